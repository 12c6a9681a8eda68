"""The bf16-product small-M kernel (_smallm_bf16) for E4M3_B128: weight rows decoded as E4M3
codes, unscaled (exact in bf16), and each block of 128 columns' dot products summed apart and
added to the totals times that block's tile scale, as a block-scaled GEMM promotes its partial
sums: a code times its tile scale is no bf16 number, so the scale can't go into the decoded row.
"""
from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._decode import _JIT
from ._smallm import B128 as BLOCK  # groups of GROUP rows (it divides BLOCK) share a tile row
from ._smallm_bf16 import (GROUP, STEP, TileIR, _add, _decode_bf16, _lane_sum,
                           check_tile_arrays)


BXROWS = 3
"""Rows of x a blocked (E4M3_B128) tile meets (tails take 1 or 2): its 2 x GROUP x BXROWS sums,
partial and total, and the GROUP + BXROWS vectors loaded a step fill AVX-512's 32 registers.
(`benchmarks/cpu_small_m.py --formats e4m3,e4m3_b128 --act bf16 --paths dp`, two threads, ms,
E4M3 / E4M3_B128: with 2 rows M = 16 3.53 / 4.04, 64 9.45 / 13.3, 256 33.2 / 47.7; with 3,
3.49 / 3.94, 9.51 / 10.4, 29.5 / 32.6; docs/decisions.md, CPU: prompts and small batches.)"""


def _emit_blocked_tile(context, builder, sig, args, xrows):
    """IR: as `_emit_tile` for E4M3_B128, whose scale changes every BLOCK columns: each block's
    dot products summed apart (vdpbf16ps), then added to the totals times that block's scale
    srow[b] (one FMA a sum)."""
    wty, xty, mty, sty = sig.args
    wbuf, x16, m0, srow = args
    t = TileIR(context, builder, ((wty, wbuf), (xty, x16)), m0, mty, xrows)
    intp, vf, vi = t.intp, t.vf, t.vi
    sarr = context.make_array(sty)(context, builder, srow)
    fma = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vf, [vf, vf, vf]), "llvm.fma.v16f32")
    zero = ir.Constant(vf, None)
    totals = [[cgutils.alloca_once_value(builder, zero) for _ in range(xrows)]
              for _ in range(GROUP)]
    parts = [[cgutils.alloca_once_value(builder, zero) for _ in range(xrows)]
             for _ in range(GROUP)]
    steps = t.steps
    per_block = ir.Constant(intp, BLOCK // STEP)
    blocks = builder.udiv(builder.add(steps, ir.Constant(intp, BLOCK // STEP - 1)), per_block)
    with cgutils.for_range(builder, blocks, intp=intp) as outer:
        first = builder.mul(outer.index, per_block)
        left = builder.sub(steps, first)
        inner = builder.select(builder.icmp_unsigned("<", left, per_block), left, per_block)
        for i in range(GROUP):
            for j in range(xrows):
                builder.store(zero, parts[i][j])
        with cgutils.for_range(builder, inner, intp=intp) as loop:
            t.step(builder, builder.mul(builder.add(first, loop.index), ir.Constant(intp, STEP)),
                   parts)
        scale = builder.load(builder.gep(sarr.data, [outer.index]))
        splat = builder.insert_element(ir.Constant(vf, ir.Undefined), scale,
                                       ir.Constant(ir.IntType(32), 0))
        splat = builder.shuffle_vector(splat, splat, ir.Constant(vi, None))
        for i in range(GROUP):
            for j in range(xrows):
                builder.store(builder.call(fma, [builder.load(parts[i][j]), splat,
                                                 builder.load(totals[i][j])]), totals[i][j])
    sums = [builder.load(totals[i][j]) for i in range(GROUP) for j in range(xrows)]
    return context.make_tuple(builder, sig.return_type, [_lane_sum(builder, v) for v in sums])


def _blocked_tile_intrinsic(xrows):
    def typer(typingctx, wbuf, x16, m0, srow):
        check_tile_arrays(wbuf, x16)
        if not (isinstance(srow, types.Array) and srow.dtype == types.float32 and srow.ndim == 1
                and srow.layout in "CA"):
            raise TypeError(f"the block scales must be a float32 row, got {srow}")
        sig = types.UniTuple(types.float32, GROUP * xrows)(wbuf, x16, m0, srow)
        return sig, lambda c, b, s, a: _emit_blocked_tile(c, b, s, a, xrows)
    typer.__name__ = f"_blocked_tile_{GROUP}x{xrows}"
    return intrinsic(typer)


_btile1, _btile2, _btile3 = (_blocked_tile_intrinsic(j) for j in (1, 2, 3))


@nb.njit(parallel=True, **_JIT)
def smallm_blocked(kind, codes, x16, terms, y, chunk, tile_scales):
    """`smallm_bf16` for E4M3_B128: codes [N, Kp] decoded as E4M3 `kind` (unscaled: exact in
    bf16), tile_scales float32 [ceil(N / 128), ceil(Kp / 128)] applied to each block's partial
    sums (`_emit_blocked_tile`)."""
    n = codes.shape[0]
    k32 = x16.shape[1]
    mt = x16.shape[0]
    no_words, no_scales = np.zeros((0, 1), np.int32), np.zeros((1, 1), np.uint8)
    for c in nb.prange((n + chunk - 1) // chunk):
        wbuf = np.zeros((GROUP, k32), np.uint16)
        sw = np.empty(1, np.float32)
        r = c * chunk
        stop = min(n, r + chunk)
        while r < stop:
            rows = min(GROUP, stop - r)
            for i in range(rows):
                _decode_bf16(kind, codes, no_words, no_scales, r + i, wbuf[i], sw)
            for i in range(rows, GROUP):
                wbuf[i, :] = 0
            srow = tile_scales[r // BLOCK]
            m = 0
            while m + BXROWS <= mt:
                _add(y, _btile3(wbuf, x16, m, srow), BXROWS, m, r, rows, terms)
                m += BXROWS
            if m + 2 <= mt:
                _add(y, _btile2(wbuf, x16, m, srow), 2, m, r, rows, terms)
                m += 2
            if m < mt:
                _add(y, _btile1(wbuf, x16, m, srow), 1, m, r, rows, terms)
            r += rows
