"""FP4 GEMV with the E2M1 select decode as a 16-entry table lookup in one AVX-512 permute.

vpermps looks a float up in a 16-float register by the low 4 bits of each lane's index, so a
code costs one shift (to bring its nibble down; the permute ignores the bits above) and one
permute, and the multiply-add: 3 vector ops per 16 codes, where the bit-operation decoders of
_numba_kernels spend 5-6 (their inner loop is issue-bound: 13 Gelem/s single core). The table
holds the exact E2M1 values, so this is the select decoder's result bit for bit, with or
without FTZ/DAZ. LLVM's loop vectoriser cannot produce a register permute from a table lookup
(it emits a gather), so the row loop is written here as LLVM IR with vector types, inside a
numba intrinsic, and the kernels around it stay plain numba.

Layout as in _numba_kernels: int32 words [N, Kp/8], one vector lane per scale block (NVFP4: 2
words, MXFP4: 4), x rearranged per step of 16 blocks (`x_steps`). 16 blocks per step; the blocks past
the last whole step (MXFP4 rows whose block count is not a multiple of 16) take the bit-operation
select path. Only compiled where numba targets AVX-512 (`available()`); numba_cpu falls back to
_numba_kernels elsewhere.
"""
from __future__ import annotations

import functools

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._numba_decode import _JIT, e4m3_fast_div256, e8m0_i32
from ._numba_kernels import _mx_select, _nv_select

