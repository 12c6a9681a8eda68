"""One Triton launch, planned once: `Plan` holds the kernel, its grid, every constexpr and the
launch options (split-K, PDL, the NaN and exponent facts it was planned for), and the launcher
(`__init__._launch`) only allocates and launches.

A plan is a function of (device, format, N, K, M, x's dtype, bias or not, the E2M1 decode, the
weight's facts, the launch settings), so it is cached per key (`plan`; explicit LaunchConfigs
from `run`: `plan_for_config`). The rules it applies are the launch table (`_table.launch_config`,
Kernel.MMA_GEMV's in `_mma_table`), the FP8 decode and PDL (`_device`, `_table`), and the MMA
GEMV's per-launch switches (`_mma_flags`); every combination a kernel can't run is refused here,
with the setting that was wrong, before anything is launched. Pure Python: no Triton import.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ..._settings import LaunchSettings
from ..._choices import E2M1Decode
from ...formats import SPECS, Format, ScaleKind
from ._device import DeviceInfo, Kernel, LaunchConfig, uses_hardware_fp8
from ._mma_flags import mma_ring_whole, mma_x_in_step
from ._mma_table import (MMA_FP8_FORMATS, MMA_GROUPS_MAX_M, MMA_RING_STAGES, MMA_WIDE_M,
                         mma_gemv_runs, mma_kernel_name, mma_layout, mma_ring_fits,
                         mma_zero_fill)
from ._table import launch_config, pdl_settings, uses_ptx_decode

REDUCE_BLOCK = 256
"""Outputs a program of `splitk_reduce_kernel` adds."""


@dataclass(frozen=True)
class WeightFacts:
    """What a plan reads of the weight's tensors (`__init__._weight_facts`): fp32 row scales
    present (E5M2's are optional), no NaN code where the decode has a NaN fix
    (`_facts.codes_nan_free`), MXFP4 rows' exponents found (`_facts.mx_row_exponents`)."""

    has_scale: bool
    nan_free: bool
    row_e: bool


@dataclass(frozen=True)
class Plan:
    """Everything one `matmul` launches but the tensors. `kernel`: the @triton.jit function's
    name (`_kernels`, `_mma`; empty for Kernel.DEQUANT, which launches its slabs itself);
    `sizes`: the integer arguments after the pointers (M, N, K, row bytes, scale columns, bytes
    of a row each K-split program takes); `options`: every constexpr and launch option but LAST
    (whether the last program of a tile reduces: the launcher's, since it depends on the
    stream's counters); `tiles`: the programs along N and M that share a K range (the counters
    a split launch takes); `row_e`: g_ptr carries the MXFP4 rows' exponents; `aligned_x`: the
    kernel reads x 16 bytes at a time (an unaligned x is copied first); `last_reduces`: the
    settings let a split launch's last programs reduce; `reduce_grid` / `reduce_options`:
    `splitk_reduce_kernel`'s launch where split > 1; `hw_fp8`, `asm`, `nan`: the decode chosen
    (hardware FP8 cvt, PTX decoders, NaN fix kept); `has_scale`: fp32 row scales applied."""

    cfg: LaunchConfig
    kernel: str
    grid: tuple[int, ...]
    sizes: tuple[int, ...]
    split: int
    options: tuple[tuple[str, object], ...]
    tiles: int
    row_e: bool
    aligned_x: bool
    last_reduces: bool
    reduce_grid: tuple[int, int]
    reduce_options: tuple[tuple[str, object], ...]
    hw_fp8: bool
    asm: bool
    nan: bool
    has_scale: bool


def split_bytes(rb: int, cfg: LaunchConfig, bits: int) -> tuple[int, int]:
    """(bytes of a row each K-split program takes, number of programs along K) for rows of rb
    bytes: cfg.split_k parts, each a whole number of cfg.block_k-code steps."""
    step_bytes = cfg.block_k * bits // 8
    per_split = -(-(-(-rb // step_bytes)) // cfg.split_k) * step_bytes
    return per_split, -(-rb // per_split)


@functools.lru_cache(maxsize=4096)
def plan(n: int, k: int, padded_k: int, m: int, fmt: Format, info: DeviceInfo,
         dtype: torch.dtype, has_bias: bool, e2m1: E2M1Decode, facts: WeightFacts,
         settings: LaunchSettings) -> Plan:
    """matmul's plan: the table's LaunchConfig and FP8 decode for this key. Errors (a setting
    this device can't honour) are not cached: they raise on every call."""
    cfg = launch_config(n, k, m, fmt, info, dtype, settings)
    hw = uses_hardware_fp8(fmt, info, settings)
    return plan_for_config(cfg, n, k, padded_k, m, fmt, info, dtype, has_bias, e2m1, facts,
                           hw, settings)


def _check_tile_steps(cfg: LaunchConfig) -> None:
    """E4M3_B128's kernels take each K step's tile scales as one scale a row (the dot kernels:
    block_k divides 128) or whole tiles (the GEMV and the dequant slabs: or a multiple of 128);
    Kernel.MMA_GEMV one scale a thread a step, its 64-byte chunks inside one tile (K ranges
    that start at multiples of 64 codes: block_k a multiple of 64)."""
    bk = cfg.block_k
    if cfg.kernel is Kernel.MMA_GEMV:
        ok = bk % 64 == 0
    else:
        ok = 128 % bk == 0 or (cfg.kernel in (Kernel.GEMV, Kernel.DEQUANT) and bk % 128 == 0)
    if not ok:
        raise ValueError(f"cfg: e4m3_b128 runs on the GEMV and dequant kernels with block_k a "
                         f"divisor or a multiple of 128, on the tl.dot kernels with block_k a "
                         f"divisor of 128, and on Kernel.MMA_GEMV with block_k a multiple of "
                         f"64; got {cfg}")


@functools.lru_cache(maxsize=4096)
def plan_for_config(cfg: LaunchConfig, n: int, k: int, padded_k: int, m: int, fmt: Format,
                    info: DeviceInfo, dtype: torch.dtype, has_bias: bool, e2m1: E2M1Decode,
                    facts: WeightFacts, hw_fp8: bool, settings: LaunchSettings) -> Plan:
    """The plan of a launch with these settings (`run` reaches every variant this way), or
    ValueError naming what `cfg` sets that its kernel can't run."""
    spec = SPECS[fmt]
    rb = padded_k // spec.codes_per_word * 4
    sb = spec.scales_shape(n, k)[1] if spec.scale not in (ScaleKind.ROW, ScaleKind.NONE) else 0
    per_split, split = split_bytes(rb, cfg, spec.bits)
    sizes = (m, n, k, rb, sb, per_split)
    if cfg.depth != 1 and cfg.kernel is not Kernel.MMA_GEMV:
        raise ValueError(f"cfg: depth is Kernel.MMA_GEMV's setting; {cfg.kernel} takes depth=1, "
                         f"got {cfg}")
    if fmt is Format.E4M3_B128:
        _check_tile_steps(cfg)
    pdl, prefetch = pdl_settings(info, fmt, cfg, settings)
    launch = dict(launch_pdl=True) if pdl else {}  # pdl: a mode, 0 = off
    has_scale = facts.has_scale
    inject = e2m1 is E2M1Decode.INJECT
    last_reduces = settings.splitk_reduce == "last"
    reduce_grid = (-(-n // REDUCE_BLOCK), m)
    reduce_options = dict(FMT=fmt.value, HAS_SCALE=has_scale, HAS_BIAS=has_bias,
                          BLOCK=REDUCE_BLOCK, PDL=pdl, **launch)
    common = dict(cfg=cfg, sizes=sizes, split=split, last_reduces=last_reduces,
                  reduce_grid=reduce_grid, reduce_options=tuple(reduce_options.items()),
                  hw_fp8=hw_fp8, has_scale=has_scale)
    if cfg.kernel is Kernel.DEQUANT:  # its slabs decode with the portable decoders
        asm = uses_ptx_decode(info, False)
        return Plan(kernel="", grid=(), options=(), tiles=0, row_e=False, aligned_x=False,
                    asm=asm, nan=not (asm and facts.nan_free), **common)
    asm = uses_ptx_decode(info, hw_fp8)
    # NaN-free variants: MMA_GEMV's tile (PTX whatever the decode: E4M3 codes, FP4's block
    # scales) and E4M3's PTX decode in the other kernels (their FP4 decode has none)
    fix_free = cfg.kernel is Kernel.MMA_GEMV or (asm and fmt in (Format.E4M3, Format.E4M3_B128))
    nan = not (fix_free and facts.nan_free)
    if cfg.kernel is Kernel.MMA_GEMV:
        return _mma_plan(cfg, n, k, padded_k, m, fmt, info, dtype, has_bias, inject, facts,
                         nan, asm, pdl, prefetch, launch, rb, per_split, common)
    options = dict(FMT=fmt.value, HAS_SCALE=has_scale, HAS_BIAS=has_bias, INJECT=inject,
                   HW=hw_fp8, ASM=asm, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                   PARTIAL=split > 1, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                   PDL=pdl, PREFETCH=prefetch, NAN=nan, **launch)
    if cfg.kernel is Kernel.GEMV:
        if cfg.block_m < m:
            raise ValueError(f"cfg: a GEMV launch with block_m={cfg.block_m} can't cover M={m}")
        grid = (-(-n // cfg.block_n), split)
        options["BLOCK_KB"] = cfg.block_k * spec.bits // 8
        return Plan(kernel="gemv_kernel", grid=grid, options=tuple(options.items()),
                    tiles=grid[0], row_e=False, aligned_x=False, asm=asm, nan=nan, **common)
    if fmt is Format.MXFP4 and cfg.block_k != 32:
        raise ValueError("cfg: the tl.dot kernels step one MXFP4 block (block_k=32)")
    grid = (-(-n // cfg.block_n), -(-m // cfg.block_m), split)
    # fp32: exact FMAs (1e-5; fp16/bf16 operands ignore the precision); the interpreter's bf16
    # tl.dot is wrong (triton 3.9): there, bf16 tiles go up to fp32
    options.update(BLOCK_K=cfg.block_k, PRECISION="ieee",
                   UPCAST=info.interpreter and dtype == torch.bfloat16)
    return Plan(kernel="dot_kernel", grid=grid, options=tuple(options.items()),
                tiles=grid[0] * grid[1], row_e=False, aligned_x=False, asm=asm, nan=nan, **common)


def _mma_plan(cfg, n, k, padded_k, m, fmt, info, dtype, has_bias, inject, facts, nan, asm, pdl,
              prefetch, launch, rb, per_split, common) -> Plan:
    """Kernel.MMA_GEMV's plan: its mapping (`mma_layout`), and the switches the launch derives
    from the shape and the weight's facts (zero fill, the ring's unpredicated copies, MXFP4's
    row exponents, x loaded in its step), after checking every combination it can't run."""
    if not mma_gemv_runs(k, m, fmt, info, dtype):
        raise ValueError(f"cfg: Kernel.MMA_GEMV takes fp16 x with M <= {MMA_GROUPS_MAX_M} "
                         f"and K a multiple of 8 on an NVIDIA GPU of compute capability 8.0 "
                         f"or newer (inline PTX: not the interpreter); got {dtype}, "
                         f"M={m}, K={k} on {info}")
    split = common["split"]
    runs, tiles = mma_layout(cfg)  # the run mapping (runs = the x rows it is laid out for)
    wide = cfg.block_m == MMA_WIDE_M
    groups = -(-m // cfg.block_m)
    if cfg.depth not in (1, 2) or (cfg.depth == 2 and (runs == 0 or tiles != 2)):
        raise ValueError(f"cfg: Kernel.MMA_GEMV takes depth 1, or 2 on the run mapping with "
                         f"2 tiles a warp; got {cfg}")
    if cfg.ring and not (runs and tiles == 2 and cfg.depth == 1 and not wide
                         and mma_ring_fits(cfg.ring, cfg.num_warps)):
        raise ValueError(f"cfg: Kernel.MMA_GEMV's ring takes the run mapping with 2 tiles a "
                         f"warp, depth 1, M <= 8, stages in {MMA_RING_STAGES} and stages * "
                         f"num_warps <= 8; got {cfg}")
    grid = (-(-n // cfg.block_n) * groups, split)
    zero = mma_zero_fill(rb, per_split, runs, cfg, k, padded_k)
    fp8 = fmt in MMA_FP8_FORMATS
    whole = mma_ring_whole(n, m, rb, per_split, runs, cfg, fp8, zero)
    # MXFP4 from registers: each block against its row's exponent, where the scales allow
    row_e = (fmt is Format.MXFP4 and cfg.depth == 1 and not cfg.ring and tiles == 2
             and not nan and facts.row_e)
    x_in_step = mma_x_in_step(fmt, row_e) and cfg.depth == 1 and not cfg.ring
    options = dict(FMT=fmt.value, HAS_BIAS=has_bias, WARPS=cfg.num_warps, PARTIAL=split > 1,
                   num_warps=cfg.num_warps, num_stages=1, PDL=pdl, PREFETCH=prefetch,
                   AHEAD=cfg.num_stages, RUNS=runs, TILES=tiles, HAS_SCALE=facts.has_scale,
                   NAN=nan, DEPTH=cfg.depth, GROUPS=groups, WIDE=wide, INJECT=inject,
                   RING=cfg.ring, ZERO=zero, WHOLE=whole, X_IN_STEP=x_in_step, ROW_E=row_e,
                   **launch)
    kernel, options = mma_kernel_name(options)  # the family's kernel, its own constexprs
    return Plan(kernel=kernel, grid=grid, options=tuple(options.items()),
                tiles=grid[0], row_e=row_e, aligned_x=True, asm=asm, nan=nan, **common)
