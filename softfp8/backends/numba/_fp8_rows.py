"""FP8 GEMV (M = 1) with the weights prefetched ahead: the row loop as LLVM vector IR.

Why: a GEMV that streams its weights at batch 1 leaves a CPU core waiting on memory unless loads
are issued ahead of use; on a 2-vCPU Zen 4 (docs/decisions.md, CPU) the hardware prefetchers
alone leave plain numba loops at 12-24 GB/s of the 32-38 GB/s two threads read. A prefetch
cannot be put into such loops: they are LLVM-vectorised numba, and a prefetch call in the loop
body stops the vectoriser (several times slower), and a burst of prefetches before each row
is slower too. So the loop is written as vector IR in a numba intrinsic, as _lut's
FP4 rows: a step is one 64-byte line of a row (32 uint16 = 64 codes) and prefetches the same
line PREFETCH_ROWS passes ahead. The decode is the same bit operations as `e5m2_pair` /
`e4m3_pair_div256(_finite)` and LLVM's fpext of the fp16 bits (vcvtph2ps), so the values are the
same bits. Only generic LLVM operations (no x86 intrinsic): any CPU numba targets.

Layout: rows as uint16 [N, Kp/2] (codes 2i and 2i + 1 in the low and high byte), met by x's
even and odd elements (xe, xo). The pairs past the last whole step take the scalar decoders.
E4M3_B128 (`gemv_fp8_tiles`) runs the same loop with its tile scales folded into x.
"""
from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._decode import _JIT, e4m3_pair_div256, e4m3_pair_div256_finite, e5m2_pair
from ._ir import PREFETCH_ROWS, prefetch, row_pointers, rows_totals, vload

E5M2_KIND, E4M3_KIND, E4M3_FINITE_KIND = 0, 1, 2
"""gemv_fp8's `kind`: E5M2, E4M3, or E4M3 whose codes hold no NaN (no NaN fix; backends.numba asks
`codes_nan_free` once per weight)."""
STEP = 32
"""uint16 pairs a step: 64 codes, one 64-byte line of a row."""
VEC = 16
"""uint16 pairs a vector: 16 fp16 values convert to one AVX-512 register of floats; 32 were split
with extracts and ran slower in cache (a quick check, not kept)."""
ROWS = 4
"""Rows a pass where K is large (backends.numba.MULTIROW_MIN_K): each x load serves four rows."""


class VecIr:
    """The vector types, constants and multiply-add of the FP8 row loops (here and _fp8_xrows):
    VEC uint16 pairs (vs), their fp16 halves (vh) and float32 values (vf)."""

    def __init__(self, builder):
        self.vs = ir.VectorType(ir.IntType(16), VEC)
        self.vf = ir.VectorType(ir.FloatType(), VEC)
        self.vh = ir.VectorType(ir.HalfType(), VEC)
        self.fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(self.vf, [self.vf] * 3), f"llvm.fma.v{VEC}f32")
        self.nan = self.splat(self.vf, float("nan"))

    @staticmethod
    def splat(ty, v):
        return ir.Constant(ty, [ir.Constant(ty.element, v)] * VEC)


def _emit_rows(context, builder, sig, args, kind, nrows):
    """IR: for rows r..r+nrows-1 of c16, the sum over the steps [0, steps) of each pair's two
    codes times xe / xo, E4M3 as value / 256; returns a ROWS-tuple of float32."""
    c16ty, rty, sty, xety, xoty = sig.args
    c16, r, steps, xe, xo = args
    t = VecIr(builder)
    intp = context.get_value_type(types.intp)
    carr = context.make_array(c16ty)(context, builder, c16)
    xea = context.make_array(xety)(context, builder, xe)
    xoa = context.make_array(xoty)(context, builder, xo)
    r = context.cast(builder, r, rty, types.intp)
    steps = context.cast(builder, steps, sty, types.intp)
    rows = row_pointers(builder, carr, r, 0, nrows, intp)
    ahead = row_pointers(builder, carr, r, PREFETCH_ROWS * nrows, nrows, intp, clamp=True)

    parts = STEP // VEC  # a sum for each (vector of a step, low / high code)
    accs = [[cgutils.alloca_once_value(builder, t.splat(t.vf, 0.0)) for _ in range(2 * parts)]
            for _ in range(nrows)]
    with cgutils.for_range_slice(builder, ir.Constant(intp, 0), steps, ir.Constant(intp, 1),
                                 intp=intp) as (s, _):
        w0 = builder.mul(s, ir.Constant(intp, STEP))
        for i in range(nrows):
            prefetch(builder, ahead[i], w0)
        for v in range(parts):
            wv = builder.add(w0, ir.Constant(intp, v * VEC))
            xs = (vload(builder, xea.data, wv, t.vf, 2), vload(builder, xoa.data, wv, t.vf, 2))
            for i in range(nrows):
                raw = vload(builder, rows[i], wv, t.vs, 2)
                accs_v = accs[i][2 * v:2 * v + 2]
                for h, val in enumerate(decode_pairs(builder, raw, kind, t)):
                    builder.store(builder.call(t.fma, [val, xs[h], builder.load(accs_v[h])]),
                                  accs_v[h])
    return rows_totals(context, builder, sig, accs, ROWS)


