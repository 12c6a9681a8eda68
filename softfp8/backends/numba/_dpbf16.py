"""The AVX-512 FP4 table rows for bf16 activations: bf16 products by vdpbf16ps.

_lut's rows spend one vpermps and one shift per 16 codes, and those two contend for the
same ports, which bound the loop (benchmarks/cpu_fp4_step.c on a Zen 4: vpermd and vpsrld one a
cycle each, eight of each 12.5-13 cycles together; the multiply-adds, one a cycle, run beside
them; the vpermps loop 25-27 Gcodes/s in cache, ~17 cycles a 128-code step). Every E2M1 value is
a bf16 too, so a vpermw on a 32-word bf16 table decodes 32 codes (4 nibbles a 16-bit word: 3
shifts and 4 permutes a step instead of 7 and 8), and vdpbf16ps multiplies 32 codes by 32 bf16
activations into 16 float32 lanes, lane i summing the codes of word i, so the block scales
spread over the lanes as in _lut (the same loop in C: 47-49 Gcodes/s).

Exact for bf16 activations: a product of a bf16 E2M1 value (2 significant bits) and a bf16
activation (8) is exact in float32, and each is added in float32 as the fp32 kernel's
multiply-add does. The instruction treats bf16 denormals as 0 and flushes denormal sums, so
`x_steps` sends activations under `TINY` to the fp32 kernel. (fp16 activations split into two
bf16 terms, exact too, were measured no faster than the fp32 kernel through backends.numba.matmul:
docs/decisions.md, CPU; they take the fp32 kernel.)

Layout: a step is 16 int32 words of a row (as in _lut) read as 32 uint16 lanes; lane l
holds codes 4 (l % 2) + j of word l // 2 at bits 4j, so xs[s, j, l] is the bf16 bits of
x[8 (16 s + l // 2) + 4 (l % 2) + j] (`x_steps`).
"""
from __future__ import annotations

import functools

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import cgutils

from ._decode import _JIT

LANES = 16
_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
_TABLE = [int(np.float32(v).view(np.uint32)) >> 16 for v in _E2M1 + [-v for v in _E2M1]] * 2
"""bf16 bits of code & 15 for the 32 entries vpermw indexes by the low 5 bits of a lane."""

