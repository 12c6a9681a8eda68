"""FP4 at small M on AVX2 CPUs: _pshufb's byte-table decode, each decoded vector used for
several rows of x before the next.

Why: without AVX-512 there is no bf16 dot product (the fused small-M kernel's), and the float32
small-M kernel decodes through a buffer; so M = 2..8 ran one GEMV per row of x, reading and
decoding the weight M times. Here a weight row's step (64 codes) is decoded once into 8 fp32
vectors, each multiplied by its block scales once, then multiply-added into every x row's sums:
the decode's cost is paid once for up to `XR_MAX` rows of x.

x lies as `x_steps` returns it, [steps, M, 64] (each row in _pshufb's step order), so a step's
rows of x are adjacent. Scales are decoded in the loop from the weight's own codes (`usable`:
as quantize makes them); other weights take the backend's other paths. Blocks past the whole steps
take the select path, as in _pshufb. Walking x in chunks of steps that fit the L1 (each weight
row over one chunk before the next) measured no clear gain (docs/decisions.md).
"""
from __future__ import annotations

import numba as nb
import numpy as np
import torch
from llvmlite import ir
from numba import types
from numba.core import cgutils, errors
from numba.extending import intrinsic

from ...formats import SPECS, Format, PackedWeight
from .._facts import known_fact, remember_fact
from ._decode import _JIT, e4m3_i32_div256, e8m0_i32
from ._ir import PREFETCH_ROWS, prefetch, row_pointers, vload
from ._kernels import _mx_select, _nv_select
from ._planes import select_planes
from ._runtime import chunk_rows, padded_x
from ._pshufb import _ORDER, STEP_WORDS, _Emit
from ._scales import loop_decodes, loop_decodes_e8m0

XR_MAX = 4
"""Rows of x a pass (`_nv_row`, `_mx_row`): two sums each (the step's h = 0 and h = 1 vectors), 8 accumulators, the
decoded vector, two scale vectors and the decode's temporaries in AVX2's 16 registers."""

_CODES = ("e4m3", "e8m0")
"""The scale codes the loop decodes, by the kernels' `mx` (NVFP4 0, MXFP4 1): each row's own
codes, read a step at a time (`_pshufb._Emit.scales`); weights whose codes don't allow it
(`usable`) take the backend's other paths."""