def decode_pairs(builder, raw, kind, t: VecIr):
    """IR: VEC pairs `raw` (uint16) as two float32 vectors, their low codes and their high ones
    (E4M3 as value / 256); this module's loop and _fp8_xrows'."""
    vs = raw.type
    low = builder.shl(raw, t.splat(vs, 8))
    if kind == E5M2_KIND:  # the fp16 bits: the low byte shifted up, the high one masked
        halves = (low, builder.and_(raw, t.splat(vs, 0xFF00)))
    else:  # value / 256: the 7 low bits at 7..13, the sign at 15 (e4m3_pair_div256)
        halves = tuple(builder.and_(builder.ashr(h, t.splat(vs, 1)), t.splat(vs, 0xBF80))
                       for h in (low, raw))
    out = []
    for h, bits in enumerate(halves):
        val = builder.fpext(builder.bitcast(bits, t.vh), t.vf)
        if kind == E4M3_KIND:  # 0x7F / 0xFF are NaN
            mask = t.splat(vs, 0x7F << (8 * h))
            val = builder.select(builder.icmp_unsigned("==", builder.and_(raw, mask),
                                                       mask), t.nan, val)
        out.append(val)
    return out


def _rows_intrinsic(kind, nrows):
    def typer(typingctx, c16, r, steps, xe, xo):
        for a in (c16, xe, xo):
            if not (isinstance(a, types.Array) and a.layout == "C"):
                raise TypeError(f"the FP8 rows need C-contiguous arrays, got {a}")
        sig = types.UniTuple(types.float32, ROWS)(c16, r, steps, xe, xo)
        return sig, lambda c, b, s, a: _emit_rows(c, b, s, a, kind, nrows)
    typer.__name__ = f"_rows_{kind}_{nrows}"
    return intrinsic(typer)


_e5m2_1, _e5m2_4 = _rows_intrinsic(E5M2_KIND, 1), _rows_intrinsic(E5M2_KIND, ROWS)
_e4m3_1, _e4m3_4 = _rows_intrinsic(E4M3_KIND, 1), _rows_intrinsic(E4M3_KIND, ROWS)
_e4m3f_1, _e4m3f_4 = _rows_intrinsic(E4M3_FINITE_KIND, 1), _rows_intrinsic(E4M3_FINITE_KIND, ROWS)


@nb.njit(**_JIT)
def _pair(u, kind):
    if kind == E5M2_KIND:
        return e5m2_pair(u)
    return e4m3_pair_div256_finite(u) if kind == E4M3_FINITE_KIND else e4m3_pair_div256(u)


@nb.njit(**_JIT)
def _rows(c16, xe, xo, y, r0, r1, kind, group):
    steps = c16.shape[1] // STEP
    post = np.float32(1.0) if kind == E5M2_KIND else np.float32(256.0)
    r = r0
    while r < r1:
        four = group == ROWS and r + ROWS <= r1
        if kind == E5M2_KIND:
            acc = _e5m2_4(c16, r, steps, xe, xo) if four else _e5m2_1(c16, r, steps, xe, xo)
        elif kind == E4M3_FINITE_KIND:
            acc = _e4m3f_4(c16, r, steps, xe, xo) if four else _e4m3f_1(c16, r, steps, xe, xo)
        else:
            acc = _e4m3_4(c16, r, steps, xe, xo) if four else _e4m3_1(c16, r, steps, xe, xo)
        rows = ROWS if four else 1
        for i in range(rows):
            a = acc[i]
            for j in range(steps * STEP, c16.shape[1]):
                lo, hi = _pair(c16[r + i, j], kind)
                a += lo * xe[j] + hi * xo[j]
            y[r + i] = a * post
        r += rows


@nb.njit(parallel=True, **_JIT)
def gemv_fp8(c16, xe, xo, y, chunk, kind, group):
    """y[r] = row r . x for FP8 rows read as uint16 [N, Kp/2]; xe / xo = x[0::2], x[1::2];
    kind E5M2_KIND, E4M3_KIND or E4M3_FINITE_KIND; `group` rows a pass (1 or ROWS)."""
    n = c16.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _rows(c16, xe, xo, y, c * chunk, min(n, (c + 1) * chunk), kind, group)


TILE = 128
"""E4M3_B128's tile: 128 rows by 128 codes (64 uint16 pairs) share one scale."""


@nb.njit(parallel=True, **_JIT)
def gemv_fp8_tiles(c16, x, tiles, y, chunk, kind, group):
    """gemv_fp8 for E4M3 with one float32 scale per TILE x TILE tile, tiles [N / TILE, K / TILE]
    (rounded up); x float32 [Kp]. The scales move onto x: the rows of a chunk that share a
    tile row meet one copy of x times that tile row's scales (xe, xo, made by the chunk's thread
    as it reaches the group: about N / TILE copies of x in all, against N rows of weight), so
    the weight loop is E4M3's own; its products are e4m3 * (x * s) for the reference's
    (e4m3 * s) * x. One parallel region: a second (to make the copies first) costs its barrier,
    which on a busy 2-vCPU machine took as long as the GEMV itself."""
    n, half = c16.shape[0], c16.shape[1]
    for c in nb.prange((n + chunk - 1) // chunk):
        xe = np.empty(half, np.float32)
        xo = np.empty(half, np.float32)
        r, r1 = c * chunk, min(n, (c + 1) * chunk)
        while r < r1:
            t = r // TILE
            for i in range(half):
                s = tiles[t, i // (TILE // 2)]  # codes 2i and 2i + 1 share a tile (TILE is even)
                xe[i] = x[2 * i] * s
                xo[i] = x[2 * i + 1] * s
            stop = min(r1, (t + 1) * TILE)
            _rows(c16, xe, xo, y, r, stop, kind, group)
            r = stop
