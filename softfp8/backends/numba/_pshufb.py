"""FP4 GEMV for AVX2 CPUs: the E2M1 select decode as two 16-entry byte tables (`vpshufb`).

Why: the AVX-512 kernel (_lut) looks codes up with a 16-float permute, which AVX2 lacks (its
`vpermps` has 8 entries, so the sign would cost three more operations a vector); the bit-operation
kernels of _kernels decode at ~6 Gelem/s a core with 8 lanes, 0.8-0.97x torch's fp16 mv at
11008 x 4096 on a 2-core Zen 3 (docs/decisions.md, CPU (Numba): M = 1). Every E2M1 value is exact
in bf16, so a code's bf16 bits are two bytes: `vpshufb` looks up 32 codes' high bytes in one
instruction and their low bytes in another, one byte interleave makes 16 bf16 words, and a shift or
a mask puts each in the top half of an fp32 lane: about 0.5 vector instructions a code with the
multiply-add. Exact values (the table holds them), so this is the select decoder's result bit for
bit, with or without FTZ/DAZ.

Layout: int32 words [N, Kp/8] (formats.py). A step is 32 bytes of a row (64 codes, byte i holds
codes 2i and 2i+1), loaded as they lie; the interleave and the shift/mask place code 2i + p of
byte i in fp32 vector 4p + q, lane l, by the fixed map `_step_order`, and x comes rearranged per
call to match (`x_steps`). A vector's lanes 0-3 and 4-7 come from bytes 16 apart, so each lane
group lies in one scale block (NVFP4 blocks are 8 bytes, MXFP4's 16). One row a pass (ROWS).
Words past the last whole step take the bit-operation select path per block, as in _lut.
NVFP4's E4M3 block scales are decoded a row at a time before its loop, or, where every code is
positive and not NaN (`loop_decodes`, as quantize() makes them), inside it (`gemv_nvfp4_raw`).
Written as LLVM IR in a numba intrinsic for the same reason as _lut (LLVM's vectoriser
does not make byte-table lookups).
"""
from __future__ import annotations

import functools
import struct

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic

from ._decode import _JIT, e4m3_i32_div256, e8m0_i32
from ._kernels import _mx_select, _nv_select
from ._ir import (PREFETCH_ROWS, numba_targets, prefetch, rows_operands, rows_sig,
                        rows_totals, vload)
from ._planes import select_planes
from ._scales import loop_decodes  # noqa: F401  (backends.numba asks the kernel module)

