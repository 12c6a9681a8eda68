"""What the Triton kernels share (the FMA GEMV and dot kernels in `_fma`, the MMA GEMV's in `_mma`):
scales, stores, split-K's reduction (and `splitk_reduce_kernel`), PDL, and DEQUANT's slab
decode (`dequant_kernel`). softfp8.backends.triton plans their launches (`_plan`).

Weights arrive as the packed rows viewed as bytes: row n starts at byte n * RB, RB (the padded
row, a multiple of 16) is auto-specialised by Triton as divisible by 16, so a thread's 16
contiguous bytes along K become one 128-bit load. FP8 rows hold one code per byte; FP4 rows
two (code 2b in the low nibble of byte b, 2b + 1 in the high one). Codes are decoded in
registers and never written back; accumulation is float32.

Scales: the row scale (E5M2 optional, E4M3) and NVFP4's tensor scale multiply each output once
in `_finish`; block scales multiply once per block (GEMV: partial sums per block; tiled: NVFP4
folds the E4M3 block scale into the half-precision tile, exact since e2m1 * e4m3 has at most 6
significant bits, MXFP4 scales each block's dot product, since 2^e does not fit an fp16 tile).
E4M3_B128's tile scales (float32, one per 128 rows x 128 codes) multiply the decoded weights in
float32 (GEMV, dequant: `_tile_scaled`), or each K step's dot product in float32 (tiled: a step
lies in one 128-code tile; e4m3 * s has up to 24 significant bits and any float32 exponent, so
it can't go into an fp16 tile exactly, nor can s go into x's fp16 tile).

Split-K: with PARTIAL the kernels write float32 partial sums to ws[pid_k, M, N]; with LAST the
last program of each tile adds them in a fixed order and finishes (`_reduce_last`, counters
from `_splitk`), otherwise `splitk_reduce_kernel` does, in the same order (deterministic).

`dequant_kernel` is the one kernel that writes decoded weights: a bounded slab of rows for
Kernel.DEQUANT's GEMM (large M, see _dequant.py). PDL (sm_90+): `_pdl_enter` / `_pdl_exit`
place the programmatic-dependent-launch trigger and wait (everything that reads x or writes
comes after the wait).
"""
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from ._decode import (e2m1_to_f32, e4m3_to_f16_div256, e4m3_to_f16_div256_ptx, e4m3_to_f32,
                      e5m2_to_f16, e5m2_to_f16_ptx, e8m0_to_f32)


@triton.jit
def _fp8_to_f16(codes, FMT: tl.constexpr, ASM: tl.constexpr, NAN: tl.constexpr = True):
    """Software FP8 decode to fp16 (E4M3 as value * 2^-8): PTX on NVIDIA, portable elsewhere.
    NAN=False: the codes hold no NaN (E4M3's PTX decode then skips its NaN fix)."""
    if FMT == "e5m2":
        if ASM:
            return e5m2_to_f16_ptx(codes)
        return e5m2_to_f16(codes)
    if ASM:
        return e4m3_to_f16_div256_ptx(codes, NAN)
    return e4m3_to_f16_div256(codes)


