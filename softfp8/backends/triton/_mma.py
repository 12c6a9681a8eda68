"""Kernel.MMA_GEMV: the GEMV on warp-level mma.sync, per-thread work written in PTX (NVIDIA
sm_80+, fp16 activations, M <= 16: above 8 in one program that feeds each decoded weight
fragment to two mma (WIDE), or in two groups of x rows). Auto picks it for FP4 at M <= 16 and
the 8-bit formats at M <= 4 (M <= 8 for small weights, E5M2's up to 16), M = 1 on sm_90
through a shared-memory ring (`_mma_ring`), else holding two steps of 8-bit weights in registers
(launch_config, `uses_mma_gemv`, `mma_config`); written for FP4
first, whose FMA GEMV was the slowest, then 8-bit (`_fp8_tile_asm`).

One kernel a family, sharing @triton.jit helpers (`_mma_loops`: the main loops; `_mma_store`:
the epilogue; `_mma_loads`, `_mma_tile`, `_mma_ring`): `mma_runs_kernel` (the run mapping from
registers, one or two buffers), `mma_tile_kernel` (the 32-row tiles, warps along K) and
`mma_ring_kernel` (the run mapping through the shared-memory ring). Which one a launch takes and
which combinations of constexprs are valid is the plan's to decide (`_plan`); `mma_kernel`
names the kernel of a constexpr set (benchmarks, compile tests).

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
- E4M3_B128: E4M3's step from zero sums, added to the accumulator times the lane's fp32 tile
  scale, one FFMA a sum (`_mma_tile`: a lane's sums cover one tile each step); no row scale.
"""
import triton
import triton.language as tl

from ._const import Const
from ._kernels import _pdl_exit, _pdl_start, _reduce_last
from ._mma_loops import _registers_loop, _ring_loop, _two_buffers_loop
from ._mma_store import _program_terms, _store_runs_program, _store_tile_program
from ._mma_table import MMA_STEP_BYTES, MMA_TILE_ROWS, mma_kernel_name

ROWS = Const(MMA_TILE_ROWS)  # two 16-row tiles a warp: rows g, g+8, g+16, g+24 a thread
STEP_BYTES = Const(MMA_STEP_BYTES)  # a warp's bytes of each row a loop step