STEP_BYTES = 32
STEP_WORDS = STEP_BYTES // 4
ROWS = 1
"""Weight rows a pass. One: the four-row pass of _lut runs out of AVX2's 16 vector
registers here (measured 2 threads, one row against four a pass: MXFP4 4096x11008 1.67 against
3.60 ms, NVFP4 1.91 against 2.24)."""
_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
_BF16 = [struct.unpack("<I", struct.pack("<f", v))[0] >> 16 for v in _E2M1 + [-v for v in _E2M1]]
_HIGH = [b >> 8 for b in _BF16]  # code -> bf16 high byte (code 8 is -0.0, as the reference)
_LOW = [b & 0xFF for b in _BF16]


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether numba compiles for a CPU with AVX2 (`vpshufb` on 32 bytes), by numba's own
    target choice (_ir.numba_targets); asked once."""
    return numba_targets("avx2")


def _step_order() -> np.ndarray:
    """order[v, l]: the code (0..63) of a step that fp32 vector v, lane l holds. Vector 4p + q:
    codes of parity p (byte i's low nibble is code 2i, its high one 2i + 1); q = 2h + s: h = 0
    the byte interleave's low halves (bytes 0-7 | 16-23 of the step), 1 its high halves (8-15 |
    24-31); s = 0 the even bf16 words of that interleave (shifted up), 1 the odd ones (masked)."""
    order = np.empty((8, 8), np.int64)
    for p in range(2):
        for h in range(2):
            half = [8 * h + i for i in range(8)] + [16 + 8 * h + i for i in range(8)]
            for s in range(2):
                order[4 * p + 2 * h + s] = [2 * half[2 * m + s] + p for m in range(8)]
    return order


_ORDER = _step_order()


class _Emit:
    """The IR pieces of a step shared by the row loops here and in _pshufb_xrows: the byte
    tables and masks as constants, the LLVM intrinsics, and the scales' lane indices."""

    def __init__(self, builder, intp, s1, wpb):
        f32, i32, i8, i16 = ir.FloatType(), ir.IntType(32), ir.IntType(8), ir.IntType(16)
        self.vf, self.vi, self.vb, self.vh = (ir.VectorType(f32, 8), ir.VectorType(i32, 8),
                                              ir.VectorType(i8, 32), ir.VectorType(i16, 16))
        mod = builder.module
        self.pshufb = cgutils.get_or_insert_function(
            mod, ir.FunctionType(self.vb, [self.vb, self.vb]), "llvm.x86.avx2.pshuf.b")
        self.fma = cgutils.get_or_insert_function(
            mod, ir.FunctionType(self.vf, [self.vf] * 3), "llvm.fma.v8f32")
        self.permps = cgutils.get_or_insert_function(
            mod, ir.FunctionType(self.vf, [self.vf, self.vi]), "llvm.x86.avx2.permps")
        self.high = ir.Constant(self.vb, [ir.Constant(i8, b) for b in _HIGH * 2])
        self.low = ir.Constant(self.vb, [ir.Constant(i8, b) for b in _LOW * 2])
        self.nibble = ir.Constant(self.vb, [ir.Constant(i8, 15)] * 32)
        self.four = ir.Constant(self.vh, [ir.Constant(i16, 4)] * 16)
        self.sixteen = ir.Constant(self.vi, [ir.Constant(i32, 16)] * 8)
        self.top = ir.Constant(self.vi, [ir.Constant(i32, -65536)] * 8)
        # vpunpcklbw / vpunpckhbw of (low bytes, high bytes): the bf16 words of bytes 0-7 | 16-23
        # and 8-15 | 24-31
        self.unpack = [ir.Constant(ir.VectorType(i32, 32), [
            ir.Constant(i32, j) for j in [v for q in (0, 16) for i in range(8)
                                          for v in (q + 8 * h + i, 32 + q + 8 * h + i)]])
            for h in range(2)]
        self.wpb, self.intp = wpb, intp
        self.nblk = STEP_WORDS // wpb
        # the scales' lane indices, hidden from LLVM: with constant ones it rewrites the vpermps
        # as two shuffles and a vpermpd (2 uops) per vector, measured 2.5% (MXFP4) / 5% (NVFP4)
        # slower
        runtime_zero = builder.select(builder.icmp_signed(">=", s1, ir.Constant(intp, 0)),
                                      ir.Constant(i32, 0), ir.Constant(i32, 1))
        self.picks = []
        for h in range(2):
            lanes = [h] * 4 + [h + 2] * 4 if self.nblk == 4 else [0] * 4 + [1] * 4
            pick = ir.Constant(self.vi, None)
            for lane, block in enumerate(lanes):
                pick = builder.insert_element(pick, builder.add(runtime_zero,
                                                                ir.Constant(i32, block)),
                                              ir.Constant(i32, lane))
            self.picks.append(pick)

    def values(self, builder, raw, use):
        """The step's 64 codes (raw: its 32 bytes as one vector) as 8 fp32 vectors, each passed
        to use(v, value) as it is made: vector v = 4p + 2h + s holds the codes `_ORDER[v]`."""
        hi_n = builder.and_(builder.bitcast(builder.lshr(builder.bitcast(raw, self.vh),
                                                         self.four), self.vb), self.nibble)
        for p, idx in enumerate((builder.and_(raw, self.nibble), hi_n)):
            hb = builder.call(self.pshufb, [self.high, idx])
            lb = builder.call(self.pshufb, [self.low, idx])
            for h in range(2):
                words16 = builder.bitcast(builder.shuffle_vector(lb, hb, self.unpack[h]),
                                          self.vi)
                for sh in range(2):
                    bits = builder.shl(words16, self.sixteen) if sh == 0 else builder.and_(
                        words16, self.top)
                    use(4 * p + 2 * h + sh, builder.bitcast(bits, self.vf))

    def scales(self, builder, srow, w0, codes_of):
        """The step's block scales as two fp32 vectors (h = 0, 1), lane for lane with the
        vectors of `values` whose h they name: NVFP4 4 blocks (lanes 0-3 of h = 0 in block 0,
        4-7 in block 2; h = 1: blocks 1 and 3), MXFP4 2 blocks (lanes 0-3 in block 0, 4-7 in
        block 1). srow: the row's decoded scales, or its own codes: "e4m3" (NVFP4, each below
        0x7F), "e8m0" (MXFP4, each in 1..254, so code << 23 is the float32 2^(code - 127))."""
        i32, i16 = ir.IntType(32), ir.IntType(16)
        nblk = self.nblk
        few = ir.VectorType(ir.FloatType(), nblk)
        first = builder.udiv(w0, ir.Constant(self.intp, self.wpb))
        if codes_of == "e4m3":
            # code << 7 is the half E4M3 / 256 (4 exponent bits in the half's 5, subnormals
            # included), widened exactly by vcvtph2ps; the halves are spread over the lanes
            # before it by shuffles with immediates, so no index vectors take registers
            vh4 = ir.VectorType(i16, nblk)
            codes = builder.zext(vload(builder, srow, first, ir.VectorType(ir.IntType(8), nblk),
                                       align=1), vh4)
            halves = builder.shl(codes, ir.Constant(vh4, [ir.Constant(i16, 7)] * nblk))
            return [builder.fpext(builder.bitcast(builder.shuffle_vector(
                halves, ir.Constant(vh4, None),
                ir.Constant(self.vi, [ir.Constant(i32, b) for b in [h] * 4 + [h + 2] * 4])),
                ir.VectorType(ir.HalfType(), 8)), self.vf) for h in range(2)]
        if codes_of == "e8m0":
            vin = ir.VectorType(i32, nblk)
            codes = builder.zext(vload(builder, srow, first, ir.VectorType(ir.IntType(8), nblk),
                                       align=1), vin)
            values = builder.bitcast(builder.shl(codes, ir.Constant(vin, [ir.Constant(i32, 23)]
                                                                     * nblk)), few)
            spread = builder.shuffle_vector(values, ir.Constant(few, None), ir.Constant(
                self.vi, [ir.Constant(i32, b) for b in [0] * 4 + [1] * 4]))
            return [spread, spread]
        sv = vload(builder, srow, first, few)
        sv = builder.shuffle_vector(sv, ir.Constant(few, None),
                                    ir.Constant(self.vi, [ir.Constant(i32, j % nblk)
                                                          for j in range(8)]))
        return [builder.call(self.permps, [sv, self.picks[h]]) for h in range(2)]