@triton.jit
def _tile_scaled(w, s_ptr, rows, k0, N, SB, R: tl.constexpr, KB: tl.constexpr):
    """E4M3_B128: w [R, KB], the codes k0..k0 + KB of `rows` decoded as value * 2^-8, times 256
    and their tiles' scales, in float32 (s * 256 is exact, and so is then e/256 * (s * 256):
    the reference's e * s, one rounding). k0 is a multiple of min(KB, 128)."""
    srow = s_ptr + (rows // 128).to(tl.int64)[:, None] * SB
    if KB <= 128:  # one tile along K: one scale a row
        s = tl.load(srow + k0 // 128, mask=(rows < N)[:, None], other=0.0)
        out = w * (s * 256.0)
    else:
        NT: tl.constexpr = KB // 128
        st = k0 // 128 + tl.arange(0, NT)[None, :]
        s = tl.load(srow + st, mask=(rows < N)[:, None] & (st < SB), other=0.0)
        out = tl.reshape(tl.reshape(w, (R, NT, 128)) * (s * 256.0)[:, :, None], (R, KB))
    return out


@triton.jit
def _finish(acc, offs_n, s_ptr, g_ptr, b_ptr, N,
            FMT: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr):
    """Row scale, NVFP4's tensor scale and bias, once per output. acc: [BM, BN]; offs_n: [BN]."""
    nmask = offs_n < N
    if HAS_SCALE:
        acc = acc * tl.load(s_ptr + offs_n, mask=nmask, other=1.0)[None, :]
    if FMT == "nvfp4":
        acc = acc * tl.load(g_ptr)
    if HAS_BIAS:
        acc = acc + tl.load(b_ptr + offs_n, mask=nmask, other=0.0).to(tl.float32)[None, :]
    return acc


@triton.jit
def _store(acc, offs_m, offs_n, pid_k, y_ptr, ws_ptr, s_ptr, g_ptr, b_ptr, M, N,
           FMT: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr,
           PARTIAL: tl.constexpr):
    m2 = offs_m[:, None]
    n2 = offs_n[None, :]
    mask = (m2 < M) & (n2 < N)
    if PARTIAL:
        tl.store(ws_ptr + (pid_k * M + m2).to(tl.int64) * N + n2, acc, mask=mask)
    else:
        out = _finish(acc, offs_n, s_ptr, g_ptr, b_ptr, N, FMT, HAS_SCALE, HAS_BIAS)
        tl.store(y_ptr + m2.to(tl.int64) * N + n2, out.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _reduce_last(cnt_ptr, tile, offs_m, offs_n, y_ptr, ws_ptr, s_ptr, g_ptr, b_ptr, M, N, SPLIT,
                 FMT: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr):
    """Called by every program of a split launch once its parts of y[offs_m, offs_n] are in ws:
    the tile's last program to count in (cnt_ptr[tile]) adds the SPLIT parts in order s = 0, 1,
    .. (splitk_reduce_kernel's float32), finishes, stores y and zeroes the counter (`_splitk`).
    The barrier puts all of this program's ws stores before thread 0's release; the acquire and
    the result's broadcast (shared memory, a barrier) put the other programs' stores before the
    reads, which go to L2 (.cg: this SM's L1 may hold none of them, but is not coherent)."""
    tl.debug_barrier()
    done = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
    if done == SPLIT - 1:
        m2 = offs_m[:, None]
        n2 = offs_n[None, :]
        mask = (m2 < M) & (n2 < N)
        acc = tl.zeros((offs_m.shape[0], offs_n.shape[0]), dtype=tl.float32)
        for s in range(0, SPLIT):
            acc += tl.load(ws_ptr + (s * M + m2).to(tl.int64) * N + n2, mask=mask, other=0.0,
                           cache_modifier=".cg")
        out = _finish(acc, offs_n, s_ptr, g_ptr, b_ptr, N, FMT, HAS_SCALE, HAS_BIAS)
        tl.store(y_ptr + m2.to(tl.int64) * N + n2, out.to(y_ptr.dtype.element_ty), mask=mask)
        tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed")  # the kernel's end orders it


@triton.jit
def _prefetch_l2(ptr, nbytes):
    """One bulk prefetch of [ptr, ptr + nbytes) into L2 by thread 0 (sm_90+; 16-byte aligned)."""
    return tl.inline_asm_elementwise(
        asm="""{
        .reg .pred p;
        .reg .b32 t;
        mov.u32 t, %tid.x;
        setp.eq.u32 p, t, 0;
        @p cp.async.bulk.prefetch.L2.global [$1], $2;
        mov.u32 $0, 0;
        }""",
        constraints="=r,l,r", args=[ptr, nbytes], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _pdl_enter(w_ptr, row0, N, RB, kb_lo, kb_hi, BLOCK_N: tl.constexpr, PDL: tl.constexpr,
               PREFETCH: tl.constexpr):
    """Programmatic dependent launch (sm_90+, launched with launch_pdl): `_pdl_start`, then
    `_pdl_wait`. Everything that reads x or writes anything comes after it."""
    _pdl_start(PDL)
    _pdl_wait(w_ptr, row0, N, RB, kb_lo, kb_hi, BLOCK_N, PDL, PREFETCH)


@triton.jit
def _pdl_start(PDL: tl.constexpr):
    """PDL = 1: let the next kernel begin launching at once; 2: only when this program's loop is
    done (_pdl_exit)."""
    if PDL == 1:
        gdc_launch_dependents()


@triton.jit
def _pdl_wait_after(dep, nonzero, PDL: tl.constexpr):
    """griddepcontrol.wait once `dep` (int32 words of loaded weights) has arrived: ptxas places a
    plain wait first of all and sinks independent loads below it. The wait is predicated on
    (dep | nonzero) != 0 with `nonzero` a runtime value that is never 0: always true, but
    ptxas can't know (with a predicate it could prove, it hoisted the wait again)."""
    if PDL != 0:
        tl.inline_asm_elementwise("""{
        .reg .pred p;
        .reg .b32 d;
        or.b32 d, $1, $2;
        setp.ne.u32 p, d, 0;
        @p griddepcontrol.wait;
        mov.b32 $0, 0;
        }""", "=r,r,r", [dep, nonzero], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _pdl_wait(w_ptr, row0, N, RB, kb_lo, kb_hi, BLOCK_N: tl.constexpr, PDL: tl.constexpr,
              PREFETCH: tl.constexpr):
    """Start this program's first PREFETCH weight bytes toward L2 (weights do not depend on the
    previous kernel) and wait until the previous kernel has finished and its writes are
    visible. Loads of weights may come before it; of x, and every store, after."""
    if PDL != 0:
        _prefetch_program(w_ptr, row0, N, RB, kb_lo, kb_hi, BLOCK_N, PREFETCH)
        gdc_wait()


@triton.jit
def _prefetch_program(w_ptr, row0, N, RB, kb_lo, kb_hi, BLOCK_N: tl.constexpr,
                      PREFETCH: tl.constexpr):
    """The first PREFETCH bytes of this program's weights (rows row0.., bytes kb_lo..kb_hi of
    each) toward L2 in one bulk prefetch; nothing where PREFETCH is 0."""
    if PREFETCH > 0:
        rows = tl.minimum(N - row0, BLOCK_N)
        nbytes = tl.minimum((rows - 1) * RB + (kb_hi - kb_lo), PREFETCH)
        _prefetch_l2(w_ptr + row0.to(tl.int64) * RB + kb_lo, nbytes)


@triton.jit
def _pdl_exit(PDL: tl.constexpr):
    if PDL == 2:
        gdc_launch_dependents()


@triton.jit
def _f16_to(w, xdt: tl.constexpr):
    """An fp16 tile in the dot's dtype. bf16 goes through fp32: Triton emulates f32 -> bf16 on
    GPUs without bf16 (sm_75), not f16 -> bf16."""
    if xdt == tl.float16:
        return w
    return w.to(tl.float32).to(xdt)


@triton.jit
def splitk_reduce_kernel(ws_ptr, s_ptr, g_ptr, b_ptr, y_ptr, M, N, SPLIT,
                         FMT: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr,
                         BLOCK: tl.constexpr, PDL: tl.constexpr = 0):
    """y[m, n] = finish(sum over s of ws[s, m, n]), summed in order s = 0, 1, ... (deterministic)."""
    if PDL != 0:
        gdc_launch_dependents()
        gdc_wait()
    pid_m = tl.program_id(1)
    offs_n = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs_n < N
    acc = tl.zeros((1, BLOCK), dtype=tl.float32)
    for s in range(0, SPLIT):
        acc += tl.load(ws_ptr + (s * M + pid_m).to(tl.int64) * N + offs_n, mask=mask, other=0.0)[None, :]
    out = _finish(acc, offs_n, s_ptr, g_ptr, b_ptr, N, FMT, HAS_SCALE, HAS_BIAS)
    tl.store(y_ptr + pid_m.to(tl.int64) * N + offs_n[None, :], out.to(y_ptr.dtype.element_ty),
             mask=mask[None, :])


@triton.jit
def dequant_kernel(w_ptr, s_ptr, g_ptr, out_ptr, info_ptr, N, K, RB, SB, ROW0,
                   FMT: tl.constexpr, HAS_SCALE: tl.constexpr, INJECT: tl.constexpr,
                   BLOCK_R: tl.constexpr, BLOCK_KB: tl.constexpr, CHECK: tl.constexpr,
                   ASM: tl.constexpr = False, NAN: tl.constexpr = True):
    """out[r, k] = W[ROW0 + r, k] in out's dtype, for a slab of rows that a cuBLAS GEMM consumes
    next (large M only: the slab is bounded, so no full-size copy of the weights is ever made).
    Each value is decoded exactly in float32 (portable decoders), times its block, row and
    tensor scales, and rounded to out's dtype once. CHECK: each row's largest |value| goes to
    info[row] (atomic max of the float32 bits), so the exact pass can redo rows that the
    narrower dtype would overflow or flush (the launcher caches it per weight: _dequant).

    The 8-bit codes go through fp16 (`_fp8_to_f16`: E4M3 as value * 2^-8, then one exact
    multiply by 256), by the PTX word decoders where ASM (NVIDIA; NAN=False: E4M3 codes checked
    NaN-free): the same float32 as the re-bias decoder (NaN payloads aside: the slab feeds only
    the GEMM) in a fraction of its operations. FP4 block scales are loaded once per block
    ([BLOCK_R, blocks]) and broadcast over the block's codes."""
    pid_r = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    rows = ROW0 + offs_r
    offs_b = pid_k * BLOCK_KB + tl.arange(0, BLOCK_KB)
    rmask = rows[:, None] < N
    codes = tl.load(w_ptr + rows[:, None].to(tl.int64) * RB + offs_b[None, :],
                    mask=rmask & (offs_b[None, :] < RB), other=0)
    out_rows = out_ptr + offs_r[:, None].to(tl.int64) * K
    if FMT == "e5m2" or FMT == "e4m3" or FMT == "e4m3_b128":
        w = _fp8_to_f16(codes, FMT, ASM, NAN).to(tl.float32)
        # E4M3 is value * 2^-8, exact in fp16 (subnormals included): the 256 goes into the row
        # scale, one multiply either way, the same float32 (256 * s is exact)
        up: tl.constexpr = 256.0 if FMT == "e4m3" else 1.0
        if HAS_SCALE:
            w = w * (tl.load(s_ptr + rows, mask=rows < N, other=1.0) * up)[:, None]
        elif FMT == "e4m3_b128":
            w = _tile_scaled(w, s_ptr, rows, pid_k * BLOCK_KB, N, SB, BLOCK_R, BLOCK_KB)
        elif FMT == "e4m3":
            w = w * 256.0
        if CHECK:
            top = tl.max(tl.abs(w), axis=1)
            tl.atomic_max(info_ptr + rows, top.to(tl.int32, bitcast=True), mask=rows < N)
        tl.store(out_rows + offs_b[None, :], w.to(out_ptr.dtype.element_ty),
                 mask=rmask & (offs_b[None, :] < K))
    else:
        HB: tl.constexpr = 8 if FMT == "nvfp4" else 16  # bytes per scale block
        NB: tl.constexpr = BLOCK_KB // HB
        offs_s = pid_k * NB + tl.arange(0, NB)
        sc = tl.load(s_ptr + rows[:, None].to(tl.int64) * SB + offs_s[None, :],
                     mask=rmask & (offs_s[None, :] < SB), other=0)
        s = e4m3_to_f32(sc, False) if FMT == "nvfp4" else e8m0_to_f32(sc)
        if FMT == "nvfp4":
            s = s * tl.load(g_ptr)
        # code 2b, then 2b + 1; then split per block to meet its scale
        w = tl.reshape(tl.join(e2m1_to_f32(codes, INJECT), e2m1_to_f32(codes >> 4, INJECT)),
                       (BLOCK_R, NB, 2 * HB))
        w = tl.reshape(w * s[:, :, None], (BLOCK_R, 2 * BLOCK_KB))
        if CHECK:
            top = tl.max(tl.abs(w), axis=1)
            tl.atomic_max(info_ptr + rows, top.to(tl.int32, bitcast=True), mask=rows < N)
        kk = 2 * pid_k * BLOCK_KB + tl.arange(0, 2 * BLOCK_KB)
        tl.store(out_rows + kk[None, :], w.to(out_ptr.dtype.element_ty),
                 mask=rmask & (kk[None, :] < K))
