"""`Needs`: what a backend requires of the machine, as data (a leaf: no softfp8 imports).

Each backend module states its `NEEDS`; `dispatch` asks `why_not` before it routes a call there.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Needs:
    """What a backend requires of the machine; `why_not` explains a refusal in words."""

    formats: frozenset  # of Format members
    device_types: frozenset[str]
    min_capability: tuple[int, int] | None = None  # CUDA compute capability; ROCm is exempt
    packages: tuple[str, ...] = ()

    def why_not(self, fmt, device: torch.device,
                capability: tuple[int, int] | None = None) -> str | None:
        """None if the backend can run `fmt` on `device`, else the reason in words."""
        if fmt not in self.formats:
            return f"it does not implement {fmt}"
        if device.type not in self.device_types:
            kinds = ", ".join(sorted(self.device_types))
            need = ""  # name the capability too: "cuda" alone hides what the GPU must have
            if self.min_capability is not None:
                need = f" of compute capability {'.'.join(map(str, self.min_capability))} or newer"
            return f"it runs on {kinds} devices{need}, not {device.type}"
        for package in self.packages:
            if not _installed(package, importlib.util.find_spec):
                return (f"the package {package!r} is not installed "
                        f"(pip install {_PIP_NAMES.get(package, package)})")
        if (self.min_capability is not None and capability is not None
                and capability < self.min_capability):
            need = ".".join(map(str, self.min_capability))
            have = ".".join(map(str, capability))
            return f"it needs compute capability {need} or newer, this GPU has {have}"
        return None


_PIP_NAMES = {"cupy": "cupy-cuda12x, or cupy-cuda13x where torch's CUDA is 13; "
                      "Pascal and Volta need 12"}
"""What to pip install for an import name, where the two differ."""

_FOUND: set = set()


def _installed(package: str, find_spec) -> bool:
    """Whether `package` can be imported. Backends ask on every call (their NEEDS check), and
    find_spec stats the file system each time (40-90 us: more than a whole GEMV), so a package
    found once is remembered, per finder function (another finder, such as a test's stand-in,
    asks afresh). A missing package is asked again each time: it may be installed meanwhile."""
    key = (package, find_spec)
    if key in _FOUND:
        return True
    if find_spec(package) is None:
        return False
    _FOUND.add(key)
    return True
