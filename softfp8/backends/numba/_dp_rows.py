"""The CPU backend's small-M path with bf16 products (_smallm_bf16): whether a weight and an x
can take it, x in the kernel's form, y with the scales the kernel leaves out.

A weight's side is worked out once and kept with its facts (`_facts`): the kernel's format id
(E4M3 without the NaN fix where its codes hold no NaN) and the binary exponent range of its
decoded values; None where its codes fall outside what the kernel decodes exactly (FP4 scale
codes that are NaN, negative or E8M0 0; E5M2 infinities and NaNs, which the float32 kernel
carries as the reference does).
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from ...formats import Format, PackedWeight
from .._facts import codes_nan_free, known_fact, remember_fact
from ._runtime import chunk_rows, padded_x

DP_TILE_MIN_M = {Format.E5M2: 128, Format.E4M3: 128, Format.NVFP4: 128, Format.MXFP4: 128}
"""Below this many rows of float32 or float16 x (per format), the bf16-product kernel runs where
it can; from here on the tiles for torch's matmul (_batch). Measured in one process, one thread,
CPU time (the machine shared at load 6-8, where wall times of two threads were scheduler
quanta), 4096 x 4096, ms, this kernel / tile: M = 64 E5M2 25.7 / 31.9, E4M3 32.4 / 31.9, NVFP4
29.4 / 38.3, MXFP4 26.1 / 38.1; M = 128 53.6 / 52.7, 61.1 / 55.1, 59.4 / 57.9, 58.0 / 61.3
(docs/performance.md, CPU: prompts and small batches)."""

DP_TILE_MIN_M_BF16 = {Format.E5M2: 256, Format.E4M3: 256, Format.NVFP4: 256, Format.MXFP4: 256}
"""The same for bfloat16 x (one bf16 term, the tile a bf16 matmul): M = 128 E5M2 28.8 / 29.3,
E4M3 28.0 / 31.3, NVFP4 27.0 / 33.0, MXFP4 31.6 / 33.1; M = 256 61.0 / 53.6, 58.5 / 50.2,
63.4 / 52.3, 55.3 / 51.6."""

_FACT = "numba bf16 rows"
_TERMS = {torch.bfloat16: 1, torch.float16: 2}
"""bf16 terms that sum to x exactly, per x dtype (float32: 3)."""
_FP8_RANGE = {Format.E5M2: (-16, 15), Format.E4M3: (-9, 8)}
"""Least and greatest binary exponent of a nonzero finite decoded value (E5M2: 2^-16 .. 57344;
E4M3: 2^-9 .. 448)."""


@functools.lru_cache(maxsize=None)
def _kernels():
    from . import _smallm_bf16

    return _smallm_bf16


def below_crossover(m: int, fmt: Format, dtype: torch.dtype) -> bool:
    """Whether M = m rows of x in `dtype` are below this kernel's crossover to the tiles."""
    return m < (DP_TILE_MIN_M_BF16 if dtype == torch.bfloat16 else DP_TILE_MIN_M)[fmt]


def available() -> bool:
    """Whether this CPU runs the kernel (AVX-512 BF16, as numba targets it)."""
    return _kernels().available()


def weight_plan(packed: PackedWeight) -> tuple[int, int, int] | None:
    """(kind, least, greatest exponent) of the weight for the kernel, or None; kept per weight."""
    known = known_fact(packed, _FACT)
    if known is not None:
        return known[0]
    plan = _weight_plan(packed)
    remember_fact(packed, _FACT, plan)
    return plan


def _weight_plan(packed: PackedWeight) -> tuple[int, int, int] | None:
    B = _kernels()
    fmt = packed.fmt
    if fmt is Format.E5M2:
        b = packed.words.view(torch.uint8)
        if bool(((b & 0x7C) == 0x7C).any()):  # inf or NaN codes
            return None
        return (B.E5M2, *_FP8_RANGE[fmt])
    if fmt is Format.E4M3:
        return (B.E4M3_FINITE if codes_nan_free(packed) else B.E4M3, *_FP8_RANGE[fmt])
    s = packed.scales
    if fmt is Format.NVFP4:
        if not bool((s < 0x7F).all()):  # negative or NaN scale codes
            return None
        return (B.NVFP4, -10, 11)  # 0.5 x 2^-9 .. 6 x 448 (the tensor scale goes on y)
    if fmt is Format.MXFP4:
        lo, hi = int(s.min()), int(s.max())
        if lo < 1 or hi > 254:  # 2^-127 (a denormal) or NaN
            return None
        return (B.MXFP4, lo - 128, hi - 125)  # 0.5 x 2^(lo - 127) .. 6 x 2^(hi - 127)
    return None


@functools.lru_cache(maxsize=16)
def _fp4_order(kp: int) -> torch.Tensor:
    return torch.from_numpy(_kernels().fp4_order(kp))


def matmul(x: torch.Tensor, packed: PackedWeight, threads: int) -> torch.Tensor | None:
    """y [M, N] float32 = x @ W.T by the bf16-product kernel, row and tensor scales applied; None
    where this weight or this x can't take it (the caller runs the float32 kernels)."""
    plan = weight_plan(packed)
    if plan is None:
        return None
    B = _kernels()
    kind, w_low, w_high = plan
    n, kp = packed.shape[0], packed.padded_k
    fmt = packed.fmt
    fp4 = fmt in (Format.NVFP4, Format.MXFP4)
    m = x.shape[0]
    terms = _TERMS.get(x.dtype, 3)
    xd = padded_x(x, kp)
    if fp4:
        xd = xd[:, _fp4_order(kp)]
    k32 = -(-kp // B.STEP) * B.STEP
    x16 = np.zeros((m * terms, k32), np.uint16)
    ok, x_low, x_high = B.split_x(xd.contiguous().numpy(), terms, x16)
    if not ok or x_low + w_low < B.EXP_LOW or x_high + w_high + 1 > B.EXP_HIGH:
        return None
    yn = np.zeros((m, n), np.float32)
    if fp4:
        codes, words = np.zeros((0, 1), np.uint8), packed.words.numpy()
        scales = packed.scales.numpy()
    else:
        codes, words = packed.words.view(torch.uint8).numpy(), np.zeros((0, 1), np.int32)
        scales = np.zeros((1, 1), np.uint8)
    B.smallm_bf16(kind, codes, words, scales, x16, terms, yn, chunk_rows(n, threads))
    y = torch.from_numpy(yn)
    if fmt is Format.NVFP4:
        y *= float(packed.global_scale.item())
    elif not fp4 and packed.scales is not None:
        y *= packed.scales
    return y
