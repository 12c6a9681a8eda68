"""Checkpoint layouts: which quantized tensors a folder holds, and their exact softfp8 form.

A layout is read from ``config.json``'s ``quantization_config`` (compressed-tensors, fbgemm_fp8,
transformers' fine-grained ``fp8``, ModelOpt) or ModelOpt's ``hf_quant_config.json``; `repack`
turns each quantized linear's tensors into a `PackedWeight` without decoding.

Anything the loader does not recognise is a `CheckpointError` naming the file, the tensor or
setting, what was found and what is supported: a model is never built from a guess.
"""
from __future__ import annotations

import enum
import fnmatch
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from ..formats import Format

class CheckpointError(ValueError):
    """A checkpoint softfp8 can't load exactly; the message names file, tensor, found, supported."""


class Layout(str, enum.Enum):
    """How a checkpoint stores its linear weights."""

    DENSE = "dense"
    """Full-precision weights (fp32/fp16/bf16): quantized while loading if `fmt` is given."""
    CT_FP8 = "compressed-tensors fp8"
    """compressed-tensors float-quantized: e4m3 ``weight``, ``weight_scale`` [out, 1] or [1]."""
    CT_FP8_BLOCK = "compressed-tensors fp8 block"
    """compressed-tensors strategy block [128, 128]: e4m3 ``weight``, ``weight_scale`` per tile."""
    CT_NVFP4 = "compressed-tensors nvfp4"
    """nvfp4-pack-quantized: ``weight_packed``, e4m3 ``weight_scale``, ``weight_global_scale``
    (the reciprocal of a tensor scale)."""
    CT_MXFP4 = "compressed-tensors mxfp4"
    """mxfp4-pack-quantized: ``weight_packed``, uint8 E8M0 ``weight_scale`` per 32."""
    FBGEMM_FP8 = "fbgemm_fp8"
    """transformers' fbgemm_fp8: e4m3 ``weight``, fp32 ``weight_scale`` [out, 1]."""
    HF_FP8 = "fp8"
    """transformers' fine-grained fp8 without blocks: e4m3 ``weight``, one ``weight_scale_inv``."""
    HF_FP8_BLOCK = "fp8 block"
    """transformers' fine-grained fp8, weight_block_size [128, 128]: a ``weight_scale_inv`` per
    tile (a multiplier, despite its name)."""
    MODELOPT_NVFP4 = "modelopt nvfp4"
    """ModelOpt NVFP4: uint8 ``weight`` [out, in/2], e4m3 ``weight_scale``, fp32
    ``weight_scale_2``."""

    def __str__(self) -> str:
        return self.value


# The tensors each layout stores per quantized linear (besides the bias), and the activation
# ones it may store that a weight-only decode does not use (they are reported, not applied).
_TENSORS: dict[Layout, tuple[str, ...]] = {
    Layout.CT_FP8: ("weight", "weight_scale"),
    Layout.CT_FP8_BLOCK: ("weight", "weight_scale"),
    Layout.CT_NVFP4: ("weight_packed", "weight_scale", "weight_global_scale"),
    Layout.CT_MXFP4: ("weight_packed", "weight_scale"),
    Layout.FBGEMM_FP8: ("weight", "weight_scale"),
    Layout.HF_FP8: ("weight", "weight_scale_inv"),
    Layout.HF_FP8_BLOCK: ("weight", "weight_scale_inv"),
    Layout.MODELOPT_NVFP4: ("weight", "weight_scale", "weight_scale_2"),
}
ACTIVATION_TENSORS = frozenset({"input_scale", "input_global_scale", "input_zero_point",
                                "input_scale_ub", "activation_scale", "output_scale",
                                "k_scale", "v_scale", "weight_zero_point"})
_FORMATS = {Layout.CT_FP8: Format.E4M3, Layout.CT_FP8_BLOCK: "e4m3_b128",
            Layout.CT_NVFP4: Format.NVFP4, Layout.CT_MXFP4: Format.MXFP4,
            Layout.FBGEMM_FP8: Format.E4M3, Layout.HF_FP8: Format.E4M3,
            Layout.HF_FP8_BLOCK: "e4m3_b128", Layout.MODELOPT_NVFP4: Format.NVFP4}

SUPPORTED = ("compressed-tensors (float-quantized/naive-quantized FP8 channel, tensor or block "
             "[128, 128]; nvfp4-pack-quantized; mxfp4-pack-quantized), fbgemm_fp8, fp8 "
             "(weight_block_size [128, 128] or none), modelopt NVFP4")