TINY = 2.0 ** -100
_TINY_BITS = np.int32(0x0D800000)  # float32 bits of TINY
"""Nonzero bf16 activations smaller than this take the fp32 kernel: from here on no product or
partial sum of this kernel is denormal (products >= 2^-101; float32 sums of them are exact
multiples of their quantum or at least ~2^-117), so the instruction's flushing changes
nothing."""


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether numba compiles for a CPU with AVX-512 BF16 and BW (vdpbf16ps, vpermw): Zen 4,
    Cooper Lake, Sapphire Rapids and later."""
    from ._ir import numba_targets

    return all(numba_targets(f) for f in ("avx512f", "avx512bw", "avx512bf16"))


def emit_rows(builder, operands, wpb, nrows, chains, codes_of=None):
    """IR of _lut's row intrinsics for bf16 activation steps (`operands`: what
    _ir.rows_operands returns, x's data being uint16): accumulators as allocas, one
    list per row, `chains` each; codes_of as _scales.add_scaled takes it."""
    from ._ir import prefetch, vload
    from ._scales import add_scaled, for_steps

    intp, s0, s1, xdata, wrows, srows, ahead = operands
    f32, i32, i16 = ir.FloatType(), ir.IntType(32), ir.IntType(16)
    vf, vi, vh = ir.VectorType(f32, LANES), ir.VectorType(i32, LANES), ir.VectorType(i16, 32)
    mod = builder.module
    permw = cgutils.get_or_insert_function(
        mod, ir.FunctionType(vh, [vh, vh]), "llvm.x86.avx512.permvar.hi.512")
    # LLVM upgrades the <16 x i32> form of the bf16 operands to <32 x bfloat> (llvmlite's IR
    # builder has no bfloat type)
    dot = cgutils.get_or_insert_function(
        mod, ir.FunctionType(vf, [vf, vi, vi]), "llvm.x86.avx512bf16.dpbf16ps.512")
    table = ir.Constant(vh, [ir.Constant(i16, v) for v in _TABLE])
    zero = ir.Constant(vf, None)
    accs = [[cgutils.alloca_once_value(builder, zero) for _ in range(chains)]
            for _ in range(nrows)]

    def step(s, scales):
        w0 = builder.mul(s, ir.Constant(intp, LANES))
        x0 = builder.mul(s, ir.Constant(intp, 4 * 32))
        lanes = [vload(builder, wrows[i], w0, vh) for i in range(nrows)]
        for row in ahead:
            prefetch(builder, row, w0)
        vals = [[builder.bitcast(builder.call(permw, [table, lanes[i] if j == 0 else builder.lshr(
            lanes[i], ir.Constant(vh, [4 * j] * 32))]), vi) for j in range(4)]
            for i in range(nrows)]
        part = [[zero] * chains for _ in range(nrows)]
        for j in range(4):
            xv = vload(builder, xdata, builder.add(x0, ir.Constant(intp, 32 * j)), vi)
            for i in range(nrows):
                k = j % chains
                part[i][k] = builder.call(dot, [part[i][k], vals[i][j], xv])
        for i in range(nrows):
            add_scaled(builder, srows[i], w0, wpb, part[i], accs[i], intp, codes_of,
                       None if scales is None else scales[i])

    for_steps(builder, s0, s1, intp, srows, wpb, codes_of, step)
    return accs


def x_steps(x, block, kp=None):
    """x [K] or [1, K] as a bf16 torch tensor, zero-padded to kp -> (xs, xp): xs the uint16 bf16
    steps (module docstring) for the whole steps of 128 codes, xp _planes.select_planes of x
    as float32 for the blocks past them. None where the kernel would not give the fp32 kernel's
    answer (a nonzero |x| < `TINY`) or x is not bf16. Right after a GEMV each torch or numpy op
    costs 10-90 us (docs/decisions.md, CPU), so x goes to numpy in one view,
    as it lies ([1, K] from backends.numba: no row taken first), and one numba pass fills every
    element of xs (padding included: no zeroed array first)."""
    import torch

    from ._planes import no_planes, select_planes

    if x.dtype != torch.bfloat16:
        return None
    u16 = x.view(torch.int16).numpy()
    if u16.ndim == 1:
        u16 = u16[None]
    k = u16.shape[1]
    kp = k if kp is None else kp
    steps = kp // (8 * LANES)
    xs = np.empty((steps, 4, 32), np.uint16)
    if not _fill_steps(u16, xs):
        return None
    if kp % (8 * LANES) == 0:
        return xs, no_planes(block)
    xn = np.zeros(kp, np.float32)
    xn[:k] = (u16[0].astype(np.int32) << 16).view(np.float32)
    return xs, select_planes(xn, block, 8 * LANES)


@nb.njit(**_JIT)
def _fill_steps(u16, xs):
    """xs[s, j, l] = u16[0, 8 (16 s + l // 2) + 4 (l % 2) + j], the bf16 bits of x, for the
    elements xs covers, and 0 past x's end (the padding). False where a nonzero |x| < TINY."""
    k = u16.shape[1]
    ok = True
    for e in range(xs.shape[0] * 8 * LANES):
        b = np.int32(0)
        if e < k:
            b = np.int32(np.int32(u16[0, e]) & np.int32(0xFFFF))
        mag = np.int32(np.int32(b << np.int32(16)) & np.int32(0x7FFFFFFF))
        ok = ok and not (mag != 0 and mag < _TINY_BITS)
        s, r = e // (8 * LANES), e % (8 * LANES)
        xs[s, r % 4, 2 * (r // 8) + (r // 4) % 2] = np.uint16(b)
    return ok
