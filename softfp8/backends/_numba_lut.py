"""FP4 GEMV with the E2M1 select decode as a 16-entry table lookup in one AVX-512 permute.

vpermps looks a float up in a 16-float register by the low 4 bits of each lane's index, so a
code costs one shift (to bring its nibble down; the permute ignores the bits above) and one
permute, and the multiply-add: 3 vector ops per 16 codes, where the bit-operation decoders of
_numba_kernels spend 5-6 (their inner loop is issue-bound: 13 Gelem/s single core). The table
holds the exact E2M1 values, so this is the select decoder's result bit for bit, with or
without FTZ/DAZ. LLVM's loop vectoriser cannot produce a register permute from a table lookup
(it emits a gather), so the row loop is written here as LLVM IR with vector types, inside a
numba intrinsic, and the kernels around it stay plain numba.

Layout: int32 words [N, Kp/8] (formats.py), one vector lane per word: a step is 16 consecutive
words of a row (128 codes), loaded as they lie, no shuffles; x comes rearranged per call so that
xs[s, j, lane] is the element code j of word 16 s + lane meets (`x_steps`); each lane's block
scale is spread over its words in registers, decoded from its code in the loop where every code
of the weight allows it (`loop_decodes`, `loop_decodes_e8m0`: the `*_raw` GEMVs), else in a pass
over each row's scales before it. ROWS rows per pass share each x load. The words
past the last whole step (rows whose word count is not a multiple of 16) take the bit-operation
select path per block. x steps of uint16 (bf16 bits, `_numba_dpbf16.x_steps`) compile the same
drivers to bf16 products instead (`_numba_dpbf16.emit_rows`). Only compiled where numba targets
AVX-512 (`available()`); numba_cpu falls back to _numba_kernels elsewhere.
"""
from __future__ import annotations

import functools

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import _numba_dpbf16
from ._numba_decode import _JIT, e4m3_i32_div256, e8m0_i32
from ._numba_kernels import _mx_select, _nv_select

LANES = 16
ROWS = 4
"""Weight rows per pass of the multi-row kernel (each x vector load serves all of them)."""
PREFETCH_ROWS = 4
"""Each step prefetches its line of the row this many passes ahead (row r + PREFETCH_ROWS x
rows), here and in _numba_pshufb / _numba_fp8_rows: the hardware prefetchers alone left the loop
waiting on memory. `python benchmarks/cpu_rows_sweep.py` on a 2-vCPU Zen 4 (2026-12-02, 2
threads, each variant its own copy of the weight, receipts/cpu-rows-sweep-s18b.txt), us, 0 / 1
/ 2 / 4 passes ahead: NVFP4 11008 x 4096 one row a pass 1770 / 1380 / 1623 / 1509, MXFP4 1255 /
1109 / 1139 / 1113; 4096 x 11008 four rows a pass 1676 / 1457 / 1381 / 1380 and 1498 / 1223 /
1256 / 1257; E5M2 2120 / 2006 / 2047 / 1955, E4M3 2178 / 1943 / 1929 / 2028."""
PREFETCH_LOCALITY = 1
"""llvm.prefetch's locality for those prefetches: 1, prefetcht2, to the L2 (not 3, prefetcht0, to
the L1, as until 2026-12-03). A prefetch into the L1 holds one of the L1's few miss buffers until
its line arrives, so the lines in flight stopped at what those allow; into the L2 the L2's own
(more) queue holds them. `python benchmarks/cpu_rows_sweep.py --ahead 4 --locality 3,2,1` on a
2-vCPU Zen 4 (2026-12-03, 2 threads, three runs, receipts/cpu-prefetch-locality-s22.txt), us,
locality 3 / 1, four rows a pass: E5M2 11008 x 4096 1483 / 1037, 1787 / 1453, 2490 / 1735;
4096 x 11008 1633 / 1345, 1966 / 1438, 1833 / 1451; NVFP4 11008 x 4096 1203 / 990, 1520 / 1177,
1500 / 1194; MXFP4 4096 x 11008 965 / 896, 1081 / 936, 1164 / 1124. Locality 2 (prefetcht1)
within a few % of 1 either way; the AVX2 FP4 kernel (compiled for znver3 on that machine) 0.93 to
1.03 of its locality-3 time."""
_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
_TABLE = _E2M1 + [-v for v in _E2M1]  # code -> value; code 8 is -0.0, as the reference


