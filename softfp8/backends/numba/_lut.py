"""FP4 GEMV with the E2M1 select decode as a 16-entry table lookup in one AVX-512 permute.

vpermps looks a float up in a 16-float register by the low 4 bits of each lane's index, so a
code costs one shift (to bring its nibble down; the permute ignores the bits above) and one
permute, and the multiply-add: 3 vector ops per 16 codes, where the bit-operation decoders of
_kernels spend 5-6 (their inner loop is issue-bound: 13 Gelem/s single core). The table
holds the exact E2M1 values, so this is the select decoder's result bit for bit, with or
without FTZ/DAZ. LLVM's loop vectoriser cannot produce a register permute from a table lookup
(it emits a gather), so the row loop is written here as LLVM IR with vector types, inside a
numba intrinsic, and the kernels around it stay plain numba.

Layout: int32 words [N, Kp/8] (formats.py), one vector lane per word: a step is 16 consecutive
words of a row (128 codes), loaded as they lie, no shuffles; x comes rearranged per call so that
xs[s, j, lane] is the element code j of word 16 s + lane meets (`x_steps`; `row_steps` in one
compiled pass for float32 x where whole steps cover Kp, as the backend calls it); each lane's block
scale is spread over its words in registers, decoded from its code in the loop where every code
of the weight allows it (`loop_decodes`, `loop_decodes_e8m0`: the `*_raw` GEMVs), else in a pass
over each row's scales before it. ROWS rows per pass share each x load. The words
past the last whole step (rows whose word count is not a multiple of 16) take the bit-operation
select path per block. x steps of uint16 (bf16 bits, `_dpbf16.x_steps`) compile the same
drivers to bf16 products instead (`_dpbf16.emit_rows`). Only compiled where numba targets
AVX-512 (`available()`); backends.numba falls back to _kernels elsewhere.
"""
from __future__ import annotations

import functools

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import _dpbf16
from ._decode import _JIT, e4m3_i32_div256, e8m0_i32
from ._ir import (PREFETCH_ROWS, numba_targets, prefetch, rows_operands, rows_sig,
                        rows_totals, vload)
from ._kernels import _mx_select, _nv_select
from ._planes import select_planes
from ._scales import add_scaled, for_steps, loop_decodes, loop_decodes_e8m0  # noqa: F401

LANES = 16
STEP_CODES = 8 * LANES
"""Codes a step of the row loop covers (16 words, one 64-byte line of a row)."""
ROWS = 4
"""Weight rows per pass of the multi-row kernel (each x vector load serves all of them)."""
_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
_TABLE = _E2M1 + [-v for v in _E2M1]  # code -> value; code 8 is -0.0, as the reference


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
    # pass, each folded into its accumulator once a step (`add_scaled`). Four in the one-row
    # pass spend two more folds a step, and one leaves MXFP4 waiting on its chain: both measure
    # slower (docs/decisions.md, CPU (Numba): M = 1, 2 multiply-add chains a row).
    chains = 2 if nrows == 1 else 1
    xty = sig.args[4]
    if xty.dtype == types.uint16:  # bf16 activation steps, xs[s, j, lane]
        accs = _dpbf16.emit_rows(builder, operands, wpb, nrows, chains, codes_of)
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


@nb.njit(parallel=True, **_JIT)
def gemv_nvfp4(words, scales, g, xs, xp, y, chunk, group):
    """y[r] = row r . x for NVFP4 words [N, Kp/8], g the tensor scale; xs and xp as `x_steps`
    returns them. Select decode by table lookup."""
    n = words.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _nvfp4_rows(words, scales, g, xs, xp, y, c * chunk, min(n, (c + 1) * chunk), group)


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
    steps = xn.shape[0] // STEP_CODES
    xs = np.ascontiguousarray(xn[:steps * LANES * 8].reshape(steps, LANES, 8).transpose(0, 2, 1))
    return xs, select_planes(xn, block, STEP_CODES)


@nb.njit(**_JIT)
def row_steps(x, kp):
    """`x_steps`' xs for x [1, K] float32 (numpy, C-contiguous), zero-padded to kp, a multiple
    of STEP_CODES (no planes then): one compiled pass, where `x_steps` of the padded row spends
    four numpy and torch calls, each 10-50 us right after a GEMV has streamed its weight.
    Through backends.numba.matmul, FP4 at 11008 x 4096 and 4096 x 11008: 0.88-1.02 of the time,
    ~0.95 at the median (docs/decisions.md, CPU)."""
    k = x.shape[1]
    xs = np.empty((kp // STEP_CODES, 8, LANES), np.float32)
    for s in range(xs.shape[0]):
        for lane in range(LANES):
            first = 8 * (LANES * s + lane)
            for j in range(8):
                xs[s, j, lane] = x[0, first + j] if first + j < k else np.float32(0.0)
    return xs
