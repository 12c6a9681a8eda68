"""One linear's checkpoint tensors as a `PackedWeight`, for each layout `layouts` detects:
FP8 codes copied byte for byte into the packed words, FP4 bytes kept (they are already softfp8's
nibble order: even element in the low nibble, as in torch's ``float4_e2m1fn_x2``), scales
converted exactly where the format allows it (the one exception, compressed-tensors NVFP4's
reciprocal tensor scale, is in `_ct_nvfp4`). A tensor of the wrong dtype or shape is a
`CheckpointError` naming the file and the tensor."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..decode import decode_e8m0
from ..formats import Format, PackedWeight, padded_k
from ..quantize import pack_codes
from .layouts import CheckpointError, CheckpointScheme, Layout

_E8M0_ONE = 127


def convert(scheme: CheckpointScheme, name: str, tensors: dict[str, torch.Tensor],
            shape: tuple[int, int], files: dict[str, str], device: torch.device) -> PackedWeight:
    """Linear `name`'s stored tensors as a PackedWeight on `device`, codes copied bit for bit.

    `tensors` maps each of `scheme.tensors` to what the file holds; `files` names each one's
    file for messages; `shape` is the module's (out_features, in_features)."""
    check = _Checker(name, tensors, files)
    return _CONVERTERS[scheme.layout](check, shape, device)


@dataclass
class _Checker:
    name: str
    tensors: dict[str, torch.Tensor]
    files: dict[str, str]

    def get(self, key: str, dtypes: tuple[torch.dtype, ...], shapes: tuple[tuple[int, ...], ...],
            device: torch.device) -> torch.Tensor:
        t = self.tensors[key]
        if t.dtype not in dtypes or tuple(t.shape) not in shapes:
            want = " or ".join(str(tuple(s)) for s in shapes)
            raise CheckpointError(
                f"{self.files.get(key, '?')}: tensor {self.name}.{key}: found {t.dtype} of shape "
                f"{tuple(t.shape)}; supported: {' or '.join(map(str, dtypes))} of shape {want} "
                "for this layer and the config's layout")
        # A copy, never a view of the file's mapping (see loader._own).
        return t.to(device, copy=True)


_FLOAT_SCALES = (torch.float32, torch.bfloat16, torch.float16)  # all widen to fp32 exactly


def _e4m3_words(check: _Checker, key: str, shape, device) -> torch.Tensor:
    codes = check.get(key, (torch.float8_e4m3fn,), (shape,), device)
    return pack_codes(codes.view(torch.uint8), Format.E4M3)


def _ct_fp8(check, shape, device):
    n, _ = shape
    scale = check.get("weight_scale", _FLOAT_SCALES, ((n, 1), (1,), ()), device)
    rows = scale.float().reshape(-1).expand(n).contiguous()  # a tensor scale on every row
    return PackedWeight(Format.E4M3, shape, _e4m3_words(check, "weight", shape, device), rows)


def _fbgemm_fp8(check, shape, device):
    n, _ = shape
    scale = check.get("weight_scale", (torch.float32,), ((n, 1),), device)
    return PackedWeight(Format.E4M3, shape, _e4m3_words(check, "weight", shape, device),
                        scale.reshape(n).contiguous())