@dataclass(frozen=True)
class CheckpointScheme:
    """What a folder's config says about its linears: the layout of the quantized ones and
    which ones it leaves alone. `source` is the file the settings came from (for messages)."""

    layout: Layout
    source: str
    targets: tuple[str, ...] = ("Linear",)
    ignore: tuple[str, ...] = ()
    ignore_style: str = "ct"  # "ct": exact / re: / class; "hf": transformers' prefix-or-suffix
    notes: tuple[str, ...] = field(default=())

    @property
    def fmt(self) -> Format | None:
        """The softfp8 format its quantized linears load as (None for a dense checkpoint)."""
        return None if self.layout is Layout.DENSE else Format.parse(_FORMATS[self.layout])

    @property
    def tensors(self) -> tuple[str, ...]:
        return _TENSORS.get(self.layout, ("weight",))

    def quantizes(self, name: str, module: nn.Module) -> bool:
        """Whether the checkpoint stores linear `name` quantized."""
        if self.layout is Layout.DENSE:
            return False
        if self.ignore_style == "hf":
            return not _hf_ignored(name, self.ignore)
        if any(_ct_match(name, module, p) for p in self.ignore):
            return False
        return any(_ct_match(name, module, p) for p in self.targets)


def _ct_match(name: str, module: nn.Module, target: str) -> bool:
    # compressed-tensors' rule: an exact name, "re:" + a regex matched at the start, or the
    # name of one of the module's classes ("Linear").
    if target.startswith("re:"):
        return re.match(target[3:], name) is not None
    return name == target or any(c.__name__ == target for c in type(module).__mro__)


def _hf_ignored(name: str, patterns: tuple[str, ...]) -> bool:
    # transformers' modules_to_not_convert rule (quantizers_utils.should_convert_module): a
    # regex from the start up to a module boundary, or a suffix; ModelOpt's globs via fnmatch.
    boundary = r"(?:(?<=\.)|(?=\.|$))"
    for p in patterns:
        if name.endswith(p) or fnmatch.fnmatchcase(name, p):
            return True
        try:
            if re.match(rf"(?:{p}){boundary}", name):
                return True
        except re.error:
            continue
    return False


# -- detection ------------------------------------------------------------------------------

def detect(folder: Path, config: dict) -> CheckpointScheme:
    """The scheme of the checkpoint in `folder`, whose parsed config.json is `config`."""
    scheme = _detect(folder, config)
    if scheme.layout is not Layout.DENSE:
        try:
            scheme.fmt
        except ValueError:
            raise CheckpointError(f"{scheme.source}: a {scheme.layout} checkpoint needs softfp8's "
                                  f"{_FORMATS[scheme.layout]} format, which this softfp8 lacks; "
                                  "supported here: per-row and per-tensor FP8, NVFP4, "
                                  "MXFP4") from None
    return scheme


def _detect(folder: Path, config: dict) -> CheckpointScheme:
    config_file = str(folder / "config.json")
    qc = config.get("quantization_config")
    modelopt_file = folder / "hf_quant_config.json"
    if qc is None and modelopt_file.is_file():
        return _modelopt(json.loads(modelopt_file.read_text()), str(modelopt_file))
    if qc is None:
        return CheckpointScheme(Layout.DENSE, config_file)
    if not isinstance(qc, dict):
        raise CheckpointError(f"{config_file}: quantization_config: expected an object, found "
                              f"{type(qc).__name__}")
    method = qc.get("quant_method")
    if method == "compressed-tensors":
        return _compressed_tensors(qc, config_file)
    if method == "fbgemm_fp8":
        return CheckpointScheme(Layout.FBGEMM_FP8, config_file, ignore=_hf_ignore(qc),
                                ignore_style="hf")
    if method == "fp8":
        return _finegrained_fp8(qc, config_file)
    if method == "modelopt":
        return _modelopt({"quantization": qc}, config_file)
    raise CheckpointError(f"{config_file}: quantization_config.quant_method is {method!r}; "
                          f"supported: {SUPPORTED}")


def _hf_ignore(qc: dict) -> tuple[str, ...]:
    # transformers never converts the output embedding (get_keys_to_not_convert), whatever
    # modules_to_not_convert lists.
    listed = qc.get("modules_to_not_convert") or ()
    return tuple(listed) + ("lm_head",)