LANES = 16
_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
_TABLE = _E2M1 + [-v for v in _E2M1]  # code -> value; code 8 is -0.0, as the reference


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether numba compiles for a CPU with AVX-512F (vpermps on 16 floats). Follows numba's
    own target choice (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES), not just the host's; fixed for the
    process, so asked once (the host query costs ~0.1 ms)."""
    import llvmlite.binding as llvm
    from numba.core import config

    if config.CPU_FEATURES is not None:
        return "+avx512f" in config.CPU_FEATURES.split(",")
    if config.CPU_NAME not in (None, "host"):
        return False
    return bool(llvm.get_host_cpu_features().get("avx512f", False))


def _emit_row(context, builder, sig, args, wpb):
    """IR: sum over steps s in [s0, s1) of the 16 blocks 16s..16s+15 of row r, each block's sum of
    code x xs[s, j] times sc[block]; returns the float32 total."""
    wty, rty, s0ty, s1ty, xty, scty = sig.args
    words, r, s0, s1, xs, sc = args
    f32, i32 = ir.FloatType(), ir.IntType(32)
    vf, vi = ir.VectorType(f32, LANES), ir.VectorType(i32, LANES)
    mod = builder.module
    perm = cgutils.get_or_insert_function(
        mod, ir.FunctionType(vf, [vf, vi]), "llvm.x86.avx512.permvar.sf.512")
    fma = cgutils.get_or_insert_function(mod, ir.FunctionType(vf, [vf, vf, vf]), "llvm.fma.v16f32")
    table = ir.Constant(vf, [ir.Constant(f32, v) for v in _TABLE])
    warr = context.make_array(wty)(context, builder, words)
    xarr = context.make_array(xty)(context, builder, xs)
    sarr = context.make_array(scty)(context, builder, sc)
    intp = context.get_value_type(types.intp)
    r = context.cast(builder, r, rty, types.intp)
    s0 = context.cast(builder, s0, s0ty, types.intp)
    s1 = context.cast(builder, s1, s1ty, types.intp)
    # C-contiguous arrays (the signature says so): plain pointer arithmetic, so LLVM folds every
    # x offset of a step into the load's immediate instead of keeping 16-32 plane pointers
    wrow = builder.gep(warr.data, [builder.mul(r, builder.extract_value(warr.shape, 1))])
    accs = [cgutils.alloca_once_value(builder, ir.Constant(vf, None)) for _ in range(4)]
    planes = 8 * wpb

    def vload(base, offset, vty):
        return builder.load(builder.bitcast(builder.gep(base, [offset]), vty.as_pointer()),
                            align=4)

    with cgutils.for_range_slice(builder, s0, s1, ir.Constant(intp, 1), intp=intp) as (s, _):
        b0 = builder.mul(s, ir.Constant(intp, LANES))
        w0 = builder.mul(b0, ir.Constant(intp, wpb))
        x0 = builder.mul(b0, ir.Constant(intp, planes))
        raw = [vload(wrow, builder.add(w0, ir.Constant(intp, LANES * q)), vi) for q in range(wpb)]
        # word q of block b to lane b (LLVM lowers these shuffles to vpermt2d)
        if wpb == 2:
            lanes = [builder.shuffle_vector(raw[0], raw[1], ir.Constant(
                vi, [2 * b + q for b in range(LANES)])) for q in range(2)]
        else:
            wide = ir.VectorType(i32, 2 * LANES)
            lo = builder.shuffle_vector(raw[0], raw[1], ir.Constant(wide, list(range(32))))
            hi = builder.shuffle_vector(raw[2], raw[3], ir.Constant(wide, list(range(32))))
            lanes = [builder.shuffle_vector(lo, hi, ir.Constant(
                vi, [4 * b + q for b in range(LANES)])) for q in range(4)]
        scale = vload(sarr.data, b0, vf)
        # four independent chains (code j goes to chain j % 4), each scaled into its own
        # accumulator, so no multiply-add waits on another's result
        part = [None] * 4
        for q in range(wpb):
            for j in range(8):
                idx = lanes[q] if j == 0 else builder.lshr(lanes[q], ir.Constant(vi, [4 * j] * LANES))
                val = builder.call(perm, [table, idx])
                xv = vload(xarr.data, builder.add(x0, ir.Constant(intp, LANES * (8 * q + j))), vf)
                k = j % 4
                part[k] = builder.fmul(val, xv) if part[k] is None else builder.call(
                    fma, [val, xv, part[k]])
        for k in range(4):
            builder.store(builder.call(fma, [part[k], scale, builder.load(accs[k])]), accs[k])
    acc = [builder.load(a) for a in accs]
    acc = builder.fadd(builder.fadd(acc[0], acc[1]), builder.fadd(acc[2], acc[3]))
    total = builder.extract_element(acc, ir.Constant(i32, 0))
    for lane in range(1, LANES):
        total = builder.fadd(total, builder.extract_element(acc, ir.Constant(i32, lane)))
    return total


def _row_sig(words, r, s0, s1, xs, sc):
    for a in (words, xs, sc):
        if not (isinstance(a, types.Array) and a.layout == "C"):
            raise TypeError(f"the FP4 LUT row needs C-contiguous arrays, got {a}")
    return types.float32(words, r, s0, s1, xs, sc)


@intrinsic
def _nv_row(typingctx, words, r, s0, s1, xp, sc):
    return _row_sig(words, r, s0, s1, xp, sc), lambda c, b, s, a: _emit_row(c, b, s, a, 2)


@intrinsic
def _mx_row(typingctx, words, r, s0, s1, xp, sc):
    return _row_sig(words, r, s0, s1, xp, sc), lambda c, b, s, a: _emit_row(c, b, s, a, 4)


@nb.njit(**_JIT)
def _nvfp4_rows(words, scales, g, xs, xp, y, r0, r1):
    nblk = scales.shape[1]
    steps = xs.shape[0]
    sc = np.empty(nblk, np.float32)
    post = np.float32(256.0) * g  # the scales below are E4M3 / 256 (e4m3_fast_div256)
    for r in range(r0, r1):
        for b in range(nblk):
            sc[b] = e4m3_fast_div256(scales[r, b])
        acc = _nv_row(words, r, 0, steps, xs, sc)
        for b in range(steps * LANES, nblk):
            acc += _nv_select(words, r, b, xp) * sc[b]
        y[r] = acc * post


@nb.njit(**_JIT)
def _mxfp4_rows(words, scales, xs, xp, y, r0, r1):
    nblk = scales.shape[1]
    steps = xs.shape[0]
    sc = np.empty(nblk, np.float32)
    for r in range(r0, r1):
        for b in range(nblk):
            sc[b] = e8m0_i32(scales[r, b])
        acc = _mx_row(words, r, 0, steps, xs, sc)
        for b in range(steps * LANES, nblk):
            acc += _mx_select(words, r, b, xp) * sc[b]
        y[r] = acc


@nb.njit(parallel=True, **_JIT)
def gemv_nvfp4(words, scales, g, xs, xp, y, chunk):
    """y[r] = row r . x for NVFP4 words [N, Kp/8], g the tensor scale; xs and xp as `x_steps`
    returns them. Select decode by table lookup."""
    n = words.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _nvfp4_rows(words, scales, g, xs, xp, y, c * chunk, min(n, (c + 1) * chunk))


@nb.njit(parallel=True, **_JIT)
def gemv_mxfp4(words, scales, xs, xp, y, chunk):
    """y[r] = row r . x for MXFP4 words [N, Kp/8]; xs and xp as `x_steps` returns them. Select
    decode by table lookup."""
    n = words.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _mxfp4_rows(words, scales, xs, xp, y, c * chunk, min(n, (c + 1) * chunk))


def x_steps(x, block):
    """x [Kp] float32 (torch) -> (xs, xp) numpy: xs[s, j, lane] = x[block * (16 s + lane) + j]
    for the whole steps of 16 blocks (one contiguous 1-2 KiB slab per step), and the planes
    xp[j, b] = x[block * b + j] the remaining blocks' select path reads."""
    nblk = x.shape[0] // block
    steps = nblk // LANES
    xs = x[:steps * LANES * block].view(steps, LANES, block).transpose(1, 2).contiguous()
    xp = x.view(nblk, block).T.contiguous()
    return xs.numpy(), xp.numpy()
