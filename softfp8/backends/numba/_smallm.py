"""Numba kernels for M > 1 on the CPU: decode each weight row once, reuse it for every row of x.

Two kernels share one row decoder (`_decode_into`):
- `smallm_matmul` (small M): each thread decodes GROUP weight rows into a buffer that stays in
  its core's cache and takes the dot products of those rows with every row of x, two rows of x
  at a time (8 running sums: each vector of weights loaded serves two rows of x, each vector of x
  four weight rows). The decode costs once per weight, not once per row of x.
- `dequantize_rows` (large M): the same decoder writes a tile of rows as float32 for torch's
  matmul (backends.numba keeps the tile bounded and drops it after the call); `dequantize_rows_bf16`
  as bfloat16 for bf16 activations (exact: every value these formats decode to before the row
  or tensor scale is a bfloat16 number).

Decode order: FP8 rows come out in K order. FP4 rows come out de-interleaved, the low nibbles
(even k) of the row's bytes first, then the high nibbles (odd k), so every loop is a plain
contiguous vector loop; the caller permutes x's columns the same way once per call
(`fp4_order`), which leaves every dot product unchanged. Block scales are decoded once per row
into a per-byte array first (a store of a broadcast, which vectorises; reading the scale of
byte i as scales[i // 8] inside the value loop would be a gather).

Values are the reference's bits: FP8 unscaled (the caller applies row scales to y, as the other
numba paths do), E4M3 through e4m3_fast_div256 x 256 (exact), E4M3_B128 the same times its
128 x 128 tile's scale (one fp32 product, as the reference's), FP4 as e2m1_select x the block
scale (NVFP4: e4m3 x the tensor scale, as quantize.dequantize_rows computes it).
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ._decode import (_I32, _JIT, _f2i, e2m1_select, e4m3_bits, e4m3_fast_div256, e5m2_fast,
                            e8m0)

E5M2, E4M3, NVFP4, MXFP4, E4M3_B128 = 0, 1, 2, 3, 4
"""Format ids as backends.numba passes them (`_batch._KIND`)."""

B128 = 128
"""E4M3_B128's tile edge: row r, byte k has the scale scales[r // 128, k // 128]."""

GROUP = 4
"""Weight rows decoded together and met by each pair of x rows: 4 rows x 2 x rows = 8 running
vector sums, which with the loaded vectors fit AVX-512's 32 registers (AVX2's 16 spill some)."""


