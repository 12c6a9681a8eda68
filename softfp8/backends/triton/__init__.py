"""The Triton backend: packed weights decoded in registers inside GEMV, small-M and tiled kernels
(with fp16 x on NVIDIA sm_80+, FP4 at M <= 16 and 8-bit at M <= 4, small weights M <= 8 (E5M2
16): a warp-level mma.sync GEMV with its decode in PTX, `_mma`); from M = 512 (FP4: 256), bounded
slabs decoded for cuBLAS (`_dequant`).

Public names (the backend protocol): NEEDS and matmul(x, packed, bias, *, e2m1). This module
checks arguments, takes the launch settings from `_table` (which kernel and tiles, the FP8
decode, programmatic dependent launch), `_mma_table` (Kernel.MMA_GEMV's), `_mma_flags` (its
per-launch switches) and `_device` (the types they share), all re-exported here, and launches
the kernels of `_kernels` (decoders in `_decode`), `_mma` and `_dequant`. Triton itself is
imported only when a kernel is launched, so NEEDS can explain a missing package instead of
failing to import.

TRITON_INTERPRET=1 in the environment when this module is first imported makes NEEDS accept CPU
tensors: forcing backend="triton" then runs the kernels in Triton's interpreter (CI, debugging).
Auto dispatch never picks the interpreter (dispatch.AUTO_DEVICE_TYPES).
"""
from __future__ import annotations

import functools
import os

import torch

from ..._env import raw_reader, raw_readers
from ..._choices import E2M1Decode
from ..._needs import Needs
from ...formats import Format, PackedWeight, ScaleKind
from ..._checks import check_linear_args
from .._facts import (codes_nan_free, known_fact, mx_row_exponents,  # noqa: F401 - re-exported
                      remember_fact)
from ._fastcall import note_split, record_call, start
from ._device import (FP8_DECODE_ENV, DeviceInfo, Kernel, LaunchConfig, device_info,
                      uses_hardware_fp8)
from ._mma_flags import mma_ring_whole, mma_x_in_step
from ._mma_table import (MMA_FORMATS, MMA_GROUPS_MAX_M, MMA_MAX_M, MMA_RING_STAGES,
                         MMA_RUN_TILES, MMA_RUNS, MMA_TILE_ROWS, MMA_WIDE_M, mma_config,
                         mma_gemv_runs, mma_layout, mma_ring_fits, mma_rows, mma_split,
                         mma_zero_fill, uses_mma_gemv)
from ._splitk import SPLITK_REDUCE_ENV, counters, last_program_reduces
from ._table import (DEQUANT_MIN_M, DEQUANT_MIN_M_FP4, DEQUANT_MIN_SLAB_ROWS,
                     DEQUANT_SLAB_BYTES, PDL_ENV, PDL_PREFETCH_ENV, TABLE_ENV, dot_upcast,
                     launch_config, pdl_auto, pdl_settings, tiled_config, uses_ptx_decode)

__all__ = ["NEEDS", "INTERPRET", "matmul", "run", "split_bytes", "codes_nan_free",
           "known_fact", "remember_fact", "mx_row_exponents",  # the backend; the launch settings:
           "Kernel", "LaunchConfig", "DeviceInfo", "device_info", "launch_config", "tiled_config",
           "mma_config", "mma_gemv_runs", "mma_layout", "mma_ring_fits", "mma_rows", "mma_split",
           "mma_zero_fill", "mma_ring_whole", "mma_x_in_step",
           "MMA_RING_STAGES",
           "uses_mma_gemv", "uses_hardware_fp8",
           "uses_ptx_decode", "dot_upcast", "pdl_auto", "pdl_settings", "DEQUANT_MIN_M",
           "DEQUANT_MIN_M_FP4", "DEQUANT_MIN_SLAB_ROWS", "DEQUANT_SLAB_BYTES", "MMA_MAX_M",
           "MMA_GROUPS_MAX_M", "MMA_FORMATS",
           "MMA_RUNS", "MMA_RUN_TILES", "MMA_TILE_ROWS", "MMA_WIDE_M",
           "FP8_DECODE_ENV", "PDL_ENV", "PDL_PREFETCH_ENV", "TABLE_ENV", "SPLITK_REDUCE_ENV"]

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

NEEDS = Needs(
    formats=frozenset(Format),
    device_types=frozenset({"cuda", "cpu"} if INTERPRET else {"cuda"}),
    min_capability=(7, 0),
    packages=("triton",),
)


