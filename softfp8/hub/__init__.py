"""Loading and saving whole models: `from_pretrained` and the checkpoint layouts it reads
(`layouts`, `loader`), softfp8's own checkpoints through transformers (`hf_quantizer`, `save`)."""
from .layouts import CheckpointError, CheckpointScheme, Layout
from .loader import LoadReport, Mode, from_pretrained

__all__ = ["CheckpointError", "CheckpointScheme", "Layout", "LoadReport", "Mode", "from_pretrained"]