@nb.njit(**_JIT)
def _decode_into(kind, codes, scales, g, r, out, sexp):
    """Weight row r as float32 into out[:Kp] in decode order (module docstring); `sexp` holds at
    least Kp / 2 floats of scratch for the FP4 block scales spread per byte. `scales`: FP4's
    block scale codes, E4M3_B128's float32 tile scales [ceil(N / 128), ceil(Kp / 128)]."""
    nb_ = codes.shape[1]  # bytes a row
    row = codes[r]  # 1-D views: indexing the 2-D arrays here kept LLVM from vectorising (10x)
    if kind == E5M2:
        for k in range(nb_):
            out[k] = e5m2_fast(row[k])
    elif kind == E4M3:
        for k in range(nb_):
            out[k] = e4m3_fast_div256(row[k]) * np.float32(256.0)
    elif kind == E4M3_B128:
        tiles = scales[r // B128]
        for t in range(tiles.shape[0]):
            s = np.float32(tiles[t])
            # slices, each loop from 0: indices LLVM knows non-negative vectorise (a loop over
            # range(t * 128, ...) checked each index for wraparound: 4x slower)
            seg, dst = row[t * B128:(t + 1) * B128], out[t * B128:(t + 1) * B128]
            for j in range(seg.shape[0]):
                dst[j] = e4m3_fast_div256(seg[j]) * np.float32(256.0) * s
    else:
        per = 8 if kind == NVFP4 else 16  # bytes a block scale covers
        srow = scales[r]
        for blk in range(srow.shape[0]):
            if kind == NVFP4:
                s = e4m3_bits(srow[blk]) * g
            else:
                s = e8m0(srow[blk])
            for j in range(blk * per, (blk + 1) * per):
                sexp[j] = s
        lo, hi = out[:nb_], out[nb_:2 * nb_]
        for i in range(nb_):
            b = _I32(row[i])
            lo[i] = e2m1_select(b) * sexp[i]
            hi[i] = e2m1_select(_I32(b >> _I32(4))) * sexp[i]


@nb.njit(**_JIT)
def _dots(buf, rows, x, y, r):
    """y[m, r + i] = buf[i] . x[m] for i < rows (GROUP or fewer), every m."""
    kp = x.shape[1]
    m_all = x.shape[0]
    if rows == GROUP:
        w0, w1, w2, w3 = buf[0], buf[1], buf[2], buf[3]
        m = 0
        while m + 2 <= m_all:
            xa, xb = x[m], x[m + 1]
            a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = np.float32(0.0)
            for k in range(kp):
                u, v = xa[k], xb[k]
                a0 += w0[k] * u
                a1 += w1[k] * u
                a2 += w2[k] * u
                a3 += w3[k] * u
                b0 += w0[k] * v
                b1 += w1[k] * v
                b2 += w2[k] * v
                b3 += w3[k] * v
            y[m, r], y[m, r + 1], y[m, r + 2], y[m, r + 3] = a0, a1, a2, a3
            y[m + 1, r], y[m + 1, r + 1], y[m + 1, r + 2], y[m + 1, r + 3] = b0, b1, b2, b3
            m += 2
        if m < m_all:
            xa = x[m]
            a0 = a1 = a2 = a3 = np.float32(0.0)
            for k in range(kp):
                u = xa[k]
                a0 += w0[k] * u
                a1 += w1[k] * u
                a2 += w2[k] * u
                a3 += w3[k] * u
            y[m, r], y[m, r + 1], y[m, r + 2], y[m, r + 3] = a0, a1, a2, a3
        return
    for i in range(rows):
        w = buf[i]
        for m in range(m_all):
            xa = x[m]
            a = np.float32(0.0)
            for k in range(kp):
                a += w[k] * xa[k]
            y[m, r + i] = a


@nb.njit(parallel=True, **_JIT)
def smallm_matmul(kind, codes, scales, g, x, y, chunk):
    """y [M, N] = x [M, Kp] @ W.T, x in decode order; codes the weight's bytes [N, Kp] (FP8) or
    [N, Kp / 2] (FP4); `chunk` rows a parallel step (a multiple of GROUP)."""
    n = codes.shape[0]
    kp = x.shape[1]
    for c in nb.prange((n + chunk - 1) // chunk):
        buf = np.empty((GROUP, kp), np.float32)
        sexp = np.empty(kp // 2 + 1, np.float32)
        r = c * chunk
        stop = min(n, r + chunk)
        while r < stop:
            rows = min(GROUP, stop - r)
            for i in range(rows):
                _decode_into(kind, codes, scales, g, r + i, buf[i], sexp)
            _dots(buf, rows, x, y, r)
            r += rows


# The tile decoders run on the calling thread, not numba's pool: a tile decodes in ~1/10 of the
# time its matmul takes, and a numba parallel region right after torch's matmul waits for
# torch's OpenMP threads, still spinning on both cores, to give them up (numba's pool is another
# libgomp), which made a tile several times slower in parallel than on one thread
# (`python benchmarks/cpu_tile_threads.py`; docs/decisions.md, CPU: prompts and small batches).

@nb.njit(**_JIT)
def dequantize_rows(kind, codes, scales, g, r0, w):
    """w [R, Kp] = weight rows r0..r0 + R as float32 in decode order (FP8 unscaled)."""
    sexp = np.empty(w.shape[1] // 2 + 1, np.float32)
    for i in range(w.shape[0]):
        _decode_into(kind, codes, scales, g, r0 + i, w[i], sexp)


@nb.njit(**_JIT)
def dequantize_rows_bf16(kind, codes, scales, g, r0, w):
    """dequantize_rows as bfloat16 bit patterns (uint16) into w [R, Kp]: the top half of each
    float32. Exact, with g = 1 for NVFP4 (the caller applies the tensor scale to y): FP8 codes,
    E2M1 x E8M0 and E2M1 x E4M3 (at most 6 significant bits) are all bfloat16 numbers."""
    kp = w.shape[1]
    sexp = np.empty(kp // 2 + 1, np.float32)
    buf = np.empty(kp, np.float32)
    for i in range(w.shape[0]):
        _decode_into(kind, codes, scales, g, r0 + i, buf, sexp)
        out = w[i]
        for k in range(kp):
            out[k] = np.uint16(_I32(_f2i(buf[k]) >> _I32(16)) & _I32(0xFFFF))
