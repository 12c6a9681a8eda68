"""The CPU backend at M > 1: the small-M kernel (each weight row decoded once for every row of x)
below a measured crossover, and from there on one bounded tile of rows at a time dequantised for
torch's matmul (oneDNN / MKL)."""
from __future__ import annotations

import functools
import time

import numpy as np
import torch

from ...formats import Format, PackedWeight
from ._runtime import chunk_rows, loaded, padded_x

TILE_MIN_M = {Format.E5M2: 256, Format.E4M3: 256, Format.NVFP4: 256, Format.MXFP4: 256,
              Format.E4M3_B128: 256}
"""From this many activation rows on (per format; float32 and float16 x), the large-M path:
dequantise a tile of rows and multiply with torch's matmul; below it, the small-M kernel
(_smallm.smallm_matmul). Measured, not guessed: `python benchmarks/cpu_small_m.py --m
32,64,128,256 --paths --reps 3` (4096 x 4096, 2-vCPU Zen 4, both paths round-robin
in one process, ms, small / tile): M = 128 E5M2 265 / 358, E4M3 246 / 416, NVFP4 264 / 322,
MXFP4 252 / 344; M = 256 585 / 581, 650 / 676, 653 / 688, 652 / 682 (even); past it torch's
sgemm, blocked for large M, pulls ahead (docs/performance.md, CPU: prompts and small batches)."""

TILE_MIN_M_BF16 = {Format.E5M2: 128, Format.E4M3: 128, Format.NVFP4: 128, Format.MXFP4: 128}
"""The same for bfloat16 x, whose tile is bfloat16 and meets torch's bf16 matmul, where that is
the faster one (`bf16_matmul_is_fast`; else float32 x's tiles and crossover): the same command
with `--act bf16 --m 16,32,64,128,256`, small / tile: M = 64 E5M2 208 / 332, E4M3 268 / 412,
NVFP4 254 / 390, MXFP4 184 / 364; M = 128 355 / 309, 316 / 366, 412 / 432, 416 / 321 (mixed);
M = 256 584 / 368, 656 / 294, 644 / 428, 606 / 412. E4M3_B128 has no bf16 tile (a code times
its tile scale is not a bf16 number): float32 x's crossover for every x."""

TILE_ELEMENTS = 1 << 22
"""float32 weights a dequantised tile holds (16 MiB: 1024 rows at K = 4096); one tile a call,
freed when the call returns, so no full-precision copy of a weight outlives a call."""

_KIND = {Format.E5M2: 0, Format.E4M3: 1, Format.NVFP4: 2, Format.MXFP4: 3, Format.E4M3_B128: 4}


def matmul_rows(x: torch.Tensor, packed: PackedWeight, threads: int) -> torch.Tensor:
    """y [M, N] float32 = x @ W.T for 1 < M: the small-M kernel below the format's TILE_MIN_M,
    else dequantised tiles for torch's matmul (float32 ones for E4M3_B128)."""
    S = loaded()[4]
    n, _ = packed.shape
    m = x.shape[0]
    fmt = packed.fmt
    kp = packed.padded_k
    fp4 = fmt in (Format.NVFP4, Format.MXFP4)
    yn = np.empty((m, n), np.float32)  # numpy first: torch.from_numpy is the cheaper pair
    y = torch.from_numpy(yn)
    codes = packed.words.view(torch.uint8).numpy()  # [N, Kp] FP8 bytes, [N, Kp/2] FP4 bytes
    b128 = fmt is Format.E4M3_B128
    scales = packed.scales.numpy() if fp4 or b128 else np.zeros((1, 1), np.uint8)
    g = np.float32(packed.global_scale.item()) if fmt is Format.NVFP4 else np.float32(1.0)
    kind = _KIND[fmt]
    bf16 = x.dtype == torch.bfloat16 and not b128 and bf16_matmul_is_fast()
    if m < (TILE_MIN_M_BF16 if bf16 else TILE_MIN_M)[fmt]:
        xd = _x_decode_order(x, kp, fp4)
        S.smallm_matmul(kind, codes, scales, g, xd.numpy(), yn, chunk_rows(n, threads))
        return _row_scaled(y, packed, fp4)
    rows = tile_rows(n, kp)
    if bf16:  # bf16 products, as torch's own bf16 matmul: the tile is exact in bf16 (g on y)
        xd = _x_decode_order(x, kp, fp4, torch.bfloat16)
        w = torch.empty((rows, kp), dtype=torch.bfloat16)  # the one tile, freed on return
        decode, gt = S.dequantize_rows_bf16, np.float32(1.0)
        wn = w.view(torch.uint16).numpy()
    else:
        xd = _x_decode_order(x, kp, fp4)
        w = torch.empty((rows, kp), dtype=torch.float32)
        decode, gt = S.dequantize_rows, g
        wn = w.numpy()
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        decode(kind, codes, scales, gt, start, wn[:stop - start])  # one thread: _smallm
        if bf16:
            y[:, start:stop] = torch.matmul(xd, w[:stop - start].T)
        else:
            torch.matmul(xd, w[:stop - start].T, out=y[:, start:stop])
    if bf16 and fmt is Format.NVFP4:
        y *= float(g)
    return _row_scaled(y, packed, fp4)



@functools.lru_cache(maxsize=None)
def bf16_matmul_is_fast() -> bool:
    """Whether torch's matmul multiplies bfloat16 matrices faster than float32 ones on this CPU,
    measured once a process: a 64 x 1024 by 1024 x 512 product on one thread (a parallel region
    on a busy machine waits on a preempted thread and times the scheduler), three warm-up calls
    each, then the best of five interleaved. Where the CPU has bf16 dot products (AVX-512 BF16,
    AMX) oneDNN's bf16 GEMM is the faster one; where it has none (AVX2, AVX-512 without BF16)
    torch widens bf16 to float32 inside its matmul, and bf16 x takes float32 tiles and
    crossovers instead (docs/performance.md, AVX2 (emulated))."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pairs = {dtype: (torch.randn(64, 1024).to(dtype), torch.randn(512, 1024).to(dtype))
                 for dtype in (torch.bfloat16, torch.float32)}
        for a, b in pairs.values():
            for _ in range(3):
                torch.matmul(a, b.T)
        best = dict.fromkeys(pairs, float("inf"))
        for _ in range(5):
            for dtype, (a, b) in pairs.items():
                start = time.perf_counter()
                torch.matmul(a, b.T)
                best[dtype] = min(best[dtype], time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return best[torch.bfloat16] < best[torch.float32]


def tile_rows(n: int, kp: int) -> int:
    """Weight rows a dequantised tile holds for the large-M path: TILE_ELEMENTS / Kp, at least
    a kernel group's, at most N."""
    return min(n, max(8, TILE_ELEMENTS // kp))


def _x_decode_order(x: torch.Tensor, kp: int, fp4: bool,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """x [M, K] as `dtype` [M, Kp], zero-padded, its columns in the order the M > 1 kernels
    decode a weight row (_smallm: FP4 even k first, then odd k)."""
    if dtype == torch.float32:
        xp = padded_x(x, kp)
    else:
        xp = torch.zeros((x.shape[0], kp), dtype=dtype)
        xp[:, :x.shape[1]] = x
    if not fp4:
        return xp.contiguous()
    m = xp.shape[0]
    return xp.view(m, kp // 2, 2).transpose(1, 2).reshape(m, kp)


def _row_scaled(y: torch.Tensor, packed: PackedWeight, fp4: bool) -> torch.Tensor:
    if not fp4 and packed.fmt is not Format.E4M3_B128 and packed.scales is not None:
        y *= packed.scales
    return y

