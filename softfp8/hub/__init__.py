"""Loading transformers checkpoints into softfp8: `from_pretrained` and the layouts it reads."""
from .layouts import CheckpointError, CheckpointScheme, Layout
from .loader import LoadReport, Mode, from_pretrained

__all__ = ["CheckpointError", "CheckpointScheme", "Layout", "LoadReport", "Mode", "from_pretrained"]
