"""E5M2 and E4M3 at small M on AVX2 CPUs: _fp8_rows' decode, each decoded vector used for
several rows of x before the next.

Why: on AVX2 the bf16-product kernels (AVX-512 BF16) don't run, and the float32 small-M kernel
decodes a row into a buffer and reads it back for each row of x; a GEMV per row of x reads and
decodes the weight M times. Here each 16 code pairs of a row are decoded once into two float32
vectors (`_fp8_rows.decode_pairs`: the same bit operations and vcvtph2ps, so the same values)
and multiply-added into every row of x's sum, up to XR_MAX rows a pass.

x lies as [M, Kp/2] twice, its even and odd elements (xe, xo), met by each pair's low and high
code as in _fp8_rows. Pairs past the last whole step take the scalar decoders. Row scales (E4M3
with row_scale) are applied to y after, as the other paths do; E4M3_B128's tile scales are
folded into x per tile row of the weight, as its GEMV does (`matmul_fp8_tiles`).
"""
from __future__ import annotations

import numba as nb
import numpy as np
import torch
from llvmlite import ir
from numba import types
from numba.core import cgutils, errors
from numba.extending import intrinsic

from ...formats import Format, PackedWeight
from .._facts import codes_nan_free
from ._decode import _JIT
from ._fp8_rows import (E4M3_FINITE_KIND, E4M3_KIND, E5M2_KIND, STEP, TILE, VEC, VecIr, _pair,
                        decode_pairs)
from ._ir import PREFETCH_ROWS, prefetch, row_pointers, row_total, vload, x_row_passes
from ._batch import _row_scaled
from ._runtime import chunk_rows, padded_x

XR_MAX = 4
"""Rows of x a pass: one 16-lane sum each (two AVX2 registers), 8 registers of sums, the two
decoded vectors (four) and the x operands in AVX2's 16."""


