"""The fused small-M kernel: each weight vector decoded in registers and multiplied with up to
XROWS rows of x (bf16 terms) by vdpbf16ps before the next is decoded.

Why: `_smallm_bf16` decodes a weight row into a bf16 buffer and reads it back once per tile of
x rows; at small M that store and reload (and the buffer's own pass) cost more than the GEMV's
whole row (docs/decisions.md, CPU: prompts and small batches). Here the decode is the M = 1
GEMV's (`_dpbf16` for FP4: a vpermw on a bf16 table; FP8: the fp16 bits widened by vcvtph2ps,
packed to bf16 by vcvtne2ps2bf16, exact) and its result feeds XROWS accumulators, one per row of
x, all in registers (`inspect_asm` of the drivers: no spills, vdpbf16ps on zmm). One weight row
a pass; the rows of x are taken XROWS at a time (and the rest), so the weight is read from memory
once and decoded once per XROWS rows of x.

x comes as `_smallm_bf16.split_x` makes it: `terms` bf16 rows per row of x that sum to it
exactly, so every product is exact and y is float32's sum of them in another order; the caller
(`_dp_rows.matmul_fused`) checks x's and the weight's exponent range so that vdpbf16ps flushes
nothing, as for `_smallm_bf16`. Values are scaled as the GEMVs scale them: E4M3 as value / 256
(y x 256 after), FP4 partial sums per step times the step's block scales (NVFP4's E4M3 / 256,
y x 256 x the tensor scale after; MXFP4's E8M0 exact), both decoded in the loop.

Layout: FP8 in K order, STEP8 codes a step (one 64-byte line); FP4 in `_dpbf16`'s order for
the whole steps of 128 codes (`fp4_x_order`). The codes past the whole steps (K off a step) are
decoded by scalar numba code (`_fp8_tail`, `_fp4_tail`) with the same values.
"""
from __future__ import annotations

import functools

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._decode import (_I32, _JIT, _f2i, _half_bits_to_f32, _i2f, e2m1_select, e4m3_fast_div256,
                      e5m2_fast)
from ._smallm_bf16 import _bf16_rne
from ._ir import PREFETCH_ROWS, numba_targets, prefetch, row_pointers, vload
from ._scales import add_scaled, for_steps

E5M2, E4M3, NVFP4, MXFP4, E4M3_FINITE = 0, 1, 2, 3, 5
"""Format ids (`_smallm_bf16`'s)."""
XROWS = 16
"""Most rows of x (bf16 terms) a pass meets with each decoded weight vector: as many float32
accumulators stay in registers beside the decode's. A pass takes XROWS rows, else up to
`SMALL_ROWS` (a loop specialised for each count)."""
SMALL_ROWS = 8
FP8_ROWS = tuple(range(1, SMALL_ROWS + 1)) + (XROWS,)
FP4_ROWS = tuple(range(1, SMALL_ROWS + 1))
"""The pass sizes each format's loop is specialised for: FP4's sixteen partial sums a pass (four
vdpbf16ps a row, then its block scales) beside sixteen accumulators spill, so it stops at 8."""
STEP8 = 64
"""FP8 codes a step: one 64-byte line of a row, two vectors of 32 bf16."""
STEP4 = 128
"""FP4 codes a step: 16 int32 words, four vpermw of 32 codes."""
LANES = 16
X_BLOCK_BYTES = 16384
"""K is taken in blocks whose bf16 x rows (all M * terms of them) fit this many bytes, so that x
stays in the L1 (32 KiB on Zen 4) while a chunk's weight rows stream past it: without it the
x loads of each weight row came from the L2 and M = 8 took 2.2x M = 4's time."""

