"""The CPU backend's small-M path with bf16 products (_smallm_bf16): whether a weight and an x
can take it, x in the kernel's form, y with the scales the kernel leaves out.

A weight's side is worked out once and kept with its facts (`_facts`): the kernel's format id
(E4M3 without the NaN fix where its codes hold no NaN) and the binary exponent range of its
decoded values; None where its codes fall outside what the kernel decodes exactly (FP4 scale
codes that are NaN, negative or E8M0 0; E5M2 infinities and NaNs, which the float32 kernel
carries as the reference does; E4M3_B128 tile scales that are not finite).
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from ...formats import Format, PackedWeight
from .._facts import codes_nan_free, known_fact, remember_fact
from ._runtime import chunk_rows, padded_x

DP_TILE_MIN_M = {Format.E5M2: 1, Format.E4M3: 32, Format.NVFP4: 32, Format.MXFP4: 32,
                 Format.E4M3_B128: 1}
"""Below this many rows of float32 or float16 x (per format; 1: never), past the GEMV rows
(`GEMV_ROWS_MAX_M`), the bf16-product kernel runs where it can; from here on the float32
small-M kernel and then the tiles (_batch). float32 x takes three bf16 terms, so three times the
products: `NUMBA_NUM_THREADS=1 python benchmarks/cpu_small_m.py --shapes 4096x4096 --m
1,2,4,8,16,32,64,128,256 --act fp32 --paths --threads 1 --cpu-time --reps 5` (2-vCPU Zen 4 at
load 9, ms, this kernel / the float32 one): M = 8 E5M2 8.7 / 7.4, E4M3 8.6 / 9.1, NVFP4 7.0 /
11.4, MXFP4 7.7 / 11.3; M = 16 13.0 / 10.9, 12.0 / 12.3, 11.3 / 14.2, 11.2 / 13.7; M = 32 26.2
/ 20.4, 23.5 / 20.7, 24.3 / 24.2, 21.2 / 21.7 (docs/performance.md, CPU: prompts and small
batches). E4M3_B128 (`--formats e4m3_b128 --paths rows,dp,small`, two threads, wall, idle):
M = 4 GEMV rows 2.71 / this 3.61 / float32 4.23, M = 8 4.80 / 4.51 / 4.76, M = 16 8.75 / 7.39
/ 6.65, M = 32 17.7 / 13.4 / 11.0: never (its blocked kernel takes a third of x's rows a tile)."""

DP_TILE_MIN_M_BF16 = {Format.E5M2: 256, Format.E4M3: 256, Format.NVFP4: 256, Format.MXFP4: 256,
                      Format.E4M3_B128: 2048}
"""The same for bfloat16 x (one bf16 term), against the tiles (a bf16 matmul): the same command
with `--act bf16`, this kernel / tile: M = 128 E5M2 27.9 / 29.3, E4M3 28.6 / 32.1, NVFP4 29.8 /
34.1, MXFP4 28.4 / 33.3; M = 256 60.1 / 52.9, 57.2 / 54.5, 64.1 / 60.3, 61.7 / 54.8. (The
float32 small-M kernel: 71.7-77.4 at M = 128.) E4M3_B128, whose tile is float32 (a code times
its tile scale is no bf16 number), stays on this kernel longer (`--formats e4m3_b128 --act bf16
--paths dp,tile`, two threads, wall, idle): M = 256 32.6 / 64.6, 512 115 / 119, 1024 150 /
212, 2048 468 / 535; even at 2048 over runs (`softfp8-bench small-m`: this kernel 551, the
tile 436-505), where x (16 MiB in bf16) no longer stays in the cache between row groups."""

DP_FIRST_MIN_M_BF16 = {Format.E4M3_B128: 3}
"""From this many rows of bf16 x (formats without a fused kernel), the GEMV rows are passed over
for this kernel, below its crossover (`GEMV_ROWS_MAX_M` stays for other x): E4M3_B128, `--formats e4m3_b128
--act bf16 --paths rows,dp` (two threads, wall, idle, ms, rows / this): M = 2 2.02 / 2.62, 3
2.95 / 2.70, 4 3.95 / 2.35-3.22 (docs/decisions.md, CPU: prompts and small batches)."""

FUSED_MAX_ROWS = {Format.E5M2: 16, Format.E4M3: 16, Format.NVFP4: 8, Format.MXFP4: 8}
"""Up to this many rows of bf16 x (per format), from M = 2, the fused kernel (`_smallm_fused`:
the decode in registers, each decoded vector used for every row of x) runs where it can; past it
the bf16-tile kernel above (docs/performance.md, CPU: prompts and small batches: FP8 at M = 12
and 16 fused 0.82-0.88x the bf16-tile kernel's time; FP4 at 16 1.3-1.5x it). bf16 x only:
float32 x (three bf16 terms a row) measured no faster than the GEMV rows at M = 2 (FP4 about
1.8x their time, receipts/cpu-smallm-fused-fp32.txt); float16 x (two) is not measured."""

FP4_PAIRS = True
"""FP4 through the fused kernel takes two weight rows a pass (`_smallm_fused.fused_fp4`)."""
MXFP4_FOLD_MIN_ROWS = 5
"""From this many bf16 rows of x, MXFP4 whose scale codes are all in 2..252 has them folded into
the decoded values there: no scale FMAs or partial sums, so a pass takes 8 rows where it took 4
(M = 5-16 one pass in two, 1.1-1.2x faster; at M = 2-4, the same passes, the fold's ~14 vector
operations a step cost what they save: docs/decisions.md, CPU: prompts and small batches)."""

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


@functools.lru_cache(maxsize=None)
def _blocked():
    from . import _smallm_b128

    return _smallm_b128


@functools.lru_cache(maxsize=None)
def _fused():
    from . import _smallm_fused

    return _smallm_fused


def fused_fits(m: int, fmt: Format, dtype: torch.dtype) -> bool:
    """Whether M = m rows of x in `dtype` (M > 1) take the fused kernel (`FUSED_MAX_ROWS`) and
    this CPU runs it. (M = 1 keeps the GEMVs: docs/decisions.md, CPU: prompts and small
    batches.)"""
    return (dtype == torch.bfloat16 and m <= FUSED_MAX_ROWS.get(fmt, 0)
            and _fused().available())


def before_gemv_rows(m: int, fmt: Format, dtype: torch.dtype) -> bool:
    """Whether M = m rows of x in `dtype` pass over the GEMV rows for this kernel
    (`DP_FIRST_MIN_M_BF16`; `below_crossover` still decides that it runs) and this CPU runs
    it."""
    return (dtype == torch.bfloat16 and m >= DP_FIRST_MIN_M_BF16.get(fmt, 1 << 31)
            and available())


def below_crossover(m: int, fmt: Format, dtype: torch.dtype) -> bool:
    """Whether M = m rows of x in `dtype` are below this kernel's crossover to the float32
    kernels and the tiles."""
    return m < (DP_TILE_MIN_M_BF16 if dtype == torch.bfloat16 else DP_TILE_MIN_M).get(fmt, 0)


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
    if fmt is Format.E4M3_B128:  # its codes as E4M3's; the tile scales go on the block sums
        s = packed.scales
        if not bool(torch.isfinite(s).all()):
            return None
        low, high = _FP8_RANGE[Format.E4M3]
        return (B.E4M3_FINITE if codes_nan_free(packed) else B.E4M3, low,
                high + max(0, int(torch.frexp(s.abs().max())[1])))  # a block sum x its scale
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


@functools.lru_cache(maxsize=16)
def _fused_order(kp: int, fp4: bool) -> np.ndarray:
    F = _fused()
    return (F.fp4_x_order(kp) if fp4 else F.fp8_x_order(kp)).astype(np.int64)


def matmul_fused(x: torch.Tensor, packed: PackedWeight, threads: int) -> torch.Tensor | None:
    """y [M, N] float32 = x @ W.T by the fused kernel (`_smallm_fused`), row and tensor scales
    applied; None where this weight or this x can't take it (as `matmul`; and for FP4, where x's
    products with the unscaled E2M1 values would leave the range, see below)."""
    plan = weight_plan(packed)
    if plan is None:
        return None
    B, F = _kernels(), _fused()
    kind, w_low, w_high = plan
    n, kp = packed.shape[0], packed.padded_k
    fmt = packed.fmt
    fp4 = fmt in (Format.NVFP4, Format.MXFP4)
    m = x.shape[0]
    terms = _TERMS.get(x.dtype, 3)
    mt = m * terms
    x3 = np.empty((-(-kp // 32), mt, 32), np.uint16)
    if x.dtype == torch.bfloat16:
        xn = x.contiguous().view(torch.uint16).numpy()
    else:
        xn = x.contiguous().numpy() if x.dtype == torch.float32 else x.float().numpy()
    ok, x_low, x_high = F.fill_x(xn, x.dtype == torch.bfloat16, _fused_order(kp, fp4), terms, x3)
    if fp4:  # the unscaled E2M1 products (0.5 .. 6 times x) pass vdpbf16ps, then the scales
        w_low, w_high = min(w_low, -1), max(w_high, 3)
        if fmt is Format.NVFP4:  # scales decoded as E4M3 / 256
            w_low -= 8
    if not _products_fit(B, ok, x_low, x_high, w_low, w_high):
        return None
    yn = np.zeros((m, n), np.float32)
    chunk = chunk_rows(n, threads)
    if fp4:
        if fmt is Format.NVFP4:
            kind4 = F.NVFP4
        else:  # scale codes from the plan's range (lo - 128, hi - 125)
            lo, hi = plan[1] + 128, plan[2] + 125
            fold = mt >= MXFP4_FOLD_MIN_ROWS and 2 <= lo and hi <= 252
            kind4 = F.MXFP4_FOLDED if fold else F.MXFP4
        F.fused_fp4(kind4, packed.words.numpy(), packed.scales.numpy(), x3, terms, yn, chunk,
                    F.block_steps(mt, F.STEP4, FP4_PAIRS), FP4_PAIRS)
    else:
        F.fused_fp8(F.E5M2 if fmt is Format.E5M2 else F.E4M3,
                    packed.words.view(torch.uint8).numpy(), x3, terms, yn, chunk,
                    F.block_steps(mt, F.STEP8, True), True)
    return _scaled(yn, packed, nvfp4_unit=256.0)


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
    if not _products_fit(B, ok, x_low, x_high, w_low, w_high):
        return None
    yn = np.zeros((m, n), np.float32)
    if fmt is Format.E4M3_B128:
        _blocked().smallm_blocked(kind, packed.words.view(torch.uint8).numpy(), x16, terms, yn,
                         chunk_rows(n, threads), packed.scales.numpy())
        return torch.from_numpy(yn)
    if fp4:
        codes, words = np.zeros((0, 1), np.uint8), packed.words.numpy()
        scales = packed.scales.numpy()
    else:
        codes, words = packed.words.view(torch.uint8).numpy(), np.zeros((0, 1), np.int32)
        scales = np.zeros((1, 1), np.uint8)
    B.smallm_bf16(kind, codes, words, scales, x16, terms, yn, chunk_rows(n, threads))
    return _scaled(yn, packed, nvfp4_unit=1.0)


def _products_fit(B, ok: bool, x_low: int, x_high: int, w_low: int, w_high: int) -> bool:
    """Whether x (finite: `ok`) times weight values whose binary exponents span these ranges
    stays within the bf16-product kernels' exact range (B.EXP_LOW .. B.EXP_HIGH)."""
    return ok and x_low + w_low >= B.EXP_LOW and x_high + w_high + 1 <= B.EXP_HIGH


def _scaled(yn: np.ndarray, packed: PackedWeight, nvfp4_unit: float) -> torch.Tensor:
    """The kernels' float32 y with what they leave out applied: NVFP4's tensor scale (times
    `nvfp4_unit`, the unit the kernel took its block scales in), or the 8-bit row scales."""
    y = torch.from_numpy(yn)
    if packed.fmt is Format.NVFP4:
        y *= nvfp4_unit * float(packed.global_scale.item())
    elif packed.fmt is not Format.MXFP4 and packed.scales is not None:  # MXFP4: in the kernel
        y *= packed.scales
    return y