@intrinsic(prefer_literal=True)
def _xrows(typingctx, c16, r, xe, xo, out, kind):
    """out[i] = row r's sum over the whole steps of its codes times x row i (E4M3 as value /
    256), for every row of x, XR_MAX rows a pass (`_ir.x_row_passes`); kind (a literal):
    _fp8_rows' kinds."""
    for a in (c16, xe, xo, out):
        if not (isinstance(a, types.Array) and a.layout == "C"):
            raise errors.TypingError(f"the FP8 x-rows kernel needs C-contiguous arrays, got {a}")
    if not isinstance(kind, types.IntegerLiteral):
        raise errors.TypingError("the FP8 x-rows kernel needs a literal kind")
    sig = types.none(c16, r, xe, xo, out, kind)

    def codegen(context, builder, sig, args):
        nkind = sig.args[5].literal_value
        cty, rty, xety, xoty, oty = sig.args[:5]
        c16_v, r_v, xe_v, xo_v, out_v = args[:5]
        t = VecIr(builder)
        intp = context.get_value_type(types.intp)
        carr = context.make_array(cty)(context, builder, c16_v)
        xea = context.make_array(xety)(context, builder, xe_v)
        xoa = context.make_array(xoty)(context, builder, xo_v)
        oarr = context.make_array(oty)(context, builder, out_v)
        r_v = context.cast(builder, r_v, rty, types.intp)
        row = row_pointers(builder, carr, r_v, 0, 1, intp)[0]
        ahead = row_pointers(builder, carr, r_v, PREFETCH_ROWS, 1, intp, clamp=True)[0]
        half = builder.extract_value(carr.shape, 1)
        steps = builder.udiv(half, ir.Constant(intp, STEP))

        def one_pass(m0, nxr):
            xrows = [[builder.gep(a.data, [builder.mul(builder.add(m0, ir.Constant(intp, j)),
                                                       half)]) for j in range(nxr)]
                     for a in (xea, xoa)]
            accs = [cgutils.alloca_once_value(builder, t.splat(t.vf, 0.0)) for _ in range(nxr)]
            with cgutils.for_range_slice(builder, ir.Constant(intp, 0), steps,
                                         ir.Constant(intp, 1), intp=intp) as (s, _):
                w0 = builder.mul(s, ir.Constant(intp, STEP))
                prefetch(builder, ahead, w0)
                sums = [builder.load(a) for a in accs]
                for v in range(STEP // VEC):
                    wv = builder.add(w0, ir.Constant(intp, v * VEC))
                    vals = decode_pairs(builder, vload(builder, row, wv, t.vs, 2), nkind, t)
                    for j in range(nxr):
                        for h in range(2):
                            xv = vload(builder, xrows[h][j], wv, t.vf, 2)
                            sums[j] = builder.call(t.fma, [vals[h], xv, sums[j]])
                for j in range(nxr):
                    builder.store(sums[j], accs[j])
            for j in range(nxr):
                builder.store(row_total(builder, [accs[j]]),
                              builder.gep(oarr.data, [builder.add(m0, ir.Constant(intp, j))]))

        x_row_passes(builder, builder.extract_value(xea.shape, 0), XR_MAX, intp, one_pass)
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(**_JIT)
def _rows(c16, xe, xo, y, r0, r1, kind):
    m, half = xe.shape
    whole = half // STEP * STEP
    post = np.float32(1.0) if kind == E5M2_KIND else np.float32(256.0)
    acc = np.empty(m, np.float32)
    for r in range(r0, r1):
        if kind == E5M2_KIND:  # each call with its kind as a literal: one loop per kind
            _xrows(c16, r, xe, xo, acc, E5M2_KIND)
        elif kind == E4M3_FINITE_KIND:
            _xrows(c16, r, xe, xo, acc, E4M3_FINITE_KIND)
        else:
            _xrows(c16, r, xe, xo, acc, E4M3_KIND)
        for j in range(whole, half):
            lo, hi = _pair(c16[r, j], kind)
            for i in range(m):
                acc[i] += lo * xe[i, j] + hi * xo[i, j]
        for i in range(m):
            y[i, r] = acc[i] * post


@nb.njit(parallel=True, **_JIT)
def matmul_fp8(c16, xe, xo, y, chunk, kind):
    """y [M, N] = x @ W.T (before row scales) for FP8 rows read as uint16 [N, Kp/2]; xe / xo
    [M, Kp/2] = x[:, 0::2], x[:, 1::2]; kind as _fp8_rows' gemv_fp8 takes it."""
    n = c16.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _rows(c16, xe, xo, y, c * chunk, min(n, (c + 1) * chunk), kind)


@nb.njit(parallel=True, **_JIT)
def matmul_fp8_tiles(c16, x, tiles, y, chunk, kind):
    """matmul_fp8 for E4M3 with one float32 scale per TILE x TILE tile, tiles [N / TILE, K /
    TILE] (rounded up); x float32 [M, Kp]. As _fp8_rows.gemv_fp8_tiles: the rows of a chunk that
    share a tile row meet one copy of x times that tile row's scales (xe, xo [M, Kp/2], made by
    the chunk's thread as it reaches them)."""
    n, half = c16.shape[0], c16.shape[1]
    m = x.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        xe = np.empty((m, half), np.float32)
        xo = np.empty((m, half), np.float32)
        r, r1 = c * chunk, min(n, (c + 1) * chunk)
        while r < r1:
            t = r // TILE
            for i in range(half):
                s = tiles[t, i // (TILE // 2)]  # codes 2i and 2i + 1 share a tile (TILE is even)
                for j in range(m):
                    xe[j, i] = x[j, 2 * i] * s
                    xo[j, i] = x[j, 2 * i + 1] * s
            stop = min(r1, (t + 1) * TILE)
            _rows(c16, xe, xo, y, r, stop, kind)
            r = stop


def matmul(x: torch.Tensor, packed: PackedWeight, threads: int) -> torch.Tensor:
    """y [M, N] float32 = x @ W.T for an E5M2, E4M3 or E4M3_B128 weight, row scales applied."""
    fmt = packed.fmt
    kind = (E5M2_KIND if fmt is Format.E5M2 else
            E4M3_FINITE_KIND if codes_nan_free(packed) else E4M3_KIND)
    xn = padded_x(x, packed.padded_k).numpy()
    n = packed.shape[0]
    y = np.empty((x.shape[0], n), np.float32)
    c16 = packed.words.view(torch.uint16).numpy()
    if fmt is Format.E4M3_B128:
        matmul_fp8_tiles(c16, xn, packed.scales.numpy(), y, chunk_rows(n, threads), kind)
        return torch.from_numpy(y)
    matmul_fp8(c16, np.ascontiguousarray(xn[:, 0::2]), np.ascontiguousarray(xn[:, 1::2]), y,
               chunk_rows(n, threads), kind)
    return _row_scaled(torch.from_numpy(y), packed, False)
