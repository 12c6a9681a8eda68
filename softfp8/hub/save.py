"""`softfp8.save_pretrained`: transformers' save_pretrained for a model with softfp8 layers, plus a
model card that says the folder needs softfp8.

`model.save_pretrained(dir)` alone writes the same tensors and config (softfp8/hub/hf_quantizer.py);
transformers has no hook that writes a model card, so this adds README.md's line. A folder opened
without softfp8 is refused by transformers either way (hf_quantizer.py's guard bytes).
"""
from __future__ import annotations

import os
import sys

from torch import nn

from ..modules import Linear

MODEL_CARD_LINE = ("This checkpoint holds softfp8's packed FP8/FP4 weights: `pip install softfp8`, "
                   "then `import softfp8` before `from_pretrained(...)`. Without softfp8, "
                   "transformers refuses it.")
_FRONT_MATTER = "---\nlibrary_name: transformers\ntags:\n- softfp8\n---\n"


def save_pretrained(model: nn.Module, save_directory: str | os.PathLike, **hf_kwargs) -> None:
    """Save a transformers model converted to softfp8 (by `quantize_model`, `SoftFP8Config` or a
    softfp8 loader) with `model.save_pretrained(save_directory, **hf_kwargs)`, and add a line to
    the folder's README.md (created with model-card front matter if absent) saying softfp8 is
    needed to load it."""
    from .hf_quantizer import attach_to_pretrained_model

    if not any(isinstance(m, Linear) for m in model.modules()):
        raise ValueError("model: has no softfp8.Linear; expected a model converted to softfp8 "
                         "(softfp8.quantize_model, or from_pretrained with SoftFP8Config)")
    modeling = sys.modules.get("transformers.modeling_utils")
    if modeling is None or not isinstance(model, modeling.PreTrainedModel):
        raise TypeError(f"model: expected a transformers PreTrainedModel, got "
                        f"{type(model).__name__} (save a plain module's state_dict with "
                        "safetensors.torch.save_file instead)")
    if not attach_to_pretrained_model(model):
        raise ValueError(f"model: quantized by {type(model.hf_quantizer).__name__}, not softfp8 "
                         "alone; not saved as a softfp8 checkpoint")
    model.save_pretrained(save_directory, **hf_kwargs)
    card = os.path.join(os.fspath(save_directory), "README.md")
    text = _FRONT_MATTER
    if os.path.exists(card):
        with open(card, encoding="utf-8") as f:
            text = f.read()
    if MODEL_CARD_LINE not in text:
        with open(card, "w", encoding="utf-8") as f:
            f.write(text.rstrip("\n") + "\n\n" + MODEL_CARD_LINE + "\n")
