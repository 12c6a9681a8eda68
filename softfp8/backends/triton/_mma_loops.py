"""Kernel.MMA_GEMV's main loops, one per family (`_mma`'s kernels call them): the shared-memory
ring (`_ring_loop`), two register buffers (`_two_buffers_loop`) and one (`_registers_loop`).
Each takes the program's accumulators and its place (rows, x rows, K range) and returns the
accumulators; the why of each is in `_mma`'s docstring and the kernels' comments. E4M3_B128's
tile scale of a step (`_mma_loads._tile_scale`) is loaded a step ahead (two buffers: the
first's at the top of its step) and applied by `_mma_tile._tiles`.
"""
import triton
import triton.language as tl

from ._kernels import _pdl_wait, _pdl_wait_after, _prefetch_program
from ._mma_loads import (_prefetch_rows, _row_e_biases, _rows_step, _tile_scale,
                         _tile_scale_row, _x_step)
from ._mma_ring import (SLOT_BYTES, _ring_base, _ring_commit, _ring_drain, _ring_issue_weights,
                        _ring_issue_x, _ring_read, _ring_rows_in, _ring_shifts)
from ._mma_tile import _tile_step, _tiles


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
def _ring_loop(a, b, av, bv, tid, pid_n, w_ptr, s_ptr, x_row, row, in_m, off, stride, kb_lo,
               kb_hi, N, K, RB, SB, FMT: tl.constexpr, NT: tl.constexpr, WARPS: tl.constexpr,
               RING: tl.constexpr, RS: tl.constexpr, PROG_ROWS: tl.constexpr,
               NAN: tl.constexpr, INJECT: tl.constexpr, PDL: tl.constexpr,
               PREFETCH: tl.constexpr, WHOLE: tl.constexpr):
    """The ring: weights, scale bytes and x reach each thread through its own shared-memory
    slots, copied RING - 1 steps ahead (`_mma_ring`); the run mapping, 2 tiles, not WIDE."""
    FP8: tl.constexpr = FMT == "e5m2" or FMT == "e4m3" or FMT == "e4m3_b128"
    WIDE: tl.constexpr = False
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
    s_row = _tile_scale_row(s_ptr, row, N, SB)
    sc = _tile_scale(s_row, off, SB, FMT)
    last = kb_hi
    if WHOLE:  # the copies of the last RING - 1 steps would pass the end: a loop of their own
        last = kb_hi - (RING - 1) * stride
    for _ in range(kb_lo, last, stride):
        _ring_issue_weights(wr, pstride, w_ptr, s_ptr, row, rows_in, RB, SB,
                            off + (RING - 1) * stride, kb_hi, RS, FMT, WHOLE)
        _ring_issue_x(wr, pstride, x_row, off + (RING - 1) * stride, kb_hi, K, in_m, FP8,
                      WHOLE)
        nsc = _tile_scale(s_row, off + stride, SB, FMT)
        rw, xw = _ring_read(rd, pstride, shifts, RING, FMT)
        a, b, av, bv = _tiles(rw[0], rw[1], rw[2], rw[3], xw, xw, a, b, av, bv, sc, FMT,
                              NAN, WIDE, INJECT)
        wr = rd
        rd = tl.where(rd == slot0 + (RING - 1) * STAGE, slot0, rd + STAGE)
        off += stride
        sc = nsc
    for _ in range(last, kb_hi, stride):  # WHOLE only: reads, each after an empty commit
        _ring_commit(tid)
        nsc = _tile_scale(s_row, off + stride, SB, FMT)
        rw, xw = _ring_read(rd, pstride, shifts, RING, FMT)
        a, b, av, bv = _tiles(rw[0], rw[1], rw[2], rw[3], xw, xw, a, b, av, bv, sc, FMT,
                              NAN, WIDE, INJECT)
        rd = tl.where(rd == slot0 + (RING - 1) * STAGE, slot0, rd + STAGE)
        off += stride
        sc = nsc
    _ring_drain(tid)
    return a, b, av, bv


