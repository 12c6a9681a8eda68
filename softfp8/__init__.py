"""softfp8: linear layers on packed 8-bit and 4-bit float weights, decoded in registers."""
from .capability import CapabilityReport, probe
from .dispatch import ActivationQuant, Backend, BackendUnavailable, E2M1Decode
from .formats import Format, PackedWeight
from .hub import from_pretrained
from .linear import linear
from .convert import QuantizeSummary, quantize_model
from .modules import Linear
from .quantize import ScaleMethod, dequantize, quantize
from ._version import __version__
from ._settings import LaunchSettings, launch_settings

# transformers learns quant_method "softfp8" when it loads its quantizer registry, not now:
# importing softfp8 never imports transformers (softfp8/hub/_hf_hook.py says how).
from .hub._hf_hook import install as _install_transformers_hook
from .hub.save import save_pretrained

_install_transformers_hook()


__all__ = ["ActivationQuant", "Backend", "BackendUnavailable", "CapabilityReport", "E2M1Decode",
           "Format", "LaunchSettings", "Linear", "PackedWeight", "QuantizeSummary", "ScaleMethod",
           "SoftFP8Config", "dequantize", "from_pretrained", "launch_settings", "linear", "probe",
           "quantize", "quantize_model", "save_pretrained"]


def __getattr__(name: str):
    if name == "SoftFP8Config":  # needs transformers: imported on first use only
        from .hub.hf_quantizer import SoftFP8Config
        return SoftFP8Config
    raise AttributeError(f"module 'softfp8' has no attribute {name!r}")