def _emit_rows(context, builder, sig, args, wpb, nrows, codes_of=None):
    """IR: for rows r..r+nrows-1, the sum over steps s in [s0, s1) of codes times x times their
    block scale (sc row i for weight row r + i, wpb words per block); returns a ROWS-tuple.
    codes_of: None, or "e4m3": sc is the weight's own E4M3 scale codes [N, blocks], each below
    0x7F (positive, not NaN: the caller checks), decoded in the loop as E4M3 / 256 (the value
    e4m3_i32_div256 gives). (MXFP4's E8M0 codes decoded so, code << 23, gave no clear gain over
    its pass before the loop: half as many scales a row; not kept.)"""
    intp, s0, s1, xdata, wrows, srows, ahead = rows_operands(  # as _lut
        context, builder, sig, args, nrows, PREFETCH_ROWS * nrows, codes_of is not None)
    e = _Emit(builder, intp, s1, wpb)
    # per row two sums: the vectors of the interleave's low halves (h = 0) and high halves (1),
    # whose lanes lie in different scale blocks for NVFP4
    accs = [[cgutils.alloca_once_value(builder, ir.Constant(e.vf, None)) for _ in range(2)]
            for _ in range(nrows)]
    with cgutils.for_range_slice(builder, s0, s1, ir.Constant(intp, 1), intp=intp) as (s, _):
        w0 = builder.mul(s, ir.Constant(intp, STEP_WORDS))
        x0 = builder.mul(s, ir.Constant(intp, 64))
        xv = [vload(builder, xdata, builder.add(x0, ir.Constant(intp, 8 * v)), e.vf)
              for v in range(8)]
        for i in range(nrows):
            raw = vload(builder, wrows[i], w0, e.vb)
            prefetch(builder, ahead[i], w0)  # each line twice (a step is half one): no branch
            part = [None, None]

            def use(v, val):
                h = (v >> 1) & 1
                part[h] = builder.fmul(val, xv[v]) if part[h] is None else builder.call(
                    e.fma, [val, xv[v], part[h]])

            e.values(builder, raw, use)
            scales = e.scales(builder, srows[i], w0, codes_of)
            for h in range(2):
                builder.store(builder.call(e.fma, [part[h], scales[h],
                                                   builder.load(accs[i][h])]), accs[i][h])
    return rows_totals(context, builder, sig, accs, ROWS)


@intrinsic
def _nv_rows(typingctx, words, r, s0, s1, xs, sc):
    sig = rows_sig(ROWS, words, r, s0, s1, xs, sc)
    return sig, lambda c, b, s, a: _emit_rows(c, b, s, a, 2, ROWS)


@intrinsic
def _nv_rows_raw(typingctx, words, r, s0, s1, xs, sc):
    sig = rows_sig(ROWS, words, r, s0, s1, xs, sc)
    return sig, lambda c, b, s, a: _emit_rows(c, b, s, a, 2, ROWS, codes_of="e4m3")


@intrinsic
def _mx_rows(typingctx, words, r, s0, s1, xs, sc):
    sig = rows_sig(ROWS, words, r, s0, s1, xs, sc)
    return sig, lambda c, b, s, a: _emit_rows(c, b, s, a, 4, ROWS)