def split_bytes(rb: int, cfg: LaunchConfig, bits: int) -> tuple[int, int]:
    """(bytes of a row each K-split program takes, number of programs along K) for rows of rb
    bytes: cfg.split_k parts, each a whole number of cfg.block_k-code steps."""
    step_bytes = cfg.block_k * bits // 8
    per_split = -(-(-(-rb // step_bytes)) // cfg.split_k) * step_bytes
    return per_split, -(-rb // per_split)


def _check(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None,
           e2m1: E2M1Decode | str) -> E2M1Decode:
    check_linear_args(x, packed, bias)
    if x.dim() != 2:
        raise ValueError(f"x: expected a 2-D [M, K] tensor, got shape {tuple(x.shape)}")
    why = NEEDS.why_not(packed.fmt, x.device, None)
    if why is not None:
        raise ValueError(f"x: the triton backend can't run on {x.device}: {why}")
    e2m1 = E2M1Decode.parse(e2m1, arg="e2m1")
    return E2M1Decode.SELECT if e2m1 is E2M1Decode.AUTO else e2m1


_PLAN_ENV = (TABLE_ENV, FP8_DECODE_ENV, PDL_ENV, PDL_PREFETCH_ENV)
"""The environment variables the launch settings read (`_plan`'s key holds their values)."""
_PLAN_ENV_READERS = tuple(raw_reader(v) for v in _PLAN_ENV)


@functools.lru_cache(maxsize=4096)
def _plan(n: int, k: int, m: int, fmt: Format, info: DeviceInfo, dtype: torch.dtype,
          env: tuple) -> tuple[LaunchConfig, bool, tuple[int, int]]:
    """matmul's settings: (LaunchConfig, the hardware FP8 decode, (PDL mode, PDL prefetch)). A
    function of the shape, the device, x's dtype and the values `env` of _PLAN_ENV (a table
    file's contents are cached by its path already), so cached: the rules cost ~10 us of an
    eager call's host time. Errors (a bad setting) are not cached: they raise on every call."""
    cfg = launch_config(n, k, m, fmt, info, dtype)
    return cfg, uses_hardware_fp8(fmt, info), pdl_settings(info, fmt, cfg)


def matmul(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None = None, *,
           e2m1: E2M1Decode | str = E2M1Decode.SELECT) -> torch.Tensor:
    """y = x @ W.T + bias for x [M, K]; y [M, N] in x's dtype, float32 accumulation."""
    e2m1 = _check(x, packed, bias, e2m1)
    info = device_info(x.device)
    n, k = packed.shape
    env = tuple(read() for read in _PLAN_ENV_READERS)  # as os.environ stores them (`_env`)
    cfg, hw, pdl = _plan(n, k, x.shape[0], packed.fmt, info, x.dtype, env)
    return _launch(x, packed, bias, cfg, e2m1, hw, pdl)


_SETTINGS_READERS = (raw_readers(*_PLAN_ENV, SPLITK_REDUCE_ENV),)


def eager_call(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None, *,
               e2m1: E2M1Decode | str, readers: tuple, y_shape: tuple[int, ...] | None = None):
    """`matmul` once, recorded for replays of the same call (`_fastcall`): (y, its LayerCall or
    None). `readers`: what the caller's choice of this backend depended on (functions returning
    the settings' values); a replay finds those and the launch plan's settings unchanged.
    `y_shape`: the shape of a replay's y (the caller's x may have more dimensions than x)."""
    return record_call(matmul, x, packed, bias, e2m1, readers + _SETTINGS_READERS, y_shape)


def run(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None, cfg: LaunchConfig, *,
        e2m1: E2M1Decode = E2M1Decode.SELECT, hw_fp8: bool = False) -> torch.Tensor:
    """Launch with explicit settings (tests and benchmarks use this to reach every variant)."""
    e2m1 = _check(x, packed, bias, e2m1)
    if hw_fp8 and packed.fmt not in (Format.E5M2, Format.E4M3):
        raise ValueError(f"hw_fp8: only e5m2/e4m3 codes have a hardware conversion, not {packed.fmt}")
    return _launch(x, packed, bias, cfg, e2m1, hw_fp8)


def _check_tile_steps(cfg: LaunchConfig) -> None:
    """E4M3_B128's kernels take each K step's tile scales as one scale a row (the dot kernels:
    block_k divides 128) or whole tiles (the GEMV and the dequant slabs: or a multiple of 128)."""
    bk = cfg.block_k
    whole = cfg.kernel in (Kernel.GEMV, Kernel.DEQUANT) and bk % 128 == 0
    if cfg.kernel is Kernel.MMA_GEMV or not (128 % bk == 0 or whole):
        raise ValueError(f"cfg: e4m3_b128 runs on the GEMV and dequant kernels with block_k a "
                         f"divisor or a multiple of 128, and on the tl.dot kernels with block_k a "
                         f"divisor of 128 (not on Kernel.MMA_GEMV); got {cfg}")


def not_current_device(x: torch.Tensor) -> bool:
    """Whether x lies on another GPU than the current one: Triton launches on the current
    device and its current stream, so the launcher makes x's device current first (a model
    spread over GPUs, e.g. transformers' device_map="auto", calls layers on cuda:1 while cuda:0
    is current)."""
    return x.is_cuda and x.device.index != torch.cuda.current_device()


def _counters(split: int, device: torch.device, tiles: int,
              unused: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(the kernel's cnt_ptr, LAST): counters from `_splitk` and True where a split launch's last
    programs reduce; else `unused` (any tensor: the kernel never reads it) and False, and
    splitk_reduce_kernel reduces (or there is no split)."""
    cnt = None if split == 1 or not last_program_reduces() else counters(device, tiles)
    return (unused, False) if cnt is None else (cnt, True)


def _note(split: int, ws: torch.Tensor, last: bool) -> None:
    if split > 1:
        note_split(ws, last)


def _launch(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None, cfg: LaunchConfig,
            e2m1: E2M1Decode, hw_fp8: bool, pdl: tuple[int, int] | None = None) -> torch.Tensor:
    """The launch itself, on arguments `_check` has passed (matmul and run each check once).
    pdl: `pdl_settings` for this device and format, where the caller has them."""
    from . import _kernels as K_

    if not_current_device(x):
        with torch.cuda.device(x.device):
            return _launch(x, packed, bias, cfg, e2m1, hw_fp8, pdl)
    x = x.contiguous()
    if bias is not None:
        bias = bias.contiguous()  # the kernels index it as bias[n]: a strided view read wrong values
    m, k = x.shape
    n = packed.shape[0]
    spec = packed.spec
    w = packed.words.view(torch.uint8)
    rb = w.shape[1]
    per_split, split = split_bytes(rb, cfg, spec.bits)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    has_scale = spec.scale is ScaleKind.ROW and packed.scales is not None
    s = packed.scales if packed.scales is not None else w
    g = packed.global_scale if packed.global_scale is not None else w
    b = bias if bias is not None else w
    sb = packed.scales.shape[1] if spec.scale not in (ScaleKind.ROW, ScaleKind.NONE) else 0
    if cfg.depth != 1 and cfg.kernel is not Kernel.MMA_GEMV:
        raise ValueError(f"cfg: depth is Kernel.MMA_GEMV's setting; {cfg.kernel} takes depth=1, "
                         f"got {cfg}")
    if packed.fmt is Format.E4M3_B128:
        _check_tile_steps(cfg)
    if cfg.kernel is Kernel.DEQUANT:
        from ._dequant import dequant_matmul

        return dequant_matmul(x, packed, bias, cfg, e2m1, w, s, g, b, y, rb, sb, has_scale)
    ws = torch.empty((split, m, n), dtype=torch.float32, device=x.device) if split > 1 else y
    info = device_info(x.device)
    asm = uses_ptx_decode(info, hw_fp8)
    pdl, prefetch = pdl if pdl is not None else pdl_settings(info, packed.fmt, cfg)
    launch = dict(launch_pdl=True) if pdl else {}  # pdl: a mode, 0 = off
    # NaN-free variants: MMA_GEMV's tile (PTX whatever the decode: E4M3 codes, FP4's block
    # scales) and E4M3's PTX decode in the other kernels (their FP4 decode has none)
    fix_free = cfg.kernel is Kernel.MMA_GEMV or (
        asm and packed.fmt in (Format.E4M3, Format.E4M3_B128))
    nan = not (fix_free and codes_nan_free(packed))
    args = (x, w, s, g, b, y, ws)  # then the counters, then (m, n, k, rb, sb, per_split)
    sizes = (m, n, k, rb, sb, per_split)
    if cfg.kernel is Kernel.MMA_GEMV:
        from ._mma import mma_gemv_kernel

        if not mma_gemv_runs(k, m, packed.fmt, info, x.dtype):
            raise ValueError(f"cfg: Kernel.MMA_GEMV takes fp16 x with M <= {MMA_GROUPS_MAX_M} "
                             f"and K a multiple of 8 on an NVIDIA GPU of compute capability 8.0 "
                             f"or newer (inline PTX: not the interpreter); got {x.dtype}, "
                             f"M={m}, K={k} on {x.device}")
        if x.data_ptr() % 16:
            x = x.clone()  # the kernel reads x 16 bytes at a time
            args = (x,) + args[1:]
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
        zero = mma_zero_fill(rb, per_split, runs, cfg, k, packed.padded_k)
        fp8 = packed.fmt in (Format.E5M2, Format.E4M3)
        whole = mma_ring_whole(n, m, rb, per_split, runs, cfg, fp8, zero)
        # MXFP4 from registers: each block against its row's exponent, where the scales allow
        e_rows = None
        if packed.fmt is Format.MXFP4 and cfg.depth == 1 and not cfg.ring and tiles == 2 and (
                not nan):
            e_rows = mx_row_exponents(packed)
        if e_rows is not None:
            args = args[:3] + (e_rows,) + args[4:]  # g_ptr: MXFP4 has no tensor scale
        x_in_step = (mma_x_in_step(packed.fmt, e_rows is not None) and cfg.depth == 1
                     and not cfg.ring)
        cnt, last = _counters(split, x.device, grid[0], w)
        _note(split, ws, last)
        start(mma_gemv_kernel, grid, (*args, cnt, *sizes), dict(
            LAST=last, FMT=packed.fmt.value, HAS_BIAS=bias is not None, WARPS=cfg.num_warps,
            PARTIAL=split > 1, num_warps=cfg.num_warps, num_stages=1, PDL=pdl,
            PREFETCH=prefetch, AHEAD=cfg.num_stages, RUNS=runs, TILES=tiles,
            HAS_SCALE=has_scale, NAN=nan, DEPTH=cfg.depth, GROUPS=groups, WIDE=wide,
            INJECT=e2m1 is E2M1Decode.INJECT, RING=cfg.ring, ZERO=zero, WHOLE=whole,
            X_IN_STEP=x_in_step, ROW_E=e_rows is not None, **launch))
    else:
        common = dict(FMT=packed.fmt.value, HAS_SCALE=has_scale, HAS_BIAS=bias is not None,
                      INJECT=e2m1 is E2M1Decode.INJECT, HW=hw_fp8, ASM=asm, BLOCK_M=cfg.block_m,
                      BLOCK_N=cfg.block_n, PARTIAL=split > 1, num_warps=cfg.num_warps,
                      num_stages=cfg.num_stages, PDL=pdl, PREFETCH=prefetch, NAN=nan, **launch)
        if cfg.kernel is Kernel.GEMV:
            if cfg.block_m < m:
                raise ValueError(f"cfg: a GEMV launch with block_m={cfg.block_m} can't cover "
                                 f"M={m}")
            grid = (-(-n // cfg.block_n), split)
            cnt, last = _counters(split, x.device, grid[0], w)
            _note(split, ws, last)
            start(K_.gemv_kernel, grid, (*args, cnt, *sizes),
                  dict(LAST=last, BLOCK_KB=cfg.block_k * spec.bits // 8, **common))
        else:
            if packed.fmt is Format.MXFP4 and cfg.block_k != 32:
                raise ValueError("cfg: the tl.dot kernels step one MXFP4 block (block_k=32)")
            grid = (-(-n // cfg.block_n), -(-m // cfg.block_m), split)
            precision = "ieee"  # fp32: exact FMAs (1e-5); fp16/bf16 operands ignore it
            cnt, last = _counters(split, x.device, grid[0] * grid[1], w)
            _note(split, ws, last)
            start(K_.dot_kernel, grid, (*args, cnt, *sizes),
                  dict(LAST=last, BLOCK_K=cfg.block_k, PRECISION=precision,
                       UPCAST=dot_upcast(x), **common))
    if split > 1 and not last:
        block = 256
        start(K_.splitk_reduce_kernel, (-(-n // block), m), (ws, s, g, b, y, m, n, split),
              dict(FMT=packed.fmt.value, HAS_SCALE=has_scale, HAS_BIAS=bias is not None,
                   BLOCK=block, PDL=pdl, **launch))
    return y