_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
_TABLE = [int(np.float32(v).view(np.uint32)) >> 16 for v in _E2M1 + [-v for v in _E2M1]] * 2


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether numba compiles for a CPU with AVX-512 BF16 and VBMI (vdpbf16ps, vpermi2b): Zen 4,
    Ice Lake server and Sapphire Rapids on; not Cooper Lake (BF16 without VBMI)."""
    return all(numba_targets(f) for f in ("avx512f", "avx512bw", "avx512bf16", "avx512vbmi"))


def _totals(context, builder, sig, accs):
    """IR: the lane sums of the vectors accs (allocas of <16 x float>) as the XROWS-tuple the
    signature returns (past len(accs): 0). Pairs of vectors are folded together (each step: two
    shuffles and an add halve the lanes per row and double the rows per vector), so R sums
    cost about 3 R operations, not 30 R as lane by lane: a pass pays them once per K block."""
    i32, f32 = ir.IntType(32), ir.FloatType()
    zero = ir.Constant(ir.VectorType(f32, LANES), None)
    vecs = [(builder.load(a), [j]) for j, a in enumerate(accs) if a is not None]
    width = LANES
    while width > 1:
        if len(vecs) % 2:
            vecs.append((zero, [None] * len(vecs[0][1])))
        half = width // 2
        runs = LANES // width  # rows a vector holds, `width` lanes each
        out = []
        for (a, ra), (b, rb) in zip(vecs[0::2], vecs[1::2]):
            if a is b:
                continue
            masks = [[src * LANES + run * width + part * half + i
                      for src in (0, 1) for run in range(runs) for i in range(half)]
                     for part in (0, 1)]
            lo, hi = (builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(i32, LANES), mk))
                      for mk in masks)
            out.append((builder.fadd(lo, hi), ra + rb))
        vecs, width = out, half
        if len(vecs) == 1 and width > 1 and len(vecs[0][1]) < LANES:  # one vector left: fold it onto itself
            (a, ra), = vecs
            runs = LANES // width
            half = width // 2
            masks = [[run * width + part * half + i for run in range(runs) for i in range(half)]
                     * 2 for part in (0, 1)]
            lo, hi = (builder.shuffle_vector(a, a, ir.Constant(ir.VectorType(i32, LANES), mk))
                      for mk in masks)
            vecs, width = [(builder.fadd(lo, hi), ra + [None] * len(ra))], half
    totals = [ir.Constant(f32, 0.0)] * sig.return_type.count
    for v, rows in vecs:
        for lane, j in enumerate(rows[:LANES]):
            if j is not None:
                totals[j] = builder.extract_element(v, ir.Constant(i32, lane))
    return context.make_tuple(builder, sig.return_type, totals)


def _dot_fn(builder):
    f32, i32 = ir.FloatType(), ir.IntType(32)
    vf, vi = ir.VectorType(f32, LANES), ir.VectorType(i32, LANES)
    return cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vf, [vf, vi, vi]), "llvm.x86.avx512bf16.dpbf16ps.512")


def _x_vectors(context, builder, xty, x3, m0, mty, intp):
    """IR: a function (vector index v, row j) -> pointer to x3[v, m0 + j, :] (x3 [V, Mt, 32]:
    every row's vector v side by side, so the rows of a pass sit at constant offsets from one
    pointer and take no register each)."""
    xarr = context.make_array(xty)(context, builder, x3)
    m0 = context.cast(builder, m0, mty, types.intp)
    mt = builder.extract_value(xarr.shape, 1)

    def at(v, j):
        row = builder.add(builder.mul(v, mt), builder.add(m0, ir.Constant(intp, j)))
        return builder.gep(xarr.data, [builder.mul(row, ir.Constant(intp, 32))])
    return at


def fp8_bf16_bits(kind) -> list[int]:
    """The bf16 bits of FP8 codes 0..127 (E5M2 or E4M3; the kernel ors the sign in for
    128..255), from the reference decoder."""
    import torch

    from ...decode import decode_e4m3_to_f32, decode_e5m2_to_f32

    decode = decode_e5m2_to_f32 if kind == E5M2 else decode_e4m3_to_f32
    vals = decode(torch.arange(128, dtype=torch.uint8))
    return [(int(v) >> 16) & 0xFFFF for v in vals.view(torch.int32).tolist()]


def _fp8_tables(kind):
    """`fp8_bf16_bits` as the four 64-byte tables the byte permutes read: the high bytes of
    codes 0..63 and 64..127, then the low bytes likewise."""
    bits = fp8_bf16_bits(kind)
    i8 = ir.IntType(8)
    vb = ir.VectorType(i8, 64)
    return [ir.Constant(vb, [ir.Constant(i8, (b >> shift) & 0xFF) for b in bits[h:h + 64]])
            for shift in (8, 0) for h in (0, 64)]


def _emit_fp8(context, builder, sig, args, kind, xrows, wrows=1):
    """IR: the dot products of FP8 rows r..r+wrows's steps [s0, s1) with x16 rows m0..m0+xrows
    (in `fp8_x_order`), as a tuple of float32 (weight row major, XROWS a row). A step is one 64-byte line: two byte permutes
    (vpermi2b) look each code's bf16 high and low byte up in 128-entry tables, the sign is or-ed
    in, and two byte interleaves make the 2 x 32 bf16 of the step, exact for every code."""
    cty, rty, xty, mty, s0ty, s1ty = sig.args[:6]
    codes, r, x16, m0, s0, s1 = args
    intp = context.get_value_type(types.intp)
    carr = context.make_array(cty)(context, builder, codes)
    r = context.cast(builder, r, rty, types.intp)
    s0 = context.cast(builder, s0, s0ty, types.intp)
    s1 = context.cast(builder, s1, s1ty, types.intp)
    rows = row_pointers(builder, carr, r, 0, wrows, intp)
    ahead = row_pointers(builder, carr, r, PREFETCH_ROWS * wrows, wrows, intp, clamp=True)
    xat = _x_vectors(context, builder, xty, x16, m0, mty, intp)
    f32, i8, i32 = ir.FloatType(), ir.IntType(8), ir.IntType(32)
    vb = ir.VectorType(i8, 64)
    vf, vi = ir.VectorType(f32, LANES), ir.VectorType(i32, LANES)
    dot = _dot_fn(builder)
    perm = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vb, [vb, vb, vb]), "llvm.x86.avx512.vpermi2var.qi.512")
    hi0, hi1, lo0, lo1 = _fp8_tables(kind)
    sign = ir.Constant(vb, [ir.Constant(i8, 0x80)] * 64)
    # vpunpcklbw / vpunpckhbw: per 128-bit lane, bytes 0..7 (8..15) of lo and hi interleaved
    inter = [ir.Constant(ir.VectorType(i32, 64), [
        b for lane in range(4) for i in range(8 * h, 8 * h + 8)
        for b in (16 * lane + i, 64 + 16 * lane + i)]) for h in (0, 1)]
    accs = [[cgutils.alloca_once_value(builder, ir.Constant(vf, None)) for _ in range(xrows)]
            for _ in range(wrows)]
    with cgutils.for_range_slice(builder, s0, s1, ir.Constant(intp, 1), intp=intp) as (s, _):
        c0 = builder.mul(s, ir.Constant(intp, STEP8))
        ws = []
        for i in range(wrows):
            prefetch(builder, ahead[i], c0)
            raw = vload(builder, rows[i], c0, vb, align=1)
            hi = builder.or_(builder.call(perm, [hi0, raw, hi1]), builder.and_(raw, sign))
            lo = builder.call(perm, [lo0, raw, lo1])
            ws.append([builder.bitcast(builder.shuffle_vector(lo, hi, inter[v]), vi)
                       for v in range(2)])
        for v in range(2):
            vx = builder.add(builder.mul(s, ir.Constant(intp, 2)), ir.Constant(intp, v))
            for j in range(xrows):
                xv = vload(builder, xat(vx, j), ir.Constant(intp, 0), vi)
                for i in range(wrows):
                    acc = accs[i][j]
                    builder.store(builder.call(dot, [builder.load(acc), ws[i][v], xv]), acc)
    flat = [None] * (wrows * XROWS)
    for i in range(wrows):
        for j in range(xrows):
            flat[i * XROWS + j] = accs[i][j]
    return _totals(context, builder, sig, flat)


def _emit_fp4(context, builder, sig, args, mx, xrows):
    """IR: the dot products of FP4 row r's whole steps (NVFP4 scales as E4M3 / 256, no tensor
    scale) with x16 rows m0..m0+xrows in `_dpbf16`'s order, as an XROWS-tuple of float32."""
    wty, sty, rty, xty, mty, s0ty, s1ty = sig.args[:7]
    words, scales, r, x16, m0, s0, s1 = args
    intp = context.get_value_type(types.intp)
    warr = context.make_array(wty)(context, builder, words)
    sarr = context.make_array(sty)(context, builder, scales)
    r = context.cast(builder, r, rty, types.intp)
    s0 = context.cast(builder, s0, s0ty, types.intp)
    s1 = context.cast(builder, s1, s1ty, types.intp)
    row = row_pointers(builder, warr, r, 0, 1, intp)[0]
    ahead = row_pointers(builder, warr, r, PREFETCH_ROWS, 1, intp, clamp=True)[0]
    srow = row_pointers(builder, sarr, r, 0, 1, intp)[0]
    xat = _x_vectors(context, builder, xty, x16, m0, mty, intp)
    f32, i16, i32 = ir.FloatType(), ir.IntType(16), ir.IntType(32)
    vf, vi, vh = ir.VectorType(f32, LANES), ir.VectorType(i32, LANES), ir.VectorType(i16, 32)
    dot = _dot_fn(builder)
    permw = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vh, [vh, vh]), "llvm.x86.avx512.permvar.hi.512")
    table = ir.Constant(vh, [ir.Constant(i16, v) for v in _TABLE])
    zero = ir.Constant(vf, None)
    wpb = 4 if mx else 2
    codes_of = "e8m0" if mx else "e4m3"
    accs = [cgutils.alloca_once_value(builder, zero) for _ in range(xrows)]

    def step(s, scales):
        w0 = builder.mul(s, ir.Constant(intp, LANES))
        lanes = vload(builder, row, w0, vh)
        prefetch(builder, ahead, w0)
        vals = [builder.bitcast(builder.call(permw, [table, lanes if j == 0 else builder.lshr(
            lanes, ir.Constant(vh, [4 * j] * 32))]), vi) for j in range(4)]
        parts = []
        for m in range(xrows):
            part = zero
            for j in range(4):
                vx = builder.add(builder.mul(s, ir.Constant(intp, 4)), ir.Constant(intp, j))
                xv = vload(builder, xat(vx, m), ir.Constant(intp, 0), vi)
                part = builder.call(dot, [part, vals[j], xv])
            parts.append(part)
        add_scaled(builder, srow, w0, wpb, parts, accs, intp, codes_of,
                   None if scales is None else scales[0])

    for_steps(builder, s0, s1, intp, [srow], wpb, codes_of, step)
    return _totals(context, builder, sig, accs)