@intrinsic(prefer_literal=True)
def _xrows(typingctx, words, scales, r, s0, s1, xs, m0, out, xr, mx):
    """out[m0 + j] += row r's sum over steps [s0, s1) of codes times block scale times x row
    m0 + j, for j < xr (a literal); mx (a literal): MXFP4 (E8M0 codes), else NVFP4 (E4M3 codes,
    the sums then E4M3 / 256 scaled)."""
    for a in (words, scales, xs, out):
        if not (isinstance(a, types.Array) and a.layout == "C"):
            raise errors.TypingError(f"the FP4 x-rows kernel needs C-contiguous arrays, got {a}")
    if not (isinstance(xr, types.IntegerLiteral) and isinstance(mx, types.IntegerLiteral)):
        raise errors.TypingError("the FP4 x-rows kernel needs literal xr and mx")
    sig = types.none(words, scales, r, s0, s1, xs, m0, out, xr, mx)

    def codegen(context, builder, sig, args):
        nxr, codes_of = sig.args[8].literal_value, _CODES[sig.args[9].literal_value]
        wty, sty, rty, s0ty, s1ty, xty, m0ty, oty = sig.args[:8]
        words_v, scales_v, r_v, s0_v, s1_v, xs_v, m0_v, out_v = args[:8]
        intp = context.get_value_type(types.intp)
        warr = context.make_array(wty)(context, builder, words_v)
        sarr = context.make_array(sty)(context, builder, scales_v)
        xarr = context.make_array(xty)(context, builder, xs_v)
        oarr = context.make_array(oty)(context, builder, out_v)
        r_v = context.cast(builder, r_v, rty, types.intp)
        m0_v = context.cast(builder, m0_v, m0ty, types.intp)
        s0_v = context.cast(builder, s0_v, s0ty, types.intp)
        s1_v = context.cast(builder, s1_v, s1ty, types.intp)
        wrow = row_pointers(builder, warr, r_v, 0, 1, intp)[0]
        srow = row_pointers(builder, sarr, r_v, 0, 1, intp)[0]
        ahead = row_pointers(builder, warr, r_v, PREFETCH_ROWS, 1, intp, clamp=True)[0]
        m_all = builder.extract_value(xarr.shape, 1)  # x rows in a step
        e = _Emit(builder, intp, s1_v, 4 if codes_of == "e8m0" else 2)
        accs = [[cgutils.alloca_once_value(builder, ir.Constant(e.vf, None)) for _ in range(2)]
                for _ in range(nxr)]
        with cgutils.for_range_slice(builder, s0_v, s1_v, ir.Constant(intp, 1),
                                     intp=intp) as (s, _):
            w0 = builder.mul(s, ir.Constant(intp, STEP_WORDS))
            # x row m0 + j of step s at (s * M + m0 + j) * 64
            xrow0 = builder.mul(builder.add(builder.mul(s, m_all), m0_v), ir.Constant(intp, 64))
            raw = vload(builder, wrow, w0, e.vb)
            prefetch(builder, ahead, w0)
            scales = e.scales(builder, srow, w0, codes_of)
            sums = [[builder.load(a) for a in row] for row in accs]

            def use(v, val):
                h = (v >> 1) & 1
                val = builder.fmul(val, scales[h])  # exact: a 2-bit significand times a scale
                for j in range(nxr):
                    off = builder.add(xrow0, ir.Constant(intp, 64 * j + 8 * v))
                    sums[j][h] = builder.call(e.fma, [val, vload(builder, xarr.data, off, e.vf),
                                                      sums[j][h]])

            e.values(builder, raw, use)
            for j in range(nxr):
                for h in range(2):
                    builder.store(sums[j][h], accs[j][h])
        i32 = ir.IntType(32)
        for j in range(nxr):
            acc = builder.fadd(builder.load(accs[j][0]), builder.load(accs[j][1]))
            total = builder.extract_element(acc, ir.Constant(i32, 0))
            for lane in range(1, 8):
                total = builder.fadd(total, builder.extract_element(acc, ir.Constant(i32, lane)))
            ptr = builder.gep(oarr.data, [builder.add(m0_v, ir.Constant(intp, j))])
            builder.store(builder.fadd(builder.load(ptr), total), ptr)
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(**_JIT)
def _nv_row(words, scales, r, s0, s1, xs, out):
    """_xrows for every row of x, XR_MAX (or the rest) at a time: NVFP4."""
    m = xs.shape[1]
    m0 = 0
    while m - m0 >= 4:
        _xrows(words, scales, r, s0, s1, xs, m0, out, 4, 0)
        m0 += 4
    if m - m0 == 3:
        _xrows(words, scales, r, s0, s1, xs, m0, out, 3, 0)
    elif m - m0 == 2:
        _xrows(words, scales, r, s0, s1, xs, m0, out, 2, 0)
    elif m - m0 == 1:
        _xrows(words, scales, r, s0, s1, xs, m0, out, 1, 0)


@nb.njit(**_JIT)
def _mx_row(words, scales, r, s0, s1, xs, out):
    """_nv_row for MXFP4."""
    m = xs.shape[1]
    m0 = 0
    while m - m0 >= 4:
        _xrows(words, scales, r, s0, s1, xs, m0, out, 4, 1)
        m0 += 4
    if m - m0 == 3:
        _xrows(words, scales, r, s0, s1, xs, m0, out, 3, 1)
    elif m - m0 == 2:
        _xrows(words, scales, r, s0, s1, xs, m0, out, 2, 1)
    elif m - m0 == 1:
        _xrows(words, scales, r, s0, s1, xs, m0, out, 1, 1)