@triton.jit
def _two_buffers_loop(a, b, av, bv, pid_n, w_ptr, s_ptr, x_row, x_wide, row, in_m, in_v, off,
                      stride, kb_lo, kb_hi, N, K, RB, SB, FMT: tl.constexpr, RS: tl.constexpr,
                      PROG_ROWS: tl.constexpr, AHEAD: tl.constexpr, NAN: tl.constexpr,
                      ZERO: tl.constexpr, WIDE: tl.constexpr, INJECT: tl.constexpr,
                      PDL: tl.constexpr, PREFETCH: tl.constexpr):
    """DEPTH = 2 (the run mapping, 2 tiles): two register buffers of weights and x."""
    FP8: tl.constexpr = FMT == "e5m2" or FMT == "e4m3" or FMT == "e4m3_b128"
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
    # E4M3_B128's scales: the first buffer's loaded at the top of its step (ptxas keeps it
    # there, ahead of the step's mma), the second's one pass ahead: both carried made ptxas
    # spill (sm_80 M = 4, sm_90 M = 8: 24-60 bytes), both in their step sank the second load
    # to just before its FFMAs (SASS, sm_80)
    s_row = _tile_scale_row(s_ptr, row, N, SB)
    sq = _tile_scale(s_row, off + stride, SB, FMT)
    xv = xw
    qv = qx
    if WIDE:
        xv = _x_step(x_wide, off, kb_hi, K, in_v, FP8, ZERO)
        qv = _x_step(x_wide, off + stride, kb_hi, K, in_v, FP8, ZERO)
    for _ in range(kb_lo, kb_hi, 2 * stride):
        if AHEAD > 0:
            _prefetch_rows(w_ptr, row, N, RB, off + AHEAD * stride, kb_hi, RS)
        sr = _tile_scale(s_row, off, SB, FMT)
        a, b, av, bv = _tiles(r0, r1, r2, r3, xw, xv, a, b, av, bv, sr, FMT, NAN, WIDE,
                              INJECT)
        r0, r1, r2, r3 = _rows_step(w_ptr, s_ptr, row, N, RB, SB, off + 2 * stride, kb_hi,
                                    FMT, RS, ZERO)
        xw = _x_step(x_row, off + 2 * stride, kb_hi, K, in_m, FP8, ZERO)
        if WIDE:
            xv = _x_step(x_wide, off + 2 * stride, kb_hi, K, in_v, FP8, ZERO)
        if AHEAD > 0:
            _prefetch_rows(w_ptr, row, N, RB, off + (AHEAD + 1) * stride, kb_hi, RS)
        a, b, av, bv = _tiles(q0, q1, q2, q3, qx, qv, a, b, av, bv, sq, FMT, NAN, WIDE,
                              INJECT)
        q0, q1, q2, q3 = _rows_step(w_ptr, s_ptr, row, N, RB, SB, off + 3 * stride, kb_hi,
                                    FMT, RS, ZERO)
        sq = _tile_scale(s_row, off + 3 * stride, SB, FMT)
        qx = _x_step(x_row, off + 3 * stride, kb_hi, K, in_m, FP8, ZERO)
        if WIDE:
            qv = _x_step(x_wide, off + 3 * stride, kb_hi, K, in_v, FP8, ZERO)
        off += 2 * stride
    return a, b, av, bv


@triton.jit
def _registers_loop(a, b, c, d, av, bv, pid_n, w_ptr, s_ptr, g_ptr, x_row, x_wide, row, in_m,
                    in_v, off, stride, kb_lo, kb_hi, N, K, RB, SB, FMT: tl.constexpr,
                    RS: tl.constexpr, PROG_ROWS: tl.constexpr, TILES: tl.constexpr,
                    AHEAD: tl.constexpr, NAN: tl.constexpr, ZERO: tl.constexpr,
                    WIDE: tl.constexpr, INJECT: tl.constexpr, PDL: tl.constexpr,
                    PREFETCH: tl.constexpr, X_IN_STEP: tl.constexpr, ROW_E: tl.constexpr):
    """One register buffer (DEPTH = 1): the run mapping (2 or 4 tiles a warp) or the tiles."""
    FP8: tl.constexpr = FMT == "e5m2" or FMT == "e4m3" or FMT == "e4m3_b128"
    r0, r1, r2, r3 = _rows_step(w_ptr, s_ptr, row, N, RB, SB, off, kb_hi, FMT, RS, ZERO)
    if TILES == 4:
        r4, r5, r6, r7 = _rows_step(w_ptr, s_ptr, row + 4 * RS, N, RB, SB, off, kb_hi, FMT, RS,
                                    ZERO)
    e0, e1, e2, e3 = _row_e_biases(g_ptr, row, N, RS, INJECT, ROW_E)
    _pdl_wait_weights(r0[0] | r1[0] | r2[0] | r3[0], w_ptr, pid_n * PROG_ROWS, N, RB, kb_lo,
                      kb_hi, PROG_ROWS, PDL, PREFETCH)
    # after the wait: a load before it let ptxas move a late launch's weight loads above it
    s_row = _tile_scale_row(s_ptr, row, N, SB)
    sc = _tile_scale(s_row, off, SB, FMT)
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
        nsc = _tile_scale(s_row, off, SB, FMT)
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
        a, b, av, bv = _tiles(r0, r1, r2, r3, xw, xv, a, b, av, bv, sc, FMT, NAN, WIDE,
                              INJECT, ROW_E)
        if TILES == 4:
            c = _tile_step(r4, r5, xw, c, sc, FMT, NAN, INJECT)
            d = _tile_step(r6, r7, xw, d, sc, FMT, NAN, INJECT)
            r4, r5, r6, r7 = n4, n5, n6, n7
        r0, r1, r2, r3, xw, xv, sc = n0, n1, n2, n3, nx, nv, nsc
    return a, b, c, d, av, bv
