"""softfp8: linear layers on packed 8-bit and 4-bit float weights, decoded in registers."""
import sys as _sys

from .capability import CapabilityReport, probe
from .dispatch import ActivationQuant, Backend, BackendUnavailable, E2M1Decode
from .formats import Format, PackedWeight
from .hub import from_pretrained
from .linear import linear
from .convert import QuantizeSummary, quantize_model
from .modules import Linear
from .quantize import ScaleMethod, dequantize, quantize

# transformers learns quant_method "softfp8" when it loads its quantizer registry, not now:
# importing softfp8 never imports transformers (softfp8/hub/_hf_hook.py says how).
from .hub._hf_hook import install as _install_transformers_hook
from .hub.save import save_pretrained

_install_transformers_hook()


def _carry_quantization_policy() -> None:
    """The function `softfp8.quantize` hides the module of the same name, whose docstring holds
    the policy for values a format can't hold (rounding, overflow, inf, NaN, zero blocks): the
    function's docstring carries it, so that help(softfp8.quantize) shows it."""
    policy = _sys.modules[f"{__name__}.quantize"].__doc__
    if quantize.__doc__ and policy:  # python -OO strips docstrings
        text = "\n".join(f"    {line}".rstrip() for line in policy.strip().splitlines())
        quantize.__doc__ = (f"{quantize.__doc__.rstrip()}\n\n    From the module "
                            f"softfp8.quantize:\n\n{text}\n")


_carry_quantization_policy()
del _carry_quantization_policy

__all__ = ["ActivationQuant", "Backend", "BackendUnavailable", "CapabilityReport", "E2M1Decode",
           "Format", "Linear", "PackedWeight", "QuantizeSummary", "ScaleMethod", "SoftFP8Config", "dequantize",
           "from_pretrained", "linear", "probe", "quantize", "quantize_model", "save_pretrained"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "SoftFP8Config":  # needs transformers: imported on first use only
        from .hub.hf_quantizer import SoftFP8Config
        return SoftFP8Config
    raise AttributeError(f"module 'softfp8' has no attribute {name!r}")
