"""`quantize_model`: every `nn.Linear` of a model replaced by a `softfp8.Linear`, in place (the
swap itself, the skip rules and `QuantizeSummary` are in `_convert`); a transformers model also
gets softfp8's quantization config, from `softfp8.hub`."""
from __future__ import annotations

import sys

from torch import nn

from ._convert import QuantizeSummary, convert_linears, model_bytes  # noqa: F401  (public here)
from .dispatch import Backend, E2M1Decode
from .formats import Format


def quantize_model(model: nn.Module, fmt: Format | str = Format.E5M2, *, skip=None,
                   backend: Backend | str = Backend.AUTO, e2m1: E2M1Decode | str = E2M1Decode.AUTO,
                   progress: bool = True, **quantize_kwargs) -> QuantizeSummary:
    """Replace every `nn.Linear` in `model` by a `softfp8.Linear` of format `fmt`, in place.

    skip: a module name or glob ("lm_head", "*.mlp.*"; a bare name matches at any depth), a list
    of them, or a predicate `(name, module) -> bool`. Layers are converted one at a time on their
    own device and each original weight is released as soon as its packed copy exists, so peak
    memory is the model plus one layer (a weight tied to another module, e.g. an lm_head sharing
    the embedding, lives on through that module). A skip name that matches no nn.Linear is
    warned about and listed in the summary's `unmatched_skip`.

    A transformers `PreTrainedModel` also gets softfp8's quantization config, so that its
    `save_pretrained` writes a checkpoint that `from_pretrained` loads back (after
    `import softfp8`) instead of one that loads as random weights.

    A model already placed with a device_map (accelerate's hooks) converts each layer on its
    device and keeps a layer's own hook; an offloaded layer can't be converted (its weight is not
    there): convert first, then dispatch with `offload_buffers=True` (the packed weights are
    buffers, which accelerate otherwise keeps on the execution device)."""
    summary = convert_linears(model, fmt, skip=skip, backend=backend, e2m1=e2m1,
                              progress=progress, stacklevel=3, **quantize_kwargs)
    if "transformers" in sys.modules:  # only a transformers model can be one; never import it here
        from .hub.hf_quantizer import attach_to_pretrained_model
        attach_to_pretrained_model(model, skip=None if callable(skip) else skip,
                                   backend=backend, e2m1=e2m1)
    return summary
