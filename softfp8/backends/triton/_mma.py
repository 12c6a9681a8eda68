"""Kernel.MMA_GEMV: the GEMV on warp-level mma.sync, per-thread work written in PTX (NVIDIA
sm_80+, fp16 activations, M <= 16: above 8 in one program that feeds each decoded weight
fragment to two mma (WIDE), or in two groups of x rows). Auto picks it for FP4 at M <= 16 and
the 8-bit formats at M <= 4 (M <= 8 for small weights, E5M2's up to 16), M = 1 on sm_90
through a shared-memory ring (`_mma_ring`), else holding two steps of 8-bit weights in registers
(launch_config, `uses_mma_gemv`, `mma_config`); written for FP4
first, whose FMA GEMV was the slowest, then 8-bit (`_fp8_tile_asm`).

Why: in the FMA GEMV (`_kernels.gemv_kernel`) Triton gives the uint8 codes and the fp16 x
different per-thread layouts and converts between them through shared memory every step (about
20 bar.sync per loop step and ~1 warp-instruction per weight byte on sm_90, where 4.4 TB/s
leaves ~0.24), so FP4 ran at 30% of the H200's read bandwidth. Here Triton only runs the loop:
every tensor is [32 * WARPS] with one element per thread, so each inline-asm block sees exactly
one thread's registers, and the fragments of `mma.m16n8k16` are built in them directly.

Fragment plan. A = 16 weight rows x 16 codes, B = 16 codes x 8 columns (x's rows: M <= 8).
Lane 4g + t holds A's rows g and g + 8 and B's column g. Each thread reads 16 bytes (32 codes)
of each of its rows at byte kb + 16t (one 128-bit load) and the 32 matching x values (64 bytes)
of activation row g. K's order inside one mma is free (a dot product does not care), as long
as A and B agree, so each thread feeds its own bytes: a word of codes c..c+7 becomes four fp16
pairs (c, c+1) .. (c+6, c+7), which are x's own pairs (x's word q holds values 2q, 2q+1), so x
goes to the mma as it was loaded (a word of 8-bit codes: two such pairs). Two 16-row tiles
per warp, WARPS warps interleaved along K (64 bytes a warp-step) and summed at the end: the
tile mapping (RUNS = 0). The run mapping (RUNS = MP, M <= MP) instead gives each warp its own
rows and reads 512 / MP contiguous bytes of each per step: mma row g is a row's 64-byte chunk
g % C (C = 8 / MP) and B's column j is x row j // C's chunk j % C, so the entries whose
chunks agree hold the sums (M = 1: the diagonal; measured faster: each warp-instruction then
covers 2 rows x 512 bytes, not 8 x 64).

E2M1 -> fp16, as the E2M1 decoder (`dispatch`, from the probe) says:
- select: by table: |code| (3 bits) indexes 8 bytes, the fp16 high bytes of 0, .5, 1, 1.5, 2, 3,
  4, 6, with one `prmt` for four codes; a `prmt` in sign-replicate mode and a `lop3` or the four
  codes' signs in, and a `prmt` a pair places two signed bytes beside zero bytes
  (`_mma_ptx._decode_word`). Exact and free of denormals.
- inject (INJECT): each code laid in an fp16 high byte as s000 e1 e0 m0 is the code * 2^-14
  (0.5 a subnormal), a mask and a `mad` per four codes, a `prmt` a pair; x re-paired to the
  pairs (c, c+2) (`_mma_ptx._decode_word_inject`); the scales carry the 2^14. 20% fewer
  integer-ALU instructions a loop step on sm_90 (SASS: NVFP4 246 -> 198); measured 5-7% faster
  on 22016 x 4096, the llama2-7b token 1% (docs/decisions.md). The FP4 loop waits on its loads
  more than on the ALU (the same loop with its loads alone takes 60% of its time).
Scales, in fp16 on each pair before the mma (the mma then sums exact products in fp32;
under INJECT each factor below is also * 2^14, which the pairs' 2^-14 cancels):
- NVFP4: the E4M3 block scale as fp16 * 2^-8 (a shift, a mask and the NaN fix of
  `_decode.e4m3_to_f16_div256_ptx`); e2m1 * e4m3 has at most 6 significant bits and stays
  within fp16's range, so the product is exact. The sum is multiplied by 256 and the tensor
  scale once.
- MXFP4: 2^e does not fit fp16. The four blocks one mma spans (threads t = 0..3) share
  E = their largest exponent among blocks with a nonzero code (or a NaN scale); each pair is
  multiplied by 2^(e - E) and the tile's fp32 sum by 2^(E - 127). Exact while every block is at
  most 2^23 below E: e2m1 * 2^(e-E) is then an fp16 multiple of 2^-24. A block further below
  loses the bits under 2^-24 * 2^E (all of it below 2^-25 * 2^E): contributions under 2^-24 of
  the largest block's unit, the order of the fp32 accumulation's own rounding.
  Where every row's nonzero blocks lie within 2^23 of the row's largest (E, per row: checked
  once per weight, `_facts.mx_row_exponents`), E is the row's instead (ROW_E): no shared
  exponent to find each step, the sums carry over the steps and are multiplied by 2^(E - 127)
  once; exact by the same argument, for every block of the row (SASS, sm_90: 424 -> 387
  instructions a step; the llama2-7b token 1.612 -> 1.518 ms on the H200, docs/decisions.md).
"""
import triton
import triton.language as tl

