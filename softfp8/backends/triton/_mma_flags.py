"""Kernel.MMA_GEMV's switches that the launcher derives per launch, beside the table's
LaunchConfig: x loaded in its own step, the ring's copies without predicates (WHOLE), each with
why. Pure Python: nothing here imports Triton. (The zero fill, `_mma_table.mma_zero_fill`,
stays with the table, whose K splits ask it.) The measurements behind them are in
docs/decisions.md (MMA GEMV)."""
from __future__ import annotations

from ...formats import Format
from ._device import LaunchConfig
from ._mma_table import MMA_MAX_M, MMA_STEP_BYTES


def mma_x_in_step(fmt: Format, row_e: bool = False) -> bool:
    """Whether Kernel.MMA_GEMV's register path (depth 1, no ring: the launcher checks) loads
    each step's x in that step rather than one step ahead with the weights (`_mma`'s
    X_IN_STEP): 16 registers and 16 register copies a step fewer (SASS, sm_90: MXFP4 445 ->
    436 instructions a step, NVFP4 401 -> 384), but x's loads then wait in the step (L1: every
    program reads x). That wait shows where the step is short: MXFP4 only, and not where it
    runs against its rows' exponents (row_e, `_mma` ROW_E: 369 instructions a step). On the
    H200 the llama2-7b token took MXFP4 1.686 -> 1.639 ms with x in its step, NVFP4 1.560 ->
    1.626, MXFP4 on its rows' exponents 1.523 ahead against 1.586 in step (docs/decisions.md)."""
    return fmt is Format.MXFP4 and not row_e


def mma_ring_whole(n: int, m: int, row_bytes: int, per_split: int, runs: int, cfg: LaunchConfig,
                   fp8: bool, zero: bool) -> bool:
    """Whether an 8-bit ring launch copies without predicates (`_mma`'s WHOLE): every program's
    rows inside N (whole row blocks), its x rows inside M (M a multiple of the x rows the run
    mapping is laid out for), its K range whole steps (`zero` = `mma_zero_fill` False) and at
    least ring - 1 steps long (the last program's too). sm_90 SASS of the M = 1 ring's loop:
    E5M2 94 -> 78 instructions a step, E4M3 219 -> 205 (156 -> 142 without its NaN fix); on the
    H200 the llama2-7b token E5M2 1.613 -> 1.601 ms, E4M3 1.669 -> 1.633 (docs/decisions.md)."""
    if not (cfg.ring and fp8 and runs and not zero and n % cfg.block_n == 0 and m % runs == 0):
        return False
    return _fewest_steps(row_bytes, per_split, MMA_STEP_BYTES * (MMA_MAX_M // runs)) >= (
        cfg.ring - 1)


def _fewest_steps(row_bytes: int, per_split: int, step: int) -> int:
    """Whole loop steps of `step` bytes in the shortest program's K range: per_split bytes
    each, the last program what is left of row_bytes."""
    last = row_bytes - (-(-row_bytes // per_split) - 1) * per_split
    return min(per_split, last) // step
