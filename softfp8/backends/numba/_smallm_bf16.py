"""The small-M kernel with bf16 products (vdpbf16ps): each weight element decoded once, into
bfloat16, and multiplied with several rows of x at a time.

Why bf16: every value FP8 and FP4 codes decode to (before a row or tensor scale) is a bfloat16
number, so the decoded row is exact in half the bytes, and vdpbf16ps multiplies 32 of them by 32
bf16 activations into 16 float32 lanes per instruction, twice the float32 FMA's rate. The
products are exact in float32 (at most 8 x 8 significant bits) and summed in float32.

x reaches the kernel as `terms` bf16 rows per row of x (`split_x`), each the rounded remainder of
the ones before: one for bf16 x, two for float16 x (11 significant bits), three for float32 x
(24): the terms sum to x exactly, so every product is exact and y is float32's sum of them, in
another order. The kernel sums the terms' dot products into y.

vdpbf16ps treats bf16 denormals as 0 and flushes denormal results, so the caller checks that no
product or sum comes near float32's denormal range or its top (`split_x` returns x's exponent
range, `_dp_rows.weight_plan` the weight's) and runs the float32 kernel (_smallm) otherwise.

Tile: GROUP weight rows decoded into a row buffer, met by XROWS rows of x at a time: 16 float32
vector sums, with the 8 vectors loaded a step, in AVX-512's 32 registers. FP8 rows decode in K
order, FP4 rows in the table decode's (`fp4_order`; x comes permuted the same way).
"""
from __future__ import annotations

import functools

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._decode import (_I32, _JIT, _f2i, _half_bits_to_f32, _i2f, e2m1_select, e5m2_fast)
from ._ir import numba_targets, vload

E5M2, E4M3, NVFP4, MXFP4 = 0, 1, 2, 3
"""Format ids (_smallm's)."""
E4M3_FINITE = 5
"""E4M3 whose codes hold no NaN (backends/_facts.codes_nan_free): decoded without the NaN fix."""

GROUP = 4
"""Weight rows decoded together (one tile's rows)."""
XROWS = 4
"""Rows of bf16 x a tile meets (tails take 1 to 3)."""
STEP = 32
"""bf16 elements a vdpbf16ps reads of each operand: the row buffers and x are padded to it."""