def _emit_switch(context, builder, sig, args, emit, counts):
    """IR: emit(xrows) for the pass's rows of x (the last argument, one of `counts`, the
    largest of them otherwise), one specialised loop each, the tuple of the one that ran."""
    rows = context.cast(builder, args[-1], sig.args[-1], types.intp)
    intp = context.get_value_type(types.intp)
    out = cgutils.alloca_once(builder, context.get_value_type(sig.return_type))
    end = builder.append_basic_block("rows_end")
    cases = [builder.append_basic_block(f"rows_{j}") for j in counts]
    sw = builder.switch(rows, cases[-1])
    for j, block in zip(counts, cases):
        if j < counts[-1]:
            sw.add_case(ir.Constant(intp, j), block)
        builder.position_at_end(block)
        builder.store(emit(j), out)
        builder.branch(end)
    builder.position_at_end(end)
    return builder.load(out)


def _check(arrays):
    for a, dt, nd in arrays:
        if not (isinstance(a, types.Array) and a.layout == "C" and a.dtype == dt and a.ndim == nd):
            raise TypeError(f"the fused small-M kernel needs C-contiguous {nd}-D {dt}, got {a}")


def _fp8_intrinsic(kind):
    def typer(typingctx, codes, r, x16, m0, s0, s1, rows):
        _check([(codes, types.uint8, 2), (x16, types.uint16, 3)])
        sig = types.UniTuple(types.float32, XROWS)(codes, r, x16, m0, s0, s1, rows)
        return sig, lambda c, b, s, a: _emit_switch(
            c, b, s, a, lambda j: _emit_fp8(c, b, s, a[:-1], kind, j), FP8_ROWS)
    typer.__name__ = f"_fp8_rows_{kind}"
    return intrinsic(typer)