from ._const import Const
from ._kernels import (_pdl_exit, _pdl_start, _pdl_wait, _pdl_wait_after, _prefetch_program,
                       _reduce_last)
from ._mma_loads import _prefetch_rows, _row_e_biases, _rows_step, _x_step
from ._mma_ring import (SLOT_BYTES, _ring_base, _ring_commit, _ring_drain, _ring_issue_weights,
                        _ring_issue_x, _ring_read, _ring_rows_in, _ring_shifts)
from ._mma_store import _program_terms, _store_runs, _store_tile
from ._mma_table import MMA_STEP_BYTES, MMA_TILE_ROWS
from ._mma_tile import _tile, _tiles

ROWS = Const(MMA_TILE_ROWS)  # two 16-row tiles a warp: rows g, g+8, g+16, g+24 a thread
STEP_BYTES = Const(MMA_STEP_BYTES)  # a warp's bytes of each row a loop step


@triton.jit
def _pdl_wait_weights(words, w_ptr, row0, N, RB, kb_lo, kb_hi, BLOCK_N: tl.constexpr,
                      PDL: tl.constexpr, PREFETCH: tl.constexpr):
    """The PDL wait after a program's first weight loads (`words`: one word of each). Under an
    early launch it waits for those words (after the L2 prefetch, where one is asked), so ptxas
    keeps the loads in flight while the previous kernel finishes; late or no PDL: the plain wait,
    which ptxas places first (nothing to overlap there, and x's loads would wait for the
    weights)."""
    if PDL == 1:
        _prefetch_program(w_ptr, row0, N, RB, kb_lo, kb_hi, BLOCK_N, PREFETCH)
        _pdl_wait_after(words, RB, PDL)
    else:
        _pdl_wait(w_ptr, row0, N, RB, kb_lo, kb_hi, BLOCK_N, PDL, PREFETCH)