EXP_LOW, EXP_HIGH = -100, 100
"""Bounds on the binary exponent of |w| x |x| (nonzero) for the kernel to give float32's answer:
from 2^-100 up even the last term of x (>= 2^-24 |x|) times w stays above float32's denormals,
which vdpbf16ps would flush; up to 2^100 sums of up to 2^27 products stay finite, as float32's
do."""


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether numba compiles for a CPU with AVX-512 BF16 (Zen 4, Cooper Lake, Sapphire Rapids
    and later)."""
    return all(numba_targets(f) for f in ("avx512f", "avx512bw", "avx512bf16"))


class TileIR:
    """What a tile's IR starts from: pointers to the GROUP weight rows of wbuf and the xrows rows
    of x16 from m0, the steps of their length, the vector types and vdpbf16ps."""

    def __init__(self, context, builder, arrays, m0, mty, xrows):
        (wty, wbuf), (xty, x16) = arrays
        warr = context.make_array(wty)(context, builder, wbuf)
        xarr = context.make_array(xty)(context, builder, x16)
        self.intp = intp = context.get_value_type(types.intp)
        m0 = context.cast(builder, m0, mty, types.intp)
        cols = builder.extract_value(warr.shape, 1)
        xcols = builder.extract_value(xarr.shape, 1)
        self.vf = ir.VectorType(ir.FloatType(), 16)
        self.vi = ir.VectorType(ir.IntType(32), 16)
        self.dot = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(self.vf, [self.vf, self.vi, self.vi]),
            "llvm.x86.avx512bf16.dpbf16ps.512")
        self.wrows = [builder.gep(warr.data, [builder.mul(ir.Constant(intp, i), cols)])
                      for i in range(GROUP)]
        self.xrows = [builder.gep(xarr.data, [builder.mul(builder.add(m0, ir.Constant(intp, j)),
                                                          xcols)])
                      for j in range(xrows)]
        self.steps = builder.udiv(cols, ir.Constant(intp, STEP))

    def step(self, builder, off, accs):
        """The dot products of step `off` (an element offset) added into accs[i][j]."""
        ws = [vload(builder, w, off, self.vi) for w in self.wrows]
        xs = [vload(builder, xr, off, self.vi) for xr in self.xrows]
        for i, w in enumerate(ws):
            for j, x in enumerate(xs):
                builder.store(builder.call(self.dot, [builder.load(accs[i][j]), w, x]), accs[i][j])


def check_tile_arrays(*arrays) -> None:
    """Typing: the tiles read C-contiguous uint16 [rows, K] arrays."""
    for a in arrays:
        if not (isinstance(a, types.Array) and a.layout == "C" and a.dtype == types.uint16
                and a.ndim == 2):
            raise TypeError(f"the bf16 tile needs C-contiguous uint16 [rows, K], got {a}")


def _emit_tile(context, builder, sig, args, xrows):
    """IR: the GROUP x xrows dot products of the bf16 rows wbuf[0..GROUP) and x16[m0..m0+xrows)
    over their whole length (a multiple of STEP), as a float32 tuple, weight row major."""
    wty, xty, mty = sig.args
    wbuf, x16, m0 = args
    t = TileIR(context, builder, ((wty, wbuf), (xty, x16)), m0, mty, xrows)
    intp, vf = t.intp, t.vf
    zero = ir.Constant(vf, None)
    accs = [[cgutils.alloca_once_value(builder, zero) for _ in range(xrows)] for _ in range(GROUP)]
    with cgutils.for_range(builder, t.steps, intp=intp) as loop:
        t.step(builder, builder.mul(loop.index, ir.Constant(intp, STEP)), accs)
    totals = [_lane_sum(builder, builder.load(accs[i][j]))
              for i in range(GROUP) for j in range(xrows)]
    return context.make_tuple(builder, sig.return_type, totals)


def _lane_sum(builder, v):
    """The 16 float32 lanes of v added pairwise: 8 + 8, 4 + 4, ..."""
    i32 = ir.IntType(32)
    width = 16
    while width > 1:
        half = width // 2
        lo = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(i32, half), list(range(half))))
        hi = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(i32, half),
                                                      list(range(half, width))))
        v, width = builder.fadd(lo, hi), half
    return builder.extract_element(v, ir.Constant(i32, 0))


def _tile_intrinsic(xrows):
    def typer(typingctx, wbuf, x16, m0):
        check_tile_arrays(wbuf, x16)
        sig = types.UniTuple(types.float32, GROUP * xrows)(wbuf, x16, m0)
        return sig, lambda c, b, s, a: _emit_tile(c, b, s, a, xrows)
    typer.__name__ = f"_tile_{GROUP}x{xrows}"
    return intrinsic(typer)


_tile1, _tile2, _tile3, _tile4 = (_tile_intrinsic(j) for j in (1, 2, 3, 4))


@nb.njit(**_JIT)
def _add(y, t, xrows, m, r, rows, terms):
    """y[(m + j) // terms, r + i] += t[i * xrows + j] for the tile's rows i < rows."""
    for i in range(rows):
        for j in range(xrows):
            y[(m + j) // terms, r + i] += t[i * xrows + j]


_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
_TABLE = _E2M1 + [-v for v in _E2M1]  # code -> value; code 8 is -0.0, as the reference


def _emit_fp4_steps(context, builder, sig, args):
    """IR: the whole steps of 16 int32 words of weight row r as bf16 bits into out: code j of
    word 16 s + lane at out[128 s + 16 j + lane] (`fp4_order`), each value the table's (vpermps)
    times its word's scale sw[word] (float32, exact), truncated to its top 16 bits (exact: every
    such product is a bf16 number)."""
    wty, rty, sty, oty = sig.args
    words, r, sw, out = args
    warr = context.make_array(wty)(context, builder, words)
    sarr = context.make_array(sty)(context, builder, sw)
    oarr = context.make_array(oty)(context, builder, out)
    intp = context.get_value_type(types.intp)
    r = context.cast(builder, r, rty, types.intp)
    cols = builder.extract_value(warr.shape, 1)
    row = builder.gep(warr.data, [builder.mul(r, cols)])
    f32, i32, i16 = ir.FloatType(), ir.IntType(32), ir.IntType(16)
    vf, vi, vh = ir.VectorType(f32, 16), ir.VectorType(i32, 16), ir.VectorType(i16, 16)
    perm = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vf, [vf, vi]), "llvm.x86.avx512.permvar.sf.512")
    table = ir.Constant(vf, [ir.Constant(f32, v) for v in _TABLE])
    sixteen = ir.Constant(vi, [ir.Constant(i32, 16)] * 16)
    steps = builder.udiv(cols, ir.Constant(intp, 16))
    with cgutils.for_range(builder, steps, intp=intp) as loop:
        w0 = builder.mul(loop.index, ir.Constant(intp, 16))
        lanes = vload(builder, row, w0, vi)
        scale = vload(builder, sarr.data, w0, vf)
        o0 = builder.mul(loop.index, ir.Constant(intp, 128))
        for j in range(8):
            idx = lanes if j == 0 else builder.lshr(lanes, ir.Constant(vi, [4 * j] * 16))
            v = builder.fmul(builder.call(perm, [table, idx]), scale)
            top = builder.trunc(builder.lshr(builder.bitcast(v, vi), sixteen), vh)
            at = builder.gep(oarr.data, [builder.add(o0, ir.Constant(intp, 16 * j))])
            ptr = builder.bitcast(at, vh.as_pointer())
            builder.store(top, ptr, align=2)
    return context.get_dummy_value()


