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
from ._ir import PREFETCH_ROWS, prefetch, row_pointers, row_total, vload, x_row_passes
from ._kernels import _mx_select, _nv_select
from ._planes import select_planes
from ._runtime import chunk_rows, padded_x
from ._pshufb import STEP_WORDS, _Emit, _gather_index
from ._scales import loop_decodes, loop_decodes_e8m0

XR_MAX = 4
"""Rows of x a pass: two sums each (the step's h = 0 and h = 1 vectors), 8 accumulators, the
decoded vector, two scale vectors and the decode's temporaries in AVX2's 16 registers."""

_CODES = ("e4m3", "e8m0")
"""The scale codes the loop decodes, by the kernels' `mx` (NVFP4 0, MXFP4 1): each row's own
codes, read a step at a time (`_pshufb._Emit.scales`); weights whose codes don't allow it
(`usable`) take the backend's other paths."""


@intrinsic(prefer_literal=True)
def _xrows(typingctx, words, scales, r, xs, out, mx):
    """out[i] = row r's sum over the whole steps of codes times block scale times x row i, for
    every row of x, XR_MAX rows a pass (`_ir.x_row_passes`); mx (a literal): MXFP4 (E8M0
    codes), else NVFP4 (E4M3 codes, the sums then E4M3 / 256 scaled)."""
    for a in (words, scales, xs, out):
        if not (isinstance(a, types.Array) and a.layout == "C"):
            raise errors.TypingError(f"the FP4 x-rows kernel needs C-contiguous arrays, got {a}")
    if not isinstance(mx, types.IntegerLiteral):
        raise errors.TypingError("the FP4 x-rows kernel needs a literal mx")
    sig = types.none(words, scales, r, xs, out, mx)

    def codegen(context, builder, sig, args):
        codes_of = _CODES[sig.args[5].literal_value]
        wty, sty, rty, xty, oty = sig.args[:5]
        words_v, scales_v, r_v, xs_v, out_v = args[:5]
        intp = context.get_value_type(types.intp)
        warr = context.make_array(wty)(context, builder, words_v)
        sarr = context.make_array(sty)(context, builder, scales_v)
        xarr = context.make_array(xty)(context, builder, xs_v)
        oarr = context.make_array(oty)(context, builder, out_v)
        r_v = context.cast(builder, r_v, rty, types.intp)
        wrow = row_pointers(builder, warr, r_v, 0, 1, intp)[0]
        srow = row_pointers(builder, sarr, r_v, 0, 1, intp)[0]
        ahead = row_pointers(builder, warr, r_v, PREFETCH_ROWS, 1, intp, clamp=True)[0]
        steps = builder.extract_value(xarr.shape, 0)
        m_all = builder.extract_value(xarr.shape, 1)  # x rows in a step
        e = _Emit(builder, intp, steps, 4 if codes_of == "e8m0" else 2)

        def one_pass(m0, nxr):
            accs = [[cgutils.alloca_once_value(builder, ir.Constant(e.vf, None))
                     for _ in range(2)] for _ in range(nxr)]
            with cgutils.for_range_slice(builder, ir.Constant(intp, 0), steps,
                                         ir.Constant(intp, 1), intp=intp) as (s, _):
                w0 = builder.mul(s, ir.Constant(intp, STEP_WORDS))
                # x row m0 + j of step s at (s * M + m0 + j) * 64
                xrow0 = builder.mul(builder.add(builder.mul(s, m_all), m0),
                                    ir.Constant(intp, 64))
                raw = vload(builder, wrow, w0, e.vb)
                prefetch(builder, ahead, w0)
                scales = e.scales(builder, srow, w0, codes_of)
                sums = [[builder.load(a) for a in row] for row in accs]

                def use(v, val):
                    h = (v >> 1) & 1
                    val = builder.fmul(val, scales[h])  # exact: a 2-bit significand times a scale
                    for j in range(nxr):
                        off = builder.add(xrow0, ir.Constant(intp, 64 * j + 8 * v))
                        sums[j][h] = builder.call(e.fma, [
                            val, vload(builder, xarr.data, off, e.vf), sums[j][h]])

                e.values(builder, raw, use)
                for j in range(nxr):
                    for h in range(2):
                        builder.store(sums[j][h], accs[j][h])
            for j in range(nxr):
                builder.store(row_total(builder, accs[j]),
                              builder.gep(oarr.data, [builder.add(m0, ir.Constant(intp, j))]))

        x_row_passes(builder, m_all, XR_MAX, intp, one_pass)
        return context.get_dummy_value()

    return sig, codegen


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
        if mx:  # each call with mx as a literal: one loop per format
            _xrows(words, scales, r, xs, acc, 1)
        else:
            _xrows(words, scales, r, xs, acc, 0)
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
    xs = np.ascontiguousarray(x[:, _gather_index(steps)].reshape(m, steps, 64).transpose(1, 0, 2))
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

