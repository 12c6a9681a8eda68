"""Kernel.MMA_GEMV's switches that the launcher derives per launch, beside the table's
LaunchConfig: x loaded in its own step, the ring's copies without predicates (WHOLE) -- each
with what it was measured on. Pure Python:
nothing here imports Triton. (The zero fill, `_mma_table.mma_zero_fill`, stays with the table,
whose K splits ask it.)"""
from __future__ import annotations

from ...formats import Format
from ._device import LaunchConfig
from ._mma_table import MMA_MAX_M, MMA_STEP_BYTES


def mma_x_in_step(fmt: Format, row_e: bool = False) -> bool:
    """Whether Kernel.MMA_GEMV's register path (depth 1, no ring: the launcher checks) loads
    each step's x in that step rather than one step ahead with the weights (`_mma`'s
    X_IN_STEP): 16 registers and 16 register copies a step fewer (SASS, sm_90: MXFP4 445 ->
    436 instructions a step, NVFP4 401 -> 384), x's loads then wait in the step (L1: every
    program reads x). MXFP4 only:
    measured on the H200 (2026-12-04, llama2-7b token against the commit before, interleaved
    twice): x in step for both FP4 formats (`xstep31`) MXFP4 1.686 / 1.688 -> 1.639 / 1.640
    ms, NVFP4 1.560 / 1.561 -> 1.626 / 1.626 (its shorter step shows the loads' wait); for
    MXFP4 only (`xstep31b`) MXFP4 1.685 / 1.686 -> 1.638 / 1.642, NVFP4 1.556 -> 1.534 (the
    loop's other savings: x's bounds, the scale offset). Not where MXFP4 runs against its
    rows' exponents (row_e, `_mma` ROW_E: 369 instructions a step with x in it, 387 ahead):
    its step too is then short enough to show x's loads (`rowe32`, token against the commit
    before, interleaved twice: x in step 1.614 / 1.620 -> 1.586 / 1.588 ms, ahead 1.523 /
    1.520)."""
    return fmt is Format.MXFP4 and not row_e


def mma_ring_whole(n: int, m: int, row_bytes: int, per_split: int, runs: int, cfg: LaunchConfig,
                   fp8: bool, zero: bool) -> bool:
    """Whether an 8-bit ring launch copies without predicates (`_mma`'s WHOLE): every program's
    rows inside N (whole row blocks), its x rows inside M (M a multiple of the x rows the run
    mapping is laid out for), its K range whole steps (`zero` = `mma_zero_fill` False) and at
    least ring - 1 steps long (the last program's too). sm_90 SASS of the M = 1 ring's loop:
    E5M2 94 -> 78 instructions a step, E4M3 219 -> 205 (156 -> 142 without its NaN fix).
    Measured on the H200 (2026-12-03, `whole29`: the commit before and after, interleaved
    twice): llama2-7b token E5M2 1.613 / 1.615 -> 1.601 / 1.600 ms, E4M3 1.669 / 1.672 ->
    1.633 / 1.637; llama3-8b GEMVs +0.5 to +3.6 points of read bandwidth, o most (E5M2 67.8 ->
    71.3%)."""
    if not (cfg.ring and fp8 and runs and not zero and n % cfg.block_n == 0 and m % runs == 0):
        return False
    return _fewest_steps(row_bytes, per_split, MMA_STEP_BYTES * (MMA_MAX_M // runs)) >= (
        cfg.ring - 1)


def _fewest_steps(row_bytes: int, per_split: int, step: int) -> int:
    """Whole loop steps of `step` bytes in the shortest program's K range: per_split bytes
    each, the last program what is left of row_bytes."""
    last = row_bytes - (-(-row_bytes // per_split) - 1) * per_split
    return min(per_split, last) // step