def _tile_shape(shape) -> tuple[int, int]:
    return (-(-shape[0] // 128), -(-shape[1] // 128))


def _hf_scale_f32(t: torch.Tensor) -> torch.Tensor:
    # UE8M0 scales (scale_fmt "ue8m0", stored as float8_e8m0fnu or raw bytes) are powers of two:
    # exact in fp32.
    if t.dtype in (torch.uint8, torch.float8_e8m0fnu):
        return decode_e8m0(t.view(torch.uint8))
    return t.float()


def _hf_fp8(check, shape, device):
    n, _ = shape
    # transformers' FP8Linear holds a scalar; its quantize op writes the one tile as [1, 1]
    scale = check.get("weight_scale_inv", _FLOAT_SCALES + (torch.float8_e8m0fnu,),
                      ((), (1,), (1, 1)), device)
    rows = _hf_scale_f32(scale).reshape(-1).expand(n).contiguous()
    return PackedWeight(Format.E4M3, shape, _e4m3_words(check, "weight", shape, device), rows)


def _block_e4m3(check, shape, device, key, dtypes):
    scale = check.get(key, dtypes, (_tile_shape(shape),), device)
    return PackedWeight("e4m3_b128", shape, _e4m3_words(check, "weight", shape, device),
                        _hf_scale_f32(scale).contiguous())


def _fp4_words(check: _Checker, key: str, shape, device) -> torch.Tensor:
    n, k = shape
    packed = check.get(key, (torch.uint8,), ((n, k // 2),), device)
    kp = padded_k(k, Format.NVFP4)  # the same alignment for both FP4 formats
    out = torch.zeros((n, kp // 2), dtype=torch.uint8, device=device)
    out[:, : k // 2] = packed  # bytes as they are: even element in the low nibble in both
    return out.view(torch.int32)


def _block_scales(t: torch.Tensor, n: int, blocks: int, pad: int) -> torch.Tensor:
    out = torch.full((n, blocks), pad, dtype=torch.uint8, device=t.device)
    out[:, : t.shape[1]] = t.view(torch.uint8)
    return out


def _check_fp4_k(check: _Checker, shape, block: int) -> None:
    if shape[1] % block:
        raise CheckpointError(f"{check.files.get(next(iter(check.tensors)), '?')}: layer "
                              f"{check.name}: in_features={shape[1]} is not a multiple of the "
                              f"format's block of {block}; supported: whole blocks")


def _modelopt_nvfp4(check, shape, device):
    n, k = shape
    _check_fp4_k(check, shape, 16)
    scales = check.get("weight_scale", (torch.float8_e4m3fn,), ((n, k // 16),), device)
    g = check.get("weight_scale_2", (torch.float32,), ((), (1,)), device)
    # ModelOpt: w = e2m1 * (float(weight_scale) * weight_scale_2), softfp8's NVFP4 exactly.
    blocks = padded_k(k, Format.NVFP4) // 16
    return PackedWeight(Format.NVFP4, shape, _fp4_words(check, "weight", shape, device),
                        _block_scales(scales, n, blocks, 0), g.reshape(()).contiguous())


def _ct_nvfp4(check, shape, device):
    n, k = shape
    _check_fp4_k(check, shape, 16)
    scales = check.get("weight_scale", (torch.float8_e4m3fn,), ((n, k // 16),), device)
    big_g = check.get("weight_global_scale", (torch.float32,), ((), (1,)), device)
    # compressed-tensors stores the reciprocal and divides: w = e2m1 * (scale / G). softfp8
    # multiplies by g = fl(1/G); fl(s * fl(1/G)) can differ from fl(s / G) in the last bit of
    # a block scale (a relative 6e-8), and is identical where G is a power of two.
    g = (1.0 / big_g.float()).reshape(()).contiguous()
    blocks = padded_k(k, Format.NVFP4) // 16
    return PackedWeight(Format.NVFP4, shape, _fp4_words(check, "weight_packed", shape, device),
                        _block_scales(scales, n, blocks, 0), g)


def _ct_mxfp4(check, shape, device):
    n, k = shape
    _check_fp4_k(check, shape, 32)
    scales = check.get("weight_scale", (torch.uint8,), ((n, k // 32),), device)
    blocks = padded_k(k, Format.MXFP4) // 32
    return PackedWeight(Format.MXFP4, shape, _fp4_words(check, "weight_packed", shape, device),
                        _block_scales(scales, n, blocks, _E8M0_ONE))


_CONVERTERS: dict[Layout, Callable[..., PackedWeight]] = {
    Layout.CT_FP8: _ct_fp8,
    Layout.CT_FP8_BLOCK: lambda c, s, d: _block_e4m3(c, s, d, "weight_scale", _FLOAT_SCALES),
    Layout.CT_NVFP4: _ct_nvfp4,
    Layout.CT_MXFP4: _ct_mxfp4,
    Layout.FBGEMM_FP8: _fbgemm_fp8,
    Layout.HF_FP8: _hf_fp8,
    Layout.HF_FP8_BLOCK: lambda c, s, d: _block_e4m3(
        c, s, d, "weight_scale_inv", _FLOAT_SCALES + (torch.uint8, torch.float8_e8m0fnu)),
    Layout.MODELOPT_NVFP4: _modelopt_nvfp4,
}
