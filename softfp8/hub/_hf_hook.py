"""softfp8's registration with transformers (quant_method "softfp8"), made when it is needed.

`import softfp8` must neither import transformers (it may not be installed, and importing it
costs seconds) nor leave transformers unaware of softfp8 (a folder saved by softfp8 would then
load as random weights). Both hold if the registration runs the moment transformers imports its
quantizer registry, `transformers.quantizers.auto`: every `from_pretrained` imports it before it
reads a `quantization_config`. `install()` registers at once if that module is already imported,
and otherwise puts a finder first on `sys.meta_path` that finds nothing itself: when the registry is
found by the other finders, it makes the registry's loader register softfp8 after the module
ran, and leaves `sys.meta_path`.
"""
from __future__ import annotations

import importlib.abc
import sys
import warnings

REGISTRY = "transformers.quantizers.auto"
QUANTIZER = "softfp8.hub.hf_quantizer"


def register() -> None:
    """Register SoftFP8Config and its quantizer with transformers (idempotent)."""
    from .hf_quantizer import register as register_with_transformers
    register_with_transformers()


def _register_or_warn() -> None:
    quantizer = sys.modules.get(QUANTIZER)
    if quantizer is not None and not hasattr(quantizer, "register"):
        return  # it is importing the registry itself (`from softfp8 import SoftFP8Config` first):
        # it registers as its last step, once it is whole
    # Raising here would fail the user's `import transformers...`, which has nothing to do with
    # softfp8 (a transformers version whose registry changed, say): say so instead.
    try:
        register()
    except Exception as err:  # noqa: BLE001 - any failure is reported, none is swallowed silently
        warnings.warn(f"softfp8 could not register its quantizer with transformers ({err!r}); "
                      "from_pretrained will not know quant_method 'softfp8'", RuntimeWarning,
                      stacklevel=2)


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Lets the other finders find transformers' quantizer registry, then has its loader register
    softfp8 once the module has run. Finds nothing else, and nothing itself."""

    def find_spec(self, fullname, path, target=None):
        if fullname != REGISTRY:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module

        def exec_module(module):  # on this one module's own loader object, not its class
            run_module(module)
            _register_or_warn()

        loader.exec_module = exec_module
        if self in sys.meta_path:  # its one job is arranged
            sys.meta_path.remove(self)
        return spec


_FINDER = _RegisterAfterImport()


def install() -> None:
    """Register now if transformers' registry is imported, else when it is (see module doc)."""
    if REGISTRY in sys.modules:
        _register_or_warn()
    elif not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _FINDER)  # ahead of the path finder, which would find it first