@nb.njit(**_JIT)
def _nvfp4_rows(words, scales, g, xs, xp, y, r0, r1):
    nblk = scales.shape[1]
    steps = xs.shape[0]
    tail = steps * STEP_WORDS // 2  # first block past the whole steps
    sc = np.empty((ROWS, nblk), np.float32)
    post = np.float32(256.0) * g  # the scales below are E4M3 / 256 (e4m3_i32_div256)
    r = r0
    while r < r1:
        rows = ROWS
        for i in range(rows):
            for b in range(nblk):
                sc[i, b] = e4m3_i32_div256(scales[r + i, b])
        acc = _nv_rows(words, r, 0, steps, xs, sc)
        for i in range(rows):
            a = acc[i]
            for b in range(tail, nblk):
                a += _nv_select(words, r + i, b, xp) * sc[i, b]
            y[r + i] = a * post
        r += rows


@nb.njit(**_JIT)
def _nvfp4_rows_raw(words, scales, g, xs, xp, y, r0, r1):
    """_nvfp4_rows for scale codes all below 0x7F: the loop decodes them (`_emit_rows`)."""
    nblk = scales.shape[1]
    steps = xs.shape[0]
    tail = steps * STEP_WORDS // 2
    post = np.float32(256.0) * g
    for r in range(r0, r1):
        a = _nv_rows_raw(words, r, 0, steps, xs, scales)[0]
        for b in range(tail, nblk):
            a += _nv_select(words, r, b, xp) * e4m3_i32_div256(scales[r, b])
        y[r] = a * post


@nb.njit(**_JIT)
def _mxfp4_rows(words, scales, xs, xp, y, r0, r1):
    nblk = scales.shape[1]
    steps = xs.shape[0]
    tail = steps * STEP_WORDS // 4
    sc = np.empty((ROWS, nblk), np.float32)
    r = r0
    while r < r1:
        rows = ROWS
        for i in range(rows):
            for b in range(nblk):
                sc[i, b] = e8m0_i32(scales[r + i, b])
        acc = _mx_rows(words, r, 0, steps, xs, sc)
        for i in range(rows):
            a = acc[i]
            for b in range(tail, nblk):
                a += _mx_select(words, r + i, b, xp) * sc[i, b]
            y[r + i] = a
        r += rows


@nb.njit(parallel=True, **_JIT)
def gemv_nvfp4(words, scales, g, xs, xp, y, chunk):
    """y[r] = row r . x for NVFP4 words [N, Kp/8], g the tensor scale; xs and xp as `x_steps`
    returns them. Select decode by byte tables."""
    n = words.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _nvfp4_rows(words, scales, g, xs, xp, y, c * chunk, min(n, (c + 1) * chunk))


@nb.njit(parallel=True, **_JIT)
def gemv_nvfp4_raw(words, scales, g, xs, xp, y, chunk):
    """gemv_nvfp4 where every scale code is below 0x7F (`loop_decodes`): the loop decodes the
    scales itself, in less time than a separate pass (docs/decisions.md, CPU (Numba): M = 1, block
    scales decoded in the loop)."""
    n = words.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _nvfp4_rows_raw(words, scales, g, xs, xp, y, c * chunk, min(n, (c + 1) * chunk))


@nb.njit(parallel=True, **_JIT)
def gemv_mxfp4(words, scales, xs, xp, y, chunk):
    """y[r] = row r . x for MXFP4 words [N, Kp/8]; xs and xp as `x_steps` returns them. Select
    decode by byte tables."""
    n = words.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _mxfp4_rows(words, scales, xs, xp, y, c * chunk, min(n, (c + 1) * chunk))


def x_steps(x, block):
    """x [Kp] float32 (numpy, or torch) -> (xs, xp) numpy: xs[s, v, l] = x[64 s + order[v, l]]
    for the whole steps of 32 bytes (`_step_order`), and `_lut.select_planes` for the
    remaining blocks. In numpy: torch's gather and copies cost ~0.1 ms a call on 2 cores (they
    start its thread pool), the GEMV at 11008 x 4096 ~1.6 ms."""
    xn = x if isinstance(x, np.ndarray) else x.numpy()
    steps = xn.shape[0] // 64
    xs = xn[_gather_index(steps)].reshape(steps, 8, 8)
    return xs, select_planes(xn, block, 64)


@functools.lru_cache(maxsize=64)
def _gather_index(steps: int) -> np.ndarray:
    """Flat indices of x in `x_steps`' order for `steps` whole steps (one array per K, kept)."""
    return (64 * np.arange(steps)[:, None] + _ORDER.reshape(1, -1)).reshape(-1)