def _finegrained_fp8(qc: dict, source: str) -> CheckpointScheme:
    block = qc.get("weight_block_size")
    if block is None:
        layout = Layout.HF_FP8
    elif list(block) == [128, 128]:
        layout = Layout.HF_FP8_BLOCK
    else:
        raise CheckpointError(f"{source}: quantization_config.weight_block_size is {block!r}; "
                              "supported: [128, 128] or none (one scale per tensor)")
    fmt = qc.get("fmt", "e4m3")
    if fmt != "e4m3":
        raise CheckpointError(f"{source}: quantization_config.fmt is {fmt!r}; supported: 'e4m3'")
    return CheckpointScheme(layout, source, ignore=_hf_ignore(qc), ignore_style="hf")


def _modelopt(doc: dict, source: str) -> CheckpointScheme:
    q = doc.get("quantization", doc)
    algo = q.get("quant_algo")
    if algo != "NVFP4":
        raise CheckpointError(f"{source}: quant_algo is {algo!r}; supported: 'NVFP4' (ModelOpt)")
    group = q.get("group_size", 16)
    if group != 16:
        raise CheckpointError(f"{source}: group_size is {group!r}; supported: 16 (NVFP4)")
    ignore = tuple(q.get("exclude_modules") or q.get("ignore") or ()) + ("lm_head",)
    return CheckpointScheme(Layout.MODELOPT_NVFP4, source, ignore=ignore, ignore_style="hf")


def _compressed_tensors(qc: dict, source: str) -> CheckpointScheme:
    where = f"{source}: quantization_config"
    status = qc.get("quantization_status", "compressed")
    if status != "compressed":
        raise CheckpointError(f"{where}.quantization_status is {status!r}; supported: "
                              "'compressed' (packed codes on disk)")
    for key in ("sparsity_config", "transform_config"):
        if qc.get(key):
            raise CheckpointError(f"{where}.{key} is set ({qc[key]!r}); supported: none (a "
                                  "sparse or rotated model would decode wrong)")
    groups = qc.get("config_groups") or {}
    if not groups:
        raise CheckpointError(f"{where}.config_groups is empty; expected one quantization group")
    layouts, targets, notes = set(), [], []
    for gname, group in groups.items():
        layouts.add(_ct_group_layout(group, group.get("format") or qc.get("format"),
                                     f"{where}.config_groups.{gname}"))
        targets.extend(group.get("targets") or ())
        if group.get("input_activations"):
            notes.append(f"{gname}: input activation quantization is not applied (weight-only)")
    if len(layouts) != 1:
        raise CheckpointError(f"{where}: groups of different layouts {sorted(map(str, layouts))}; "
                              "supported: one layout per checkpoint")
    return CheckpointScheme(layouts.pop(), source, tuple(targets), tuple(qc.get("ignore") or ()),
                            "ct", tuple(notes))


def _ct_group_layout(group: dict, fmt: str | None, where: str) -> Layout:
    w = group.get("weights")
    if not w:
        raise CheckpointError(f"{where}.weights is missing; supported: weight quantization")
    found = (f"type={w.get('type')!r}, num_bits={w.get('num_bits')!r}, strategy="
             f"{w.get('strategy')!r}, group_size={w.get('group_size')!r}, "
             f"block_structure={w.get('block_structure')!r}, format={fmt!r}")
    if w.get("symmetric") is False:
        raise CheckpointError(f"{where}.weights: symmetric is false; supported: symmetric only")
    if w.get("actorder") not in (None, "static"):
        raise CheckpointError(f"{where}.weights.actorder is {w.get('actorder')!r}; supported: none")
    kind, bits, strategy = w.get("type"), w.get("num_bits"), w.get("strategy")
    layout = None
    if kind == "float" and bits == 8 and fmt in ("float-quantized", "naive-quantized"):
        if strategy in ("channel", "tensor"):
            layout = Layout.CT_FP8
        elif strategy == "block" and list(w.get("block_structure") or ()) == [128, 128]:
            layout = Layout.CT_FP8_BLOCK
    elif kind == "float" and bits == 4:
        if (fmt == "nvfp4-pack-quantized" and strategy == "tensor_group"
                and w.get("group_size") == 16):
            layout = Layout.CT_NVFP4
        elif fmt == "mxfp4-pack-quantized" and strategy == "group" and w.get("group_size") == 32:
            layout = Layout.CT_MXFP4
    if layout is None:
        raise CheckpointError(f"{where}: weights {found}; supported: {SUPPORTED}")
    return layout