@intrinsic
def _fp4_steps(typingctx, words, r, sw, out):
    for a, dt, nd in ((words, types.int32, 2), (sw, types.float32, 1), (out, types.uint16, 1)):
        if not (isinstance(a, types.Array) and a.layout == "C" and a.dtype == dt and a.ndim == nd):
            raise TypeError(f"the FP4 bf16 decode needs C-contiguous {dt} arrays, got {a}")
    return types.void(words, r, sw, out), _emit_fp4_steps


def fp4_order(kp: int) -> np.ndarray:
    """The column of x that each position of a decoded FP4 row meets: the whole steps of 128
    codes in `_emit_fp4_steps`' order, the codes past them in K order."""
    whole = kp // 128 * 128
    pos = np.arange(whole)
    s, rest = pos // 128, pos % 128
    j, lane = rest // 16, rest % 16
    return np.concatenate([8 * (16 * s + lane) + j, np.arange(whole, kp)])


@nb.njit(inline="always", **_JIT)
def _e4m3_bf16(c):
    """E4M3 code c (not NaN) as bf16 bits: value / 256 as fp16 (_decode.e4m3_fast_div256), x 256
    in float32 (exact), the top half."""
    c = np.uint16(c)
    h = np.uint16(((c & np.uint16(0x7F)) << np.uint16(7)) | ((c & np.uint16(0x80)) << np.uint16(8)))
    return np.uint16(_I32(_f2i(_half_bits_to_f32(h) * np.float32(256.0)) >> _I32(16))
                     & _I32(0xFFFF))