def numba_targets(feature: str) -> bool:
    """Whether numba compiles for a CPU with `feature` (an LLVM feature name: "avx512f",
    "avx2"). Follows numba's own target choice (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES), not just
    the host's."""
    import llvmlite.binding as llvm
    from numba.core import config

    if config.CPU_FEATURES is not None:
        return f"+{feature}" in config.CPU_FEATURES.split(",")
    if config.CPU_NAME not in (None, "host"):
        return False
    return bool(llvm.get_host_cpu_features().get(feature, False))


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether numba compiles for a CPU with AVX-512F (vpermps on 16 floats); fixed for the
    process, so asked once (the host query costs ~0.1 ms)."""
    return numba_targets("avx512f")


def _emit_rows(context, builder, sig, args, wpb, nrows, codes_of=None):
    """IR: for rows r..r+nrows-1, the sum over steps s in [s0, s1) of the 16 words 16s..16s+15,
    each word's sum of code j x xs[s, j] times the scale sc[i, word // wpb] of its block (sc row
    i for weight row r + i, wpb words per block); returns the float32 totals as a ROWS-tuple (the
    one-row kernel repeats its total). codes_of: None, or "e4m3" / "e8m0": sc is the weight's
    own scale codes [N, blocks], E4M3 each below 0x7F (`loop_decodes`), decoded in the loop as
    E4M3 / 256, or E8M0 each in 1..254 (`loop_decodes_e8m0`) (`add_scaled`)."""
    operands = rows_operands(context, builder, sig, args, nrows, PREFETCH_ROWS * nrows,
                             codes_of is not None)
    intp, s0, s1, xdata, wrows, srows, ahead = operands
    # independent multiply-add chains (code j of row i to chain j % chains), so that a step's
    # multiply-adds do not wait on each other: one a row of a four-row pass, two in the one-row
    # pass, each folded into its accumulator once a step (`add_scaled`). Four there (until
    # 2026-12-03) spent two more folds a step: 5-9% slower on a Zen 4, in cache and from memory,
    # float32 and bf16 steps; one left MXFP4 waiting on its chain, 15-20% slower than two
    # (`python benchmarks/cpu_fp4_kernel_ab.py`, receipts/cpu-fp4-chains2-zen4-s21.txt, -chains1-).
    chains = 2 if nrows == 1 else 1
    xty = sig.args[4]
    if xty.dtype == types.uint16:  # bf16 activation steps, xs[s, j, lane]
        accs = _numba_dpbf16.emit_rows(builder, operands, wpb, nrows, chains, codes_of)
        return rows_totals(context, builder, sig, accs, ROWS)
    f32, i32 = ir.FloatType(), ir.IntType(32)
    vf, vi = ir.VectorType(f32, LANES), ir.VectorType(i32, LANES)
    mod = builder.module
    perm = cgutils.get_or_insert_function(
        mod, ir.FunctionType(vf, [vf, vi]), "llvm.x86.avx512.permvar.sf.512")
    fma = cgutils.get_or_insert_function(mod, ir.FunctionType(vf, [vf, vf, vf]), "llvm.fma.v16f32")
    table = ir.Constant(vf, [ir.Constant(f32, v) for v in _TABLE])
    accs = [[cgutils.alloca_once_value(builder, ir.Constant(vf, None)) for _ in range(chains)]
            for _ in range(nrows)]

    def step(s, scales):
        w0 = builder.mul(s, ir.Constant(intp, LANES))
        x0 = builder.mul(w0, ir.Constant(intp, 8))
        lanes = [vload(builder, wrows[i], w0, vi) for i in range(nrows)]
        for row in ahead:  # a step is one 64-byte line of each row
            prefetch(builder, row, w0)
        part = [[None] * chains for _ in range(nrows)]
        for j in range(8):
            xv = vload(builder, xdata, builder.add(x0, ir.Constant(intp, LANES * j)), vf)
            for i in range(nrows):
                idx = lanes[i] if j == 0 else builder.lshr(
                    lanes[i], ir.Constant(vi, [4 * j] * LANES))
                val = builder.call(perm, [table, idx])
                k = j % chains
                part[i][k] = builder.fmul(val, xv) if part[i][k] is None else builder.call(
                    fma, [val, xv, part[i][k]])
        for i in range(nrows):
            add_scaled(builder, srows[i], w0, wpb, part[i], accs[i], intp, codes_of,
                       None if scales is None else scales[i])

    for_steps(builder, s0, s1, intp, srows, wpb, codes_of, step)
    return rows_totals(context, builder, sig, accs, ROWS)


def for_steps(builder, s0, s1, intp, srows, wpb, codes_of, step):
    """IR: step(s, scales) for each step s in [s0, s1) (this module's rows and _numba_dpbf16's).
    scales is None (`add_scaled` decodes each row's scales for the step), or for NVFP4's E4M3
    codes decoded in the loop (wpb 2, codes_of "e4m3") each row's float32 scale vector for the
    step, decoded together with the other step of its pair: the pair's 16 codes widened and
    converted once (`e4m3_pair_scales`), each step's 8 spread over its 16 lanes by one permute
    (where a step alone spends the widening and conversion on its 8). An odd last step goes
    alone."""
    one = ir.Constant(intp, 1)
    if codes_of != "e4m3" or wpb != 2:
        with cgutils.for_range_slice(builder, s0, s1, one, intp=intp) as (s, _):
            step(s, None)
        return
    two = ir.Constant(intp, 2)
    end = builder.add(s0, builder.mul(builder.sdiv(builder.sub(s1, s0), two), two))
    with cgutils.for_range_slice(builder, s0, end, two, intp=intp) as (s, _):
        w0 = builder.mul(s, ir.Constant(intp, LANES))
        pairs = [e4m3_pair_scales(builder, srow, w0, intp) for srow in srows]
        step(s, [p[0] for p in pairs])
        step(builder.add(s, one), [p[1] for p in pairs])
    with builder.if_then(builder.icmp_signed("<", end, s1)):
        step(end, None)


def e4m3_pair_scales(builder, srow, w0, intp):
    """IR: the float32 scale vectors of NVFP4 steps w0 / 16 and the next (16 lanes each, lane i
    the scale of its word's block) from the 16 E4M3 codes of their blocks in the scale row
    `srow`, decoded as one vector (`e4m3_div256`), then spread a step each."""
    vb = ir.VectorType(ir.IntType(8), LANES)
    dec = e4m3_div256(builder, vload(builder, srow, builder.udiv(w0, ir.Constant(intp, 2)), vb,
                                     align=1))
    return tuple(builder.shuffle_vector(dec, ir.Constant(dec.type, None), ir.Constant(
        ir.VectorType(ir.IntType(32), LANES), [8 * h + lane // 2 for lane in range(LANES)]))
        for h in (0, 1))


def e4m3_div256(builder, codes):
    """IR: float32 E4M3 / 256 of a vector of E4M3 codes (i8 lanes), each below 0x7F: code << 7
    is that half (the code's 4 exponent bits in the half's 5, subnormals included), widened
    exactly by vcvtph2ps."""
    n = codes.type.count
    vh = ir.VectorType(ir.IntType(16), n)
    halves = builder.shl(builder.zext(codes, vh), ir.Constant(vh, [ir.Constant(vh.element, 7)] * n))
    return builder.fpext(builder.bitcast(halves, ir.VectorType(ir.HalfType(), n)),
                         ir.VectorType(ir.FloatType(), n))


def vload(builder, base, offset, vty, align=4):
    """IR: a vector of type vty loaded from element `offset` of the pointer `base` (this module's,
    _numba_pshufb's, _numba_dpbf16's and _numba_fp8_rows' loads)."""
    return builder.load(builder.bitcast(builder.gep(base, [offset]), vty.as_pointer()),
                        align=align)


def add_scaled(builder, srow, w0, wpb, parts, accs, intp, codes_of=None, scale=None):
    """IR: each accumulator (alloca) in accs += its part (a float32 vector, lane i summing word
    w0 + i's codes) times the step's 16 / wpb block scales: `scale`, where the caller decoded
    them (`for_steps`), else `step_scales` of the scale row `srow`."""
    vf = ir.VectorType(ir.FloatType(), LANES)
    fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vf, [vf, vf, vf]),
                                         "llvm.fma.v16f32")
    if scale is None:
        scale = step_scales(builder, srow, w0, wpb, intp, codes_of)
    for part, acc in zip(parts, accs):
        builder.store(builder.call(fma, [part, scale, builder.load(acc)]), acc)


def step_scales(builder, srow, w0, wpb, intp, codes_of=None):
    """IR: the float32 scales of the step at word w0 from the scale row `srow`, each of its
    16 / wpb blocks' spread over its words' lanes by one permute (spreading them in memory per
    row cost ~0.15 us a row: a scalar loop). codes_of None: srow holds float32 scales; "e4m3":
    E4M3 codes below 0x7F, decoded as E4M3 / 256 (`e4m3_div256`); "e8m0": codes in 1..254, and
    code << 23 is the float32 2^(code - 127)."""
    f32, i32 = ir.FloatType(), ir.IntType(32)
    nblk = LANES // wpb
    vf, few = ir.VectorType(f32, LANES), ir.VectorType(f32, nblk)
    spread = ir.Constant(ir.VectorType(i32, LANES), [lane // wpb for lane in range(LANES)])
    first = builder.udiv(w0, ir.Constant(intp, wpb))
    if codes_of is None:
        return builder.shuffle_vector(vload(builder, srow, first, few), ir.Constant(few, None),
                                      spread)
    vb = ir.VectorType(ir.IntType(8), nblk)
    codes = builder.shuffle_vector(vload(builder, srow, first, vb, align=1),
                                   ir.Constant(vb, None), spread)
    if codes_of == "e4m3":
        return e4m3_div256(builder, codes)
    assert codes_of == "e8m0", codes_of
    vi = ir.VectorType(i32, LANES)
    return builder.bitcast(builder.shl(builder.zext(codes, vi), ir.Constant(
        vi, [ir.Constant(i32, 23)] * LANES)), vf)


def _rows_intrinsic(wpb, nrows, codes_of=None):
    """A row intrinsic: `_emit_rows` for wpb words a block (NVFP4 2, MXFP4 4), nrows rows a pass,
    the scales decoded before the loop (None) or in it from their codes ("e4m3", "e8m0")."""
    def typer(typingctx, words, r, s0, s1, xs, sc):
        sig = rows_sig(ROWS, words, r, s0, s1, xs, sc)
        return sig, lambda c, b, s, a: _emit_rows(c, b, s, a, wpb, nrows, codes_of)
    typer.__name__ = f"_rows_{wpb}_{nrows}_{codes_of}"
    return intrinsic(typer)


_nv_row, _nv_rows = _rows_intrinsic(2, 1), _rows_intrinsic(2, ROWS)
_nv_row_raw, _nv_rows_raw = _rows_intrinsic(2, 1, "e4m3"), _rows_intrinsic(2, ROWS, "e4m3")
_mx_row, _mx_rows = _rows_intrinsic(4, 1), _rows_intrinsic(4, ROWS)
_mx_row_raw, _mx_rows_raw = _rows_intrinsic(4, 1, "e8m0"), _rows_intrinsic(4, ROWS, "e8m0")


def rows_operands(context, builder, sig, args, nrows, ahead, own_scales=False):
    """The row intrinsics' operands as IR (this module's and _numba_pshufb's): (intp, s0, s1, x's
    data pointer, pointers to weight rows r..r+nrows-1, pointers to scale rows 0..nrows-1 (a
    buffer of decoded scales; own_scales: rows r..r+nrows-1, the weight's own scale codes), and
    pointers to weight rows r+ahead..r+ahead+nrows-1, each at most the last row, for `prefetch`:
    none when ahead is 0)."""
    wty, rty, s0ty, s1ty, xty, scty = sig.args
    words, r, s0, s1, xs, sc = args
    warr = context.make_array(wty)(context, builder, words)
    xarr = context.make_array(xty)(context, builder, xs)
    sarr = context.make_array(scty)(context, builder, sc)
    intp = context.get_value_type(types.intp)
    r = context.cast(builder, r, rty, types.intp)
    s0 = context.cast(builder, s0, s0ty, types.intp)
    s1 = context.cast(builder, s1, s1ty, types.intp)
    # C-contiguous arrays (the signature says so): plain pointer arithmetic, so LLVM folds every
    # x offset of a step into the load's immediate
    scols = builder.extract_value(sarr.shape, 1)
    wrows = row_pointers(builder, warr, r, 0, nrows, intp)
    srows = (row_pointers(builder, sarr, r, 0, nrows, intp) if own_scales else
             [builder.gep(sarr.data, [builder.mul(ir.Constant(intp, i), scols)])
              for i in range(nrows)])
    ahead_rows = row_pointers(builder, warr, r, ahead, nrows if ahead else 0, intp, clamp=True)
    return intp, s0, s1, xarr.data, wrows, srows, ahead_rows


def row_pointers(builder, arr, r, offset, n, intp, clamp=False):
    """IR: pointers to rows r+offset..r+offset+n-1 of the C-contiguous 2-D array `arr` (a
    make_array struct); clamp: each at most the last row (the prefetches ahead of the loop)."""
    cols = builder.extract_value(arr.shape, 1)
    last = builder.sub(builder.extract_value(arr.shape, 0), ir.Constant(intp, 1))
    out = []
    for i in range(n):
        row = builder.add(r, ir.Constant(intp, offset + i))
        if clamp:
            row = builder.select(builder.icmp_signed("<", row, last), row, last)
        out.append(builder.gep(arr.data, [builder.mul(row, cols)]))
    return out


def prefetch(builder, row, offset, locality=PREFETCH_LOCALITY):
    """IR: a prefetch (read) of the line at element `offset` of `row`; `locality` as
    llvm.prefetch takes it (x86: 3 prefetcht0, to all cache levels; 2 prefetcht1, 1 prefetcht2,
    0 prefetchnta)."""
    i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0")
    builder.call(fn, [builder.bitcast(builder.gep(row, [offset]), i8p), ir.Constant(i32, 0),
                      ir.Constant(i32, locality), ir.Constant(i32, 1)])


def rows_totals(context, builder, sig, accs, rows):
    """IR: each row's vector accumulators (allocas in accs[i]) added pairwise, then lane by lane,
    as the `rows`-tuple the signature returns (rows past len(accs) repeat the first total)."""
    i32 = ir.IntType(32)
    totals = []
    for row in accs:
        acc = [builder.load(a) for a in row]
        while len(acc) > 1:
            acc = [builder.fadd(acc[2 * h], acc[2 * h + 1]) for h in range(len(acc) // 2)]
        total = builder.extract_element(acc[0], ir.Constant(i32, 0))
        for lane in range(1, acc[0].type.count):
            total = builder.fadd(total, builder.extract_element(acc[0], ir.Constant(i32, lane)))
        totals.append(total)
    totals += [totals[0]] * (rows - len(accs))
    return context.make_tuple(builder, sig.return_type, totals)


def rows_sig(rows, words, r, s0, s1, xs, sc):
    """The row intrinsics' signature (this module's and _numba_pshufb's): a `rows`-tuple of
    float32 (the module's ROWS) from C-contiguous words, x steps and scales."""
    for a in (words, xs, sc):
        if not (isinstance(a, types.Array) and a.layout == "C"):
            raise TypeError(f"the FP4 table rows need C-contiguous arrays, got {a}")
    return types.UniTuple(types.float32, rows)(words, r, s0, s1, xs, sc)


# ROWS rows per pass; the rows past the last whole group take the one-row kernel. The block
# scales are decoded once per row (a vectorised loop over int32 lanes).

@nb.njit(**_JIT)
def _nvfp4_rows(words, scales, g, xs, xp, y, r0, r1, group):
    nblk = scales.shape[1]
    steps = xs.shape[0]
    tail = steps * LANES // 2  # first block past the whole steps
    sc = np.empty((ROWS, nblk), np.float32)
    post = np.float32(256.0) * g  # the scales below are E4M3 / 256 (e4m3_i32_div256)
    r = r0
    while r < r1:
        rows = ROWS if r + ROWS <= r1 and group == ROWS else 1
        for i in range(rows):
            for b in range(nblk):
                sc[i, b] = e4m3_i32_div256(scales[r + i, b])
        acc = _nv_rows(words, r, 0, steps, xs, sc) if rows == ROWS else (
            _nv_row(words, r, 0, steps, xs, sc))
        for i in range(rows):
            a = acc[i]
            for b in range(tail, nblk):
                a += _nv_select(words, r + i, b, xp) * sc[i, b]
            y[r + i] = a * post
        r += rows


@nb.njit(**_JIT)
def _nvfp4_rows_raw(words, scales, g, xs, xp, y, r0, r1, group):
    """_nvfp4_rows for scale codes all below 0x7F: the loop decodes them (`_emit_rows`)."""
    nblk = scales.shape[1]
    steps = xs.shape[0]
    tail = steps * LANES // 2
    post = np.float32(256.0) * g
    r = r0
    while r < r1:
        rows = ROWS if r + ROWS <= r1 and group == ROWS else 1
        acc = _nv_rows_raw(words, r, 0, steps, xs, scales) if rows == ROWS else (
            _nv_row_raw(words, r, 0, steps, xs, scales))
        for i in range(rows):
            a = acc[i]
            for b in range(tail, nblk):
                a += _nv_select(words, r + i, b, xp) * e4m3_i32_div256(scales[r + i, b])
            y[r + i] = a * post
        r += rows


@nb.njit(**_JIT)
def _mxfp4_rows(words, scales, xs, xp, y, r0, r1, group):
    nblk = scales.shape[1]
    steps = xs.shape[0]
    tail = steps * LANES // 4
    sc = np.empty((ROWS, nblk), np.float32)
    r = r0
    while r < r1:
        rows = ROWS if r + ROWS <= r1 and group == ROWS else 1
        for i in range(rows):
            for b in range(nblk):
                sc[i, b] = e8m0_i32(scales[r + i, b])
        acc = _mx_rows(words, r, 0, steps, xs, sc) if rows == ROWS else (
            _mx_row(words, r, 0, steps, xs, sc))
        for i in range(rows):
            a = acc[i]
            for b in range(tail, nblk):
                a += _mx_select(words, r + i, b, xp) * sc[i, b]
            y[r + i] = a
        r += rows


@nb.njit(**_JIT)
def _mxfp4_rows_raw(words, scales, xs, xp, y, r0, r1, group):
    """_mxfp4_rows for scale codes all in 1..254: the loop decodes them (`_emit_rows`)."""
    nblk = scales.shape[1]
    steps = xs.shape[0]
    tail = steps * LANES // 4
    r = r0
    while r < r1:
        rows = ROWS if r + ROWS <= r1 and group == ROWS else 1
        acc = _mx_rows_raw(words, r, 0, steps, xs, scales) if rows == ROWS else (
            _mx_row_raw(words, r, 0, steps, xs, scales))
        for i in range(rows):
            a = acc[i]
            for b in range(tail, nblk):
                a += _mx_select(words, r + i, b, xp) * e8m0_i32(scales[r + i, b])
            y[r + i] = a
        r += rows


@nb.njit(parallel=True, **_JIT)
def gemv_mxfp4_raw(words, scales, xs, xp, y, chunk, group):
    """gemv_mxfp4 where every scale code is in 1..254 (`loop_decodes_e8m0`)."""
    n = words.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _mxfp4_rows_raw(words, scales, xs, xp, y, c * chunk, min(n, (c + 1) * chunk), group)


def loop_decodes_e8m0(scales) -> bool:
    """Whether gemv_mxfp4_raw takes these MXFP4 scale codes: all in 1..254 (code << 23 is then
    the float32 2^(code - 127); 0 is 2^-127, a denormal, and 255 NaN)."""
    return bool(((scales >= 1) & (scales <= 254)).all())


@nb.njit(parallel=True, **_JIT)
def gemv_nvfp4(words, scales, g, xs, xp, y, chunk, group):
    """y[r] = row r . x for NVFP4 words [N, Kp/8], g the tensor scale; xs and xp as `x_steps`
    returns them. Select decode by table lookup."""
    n = words.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _nvfp4_rows(words, scales, g, xs, xp, y, c * chunk, min(n, (c + 1) * chunk), group)


def loop_decodes(scales) -> bool:
    """Whether gemv_nvfp4_raw (here and in _numba_pshufb) takes these NVFP4 scale codes (a torch
    uint8 tensor): all below 0x7F, i.e. positive and not NaN, as quantize() makes them. Its loop
    decodes the codes itself (`add_scaled`), where gemv_nvfp4 decodes each row's scales in a
    pass before it."""
    return bool((scales < 0x7F).all())


@nb.njit(parallel=True, **_JIT)
def gemv_nvfp4_raw(words, scales, g, xs, xp, y, chunk, group):
    """gemv_nvfp4 where every scale code is below 0x7F (`loop_decodes`): the loop decodes the
    scales itself."""
    n = words.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _nvfp4_rows_raw(words, scales, g, xs, xp, y, c * chunk, min(n, (c + 1) * chunk), group)


@nb.njit(parallel=True, **_JIT)
def gemv_mxfp4(words, scales, xs, xp, y, chunk, group):
    """y[r] = row r . x for MXFP4 words [N, Kp/8]; xs and xp as `x_steps` returns them. Select
    decode by table lookup."""
    n = words.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _mxfp4_rows(words, scales, xs, xp, y, c * chunk, min(n, (c + 1) * chunk), group)


def x_steps(x, block):
    """x [Kp] float32 (numpy, or torch) -> (xs, xp) numpy: xs[s, j, lane] = x[8 (16 s + lane) +
    j], the element code j of word 16 s + lane meets, for the whole steps of 16 words (one
    contiguous 512-byte slab per step), and `select_planes` for the remaining blocks. In numpy
    (torch's copies start its thread pool: ~0.1 ms a call)."""
    xn = x if isinstance(x, np.ndarray) else x.numpy()
    steps = xn.shape[0] // (8 * LANES)
    xs = np.ascontiguousarray(xn[:steps * LANES * 8].reshape(steps, LANES, 8).transpose(0, 2, 1))
    return xs, select_planes(xn, block, 8 * LANES)


def select_planes(xn, block, step_codes):
    """The planes xp[j, b] = xn[block * b + j] that the row kernels' select path reads for the
    blocks past their whole steps of `step_codes` codes (this module's and _numba_pshufb's);
    when the steps cover xn, an empty [block, 0] array of the same type, which no kernel indexes
    (right after a GEMV the planes' copy costs ~4 us)."""
    if xn.shape[0] % step_codes == 0:
        return _no_planes(block)
    return np.ascontiguousarray(xn.reshape(-1, block).T)


@functools.lru_cache(maxsize=8)
def _no_planes(block: int) -> np.ndarray:
    return np.zeros((block, 0), np.float32)
