"""The IR building blocks of the numba GEMVs' vector row loops (_lut, _pshufb,
_dpbf16, _fp8_rows): what numba compiles for, vector loads, the weight prefetch, row
pointers and the row sums returned from an intrinsic. These loops are written as LLVM IR inside
numba intrinsics where LLVM's vectoriser would not produce them (a register permute, a prefetch
in the loop); the kernels around them stay plain numba.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils

PREFETCH_ROWS = 4
"""Each step prefetches its line of the row this many passes ahead (row r + PREFETCH_ROWS x rows),
in _lut, _pshufb and _fp8_rows: the hardware prefetchers alone leave the loop waiting on memory,
and no one distance of 0, 1, 2 or 4 passes is fastest on every format and shape: 4 is within
~10% of the fastest on each (docs/decisions.md, CPU (Numba): M = 1, weight prefetches)."""
PREFETCH_LOCALITY = 1
"""llvm.prefetch's locality for those prefetches: 1, prefetcht2, to the L2 (not 3, prefetcht0, to
the L1, which measured slower). A prefetch into the L1 holds one of the L1's few miss buffers until
its line arrives, so the lines in flight stopped at what those allow; into the L2 the L2's own
(more) queue holds them (docs/decisions.md, CPU (Numba): M = 1). The same sweep with
`--ahead 4 --locality 3,2,1` on a 2-vCPU Zen 4 (2 threads, three runs), us, locality 3 / 1, four
rows a pass: E5M2 11008 x 4096 1483 / 1037, 1787 / 1453, 2490 / 1735;
4096 x 11008 1633 / 1345, 1966 / 1438, 1833 / 1451; NVFP4 11008 x 4096 1203 / 990, 1520 / 1177,
1500 / 1194; MXFP4 4096 x 11008 965 / 896, 1081 / 936, 1164 / 1124. Locality 2 (prefetcht1)
within a few % of 1 either way; the AVX2 FP4 kernel (compiled for znver3 on that machine) 0.93 to
1.03 of its locality-3 time."""


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


def vload(builder, base, offset, vty, align=4):
    """IR: a vector of type vty loaded from element `offset` of the pointer `base` (this module's,
    _pshufb's, _dpbf16's and _fp8_rows' loads)."""
    return builder.load(builder.bitcast(builder.gep(base, [offset]), vty.as_pointer()),
                        align=align)


def rows_operands(context, builder, sig, args, nrows, ahead, own_scales=False):
    """The row intrinsics' operands as IR (this module's and _pshufb's): (intp, s0, s1, x's
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
    totals = [row_total(builder, row) for row in accs]
    totals += [totals[0]] * (rows - len(accs))
    return context.make_tuple(builder, sig.return_type, totals)


def row_total(builder, accs):
    """IR: one row's vector accumulators (allocas) added pairwise, then lane by lane (a float)."""
    i32 = ir.IntType(32)
    acc = [builder.load(a) for a in accs]
    while len(acc) > 1:
        acc = [builder.fadd(acc[2 * h], acc[2 * h + 1]) for h in range(len(acc) // 2)]
    total = builder.extract_element(acc[0], ir.Constant(i32, 0))
    for lane in range(1, acc[0].type.count):
        total = builder.fadd(total, builder.extract_element(acc[0], ir.Constant(i32, lane)))
    return total


def x_row_passes(builder, m, most, intp, one_pass):
    """IR: one_pass(m0, xr) over the rows of x [0, m) (the x-rows kernels, _pshufb_xrows and
    _fp8_xrows): passes of `most` rows while they fill, then one pass of the rows left; xr is a
    Python int, so each pass is unrolled over its rows."""
    step = ir.Constant(intp, most)
    whole = builder.mul(builder.udiv(m, step), step)
    with cgutils.for_range_slice(builder, ir.Constant(intp, 0), whole, step, intp=intp) as (m0, _):
        one_pass(m0, most)
    rest = builder.sub(m, whole)
    for xr in range(most - 1, 0, -1):
        with builder.if_then(builder.icmp_signed("==", rest, ir.Constant(intp, xr))):
            one_pass(whole, xr)


def rows_sig(rows, words, r, s0, s1, xs, sc):
    """The row intrinsics' signature (this module's and _pshufb's): a `rows`-tuple of
    float32 (the module's ROWS) from C-contiguous words, x steps and scales."""
    for a in (words, xs, sc):
        if not (isinstance(a, types.Array) and a.layout == "C"):
            raise TypeError(f"the FP4 table rows need C-contiguous arrays, got {a}")
    return types.UniTuple(types.float32, rows)(words, r, s0, s1, xs, sc)