def _fp4_intrinsic(mx):
    def typer(typingctx, words, scales, r, x16, m0, s0, s1, rows):
        _check([(words, types.int32, 2), (scales, types.uint8, 2), (x16, types.uint16, 3)])
        sig = types.UniTuple(types.float32, XROWS)(words, scales, r, x16, m0, s0, s1, rows)
        return sig, lambda c, b, s, a: _emit_switch(
            c, b, s, a, lambda j: _emit_fp4(c, b, s, a[:-1], mx, j), FP4_ROWS)
    typer.__name__ = f"_fp4_rows_{'mx' if mx else 'nv'}"
    return intrinsic(typer)


def _fp8_pair_intrinsic(kind):
    """_fp8_intrinsic for two weight rows a pass (r, r + 1): each x load serves both."""
    def typer(typingctx, codes, r, x16, m0, s0, s1, rows):
        _check([(codes, types.uint8, 2), (x16, types.uint16, 3)])
        sig = types.UniTuple(types.float32, 2 * XROWS)(codes, r, x16, m0, s0, s1, rows)
        return sig, lambda c, b, s, a: _emit_switch(
            c, b, s, a, lambda j: _emit_fp8(c, b, s, a[:-1], kind, j, 2), FP4_ROWS)
    typer.__name__ = f"_fp8_pair_{kind}"
    return intrinsic(typer)


