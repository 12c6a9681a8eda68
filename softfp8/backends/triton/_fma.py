"""The FMA GEMV and the tl.dot kernels (Kernel.GEMV, SMALL_M, TILED; and DEQUANT's exact pass):
weights decoded in registers by `_decode`'s decoders, against x in any float dtype; their
shared pieces (scales, stores, split-K, PDL) in `_kernels`. How the rows, codes and scales are
laid out and applied is `_kernels`' docstring.
"""
import triton
import triton.language as tl

from ._decode import (e2m1_pair_to_f16_ptx, e2m1_to_f16, e2m1_to_f32, e4m3_to_f32, e5m2_to_f32,
                      e8m0_to_f32)
from ._kernels import (_f16_to, _fp8_to_f16, _pdl_enter, _pdl_exit, _reduce_last, _store,
                       _tile_scaled)


@triton.jit
def gemv_kernel(x_ptr, w_ptr, s_ptr, g_ptr, b_ptr, y_ptr, ws_ptr, cnt_ptr,
                M, N, K, RB, SB, KB_SPLIT,
                FMT: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr,
                INJECT: tl.constexpr, HW: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_KB: tl.constexpr, PARTIAL: tl.constexpr,
                ASM: tl.constexpr = False,
                PDL: tl.constexpr = 0, PREFETCH: tl.constexpr = 0, NAN: tl.constexpr = True,
                LAST: tl.constexpr = False):
    """CUDA-core GEMV for M <= BLOCK_M (1, or a few rows): program (pid_n, pid_k) reads rows
    pid_n*BLOCK_N.. over bytes [pid_k*KB_SPLIT, +KB_SPLIT) once for all M rows of x. The
    accumulator keeps the K axis ([BM, BN, BLOCK_KB] for FP8) so the loop has no cross-thread
    reduction; one tl.sum at the end."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_b = tl.arange(0, BLOCK_KB)
    m3 = offs_m[:, None, None]
    n3 = offs_n[None, :, None]
    b3 = offs_b[None, None, :]
    w_rows = w_ptr + n3.to(tl.int64) * RB
    x_rows = x_ptr + m3.to(tl.int64) * K
    mask_n = n3 < N
    mask_m = m3 < M
    kb_lo = pid_k * KB_SPLIT
    kb_hi = tl.minimum(kb_lo + KB_SPLIT, RB)
    _pdl_enter(w_ptr, pid_n * BLOCK_N, N, RB, kb_lo, kb_hi, BLOCK_N, PDL, PREFETCH)
    FP8: tl.constexpr = FMT == "e5m2" or FMT == "e4m3" or FMT == "e4m3_b128"
    if FP8:
        acc = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_KB), dtype=tl.float32)
    else:
        HB: tl.constexpr = 8 if FMT == "nvfp4" else 16  # bytes per scale block
        NBI: tl.constexpr = BLOCK_KB // HB
        acc = tl.zeros((BLOCK_M, BLOCK_N, NBI), dtype=tl.float32)
    for kb in range(kb_lo, kb_hi, BLOCK_KB):
        bb = kb + b3
        codes = tl.load(w_rows + bb, mask=mask_n & (bb < RB), other=0)
        if FP8:
            if HW:
                w = e5m2_to_f32(codes, HW) if FMT == "e5m2" else e4m3_to_f32(codes, HW)
            else:
                w = _fp8_to_f16(codes, FMT, ASM, NAN).to(tl.float32)  # E4M3: x 256 once, below
            if FMT == "e4m3_b128":  # its 256 goes with the tile scale
                w = tl.reshape(_tile_scaled(tl.reshape(w, (BLOCK_N, BLOCK_KB)), s_ptr, offs_n,
                                            kb, N, SB, BLOCK_N, BLOCK_KB),
                               (1, BLOCK_N, BLOCK_KB))
            xv = tl.load(x_rows + bb, mask=mask_m & (bb < K), other=0.0).to(tl.float32)
            acc += w * xv
        else:
            if ASM and INJECT:
                lo16, hi16 = e2m1_pair_to_f16_ptx(codes)
                lo = lo16.to(tl.float32)
                hi = hi16.to(tl.float32)
            else:
                lo = e2m1_to_f32(codes, INJECT)
                hi = e2m1_to_f32(codes >> 4, INJECT)
            # one contiguous (vectorised) load of x, split into the even and odd codes' planes
            kk = 2 * kb + tl.arange(0, 2 * BLOCK_KB)[None, None, :]
            xx = tl.load(x_rows + kk, mask=mask_m & (kk < K), other=0.0).to(tl.float32)
            xe, xo = tl.split(tl.reshape(xx, (BLOCK_M, 1, BLOCK_KB, 2)))
            p = lo * xe + hi * xo
            p = tl.sum(tl.reshape(p, (BLOCK_M, BLOCK_N, NBI, HB)), axis=3)
            sb = kb // HB + tl.arange(0, NBI)[None, None, :]
            sc = tl.load(s_ptr + n3.to(tl.int64) * SB + sb, mask=mask_n & (sb < SB), other=0)
            if FMT == "nvfp4":
                acc += p * e4m3_to_f32(sc, False)
            else:
                acc += p * e8m0_to_f32(sc)
    _pdl_exit(PDL)
    out = tl.sum(acc, axis=2)
    if FMT == "e4m3" and not HW:
        out = out * 256.0  # e4m3_to_f16_div256 read every code as value * 2^-8
    _store(out, offs_m, offs_n, pid_k, y_ptr, ws_ptr, s_ptr, g_ptr, b_ptr, M, N,
           FMT, HAS_SCALE, HAS_BIAS, PARTIAL)
    if LAST:
        _reduce_last(cnt_ptr, pid_n, offs_m, offs_n, y_ptr, ws_ptr, s_ptr, g_ptr, b_ptr, M, N,
                     tl.num_programs(1), FMT, HAS_SCALE, HAS_BIAS)


@triton.jit
def dot_kernel(x_ptr, w_ptr, s_ptr, g_ptr, b_ptr, y_ptr, ws_ptr, cnt_ptr,
               M, N, K, RB, SB, KB_SPLIT,
               FMT: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr,
               INJECT: tl.constexpr, HW: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PARTIAL: tl.constexpr,
               PRECISION: tl.constexpr, UPCAST: tl.constexpr, ASM: tl.constexpr = False,
               PDL: tl.constexpr = 0, PREFETCH: tl.constexpr = 0, FIX: tl.constexpr = False,
               FIX_HI: tl.constexpr = 0, FIX_LO: tl.constexpr = 0, NAN: tl.constexpr = True,
               LAST: tl.constexpr = False):
    """tl.dot kernel: each step decodes a [BLOCK_N, BLOCK_K] weight tile into x's dtype (fp16,
    bf16, or fp32 with PRECISION="ieee") and multiplies it with a [BLOCK_M, BLOCK_K] tile of x.
    Small M: one M block (BLOCK_M = 16), so the weights are read once for all rows; larger M:
    a 2-D grid of tiles. MXFP4 steps one 32-code block at a time (BLOCK_K = 32).
    UPCAST: both tiles in fp32 whatever x's dtype -- only for Triton's interpreter, whose bf16
    tl.dot returns garbage (seen with triton 3.9; the launcher sets it there and nowhere else).
    FIX: the exact pass after Kernel.DEQUANT -- ws_ptr holds each row's largest |value| (float32
    bits, from dequant_kernel); only row blocks with a row that x's dtype can't hold exactly
    (above FIX_HI, or nonzero below FIX_LO) loop and store, the others exit at once."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    FP8: tl.constexpr = FMT == "e5m2" or FMT == "e4m3" or FMT == "e4m3_b128"
    BKB: tl.constexpr = BLOCK_K if FP8 else BLOCK_K // 2
    xdt: tl.constexpr = tl.float32 if UPCAST else x_ptr.dtype.element_ty
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_b = tl.arange(0, BKB)
    offs_k = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + offs_n[:, None].to(tl.int64) * RB
    x_rows = x_ptr + offs_m[:, None].to(tl.int64) * K
    mask_n = offs_n[:, None] < N
    mask_m = offs_m[:, None] < M
    kb_lo = pid_k * KB_SPLIT
    kb_hi = tl.minimum(kb_lo + KB_SPLIT, RB)
    _pdl_enter(w_ptr, pid_n * BLOCK_N, N, RB, kb_lo, kb_hi, BLOCK_N, PDL, PREFETCH)
    if FIX:
        bits = tl.load(ws_ptr + offs_n, mask=offs_n < N, other=0)
        bad = tl.sum(((bits > FIX_HI) | ((bits > 0) & (bits < FIX_LO))).to(tl.int32), axis=0)
        kb_hi = tl.where(bad > 0, kb_hi, kb_lo)  # nothing to fix: no K steps ...
        offs_n = tl.where(bad > 0, offs_n, N)  # ... and no store
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(kb_lo, kb_hi, BKB):
        bb = kb + offs_b[None, :]
        codes = tl.load(w_rows + bb, mask=mask_n & (bb < RB), other=0)
        k0 = kb if FP8 else 2 * kb
        kk = k0 + offs_k[None, :]
        xt = tl.load(x_rows + kk, mask=mask_m & (kk < K), other=0.0).to(xdt)
        if FP8:
            if HW:
                w = (e5m2_to_f32(codes, HW) if FMT == "e5m2" else e4m3_to_f32(codes, HW)).to(xdt)
            else:
                w = _f16_to(_fp8_to_f16(codes, FMT, ASM, NAN), xdt)  # E4M3: x 256 below
            if FMT == "e4m3_b128":
                # the step's dot, times its tile scales (and the 256) in float32: the launcher
                # keeps a step within one 128-code tile (128 % BLOCK_K == 0)
                sc = tl.load(s_ptr + (offs_n // 128).to(tl.int64) * SB + kb // 128,
                             mask=offs_n < N, other=0.0)
                part = tl.dot(xt, tl.trans(w), input_precision=PRECISION)
                acc += part * (sc * 256.0)[None, :]
            else:
                acc = tl.dot(xt, tl.trans(w), acc, input_precision=PRECISION)
        else:
            # No interleave: the even codes (low nibbles) meet x's even elements and the odd
            # codes x's odd ones, in two dots; the sum over K does not care about the order.
            xx = tl.load(x_rows + (2 * kb + tl.arange(0, 2 * BKB))[None, :],
                         mask=mask_m & ((2 * kb + tl.arange(0, 2 * BKB))[None, :] < K), other=0.0)
            xe, xo = tl.split(tl.reshape(xx.to(xdt), (BLOCK_M, BKB, 2)))
            if ASM and INJECT:
                lo, hi = e2m1_pair_to_f16_ptx(codes)
            else:
                lo = e2m1_to_f16(codes, INJECT)
                hi = e2m1_to_f16(codes >> 4, INJECT)
            if FMT == "nvfp4":
                # e2m1 * e4m3 has at most 6 significant bits and lies in fp16's normal range:
                # folding the block scale into the fp16 tile is exact (and exact in bf16).
                NBI: tl.constexpr = BKB // 8
                sb = kb // 8 + tl.arange(0, NBI)[None, :]
                sc = tl.load(s_ptr + offs_n[:, None].to(tl.int64) * SB + sb,
                             mask=mask_n & (sb < SB), other=0)
                s = e4m3_to_f32(sc, False).to(tl.float16)  # per block: no fp16 subnormal step
                s = tl.reshape(tl.broadcast_to(s[:, :, None], (BLOCK_N, NBI, 8)), (BLOCK_N, BKB))
                acc = tl.dot(xe, tl.trans(_f16_to(lo * s, xdt)), acc, input_precision=PRECISION)
                acc = tl.dot(xo, tl.trans(_f16_to(hi * s, xdt)), acc, input_precision=PRECISION)
            else:
                # 2^e does not fit an fp16 tile: one block a step, its dot scaled in fp32.
                sc = tl.load(s_ptr + offs_n.to(tl.int64) * SB + kb // 16,
                             mask=offs_n < N, other=0)  # kb < RB, so kb // 16 < SB
                part = tl.dot(xe, tl.trans(_f16_to(lo, xdt)), input_precision=PRECISION)
                part = tl.dot(xo, tl.trans(_f16_to(hi, xdt)), part, input_precision=PRECISION)
                acc += part * e8m0_to_f32(sc)[None, :]
    _pdl_exit(PDL)
    if FMT == "e4m3" and not HW:
        acc = acc * 256.0  # e4m3_to_f16_div256 read every code as value * 2^-8
    _store(acc, offs_m, offs_n, pid_k, y_ptr, ws_ptr, s_ptr, g_ptr, b_ptr, M, N,
           FMT, HAS_SCALE, HAS_BIAS, PARTIAL)
    if LAST:
        _reduce_last(cnt_ptr, pid_n * tl.num_programs(1) + pid_m, offs_m, offs_n, y_ptr, ws_ptr,
                     s_ptr, g_ptr, b_ptr, M, N, tl.num_programs(2), FMT, HAS_SCALE, HAS_BIAS)