@nb.njit(**_JIT)
def _decode_bf16(kind, codes, words, scales, r, out, sw):
    """Weight row r as bfloat16 bits into out[:Kp] (FP8 in K order, unscaled; FP4 in
    `fp4_order`, NVFP4 without its tensor scale: all exact in bf16); out past Kp is left as it is
    (zero). codes: the FP8 bytes [N, Kp]; words: the FP4 int32 words [N, Kp / 8]; sw: float32
    scratch of Kp / 8 elements (FP4: each word's scale)."""
    if kind == E5M2:
        row = codes[r]
        for k in range(row.shape[0]):
            out[k] = np.uint16(_I32(_f2i(e5m2_fast(row[k])) >> _I32(16)) & _I32(0xFFFF))
    elif kind == E4M3_FINITE:  # codes without NaN: one loop, no fix (vectorised)
        row = codes[r]
        for k in range(row.shape[0]):
            out[k] = _e4m3_bf16(row[k])
    elif kind == E4M3:
        row = codes[r]
        for k in range(row.shape[0]):
            out[k] = _e4m3_bf16(row[k])
        for k in range(row.shape[0]):
            if (row[k] & np.uint8(0x7F)) == np.uint8(0x7F):
                out[k] = np.uint16(0x7FC0)  # NaN
    else:
        nw = words.shape[1]
        wpb = 2 if kind == NVFP4 else 4  # words a block scale covers
        srow = scales[r]
        if kind == NVFP4:  # codes below 0x7F (the caller checks): no NaN fix, as fp16 x 256
            for w in range(nw):
                c = np.uint16(srow[w // wpb])
                sw[w] = _half_bits_to_f32(np.uint16(c << np.uint16(7))) * np.float32(256.0)
        else:
            for w in range(nw):  # codes in 1..254 (the caller checks): 2^(c - 127), normal
                sw[w] = _i2f(_I32(_I32(srow[w // wpb]) << _I32(23)))
        _fp4_steps(words, r, sw, out)
        wrow = words[r]
        for w in range(nw // 16 * 16, nw):
            s = sw[w]
            for j in range(8):
                v = e2m1_select(_I32(wrow[w] >> _I32(4 * j))) * s
                out[8 * w + j] = np.uint16(_I32(_f2i(v) >> _I32(16)) & _I32(0xFFFF))


@nb.njit(parallel=True, **_JIT)
def smallm_bf16(kind, codes, words, scales, x16, terms, y, chunk):
    """y [M, N] (zeroed by the caller) += x @ W.T from x16 [M * terms, K32], the bf16 terms of x
    (`split_x`) in the weight's decode order; codes and words as `_decode_bf16` takes them (the
    other one empty); `chunk` weight rows a parallel step (a multiple of GROUP)."""
    n = max(codes.shape[0], words.shape[0])
    k32 = x16.shape[1]
    mt = x16.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        wbuf = np.zeros((GROUP, k32), np.uint16)
        sw = np.empty(k32 // 8 + 16, np.float32)
        r = c * chunk
        stop = min(n, r + chunk)
        while r < stop:
            rows = min(GROUP, stop - r)
            for i in range(rows):
                _decode_bf16(kind, codes, words, scales, r + i, wbuf[i], sw)
            for i in range(rows, GROUP):
                wbuf[i, :] = 0
            m = 0
            while m + XROWS <= mt:
                _add(y, _tile4(wbuf, x16, m), XROWS, m, r, rows, terms)
                m += XROWS
            left = mt - m
            if left == 3:
                _add(y, _tile3(wbuf, x16, m), 3, m, r, rows, terms)
            elif left == 2:
                _add(y, _tile2(wbuf, x16, m), 2, m, r, rows, terms)
            elif left == 1:
                _add(y, _tile1(wbuf, x16, m), 1, m, r, rows, terms)
            r += rows


_U32 = np.uint32


@nb.njit(**_JIT)
def _bf16_rne(v):
    """float32 v (finite) rounded to the nearest bfloat16, ties to even: its bits as int32."""
    b = _U32(_f2i(v))
    return _I32(_U32(b + _U32(0x7FFF) + _U32(_U32(b >> _U32(16)) & _U32(1))) >> _U32(16))


@nb.njit(**_JIT)
def split_x(xd, terms, x16):
    """x16[m * terms + t, :K] = the bf16 terms of float32 xd [M, K] (module docstring), rounded to
    nearest even; x16 past K is left as it is (zero). Returns (ok, low, high): ok False where an
    element is not finite; low / high the least and greatest binary exponent of a nonzero |x|
    (0, 0 where x is all zero; a denormal counts as -127)."""
    m_all, k = xd.shape
    low, high, ok = 1000, -1000, True
    for m in range(m_all):
        for i in range(k):
            v = xd[m, i]
            bits = _I32(_f2i(v))
            e = _I32(_I32(bits >> _I32(23)) & _I32(0xFF))
            if e == _I32(0xFF):
                ok = False
                continue
            if _I32(bits & _I32(0x7FFFFFFF)) != _I32(0):
                low = min(low, e - 127)
                high = max(high, e - 127)
            hi = _bf16_rne(v)
            x16[m * terms, i] = np.uint16(hi & _I32(0xFFFF))
            rest = v
            for t in range(1, terms):  # each term the rounded remainder of the ones before
                rest = rest - _i2f(_I32(hi << _I32(16)))
                hi = _bf16_rne(rest)
                x16[m * terms + t, i] = np.uint16(hi & _I32(0xFFFF))
    if low > high:
        low = high = 0
    return ok, low, high