_e5m2, _e4m3 = (_fp8_intrinsic(k) for k in (E5M2, E4M3))
_e5m2_2, _e4m3_2 = (_fp8_pair_intrinsic(k) for k in (E5M2, E4M3))
_nvfp4, _mxfp4 = _fp4_intrinsic(False), _fp4_intrinsic(True)


@nb.njit(**_JIT)
def fill_x(x, bits16, order, terms, x3):
    """x3[v, m * terms + t, i] = term t of x[m, order[32 v + i]] (0 where order points past
    x's columns: the padding), the bf16 terms as `_smallm_bf16.split_x` makes them; x float32,
    or (bits16) bf16 bits as uint16, one term, as they lie: one pass gathers and splits.
    Returns split_x's (ok, low, high)."""
    m_all, k = x.shape
    low, high, ok = 1000, -1000, True
    for v in range(x3.shape[0]):
        for i in range(32):
            p = 32 * v + i
            col = order[p] if p < order.shape[0] else k
            for m in range(m_all):
                if col >= k:
                    for t in range(terms):
                        x3[v, m * terms + t, i] = 0
                    continue
                if bits16:
                    bits = _I32(_I32(x[m, col]) << _I32(16))
                    f = _i2f(bits)
                else:
                    f = np.float32(x[m, col])
                    bits = _I32(_f2i(f))
                e = _I32(_I32(bits >> _I32(23)) & _I32(0xFF))
                if e == _I32(0xFF):
                    ok = False
                    continue
                if _I32(bits & _I32(0x7FFFFFFF)) != _I32(0):
                    low = min(low, e - 127)
                    high = max(high, e - 127)
                if bits16:
                    x3[v, m, i] = np.uint16(x[m, col])
                    continue
                hi = _bf16_rne(f)
                x3[v, m * terms, i] = np.uint16(hi & _I32(0xFFFF))
                rest = f
                for t in range(1, terms):
                    rest = rest - _i2f(_I32(hi << _I32(16)))
                    hi = _bf16_rne(rest)
                    x3[v, m * terms + t, i] = np.uint16(hi & _I32(0xFFFF))
    if low > high:
        low = high = 0
    return ok, low, high