@nb.njit(**_JIT)
def _rows(words, scales, mx, post, xs, xp, y, r0, r1):
    """y[:, r] for rows [r0, r1): the whole steps for every row of x, then the blocks past them
    (the select path) and the factor `post`."""
    m = xs.shape[1]
    steps = xs.shape[0]
    nblk = scales.shape[1]
    tail = steps * (STEP_WORDS // (4 if mx else 2))  # first block past the whole steps
    acc = np.empty(m, np.float32)
    for r in range(r0, r1):
        acc[:] = 0.0
        if mx:
            _mx_row(words, scales, r, 0, steps, xs, acc)
        else:
            _nv_row(words, scales, r, 0, steps, xs, acc)
        for b in range(tail, nblk):
            if mx:
                s = e8m0_i32(scales[r, b])
                for i in range(m):
                    acc[i] += _mx_select(words, r, b, xp[i]) * s
            else:
                s = e4m3_i32_div256(scales[r, b])
                for i in range(m):
                    acc[i] += _nv_select(words, r, b, xp[i]) * s
        for i in range(m):
            y[i, r] = acc[i] * post


@nb.njit(parallel=True, **_JIT)
def matmul_fp4(words, scales, mx, post, xs, xp, y, chunk):
    """y [M, N] = x @ W.T for FP4 words [N, Kp/8] and their block scale codes (`usable`); post:
    the factor on every sum (NVFP4: 256 times the tensor scale, the loop's scales being E4M3 /
    256; MXFP4: 1); xs, xp as `x_steps` returns them."""
    n = words.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _rows(words, scales, mx, post, xs, xp, y, c * chunk, min(n, (c + 1) * chunk))


def usable(scales, mx: bool) -> bool:
    """Whether the loop decodes these block scale codes (a torch uint8 tensor): NVFP4's all
    below 0x7F (positive, not NaN, as quantize makes them), MXFP4's all in 1..254."""
    return loop_decodes_e8m0(scales) if mx else loop_decodes(scales)


def x_steps(x: np.ndarray, block: int):
    """x [M, Kp] float32 -> (xs [steps, M, 64]: each row in _pshufb's step order, xp [M, block,
    blocks past the steps]: the select planes of each row)."""
    m, kp = x.shape
    steps = kp // 64
    index = (64 * np.arange(steps)[:, None] + _ORDER.reshape(1, -1))  # [steps, 64]
    xs = np.ascontiguousarray(x[:, index].transpose(1, 0, 2))
    xp = np.ascontiguousarray(np.stack([select_planes(row, block, 64) for row in x]))
    return xs, xp


_USABLE = "pshufb x-rows scale codes"
"""The key of `usable`'s answer among a weight's facts (`_facts.known_fact`)."""


def matmul(x: torch.Tensor, packed: PackedWeight, threads: int) -> torch.Tensor | None:
    """y [M, N] float32 = x @ W.T for an FP4 weight, or None where the loop can't decode its
    scale codes (`usable`, worked out once a weight)."""
    mx = packed.fmt is Format.MXFP4
    known = known_fact(packed, _USABLE)
    if known is None:
        known = (usable(packed.scales, mx),)
        remember_fact(packed, _USABLE, known[0])
    if not known[0]:
        return None
    n = packed.shape[0]
    xs, xp = x_steps(padded_x(x, packed.padded_k).numpy(), SPECS[packed.fmt].block)
    y = np.empty((x.shape[0], n), np.float32)
    post = np.float32(1.0) if mx else np.float32(256.0) * np.float32(packed.global_scale.item())
    matmul_fp4(packed.words.numpy(), packed.scales.numpy(), mx, post, xs, xp, y,
               chunk_rows(n, threads))
    return torch.from_numpy(y)

