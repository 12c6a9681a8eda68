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
from ._fp8_rows import (E4M3_FINITE_KIND, E4M3_KIND, E5M2_KIND, STEP, TILE, VEC, _pair,
                        decode_pairs)
from ._ir import PREFETCH_ROWS, prefetch, row_pointers, vload
from ._runtime import chunk_rows, padded_x

XR_MAX = 4
"""Rows of x a pass (`_e5m2_row` and the like): one 16-lane sum each (two AVX2 registers), 8 registers of sums, the two
decoded vectors (four) and the x operands in AVX2's 16."""


@intrinsic(prefer_literal=True)
def _xrows(typingctx, c16, r, xe, xo, m0, out, xr, kind):
    """out[m0 + j] += row r's sum over the whole steps of its codes times x row m0 + j (E4M3 as
    value / 256), for j < xr; xr and kind (_fp8_rows' kinds) literals."""
    for a in (c16, xe, xo, out):
        if not (isinstance(a, types.Array) and a.layout == "C"):
            raise errors.TypingError(f"the FP8 x-rows kernel needs C-contiguous arrays, got {a}")
    if not (isinstance(xr, types.IntegerLiteral) and isinstance(kind, types.IntegerLiteral)):
        raise errors.TypingError("the FP8 x-rows kernel needs literal xr and kind")
    sig = types.none(c16, r, xe, xo, m0, out, xr, kind)

    def codegen(context, builder, sig, args):
        nxr, nkind = sig.args[6].literal_value, sig.args[7].literal_value
        cty, rty, xety, xoty, m0ty, oty = sig.args[:6]
        c16_v, r_v, xe_v, xo_v, m0_v, out_v = args[:6]
        i16, f32, i32 = ir.IntType(16), ir.FloatType(), ir.IntType(32)
        vs, vf = ir.VectorType(i16, VEC), ir.VectorType(f32, VEC)
        vh = ir.VectorType(ir.HalfType(), VEC)
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vf, [vf, vf, vf]),
                                             f"llvm.fma.v{VEC}f32")
        intp = context.get_value_type(types.intp)
        carr = context.make_array(cty)(context, builder, c16_v)
        xea = context.make_array(xety)(context, builder, xe_v)
        xoa = context.make_array(xoty)(context, builder, xo_v)
        oarr = context.make_array(oty)(context, builder, out_v)
        r_v = context.cast(builder, r_v, rty, types.intp)
        m0_v = context.cast(builder, m0_v, m0ty, types.intp)
        row = row_pointers(builder, carr, r_v, 0, 1, intp)[0]
        ahead = row_pointers(builder, carr, r_v, PREFETCH_ROWS, 1, intp, clamp=True)[0]
        half = builder.extract_value(carr.shape, 1)
        steps = builder.udiv(half, ir.Constant(intp, STEP))
        xrows = [[builder.gep(a.data, [builder.mul(builder.add(m0_v, ir.Constant(intp, j)),
                                                   half)]) for j in range(nxr)]
                 for a in (xea, xoa)]

        def splat(ty, v):
            return ir.Constant(ty, [ir.Constant(ty.element, v)] * VEC)

        nan = splat(vf, float("nan"))
        accs = [cgutils.alloca_once_value(builder, splat(vf, 0.0)) for _ in range(nxr)]
        with cgutils.for_range_slice(builder, ir.Constant(intp, 0), steps, ir.Constant(intp, 1),
                                     intp=intp) as (s, _):
            w0 = builder.mul(s, ir.Constant(intp, STEP))
            prefetch(builder, ahead, w0)
            sums = [builder.load(a) for a in accs]
            for v in range(STEP // VEC):
                wv = builder.add(w0, ir.Constant(intp, v * VEC))
                vals = decode_pairs(builder, vload(builder, row, wv, vs, 2), nkind, splat, vh, vf,
                                    nan)
                for j in range(nxr):
                    for h in range(2):
                        xv = vload(builder, xrows[h][j], wv, vf, 2)
                        sums[j] = builder.call(fma, [vals[h], xv, sums[j]])
            for j in range(nxr):
                builder.store(sums[j], accs[j])
        for j in range(nxr):
            acc = builder.load(accs[j])
            total = builder.extract_element(acc, ir.Constant(i32, 0))
            for lane in range(1, VEC):
                total = builder.fadd(total, builder.extract_element(acc, ir.Constant(i32, lane)))
            ptr = builder.gep(oarr.data, [builder.add(m0_v, ir.Constant(intp, j))])
            builder.store(builder.fadd(builder.load(ptr), total), ptr)
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(**_JIT)
def _e5m2_row(c16, r, xe, xo, out):
    """_xrows for every row of x, XR_MAX (then 2, then 1) at a time: E5M2."""
    m = xe.shape[0]
    m0 = 0
    while m - m0 >= 4:
        _xrows(c16, r, xe, xo, m0, out, 4, 0)
        m0 += 4
    if m - m0 >= 2:
        _xrows(c16, r, xe, xo, m0, out, 2, 0)
        m0 += 2
    if m - m0 == 1:
        _xrows(c16, r, xe, xo, m0, out, 1, 0)


@nb.njit(**_JIT)
def _e4m3_row(c16, r, xe, xo, out):
    """_e5m2_row for E4M3 (its codes may hold NaN: 0x7F / 0xFF)."""
    m = xe.shape[0]
    m0 = 0
    while m - m0 >= 4:
        _xrows(c16, r, xe, xo, m0, out, 4, 1)
        m0 += 4
    if m - m0 >= 2:
        _xrows(c16, r, xe, xo, m0, out, 2, 1)
        m0 += 2
    if m - m0 == 1:
        _xrows(c16, r, xe, xo, m0, out, 1, 1)


@nb.njit(**_JIT)
def _e4m3f_row(c16, r, xe, xo, out):
    """_e5m2_row for E4M3 whose codes hold no NaN (no NaN fix)."""
    m = xe.shape[0]
    m0 = 0
    while m - m0 >= 4:
        _xrows(c16, r, xe, xo, m0, out, 4, 2)
        m0 += 4
    if m - m0 >= 2:
        _xrows(c16, r, xe, xo, m0, out, 2, 2)
        m0 += 2
    if m - m0 == 1:
        _xrows(c16, r, xe, xo, m0, out, 1, 2)


@nb.njit(**_JIT)
def _rows(c16, xe, xo, y, r0, r1, kind):
    m, half = xe.shape
    whole = half // STEP * STEP
    post = np.float32(1.0) if kind == E5M2_KIND else np.float32(256.0)
    acc = np.empty(m, np.float32)
    for r in range(r0, r1):
        acc[:] = 0.0
        if kind == E5M2_KIND:
            _e5m2_row(c16, r, xe, xo, acc)
        elif kind == E4M3_FINITE_KIND:
            _e4m3f_row(c16, r, xe, xo, acc)
        else:
            _e4m3_row(c16, r, xe, xo, acc)
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
    out = torch.from_numpy(y)
    if packed.scales is not None:
        out *= packed.scales
    return out
