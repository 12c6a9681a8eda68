"""The fused small-M kernel's vector loops (`_smallm_fused`), as LLVM IR in numba intrinsics: one
loop per format and pass size (rows of x; one or two weight rows), each returning its dot
products as a tuple. The decodes and why: `_smallm_fused`'s docstring."""
from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._ir import PREFETCH_ROWS, numba_targets, prefetch, row_pointers, vload
from ._scales import add_scaled, for_steps

E5M2, E4M3 = 0, 1
"""The FP8 loops' format ids (`_smallm_bf16`'s)."""
XROWS = 16
"""Most rows of x (bf16 terms) a pass meets with each decoded weight vector: as many float32
accumulators stay in registers beside the decode's. A pass takes XROWS rows, else up to
`SMALL_ROWS` (a loop specialised for each count)."""
SMALL_ROWS = 8
FP8_ROWS = tuple(range(1, SMALL_ROWS + 1)) + (XROWS,)
FP4_ROWS = tuple(range(1, SMALL_ROWS + 1))
"""The pass sizes each format's loop is specialised for: FP4's sixteen partial sums a pass (four
vdpbf16ps a row, then its block scales) beside sixteen accumulators spill, so it stops at 8."""
FP4_PAIR_ROWS = 4
FP4_PAIR_COUNTS = tuple(range(1, FP4_PAIR_ROWS + 1))
FP4_FOLD_PAIR_ROWS = 8
FP4_FOLD_PAIR_COUNTS = tuple(range(1, FP4_FOLD_PAIR_ROWS + 1))
"""FP4's passes of two weight rows take up to 4 rows of x: 8 partial sums, 8 accumulators and
8 decoded vectors in registers; with MXFP4's scales folded into the decoded values (no partial
sums) up to 8."""
STEP8 = 64
"""FP8 codes a step: one 64-byte line of a row, two vectors of 32 bf16."""
STEP4 = 128
"""FP4 codes a step: 16 int32 words, four vpermw of 32 codes."""
LANES = 16

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
            masks = [[src * LANES + run * width + part * half + i
                      for src in (0, 1) for run in range(runs) for i in range(half)]
                     for part in (0, 1)]
            lo, hi = (builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(i32, LANES), mk))
                      for mk in masks)
            out.append((builder.fadd(lo, hi), ra + rb))
        vecs, width = out, half
        if len(vecs) == 1 and width > 1 and len(vecs[0][1]) < LANES:  # fold the last onto itself
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
    (in `fp8_x_order`), as a tuple of float32 (weight row major, XROWS a row). A step is one
    64-byte line: two byte permutes (vpermi2b) look each code's bf16 high and low byte up in
    128-entry tables, the sign is or-ed in, and two byte interleaves make the 2 x 32 bf16 of the
    step, exact for every code."""
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


def _emit_fp4(context, builder, sig, args, mx, xrows, wrows=1, fold=False):
    """IR: the dot products of FP4 rows r..r+wrows's whole steps (NVFP4 scales as E4M3 / 256, no
    tensor scale) with x16 rows m0..m0+xrows in `_dpbf16`'s order, as a tuple of float32 (weight
    row major, XROWS a row). Two weight rows a pass (wrows 2) share each x load and give the
    out-of-order core twice the independent vdpbf16ps chains (a row's four a step feed one
    partial sum, scaled into its accumulator after). fold (MXFP4, scale codes in 2..252): each
    decoded bf16 times its block's 2^(code - 127) by adding code - 127 to its exponent (nonzero
    magnitudes only; exact, and normal for those codes), so the vdpbf16ps go straight into the
    accumulators: no partial sums, no scale FMAs."""
    wty, sty, rty, xty, mty, s0ty, s1ty = sig.args[:7]
    words, scales, r, x16, m0, s0, s1 = args
    intp = context.get_value_type(types.intp)
    warr = context.make_array(wty)(context, builder, words)
    sarr = context.make_array(sty)(context, builder, scales)
    r = context.cast(builder, r, rty, types.intp)
    s0 = context.cast(builder, s0, s0ty, types.intp)
    s1 = context.cast(builder, s1, s1ty, types.intp)
    rows = row_pointers(builder, warr, r, 0, wrows, intp)
    ahead = row_pointers(builder, warr, r, PREFETCH_ROWS * wrows, wrows, intp, clamp=True)
    srows = row_pointers(builder, sarr, r, 0, wrows, intp)
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
    accs = [[cgutils.alloca_once_value(builder, zero) for _ in range(xrows)]
            for _ in range(wrows)]

    def step(s, scales):
        w0 = builder.mul(s, ir.Constant(intp, LANES))
        vals, raw = [], []
        for i in range(wrows):
            lanes = vload(builder, rows[i], w0, vh)
            raw.append(lanes)
            prefetch(builder, ahead[i], w0)
            vals.append([builder.bitcast(builder.call(permw, [table, lanes if j == 0 else
                         builder.lshr(lanes, ir.Constant(vh, [4 * j] * 32))]), vi)
                         for j in range(4)])
        if fold:
            i8 = ir.IntType(8)
            for i in range(wrows):
                codes = vload(builder, srows[i], builder.udiv(w0, ir.Constant(intp, 4)),
                              ir.VectorType(i8, 4), align=1)
                spread = builder.shuffle_vector(codes, ir.Constant(codes.type, None), ir.Constant(
                    ir.VectorType(i32, 32), [lane // 8 for lane in range(32)]))
                shift = builder.shl(builder.sub(builder.zext(spread, vh), ir.Constant(
                    vh, [127] * 32)), ir.Constant(vh, [7] * 32))
                lanes = [builder.lshr(raw[i], ir.Constant(vh, [4 * j] * 32)) if j else raw[i]
                         for j in range(4)]
                vals[i] = [builder.bitcast(builder.select(
                    builder.icmp_unsigned("!=", builder.and_(lanes[j], ir.Constant(vh, [7] * 32)),
                                          ir.Constant(vh, None)),
                    builder.add(builder.bitcast(vals[i][j], vh), shift),
                    builder.bitcast(vals[i][j], vh)), vi) for j in range(4)]
            for m in range(xrows):
                for j in range(4):
                    vx = builder.add(builder.mul(s, ir.Constant(intp, 4)), ir.Constant(intp, j))
                    xv = vload(builder, xat(vx, m), ir.Constant(intp, 0), vi)
                    for i in range(wrows):
                        acc = accs[i][m]
                        builder.store(builder.call(dot, [builder.load(acc), vals[i][j], xv]), acc)
            return
        parts = [[zero] * xrows for _ in range(wrows)]
        for m in range(xrows):
            for j in range(4):
                vx = builder.add(builder.mul(s, ir.Constant(intp, 4)), ir.Constant(intp, j))
                xv = vload(builder, xat(vx, m), ir.Constant(intp, 0), vi)
                for i in range(wrows):
                    parts[i][m] = builder.call(dot, [parts[i][m], vals[i][j], xv])
        for i in range(wrows):
            add_scaled(builder, srows[i], w0, wpb, parts[i], accs[i], intp, codes_of,
                       None if scales is None else scales[i])

    for_steps(builder, s0, s1, intp, srows, wpb, "fold" if fold else codes_of, step)
    flat = [None] * (wrows * XROWS)
    for i in range(wrows):
        for j in range(xrows):
            flat[i * XROWS + j] = accs[i][j]
    return _totals(context, builder, sig, flat)


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


def _fp4_pair_intrinsic(mx, fold=False):
    """_fp4_intrinsic for two weight rows a pass (r, r + 1), up to FP4_PAIR_ROWS rows of x
    (folded MXFP4 scales: FP4_FOLD_PAIR_ROWS)."""
    counts = FP4_FOLD_PAIR_COUNTS if fold else FP4_PAIR_COUNTS

    def typer(typingctx, words, scales, r, x16, m0, s0, s1, rows):
        _check([(words, types.int32, 2), (scales, types.uint8, 2), (x16, types.uint16, 3)])
        sig = types.UniTuple(types.float32, 2 * XROWS)(words, scales, r, x16, m0, s0, s1, rows)
        return sig, lambda c, b, s, a: _emit_switch(
            c, b, s, a, lambda j: _emit_fp4(c, b, s, a[:-1], mx, j, 2, fold), counts)
    typer.__name__ = f"_fp4_pair_{'mxf' if fold else 'mx' if mx else 'nv'}"
    return intrinsic(typer)


_e5m2, _e4m3 = (_fp8_intrinsic(k) for k in (E5M2, E4M3))
_e5m2_2, _e4m3_2 = (_fp8_pair_intrinsic(k) for k in (E5M2, E4M3))
_nvfp4, _mxfp4 = _fp4_intrinsic(False), _fp4_intrinsic(True)
_nvfp4_2, _mxfp4_2 = _fp4_pair_intrinsic(False), _fp4_pair_intrinsic(True)
_mxfp4_fold_2 = _fp4_pair_intrinsic(True, fold=True)