@triton.jit
def _runs_program(x_ptr, M, K, RB, KB_SPLIT, RUNS: tl.constexpr, TILES: tl.constexpr,
                  WARPS: tl.constexpr, GROUPS: tl.constexpr, PDL: tl.constexpr):
    """This program's place in the run mapping: (pid_n, m0, pid_k, tid, kb_lo, kb_hi, row, in_m,
    x_row, in_v, x_wide, off, stride) -- its rows, its group's first x row, its K range, each
    thread's first weight row and x row (and WIDE's x row + 8), its byte offset and step."""
    NT: tl.constexpr = 32 * WARPS
    MP: tl.constexpr = RUNS
    C: tl.constexpr = 8 // MP  # 64-byte chunks of a row per warp-step
    WARP_ROWS: tl.constexpr = 2 * MP * TILES
    PROG_ROWS: tl.constexpr = WARP_ROWS * WARPS
    pid_n = tl.program_id(0) // GROUPS
    m0 = (tl.program_id(0) % GROUPS) * MP  # this group's first x row
    pid_k = tl.program_id(1)
    tid = tl.arange(0, NT)
    lane = tid % 32
    g = lane // 4
    t = lane % 4
    kb_lo = pid_k * KB_SPLIT
    kb_hi = tl.minimum(kb_lo + KB_SPLIT, RB)
    _pdl_start(PDL)
    xl = g // C  # B column g: the group's x row g // C, chunk g % C
    row = pid_n * PROG_ROWS + WARP_ROWS * (tid // 32) + xl
    in_m = m0 + xl < M
    x_row = x_ptr + tl.minimum(m0 + xl, M - 1).to(tl.int64) * K
    in_v = m0 + 8 + xl < M  # WIDE: x row xl + 8, B's columns 8..15
    x_wide = x_ptr + tl.minimum(m0 + 8 + xl, M - 1).to(tl.int64) * K
    off = kb_lo + STEP_BYTES * (g % C) + 16 * t
    stride = STEP_BYTES * C
    return pid_n, m0, pid_k, tid, kb_lo, kb_hi, row, in_m, x_row, in_v, x_wide, off, stride


@triton.jit
def mma_runs_kernel(x_ptr, w_ptr, s_ptr, g_ptr, b_ptr, y_ptr, ws_ptr, cnt_ptr,
                    M, N, K, RB, SB, KB_SPLIT,
                    FMT: tl.constexpr, HAS_BIAS: tl.constexpr, WARPS: tl.constexpr,
                    PARTIAL: tl.constexpr, RUNS: tl.constexpr, PDL: tl.constexpr = 0,
                    PREFETCH: tl.constexpr = 0, HAS_SCALE: tl.constexpr = False,
                    AHEAD: tl.constexpr = 0, TILES: tl.constexpr = 2, NAN: tl.constexpr = True,
                    DEPTH: tl.constexpr = 1, ZERO: tl.constexpr = True,
                    GROUPS: tl.constexpr = 1, WIDE: tl.constexpr = False,
                    LAST: tl.constexpr = False, INJECT: tl.constexpr = False,
                    X_IN_STEP: tl.constexpr = False, ROW_E: tl.constexpr = False):
    """The run mapping from registers. Program (pid_n, pid_k) over bytes [pid_k * KB_SPLIT,
    +KB_SPLIT) of its rows. RUNS = MP (1, 2, 4 or 8; M <= MP): each warp owns 2 * MP * TILES rows
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
    WIDE (RUNS = 8, two tiles a warp, one group; or the tile mapping): M up to 16 in one
    program, each step's weights decoded once for both halves of x's rows (B's columns 0..7 are
    x rows 0..7, a second mma's 8..15), against GROUPS' two programs that each decode them.
    LAST (PARTIAL): the last of a block's K programs adds the parts (`_kernels._reduce_last`).
    The rows' scales, tensor scale and bias are loaded before any store (`_mma_store`): after
    the loop (FP4's loop holds ~128 registers), or at the start for ROW_E without a bias.
    X_IN_STEP (registers, depth 1): each step's x loaded in that step, not one step ahead with
    the weights (`_mma_flags.mma_x_in_step`).
    ROW_E (MXFP4 from registers, depth 1, 2 tiles): g_ptr holds each row's exponent E (int32,
    `_facts.mx_row_exponents`: the largest among its blocks with a nonzero code, none of which
    lies more than 2^23 below it), so each block's factor is 2^(e - E) against the row, not
    against a shared exponent of the four blocks of each mma found by shuffles every step; the
    sums carry over the steps and the epilogue multiplies them by 2^(E - 127) once.
    Needs num_warps == WARPS, K % 8 == 0 and a 16-byte aligned x (the plan and the launcher
    check)."""
    NT: tl.constexpr = 32 * WARPS
    MP: tl.constexpr = RUNS
    WARP_ROWS: tl.constexpr = 2 * MP * TILES
    PROG_ROWS: tl.constexpr = WARP_ROWS * WARPS
    RS: tl.constexpr = MP  # row step between a thread's rows
    (pid_n, m0, pid_k, tid, kb_lo, kb_hi, row, in_m, x_row, in_v, x_wide, off,
     stride) = _runs_program(x_ptr, M, K, RB, KB_SPLIT, RUNS, TILES, WARPS, GROUPS, PDL)
    # each stored row's scale and bias, loaded now: they arrive during the loop. MXFP4 on its
    # rows' exponents (ROW_E) too, for each row's 2^(E - 127), but not with a bias: FP4's loop
    # holds ~120 registers and 4 more for the biases cost it 7 instructions a step (SASS,
    # sm_90, one warp: 382 -> 389; without a bias 385 either way, 2 warps 387 -> 384)
    TERMS_FIRST: tl.constexpr = ROW_E and not HAS_BIAS
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
    if DEPTH == 2:
        a, b, av, bv = _two_buffers_loop(a, b, av, bv, pid_n, w_ptr, s_ptr, x_row, x_wide, row,
                                         in_m, in_v, off, stride, kb_lo, kb_hi, N, K, RB, SB,
                                         FMT, RS, PROG_ROWS, AHEAD, NAN, ZERO, WIDE, INJECT,
                                         PDL, PREFETCH)
    else:
        a, b, c, d, av, bv = _registers_loop(a, b, c, d, av, bv, pid_n, w_ptr, s_ptr, g_ptr,
                                             x_row, x_wide, row, in_m, in_v, off, stride, kb_lo,
                                             kb_hi, N, K, RB, SB, FMT, RS, PROG_ROWS, TILES,
                                             AHEAD, NAN, ZERO, WIDE, INJECT, PDL, PREFETCH,
                                             X_IN_STEP, ROW_E)
    _pdl_exit(PDL)
    if not TERMS_FIRST:  # after the loop (FP4's loop holds ~128 registers), before any store
        terms = _program_terms(pid_n * PROG_ROWS, s_ptr, g_ptr, b_ptr, N, FMT, HAS_SCALE,
                               HAS_BIAS, PARTIAL, WARPS, RUNS, TILES, ROW_E)
    _store_runs_program(a, b, c, d, av, bv, terms, pid_n, m0, pid_k, y_ptr, ws_ptr, M, N, FMT,
                        HAS_SCALE, HAS_BIAS, PARTIAL, WARPS, MP, WARP_ROWS, PROG_ROWS, TILES,
                        WIDE, ROW_E)
    if LAST:
        XR: tl.constexpr = 16 if WIDE else MP  # x rows of this program
        _reduce_last(cnt_ptr, tl.program_id(0), m0 + tl.arange(0, XR),
                     pid_n * PROG_ROWS + tl.arange(0, PROG_ROWS), y_ptr, ws_ptr, s_ptr, g_ptr,
                     b_ptr, M, N, tl.num_programs(1), FMT, HAS_SCALE, HAS_BIAS)


@triton.jit
def mma_ring_kernel(x_ptr, w_ptr, s_ptr, g_ptr, b_ptr, y_ptr, ws_ptr, cnt_ptr,
                    M, N, K, RB, SB, KB_SPLIT,
                    FMT: tl.constexpr, HAS_BIAS: tl.constexpr, WARPS: tl.constexpr,
                    PARTIAL: tl.constexpr, RUNS: tl.constexpr, RING: tl.constexpr,
                    PDL: tl.constexpr = 0, PREFETCH: tl.constexpr = 0,
                    HAS_SCALE: tl.constexpr = False, NAN: tl.constexpr = True,
                    GROUPS: tl.constexpr = 1, LAST: tl.constexpr = False,
                    INJECT: tl.constexpr = False, WHOLE: tl.constexpr = False):
    """The run mapping (2 tiles a warp, one group of RUNS x rows) with each step carried to
    the threads by a shared-memory ring of RING stages (`_mma_ring`, `_mma_loops._ring_loop`):
    weights, scale bytes and x copied RING - 1 steps ahead, the weights' first copies before
    the PDL wait. The rows' scales, tensor scale and bias are loaded at the program's start
    (they arrive during the loop). WHOLE (8-bit): every program's rows lie inside N, its x rows
    inside M, its K range is whole steps, at least RING - 1 of them (the plan checks): the
    copies go without predicates, and the last RING - 1 steps, which copy nothing, run in a
    loop of their own. The other constexprs: `mma_runs_kernel`'s."""
    NT: tl.constexpr = 32 * WARPS
    MP: tl.constexpr = RUNS
    WARP_ROWS: tl.constexpr = 2 * MP * 2
    PROG_ROWS: tl.constexpr = WARP_ROWS * WARPS
    RS: tl.constexpr = MP  # row step between a thread's rows
    (pid_n, m0, pid_k, tid, kb_lo, kb_hi, row, in_m, x_row, in_v, x_wide, off,
     stride) = _runs_program(x_ptr, M, K, RB, KB_SPLIT, RUNS, 2, WARPS, GROUPS, PDL)
    terms = _program_terms(pid_n * PROG_ROWS, s_ptr, g_ptr, b_ptr, N, FMT, HAS_SCALE,
                           HAS_BIAS, PARTIAL, WARPS, RUNS, 2, False)
    zero = tl.zeros((NT,), tl.float32)
    a = (zero, zero, zero, zero)
    b = a
    c = a
    d = a
    av = a
    bv = a
    a, b, av, bv = _ring_loop(a, b, av, bv, tid, pid_n, w_ptr, s_ptr, x_row, row, in_m, off,
                              stride, kb_lo, kb_hi, N, K, RB, SB, FMT, NT, WARPS, RING, RS,
                              PROG_ROWS, NAN, INJECT, PDL, PREFETCH, WHOLE)
    _pdl_exit(PDL)
    _store_runs_program(a, b, c, d, av, bv, terms, pid_n, m0, pid_k, y_ptr, ws_ptr, M, N, FMT,
                        HAS_SCALE, HAS_BIAS, PARTIAL, WARPS, MP, WARP_ROWS, PROG_ROWS, 2, False,
                        False)
    if LAST:
        _reduce_last(cnt_ptr, tl.program_id(0), m0 + tl.arange(0, MP),
                     pid_n * PROG_ROWS + tl.arange(0, PROG_ROWS), y_ptr, ws_ptr, s_ptr, g_ptr,
                     b_ptr, M, N, tl.num_programs(1), FMT, HAS_SCALE, HAS_BIAS)


@triton.jit
def mma_tile_kernel(x_ptr, w_ptr, s_ptr, g_ptr, b_ptr, y_ptr, ws_ptr, cnt_ptr,
                    M, N, K, RB, SB, KB_SPLIT,
                    FMT: tl.constexpr, HAS_BIAS: tl.constexpr, WARPS: tl.constexpr,
                    PARTIAL: tl.constexpr, PDL: tl.constexpr = 0, PREFETCH: tl.constexpr = 0,
                    HAS_SCALE: tl.constexpr = False, AHEAD: tl.constexpr = 0,
                    NAN: tl.constexpr = True, ZERO: tl.constexpr = True,
                    GROUPS: tl.constexpr = 1, WIDE: tl.constexpr = False,
                    LAST: tl.constexpr = False, INJECT: tl.constexpr = False,
                    X_IN_STEP: tl.constexpr = False, ROW_E: tl.constexpr = False):
    """The tile mapping: rows pid_n * 32 .. +32, two 16-row tiles; warp w takes the 64-byte
    steps w, w + WARPS, ... of the program's K range, one step of weights in registers; the
    warps' sums are added at the end. GROUPS > 1: x's rows in groups of 8; WIDE: M up to 16 in
    one program. The other constexprs: `mma_runs_kernel`'s."""
    NT: tl.constexpr = 32 * WARPS
    PROG_ROWS: tl.constexpr = ROWS
    RS: tl.constexpr = 8  # row step between a thread's rows
    pid_n = tl.program_id(0) // GROUPS
    m0 = (tl.program_id(0) % GROUPS) * 8  # this group's first x row
    pid_k = tl.program_id(1)
    tid = tl.arange(0, NT)
    lane = tid % 32
    g = lane // 4
    t = lane % 4
    kb_lo = pid_k * KB_SPLIT
    kb_hi = tl.minimum(kb_lo + KB_SPLIT, RB)
    _pdl_start(PDL)
    row = pid_n * ROWS + g  # rows row, row + 8 (tile 0), row + 16, row + 24 (tile 1)
    in_m = m0 + g < M
    x_row = x_ptr + tl.minimum(m0 + g, M - 1).to(tl.int64) * K
    in_v = m0 + 8 + g < M
    x_wide = x_ptr + tl.minimum(m0 + 8 + g, M - 1).to(tl.int64) * K
    off = kb_lo + STEP_BYTES * (tid // 32) + 16 * t
    stride = STEP_BYTES * WARPS
    TERMS_FIRST: tl.constexpr = ROW_E and not HAS_BIAS  # as `mma_runs_kernel`
    if TERMS_FIRST:
        terms = _program_terms(pid_n * PROG_ROWS, s_ptr, g_ptr, b_ptr, N, FMT, HAS_SCALE,
                               HAS_BIAS, PARTIAL, WARPS, 0, 2, ROW_E)
    zero = tl.zeros((NT,), tl.float32)
    a = (zero, zero, zero, zero)
    b = a
    c = a
    d = a
    av = a
    bv = a
    a, b, c, d, av, bv = _registers_loop(a, b, c, d, av, bv, pid_n, w_ptr, s_ptr, g_ptr, x_row,
                                         x_wide, row, in_m, in_v, off, stride, kb_lo, kb_hi, N,
                                         K, RB, SB, FMT, RS, PROG_ROWS, 2, AHEAD, NAN, ZERO,
                                         WIDE, INJECT, PDL, PREFETCH, X_IN_STEP, ROW_E)
    _pdl_exit(PDL)
    if not TERMS_FIRST:
        terms = _program_terms(pid_n * PROG_ROWS, s_ptr, g_ptr, b_ptr, N, FMT, HAS_SCALE,
                               HAS_BIAS, PARTIAL, WARPS, 0, 2, ROW_E)
    # lane (g, t) holds rows g, g+8 of each tile for columns 2t, 2t+1: add the warps' sums
    _store_tile_program(a, b, av, bv, terms, pid_n, m0, pid_k, y_ptr, ws_ptr, M, N, FMT,
                        HAS_SCALE, HAS_BIAS, PARTIAL, WARPS, ROWS, WIDE, ROW_E)
    if LAST:
        XR: tl.constexpr = 16 if WIDE else 8  # x rows of this program
        _reduce_last(cnt_ptr, tl.program_id(0), m0 + tl.arange(0, XR),
                     pid_n * PROG_ROWS + tl.arange(0, PROG_ROWS), y_ptr, ws_ptr, s_ptr, g_ptr,
                     b_ptr, M, N, tl.num_programs(1), FMT, HAS_SCALE, HAS_BIAS)


def mma_kernel(constexprs: dict) -> tuple:
    """(the MMA GEMV kernel, its constexprs) for constexprs named as across the family
    (`_mma_table.mma_kernel_name`: the constexprs a kernel fixes are checked and dropped)."""
    name, kept = mma_kernel_name(constexprs)
    return globals()[name], kept