@triton.jit
def mma_gemv_kernel(x_ptr, w_ptr, s_ptr, g_ptr, b_ptr, y_ptr, ws_ptr, cnt_ptr,
                    M, N, K, RB, SB, KB_SPLIT,
                    FMT: tl.constexpr, HAS_BIAS: tl.constexpr, WARPS: tl.constexpr,
                    PARTIAL: tl.constexpr, PDL: tl.constexpr = 0, PREFETCH: tl.constexpr = 0,
                    HAS_SCALE: tl.constexpr = False,
                    AHEAD: tl.constexpr = 0, RUNS: tl.constexpr = 0,
                    TILES: tl.constexpr = 2, NAN: tl.constexpr = True,
                    DEPTH: tl.constexpr = 1, ZERO: tl.constexpr = True,
                    GROUPS: tl.constexpr = 1, WIDE: tl.constexpr = False,
                    LAST: tl.constexpr = False, INJECT: tl.constexpr = False,
                    RING: tl.constexpr = 0,
                    WHOLE: tl.constexpr = False, X_IN_STEP: tl.constexpr = False,
                    ROW_E: tl.constexpr = False):
    """Program (pid_n, pid_k) over bytes [pid_k * KB_SPLIT, +KB_SPLIT) of its rows.
    RUNS = 0 (the tile mapping): rows pid_n * 32 .. +32, two 16-row tiles; warp w takes the
    64-byte steps w, w + WARPS, ...; the warps' sums are added at the end.
    RUNS = MP (1, 2, 4 or 8; M <= MP), the run mapping: each warp owns 2 * MP * TILES rows
    over the whole K range and reads C = 8 / MP contiguous 64-byte chunks (512 / MP bytes) of
    each per step. mma row g (and g + 8) is then weight row g // C (MP + g // C) restricted to
    chunk g % C, and B's column j is x row j // C's chunk j % C, so the entries whose chunks
    agree hold the sums (_store_runs; M = 1: the diagonal). Measured faster at M = 1 than the
    tiles: each warp-instruction covers 2 rows x 512 bytes, not 8 x 64. TILES (2 or 4, run
    mapping only): 16-row mma tiles per warp, the second pair doubles the bytes each thread
    has in flight and halves x's loads per weight byte.
    AHEAD > 0: each step also pulls the weights of the step AHEAD steps later toward L2.
    NAN=False: E4M3 codes known to hold no NaN (the decode
    leaves out its NaN fix; `codes_nan_free`). DEPTH = 2 (run mapping, 2 tiles): two register
    buffers of weights and x, each refilled after its own step's mma, so a warp has two steps
    in flight (ptxas places a one-buffer loop's loads after the mma that frees its registers).
    ZERO = 0 (`mma_zero_fill`): every program's K range is whole loop steps (DEPTH of them a
    pass) and x covers the padded rows, so no tile reads a register a switched-off load left
    (only rows past N, whose sums are never stored): the loads skip zeroing them.
    GROUPS > 1: M up to GROUPS * 8 (tiles) or GROUPS * MP (runs): x's rows in groups of that
    many, program pid_n * GROUPS + j taking group j of rows pid_n's block, so the groups of one
    block are neighbours in launch order and all but the first read its weights from L2.
    WIDE (the tile mapping or RUNS = 8, two tiles a warp, one group): M up to 16 in one
    program, each step's weights decoded once for both halves of x's rows (B's columns 0..7 are
    x rows 0..7, a second mma's 8..15), against GROUPS' two programs that each decode them.
    LAST (PARTIAL): the last of a block's K programs adds the parts (`_kernels._reduce_last`).
    RING > 0 (run mapping, 2 tiles, depth 1, not WIDE): weights, scale bytes and x reach each
    thread through its own shared-memory slots, copied RING - 1 steps ahead (`_mma_ring`);
    The rows' scales, tensor scale and bias are loaded before any store (`_mma_store`): with
    the ring at the program's start (they arrive during the loop), else after the loop (FP4's
    loop holds ~128 registers).
    WHOLE (the ring, 8-bit): every program's rows lie inside N, its x rows inside M, its
    K range is whole steps, at least RING - 1 of them (the launcher checks): the copies go
    without predicates, and the last RING - 1 steps, which copy nothing, run in a loop of their
    own (each commits an empty group, so the reads' wait counts stay as they are).
    X_IN_STEP (registers, depth 1): each step's x loaded in that step, not one step ahead with
    the weights (`_mma_flags.mma_x_in_step`).
    ROW_E (MXFP4 from registers, depth 1, 2 tiles): g_ptr holds each row's exponent E (int32,
    `_facts.mx_row_exponents`: the largest among its blocks with a nonzero code, none of which
    lies more than 2^23 below it), so each block's factor is 2^(e - E) against the row, not
    against a shared exponent of the four blocks of each mma found by shuffles every step; the
    sums carry over the steps and the epilogue multiplies them by 2^(E - 127) once.
    Needs num_warps == WARPS, K % 8 == 0 and a 16-byte aligned x (the launcher checks)."""
    NT: tl.constexpr = 32 * WARPS
    FP8: tl.constexpr = FMT == "e5m2" or FMT == "e4m3"
    MP: tl.constexpr = RUNS if RUNS > 0 else 1
    C: tl.constexpr = 8 // MP  # run mapping: 64-byte chunks of a row per warp-step
    WARP_ROWS: tl.constexpr = 2 * MP * TILES
    PROG_ROWS: tl.constexpr = WARP_ROWS * WARPS if RUNS > 0 else ROWS
    RS: tl.constexpr = MP if RUNS > 0 else 8  # row step between a thread's rows
    tl.static_assert(RUNS > 0 or TILES == 2, "the tile mapping has two tiles a warp")
    tl.static_assert(not WIDE or ((RUNS == 0 or RUNS == 8) and TILES == 2 and GROUPS == 1),
                     "WIDE: 8 x rows a tile, 2 tiles, one group")
    tl.static_assert(not ROW_E or (FMT == "mxfp4" and RING == 0 and DEPTH == 1 and TILES == 2),
                     "ROW_E: MXFP4 from registers, 2 tiles")
    pid_n = tl.program_id(0) // GROUPS
    m0 = (tl.program_id(0) % GROUPS) * (MP if RUNS > 0 else 8)  # this group's first x row
    pid_k = tl.program_id(1)
    tid = tl.arange(0, NT)
    lane = tid % 32
    g = lane // 4
    t = lane % 4
    kb_lo = pid_k * KB_SPLIT
    kb_hi = tl.minimum(kb_lo + KB_SPLIT, RB)
    _pdl_start(PDL)
    if RUNS > 0:
        xl = g // C  # B column g: the group's x row g // C, chunk g % C
        row = pid_n * PROG_ROWS + WARP_ROWS * (tid // 32) + xl
        in_m = m0 + xl < M
        x_row = x_ptr + tl.minimum(m0 + xl, M - 1).to(tl.int64) * K
        in_v = m0 + 8 + xl < M  # WIDE: x row xl + 8, B's columns 8..15
        x_wide = x_ptr + tl.minimum(m0 + 8 + xl, M - 1).to(tl.int64) * K
        off = kb_lo + STEP_BYTES * (g % C) + 16 * t
        stride = STEP_BYTES * C
    else:
        row = pid_n * ROWS + g  # rows row, row + 8 (tile 0), row + 16, row + 24 (tile 1)
        in_m = m0 + g < M
        x_row = x_ptr + tl.minimum(m0 + g, M - 1).to(tl.int64) * K
        in_v = m0 + 8 + g < M
        x_wide = x_ptr + tl.minimum(m0 + 8 + g, M - 1).to(tl.int64) * K
        off = kb_lo + STEP_BYTES * (tid // 32) + 16 * t
        stride = STEP_BYTES * WARPS
    # each stored row's scale and bias, loaded now: they arrive during the loop. MXFP4 on its
    # rows' exponents (ROW_E) too, for each row's 2^(E - 127), but not with a bias: FP4's loop
    # holds ~120 registers and 4 more for the biases cost it 7 instructions a step (SASS,
    # sm_90, one warp: 382 -> 389; without a bias 385 either way, 2 warps 387 -> 384)
    TERMS_FIRST: tl.constexpr = RING > 0 or (ROW_E and not HAS_BIAS)
    if TERMS_FIRST:
        terms = _program_terms(pid_n * PROG_ROWS, s_ptr, g_ptr, b_ptr, N, FMT, HAS_SCALE,
                               HAS_BIAS, PARTIAL, WARPS, RUNS, TILES, ROW_E)
    zero = tl.zeros((NT,), tl.float32)
    a = (zero, zero, zero, zero)
    b = a
    c = a
    d = a
    av = a  # WIDE: the sums of x rows 8..15
    bv = a
    if RING > 0:
        tl.static_assert(RUNS > 0 and TILES == 2 and DEPTH == 1 and not WIDE,
                         "RING: the run mapping, 2 tiles, depth 1, not WIDE")
        STAGE: tl.constexpr = NT * SLOT_BYTES
        slot0 = _ring_base(tid, RING, WARPS)
        pstride = tl.full((NT,), NT * 16, tl.int32)  # one piece of every thread
        shifts = tl.zeros_like(tid)
        if not FP8:
            shifts = _ring_shifts(s_ptr, row, N, RB, SB, off, RS, FMT)
        # weights don't depend on the previous kernel: their copies start before the PDL wait
        rows_in = _ring_rows_in(row, N, RS)  # loop-invariant: computed once
        tl.static_assert(not WHOLE or FP8, "WHOLE: 8-bit")
        for j in tl.static_range(RING - 1):
            _ring_issue_weights(slot0 + j * STAGE, pstride, w_ptr, s_ptr, row, rows_in, RB, SB,
                                off + j * stride, kb_hi, RS, FMT, WHOLE)
        _pdl_wait(w_ptr, pid_n * PROG_ROWS, N, RB, kb_lo, kb_hi, PROG_ROWS, PDL, PREFETCH)
        for j in tl.static_range(RING - 1):  # each closes one step's group
            _ring_issue_x(slot0 + j * STAGE, pstride, x_row, off + j * stride, kb_hi, K, in_m,
                          FP8, WHOLE)
        # this step's stage, and the one the step RING - 1 ahead goes to: the stage read by
        # the step before (a running address, no multiply or modulo a step)
        rd = slot0
        wr = slot0 + (RING - 1) * STAGE
        last = kb_hi
        if WHOLE:  # the copies of the last RING - 1 steps would pass the end: a loop of their own
            last = kb_hi - (RING - 1) * stride
        for _ in range(kb_lo, last, stride):
            _ring_issue_weights(wr, pstride, w_ptr, s_ptr, row, rows_in, RB, SB,
                                off + (RING - 1) * stride, kb_hi, RS, FMT, WHOLE)
            _ring_issue_x(wr, pstride, x_row, off + (RING - 1) * stride, kb_hi, K, in_m, FP8,
                          WHOLE)
            rw, xw = _ring_read(rd, pstride, shifts, RING, FMT)
            a, b, av, bv = _tiles(rw[0], rw[1], rw[2], rw[3], xw, xw, a, b, av, bv, FMT,
                                  NAN, WIDE, INJECT)
            wr = rd
            rd = tl.where(rd == slot0 + (RING - 1) * STAGE, slot0, rd + STAGE)
            off += stride
        for _ in range(last, kb_hi, stride):  # WHOLE only: reads, each after an empty commit
            _ring_commit(tid)
            rw, xw = _ring_read(rd, pstride, shifts, RING, FMT)
            a, b, av, bv = _tiles(rw[0], rw[1], rw[2], rw[3], xw, xw, a, b, av, bv, FMT,
                                  NAN, WIDE, INJECT)
            rd = tl.where(rd == slot0 + (RING - 1) * STAGE, slot0, rd + STAGE)
        _ring_drain(tid)
    elif DEPTH == 2:
        # two register buffers: each refills right after its own step's arithmetic, so the
        # other buffer's step runs while it arrives (with one buffer ptxas issued the next
        # step's loads after this step's mma, reusing its registers: one step in flight)
        # weights don't depend on the previous kernel: under an early PDL launch their first
        # loads fly while it finishes, x's after the wait (measured: `_table.pdl_auto`)
        r0, r1, r2, r3 = _rows_step(w_ptr, s_ptr, row, N, RB, SB, off, kb_hi, FMT, RS, ZERO)
        q0, q1, q2, q3 = _rows_step(w_ptr, s_ptr, row, N, RB, SB, off + stride, kb_hi, FMT, RS,
                                    ZERO)
        _pdl_wait_weights(r0[0] | r1[0] | r2[0] | r3[0] | q0[0] | q1[0] | q2[0] | q3[0], w_ptr,
                          pid_n * PROG_ROWS, N, RB, kb_lo, kb_hi, PROG_ROWS, PDL, PREFETCH)
        xw = _x_step(x_row, off, kb_hi, K, in_m, FP8, ZERO)
        qx = _x_step(x_row, off + stride, kb_hi, K, in_m, FP8, ZERO)
        xv = xw
        qv = qx
        if WIDE:
            xv = _x_step(x_wide, off, kb_hi, K, in_v, FP8, ZERO)
            qv = _x_step(x_wide, off + stride, kb_hi, K, in_v, FP8, ZERO)
        for _ in range(kb_lo, kb_hi, 2 * stride):
            if AHEAD > 0:
                _prefetch_rows(w_ptr, row, N, RB, off + AHEAD * stride, kb_hi, RS)
            a, b, av, bv = _tiles(r0, r1, r2, r3, xw, xv, a, b, av, bv, FMT, NAN, WIDE,
                                  INJECT)
            r0, r1, r2, r3 = _rows_step(w_ptr, s_ptr, row, N, RB, SB, off + 2 * stride, kb_hi,
                                        FMT, RS, ZERO)
            xw = _x_step(x_row, off + 2 * stride, kb_hi, K, in_m, FP8, ZERO)
            if WIDE:
                xv = _x_step(x_wide, off + 2 * stride, kb_hi, K, in_v, FP8, ZERO)
            if AHEAD > 0:
                _prefetch_rows(w_ptr, row, N, RB, off + (AHEAD + 1) * stride, kb_hi, RS)
            a, b, av, bv = _tiles(q0, q1, q2, q3, qx, qv, a, b, av, bv, FMT, NAN, WIDE,
                                  INJECT)
            q0, q1, q2, q3 = _rows_step(w_ptr, s_ptr, row, N, RB, SB, off + 3 * stride, kb_hi,
                                        FMT, RS, ZERO)
            qx = _x_step(x_row, off + 3 * stride, kb_hi, K, in_m, FP8, ZERO)
            if WIDE:
                qv = _x_step(x_wide, off + 3 * stride, kb_hi, K, in_v, FP8, ZERO)
            off += 2 * stride
    else:
        r0, r1, r2, r3 = _rows_step(w_ptr, s_ptr, row, N, RB, SB, off, kb_hi, FMT, RS, ZERO)
        if TILES == 4:
            r4, r5, r6, r7 = _rows_step(w_ptr, s_ptr, row + 4 * RS, N, RB, SB, off, kb_hi, FMT, RS,
                                        ZERO)
        e0, e1, e2, e3 = _row_e_biases(g_ptr, row, N, RS, INJECT, ROW_E)
        _pdl_wait_weights(r0[0] | r1[0] | r2[0] | r3[0], w_ptr, pid_n * PROG_ROWS, N, RB, kb_lo,
                          kb_hi, PROG_ROWS, PDL, PREFETCH)
        xw = _x_step(x_row, off, kb_hi, K, in_m, FP8, ZERO)
        xv = xw
        if WIDE:
            xv = _x_step(x_wide, off, kb_hi, K, in_v, FP8, ZERO)
        for _ in range(kb_lo, kb_hi, stride):
            if X_IN_STEP:  # x sits in L1 (every program reads it): its loads land during the
                # decode, and one step ahead it took a second set of 16 registers and 16 copies
                # a step (`mma_x_in_step`)
                xw = _x_step(x_row, off, kb_hi, K, in_m, FP8, ZERO)
                xv = xw
                if WIDE:
                    xv = _x_step(x_wide, off, kb_hi, K, in_v, FP8, ZERO)
            off += stride
            # the next step's loads come before this step's arithmetic in the PTX (ptxas
            # keeps them in flight while it runs: one step ahead; DEPTH = 2: two)
            n0, n1, n2, n3 = _rows_step(w_ptr, s_ptr, row, N, RB, SB, off, kb_hi, FMT, RS, ZERO)
            if TILES == 4:
                n4, n5, n6, n7 = _rows_step(w_ptr, s_ptr, row + 4 * RS, N, RB, SB, off, kb_hi, FMT,
                                            RS, ZERO)
            nx = xw
            nv = xv
            if not X_IN_STEP:
                nx = _x_step(x_row, off, kb_hi, K, in_m, FP8, ZERO)
                nv = nx
                if WIDE:
                    nv = _x_step(x_wide, off, kb_hi, K, in_v, FP8, ZERO)
            if AHEAD > 0:
                _prefetch_rows(w_ptr, row, N, RB, off + AHEAD * stride, kb_hi, RS)
            if ROW_E:  # each scale byte against its row's exponent
                r0 = (r0[0], r0[1], r0[2], r0[3], r0[4] + e0)
                r1 = (r1[0], r1[1], r1[2], r1[3], r1[4] + e1)
                r2 = (r2[0], r2[1], r2[2], r2[3], r2[4] + e2)
                r3 = (r3[0], r3[1], r3[2], r3[3], r3[4] + e3)
            a, b, av, bv = _tiles(r0, r1, r2, r3, xw, xv, a, b, av, bv, FMT, NAN, WIDE,
                                  INJECT, ROW_E)
            if TILES == 4:
                c = _tile(r4, r5, xw, c, FMT, NAN, INJECT)
                d = _tile(r6, r7, xw, d, FMT, NAN, INJECT)
                r4, r5, r6, r7 = n4, n5, n6, n7
            r0, r1, r2, r3, xw, xv = n0, n1, n2, n3, nx, nv
    _pdl_exit(PDL)
    if not TERMS_FIRST:  # after the loop (FP4's loop holds ~128 registers), before any store
        terms = _program_terms(pid_n * PROG_ROWS, s_ptr, g_ptr, b_ptr, N, FMT, HAS_SCALE,
                               HAS_BIAS, PARTIAL, WARPS, RUNS, TILES, ROW_E)
    ta, la, tb, lb, tc, lc, td, ld = terms
    if RUNS > 0:
        row0 = pid_n * PROG_ROWS
        _store_runs(a, ta, la, row0, m0, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE, HAS_BIAS,
                    PARTIAL, WARPS, MP, WARP_ROWS, ROW_E)
        _store_runs(b, tb, lb, row0 + 2 * MP, m0, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE,
                    HAS_BIAS, PARTIAL, WARPS, MP, WARP_ROWS, ROW_E)
        if WIDE:
            _store_runs(av, ta, la, row0, m0 + 8, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE,
                        HAS_BIAS, PARTIAL, WARPS, MP, WARP_ROWS, ROW_E)
            _store_runs(bv, tb, lb, row0 + 2 * MP, m0 + 8, y_ptr, ws_ptr, pid_k, M, N, FMT,
                        HAS_SCALE, HAS_BIAS, PARTIAL, WARPS, MP, WARP_ROWS, ROW_E)
        if TILES == 4:
            _store_runs(c, tc, lc, row0 + 4 * MP, m0, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE,
                        HAS_BIAS, PARTIAL, WARPS, MP, WARP_ROWS, ROW_E)
            _store_runs(d, td, ld, row0 + 6 * MP, m0, y_ptr, ws_ptr, pid_k, M, N, FMT, HAS_SCALE,
                        HAS_BIAS, PARTIAL, WARPS, MP, WARP_ROWS, ROW_E)
    else:
        # lane (g, t) holds rows g, g+8 of each tile for columns 2t, 2t+1: add the warps' sums
        row0 = pid_n * ROWS
        _store_tile(a[0], a[1], a[2], a[3], ta, la, row0, m0, y_ptr, ws_ptr, pid_k, M, N, FMT,
                    HAS_SCALE, HAS_BIAS, PARTIAL, WARPS, ROW_E)
        _store_tile(b[0], b[1], b[2], b[3], tb, lb, row0 + 16, m0, y_ptr, ws_ptr, pid_k, M, N,
                    FMT, HAS_SCALE, HAS_BIAS, PARTIAL, WARPS, ROW_E)
        if WIDE:
            _store_tile(av[0], av[1], av[2], av[3], ta, la, row0, m0 + 8, y_ptr, ws_ptr, pid_k, M,
                        N, FMT, HAS_SCALE, HAS_BIAS, PARTIAL, WARPS, ROW_E)
            _store_tile(bv[0], bv[1], bv[2], bv[3], tb, lb, row0 + 16, m0 + 8, y_ptr, ws_ptr,
                        pid_k, M, N, FMT, HAS_SCALE, HAS_BIAS, PARTIAL, WARPS, ROW_E)
    if LAST:
        XR: tl.constexpr = 16 if WIDE else (MP if RUNS > 0 else 8)  # x rows of this program
        _reduce_last(cnt_ptr, tl.program_id(0), m0 + tl.arange(0, XR),
                     pid_n * PROG_ROWS + tl.arange(0, PROG_ROWS), y_ptr, ws_ptr, s_ptr, g_ptr,
                     b_ptr, M, N, tl.num_programs(1), FMT, HAS_SCALE, HAS_BIAS)
