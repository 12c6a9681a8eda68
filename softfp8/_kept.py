"""What a `softfp8.Linear` keeps between calls about its own tensors: recorded eager calls
(`_KeptCall`) and weak stamps of the tensors it may keep references to (`_TensorStamp`)."""
from __future__ import annotations

import weakref


class _KeptCall:
    """A recorded eager call of a Linear (`ops.record_eager`) and the tensors it was recorded
    with: replayed while the layer holds the same tensors, unwritten (an in-place write may
    change what the launch was planned on, e.g. that no E4M3 code is NaN)."""

    __slots__ = ("call", "tensors", "versions")

    def __init__(self, call, w, s, g, bias):
        self.call = call
        self.tensors = (w, s, g, bias)
        self.versions = self._versions(w, s, g)

    @staticmethod
    def _versions(w, s, g) -> tuple:
        try:
            return (w._version, None if s is None else s._version,
                    None if g is None else g._version)
        except RuntimeError:  # inference tensors keep no version (`_facts.version_of`)
            return None

    def holds(self, w, s, g, bias) -> bool:
        kw, ks, kg, kb = self.tensors
        return (w is kw and s is ks and g is kg and bias is kb
                and self._versions(w, s, g) == self.versions)


class _TensorStamp:
    """Weak references to a weight's tensors (None stays None): their identity, without keeping
    them. A copy or pickle of a layer carries an empty stamp, which matches no tensors."""

    __slots__ = ("refs",)

    def __init__(self, *tensors):
        self.refs = tuple(None if t is None else weakref.ref(t) for t in tensors)

    def __reduce__(self):
        return (_TensorStamp, ())

    def holds(self, *tensors) -> bool:
        if len(tensors) != len(self.refs):
            return False
        for ref, t in zip(self.refs, tensors):
            if (t is None) != (ref is None) or (ref is not None and ref() is not t):
                return False
        return True
