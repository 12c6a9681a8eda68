"""softfp8: linear layers on packed 8-bit and 4-bit float weights, decoded in registers."""
from .capability import CapabilityReport, probe
from .dispatch import ActivationQuant, Backend, BackendUnavailable, E2M1Decode
from .formats import Format, PackedWeight
from .linear import linear
from .modules import Linear, QuantizeSummary, quantize_model
from .quantize import ScaleMethod, dequantize, quantize

__all__ = ["ActivationQuant", "Backend", "BackendUnavailable", "CapabilityReport", "E2M1Decode",
           "Format", "Linear", "PackedWeight", "QuantizeSummary", "ScaleMethod", "dequantize",
           "linear", "probe", "quantize", "quantize_model"]
__version__ = "0.1.0"
