"""A softfp8 checkpoint's safetensors headers checked against its config before transformers
loads it: every converted layer's tensors present, of the dtype and shape its format needs, and
nothing else under its name, so a malformed or mismatched folder fails naming the file and the
tensor instead of loading a wrong model."""
from __future__ import annotations

import torch
from torch import nn

from .._format_tag import TAG_KEY
from ..modules import Linear

_DTYPE_NAMES = {torch.int32: "I32", torch.uint8: "U8", torch.float32: "F32"}


def _expected_tensors(layer: Linear) -> dict[str, tuple[str, tuple[int, ...]] | None]:
    """suffix -> (safetensors dtype, shape) of what a checkpoint holds for `layer` (None: any
    float of the bias's shape; the tag's length varies)."""
    out = {name: (_DTYPE_NAMES[t.dtype], tuple(t.shape)) for name in ("words", "scales",
                                                                      "global_scale")
           if (t := getattr(layer, name)) is not None}
    if layer.bias is not None:
        out["bias"] = None
    out[TAG_KEY] = ("U8", None)
    return out


def check_saved_checkpoint(model: nn.Module, plan: dict, files: list[str]) -> None:
    """Every converted layer's tensors in the safetensors headers: present, of the dtype and shape
    its format needs, and nothing else under its name. (Other files are checked after loading.)"""
    if not all(f.endswith(".safetensors") for f in files):
        return
    from safetensors import safe_open

    found = {}
    for path in files:
        with safe_open(path, framework="pt") as handle:
            for key in handle.keys():
                piece = handle.get_slice(key)
                found[key] = (path, piece.get_dtype(), tuple(piece.get_shape()))
    prefix = getattr(model, "base_model_prefix", "") or ""

    def locate(key: str) -> str | None:  # checkpoints may carry or omit the base model's prefix
        for candidate in (key, f"{prefix}.{key}", key.removeprefix(f"{prefix}.")):
            if candidate in found:
                return candidate
        return None

    where = ", ".join(sorted({p.rsplit("/", 1)[-1] for p in files}))
    by_layer = {}
    for key in found:
        by_layer.setdefault(key.rpartition(".")[0], []).append(key)
    for name, (fmt, _) in plan.items():
        layer = model.get_submodule(name)
        what = f"{name}, {fmt} ({layer.out_features}, {layer.in_features}),"
        expected = _expected_tensors(layer)
        seen = set()
        for suffix, want in expected.items():
            key = locate(f"{name}.{suffix}")
            if key is None:
                raise ValueError(f"{name}.{suffix}: missing from the checkpoint ({where}); "
                                 f"config.json's quantization_config makes {what} which needs "
                                 f"{sorted(expected)}")
            seen.add(key)
            path, dtype, shape = found[key]
            if want is None:
                ok = dtype.startswith(("F", "BF")) and shape == (layer.out_features,)
                want_text = f"a float tensor of shape ({layer.out_features},)"
            else:
                ok = dtype == want[0] and (want[1] is None and len(shape) == 1 or shape == want[1])
                want_text = f"{want[0]} of shape {want[1] if want[1] is not None else '(length,)'}"
            if not ok:
                raise ValueError(f"{path}: tensor {key}: found {dtype} of shape {shape}; {what} "
                                 f"expects {want_text}")
        module_key = locate(f"{name}.words").rpartition(".")[0]
        extra = sorted(set(by_layer.get(module_key, ())) - seen - {f"{module_key}.weight"})
        if extra:
            raise ValueError(f"{found[extra[0]][0]}: tensors {extra} are not part of {what} "
                             "as config.json's quantization_config describes it")
