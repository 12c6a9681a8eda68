"""The CUDA backend: CUDA C kernels compiled at run time by NVRTC through CuPy, for NVIDIA GPUs
that Triton can't reach (compute capability below 7.0: Pascal's P40, P100, GTX 10xx) or where
Triton is missing or fails. No CUDA toolkit is needed: CuPy's wheel brings NVRTC.

The kernels (`_source`) decode the packed codes to float32 in registers with integer operations
and accumulate in float32, so they need neither FP8 units nor fast fp16 arithmetic:

- M <= `GEMV_MAX_M` (batch-1 decoding and small batches): the GEMV kernel, reading each weight
  once with 16-byte loads, x in float32, float16 or bfloat16 (y in x's dtype);
- larger M: slabs of rows are decoded to float32 (`dequant`, at most `SLAB_BYTES` at a time)
  and multiplied with torch's matmul (cuBLAS), as the reference does.

Kernels launch on torch's current stream (CUDA graphs capture them) with the tensors' own
pointers; nothing is copied except x when it needs padding to the packed K or 16-byte alignment.
"""
from __future__ import annotations

import torch

from ..._checks import check_matrix_args
from ..._choices import E2M1Decode
from ..._needs import Needs
from ...formats import Format, PackedWeight
from .._facts import _row_chunks, codes_nan_free, known_fact, remember_fact
from ._source import GEMV_MAX_M, WARPS, Variant, XKind, codes_per_vector, rows_per_warp

FORMATS = frozenset(Format) - {Format.E4M3_B128}
"""The formats its kernels decode (E4M3_B128's tile scales are not written for it yet: dispatch
says so and routes that format elsewhere)."""
NEEDS = Needs(formats=FORMATS, device_types=frozenset({"cuda"}), packages=("cupy",))

SLAB_BYTES = 1 << 26
"""Float32 weight decoded at a time for M > GEMV_MAX_M (64 MiB)."""

_X_KIND = {torch.float32: XKind.F32, torch.float16: XKind.F16, torch.bfloat16: XKind.BF16}


def _e5m2_specials(packed: PackedWeight) -> bool:
    """Whether an E5M2 weight holds inf/NaN codes (all-ones exponent); kept like the facts of
    `_facts`. True (the fixed decode) during CUDA graph capture before an eager call checked."""
    known = known_fact(packed, "e5m2 specials")
    if known is not None:
        return known[0]
    if packed.words.is_cuda and torch.cuda.is_current_stream_capturing():
        return True
    found = torch.zeros((), dtype=torch.bool, device=packed.device)
    for _, part in _row_chunks(packed.words.view(torch.uint8)):
        found |= ((part & 0x7C) == 0x7C).any()
    value = bool(found)
    remember_fact(packed, "e5m2 specials", value)
    return value


def specials(packed: PackedWeight) -> bool:
    """Whether this weight's decode needs its special-code fix (`Variant.specials`)."""
    if packed.fmt is Format.E5M2:
        return _e5m2_specials(packed)
    if packed.fmt is Format.MXFP4:
        return False  # E8M0's fixes are always in: one scale per 32 weights
    return not codes_nan_free(packed)


def _check(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None) -> None:
    check_matrix_args(x, packed, bias)
    if not (x.is_cuda and packed.words.is_cuda):
        raise ValueError(f"x and packed must be on one CUDA device for the cuda backend, got "
                         f"{x.device} and {packed.device}")


def _padded(x: torch.Tensor, kp: int) -> torch.Tensor:
    """x [M, Kp], zero-padded along K, contiguous and 16-byte aligned (the kernels' loads)."""
    if x.shape[1] != kp:
        x = torch.nn.functional.pad(x, (0, kp - x.shape[1]))
    if not x.is_contiguous() or x.data_ptr() % 16:  # a fresh allocation is 256-byte aligned
        x = x.clone(memory_format=torch.contiguous_format)
    return x


def matmul(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None = None, *,
           e2m1: E2M1Decode = E2M1Decode.SELECT, checked: bool = False) -> torch.Tensor:
    """y = x @ W.T + bias for x [M, K] on a CUDA device, float32 accumulation, in x's dtype.
    `checked`: backends/__init__."""
    if not checked:
        _check(x, packed, bias)
    from ._runtime import launch, ptr

    m = x.shape[0]
    n, _ = packed.shape
    kp = packed.padded_k
    vecs = kp // codes_per_vector(packed.fmt)
    fp4 = packed.fmt in (Format.NVFP4, Format.MXFP4)
    # flags that don't apply to the format are normalised, so they never make a second kernel
    common = dict(fmt=packed.fmt, specials=specials(packed),
                  inject=fp4 and E2M1Decode(e2m1) is E2M1Decode.INJECT,
                  row_scale=not fp4 and packed.scales is not None)
    row_scale = None if fp4 else packed.scales
    block_scales = packed.scales if fp4 else None
    if m == 0:
        return torch.zeros((0, n), dtype=x.dtype, device=x.device)
    if m <= GEMV_MAX_M:
        xp = _padded(x.detach(), kp)
        if bias is not None and bias.dtype not in _X_KIND:
            bias = bias.float()
        if bias is not None:
            bias = bias.detach().contiguous()
        variant = Variant("gemv", m=m, x=_X_KIND[x.dtype],
                          bias=None if bias is None else _X_KIND[bias.dtype], **common)
        y = torch.empty((m, n), dtype=x.dtype, device=x.device)
        grid = -(-n // (rows_per_warp(m) * WARPS))
        launch(x.device, variant, grid, WARPS * 32,
               (ptr(packed.words), ptr(row_scale), ptr(block_scales), ptr(packed.global_scale),
                ptr(xp), ptr(bias), ptr(y), _i32(n), _i32(vecs), _i32(kp)))
        return y
    return _dequant_matmul(x, packed, bias, kp, vecs, Variant("dequant", **common),
                           row_scale, block_scales)


def _dequant_matmul(x, packed, bias, kp, vecs, variant, row_scale, block_scales):
    from ._runtime import launch, ptr

    n = packed.shape[0]
    xf = _padded(x.detach().to(torch.float32), kp)
    y = torch.empty((x.shape[0], n), dtype=torch.float32, device=x.device)
    rows = max(1, SLAB_BYTES // (4 * kp))
    slab = torch.empty((min(rows, n), kp), dtype=torch.float32, device=x.device)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        threads = (stop - start) * vecs
        launch(x.device, variant, -(-threads // 256), 256,
               (ptr(packed.words), ptr(row_scale), ptr(block_scales), ptr(packed.global_scale),
                ptr(slab), _i32(start), _i32(stop), _i32(vecs)))
        torch.matmul(xf, slab[:stop - start].T, out=y[:, start:stop])
    if bias is not None:
        y += bias.detach().to(torch.float32)
    return y.to(x.dtype)


def _i32(v: int):
    import numpy as np

    return np.int32(v)