@nb.njit(**_JIT)
def _bf16(x3, m, k):
    """x's term m at position k as float32 (x3 [V, Mt, 32])."""
    return _i2f(_I32(_I32(x3[k // 32, m, k % 32]) << _I32(16)))


@nb.njit(**_JIT)
def _fp8_tail(kind, row, x16, m, k0):
    """The codes of `row` from k0 on times x16 row m (in K order there)."""
    a = np.float32(0.0)
    for k in range(k0, row.shape[0]):
        v = e5m2_fast(row[k]) if kind == E5M2 else e4m3_fast_div256(row[k]) * np.float32(256.0)
        a += v * _bf16(x16, m, k)
    return a


@nb.njit(**_JIT)
def _fp4_tail(mx, wrow, srow, x16, m, w0):
    """The words of `wrow` from w0 on times x16 row m (in K order there), each code times its
    block's scale (NVFP4: E4M3 / 256)."""
    a = np.float32(0.0)
    wpb = 4 if mx else 2
    for w in range(w0, wrow.shape[0]):
        c = _I32(srow[w // wpb])
        if mx:
            s = _i2f(_I32(c << _I32(23)))
        else:
            s = _half_bits_to_f32(np.uint16(c << _I32(7)))
        for j in range(8):
            a += (e2m1_select(_I32(wrow[w] >> _I32(4 * j))) * s) * _bf16(x16, m, 8 * w + j)
    return a


def block_steps(mt: int, step: int) -> int:
    """Steps a K block spans (the drivers' `per`): its x rows (mt of them, bf16) fit
    X_BLOCK_BYTES."""
    return max(1, X_BLOCK_BYTES // (2 * step * mt))


@nb.njit(**_JIT)
def _fp8_one(kind, codes, r, x16, m, s0, s1, left, terms, y, tail_from):
    """One pass of weight row r over x16 rows m.. (XROWS of them, else up to SMALL_ROWS) added
    into y (with the codes from tail_from on where it is >= 0); returns the rows it took."""
    rows = XROWS if left >= XROWS else min(SMALL_ROWS, left)
    if kind == E5M2:
        t = _e5m2(codes, r, x16, m, s0, s1, rows)
    else:
        t = _e4m3(codes, r, x16, m, s0, s1, rows)
    for j in range(rows):
        a = t[j]
        if tail_from >= 0:
            a += _fp8_tail(kind, codes[r], x16, m + j, tail_from)
        y[(m + j) // terms, r] += a
    return rows


@nb.njit(**_JIT)
def _fp8_two(kind, codes, r, x16, m, s0, s1, left, terms, y, tail_from):
    """_fp8_one for weight rows r and r + 1 together (up to SMALL_ROWS rows of x)."""
    rows = min(SMALL_ROWS, left)
    if kind == E5M2:
        t = _e5m2_2(codes, r, x16, m, s0, s1, rows)
    else:
        t = _e4m3_2(codes, r, x16, m, s0, s1, rows)
    for i in range(2):
        for j in range(rows):
            a = t[i * XROWS + j]
            if tail_from >= 0:
                a += _fp8_tail(kind, codes[r + i], x16, m + j, tail_from)
            y[(m + j) // terms, r + i] += a
    return rows


@nb.njit(parallel=True, **_JIT)
def fused_fp8(kind, codes, x16, terms, y, chunk, per, pairs):
    """y [M, N] (zeroed by the caller) += x @ W.T (FP8 unscaled) from x16 [K64 / 32, M * terms,
    32], the bf16 terms of x in `fp8_x_order`; codes the FP8 bytes [N, Kp] (kind E5M2 or E4M3);
    `chunk` rows a parallel step, `per` steps a K block; `pairs`: two weight rows a pass."""
    n, kp = codes.shape
    mt = x16.shape[1]
    steps = kp // STEP8
    for c in nb.prange((n + chunk - 1) // chunk):
        r0, r1 = c * chunk, min(n, (c + 1) * chunk)
        for s0 in range(0, max(steps, 1), per):
            s1 = min(steps, s0 + per)
            tail_from = steps * STEP8 if s1 == steps else -1
            r = r0
            while r < r1:
                two = pairs and r + 1 < r1
                m = 0
                while m < mt:
                    if two:
                        m += _fp8_two(kind, codes, r, x16, m, s0, s1, mt - m, terms, y, tail_from)
                    else:
                        m += _fp8_one(kind, codes, r, x16, m, s0, s1, mt - m, terms, y, tail_from)
                r += 2 if two else 1


@nb.njit(parallel=True, **_JIT)
def fused_fp4(mx, words, scales, x16, terms, y, chunk, per):
    """fused_fp8 for FP4 int32 words [N, Kp / 8] and their scale codes (NVFP4 E4M3 below 0x7F,
    y / 256 without the tensor scale; MXFP4 E8M0 in 1..254); x16 in `fp4_x_order`."""
    n, nw = words.shape
    mt = x16.shape[1]
    steps = nw // LANES
    for c in nb.prange((n + chunk - 1) // chunk):
        r0, r1 = c * chunk, min(n, (c + 1) * chunk)
        for s0 in range(0, max(steps, 1), per):
            s1 = min(steps, s0 + per)
            last = s1 == steps
            for r in range(r0, r1):
                m = 0
                while m < mt:
                    rows = min(SMALL_ROWS, mt - m)
                    if mx:
                        t = _mxfp4(words, scales, r, x16, m, s0, s1, rows)
                    else:
                        t = _nvfp4(words, scales, r, x16, m, s0, s1, rows)
                    for j in range(rows):
                        a = t[j]
                        if last:
                            a += _fp4_tail(mx, words[r], scales[r], x16, m + j, steps * LANES)
                        y[(m + j) // terms, r] += a
                    m += rows


def fp8_x_order(kp: int) -> np.ndarray:
    """The column of x that each position of the kernel's FP8 x meets: for each whole step of
    64 codes, the codes of the first interleave (bytes 0..7 of each 16) then the second (8..15),
    `_emit_fp8`'s order; then the codes past them in K order."""
    whole = kp // STEP8 * STEP8
    pos = np.arange(whole)
    s, rest = pos // STEP8, pos % STEP8
    h, within = rest // 32, rest % 32
    return np.concatenate([STEP8 * s + 16 * (within // 8) + 8 * h + within % 8,
                           np.arange(whole, kp)])


def fp4_x_order(kp: int) -> np.ndarray:
    """The column of x that each position of the kernel's FP4 x meets: for each whole step of
    128 codes, xs[j, l] = x[8 (16 s + l // 2) + 4 (l % 2) + j] (`_dpbf16`'s order), then the
    codes past them in K order."""
    whole = kp // STEP4 * STEP4
    pos = np.arange(whole)
    s, rest = pos // STEP4, pos % STEP4
    j, lane = rest // 32, rest % 32
    return np.concatenate([8 * (16 * s + lane // 2) + 4 * (lane % 2) + j, np.arange(whole, kp)])
