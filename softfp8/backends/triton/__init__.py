"""The Triton backend: packed weights decoded in registers inside GEMV, small-M and tiled kernels
(with fp16 x on NVIDIA sm_80+, FP4 at M <= 16 and 8-bit at M <= 4, small weights M <= 8 (E5M2
16): a warp-level mma.sync GEMV with its decode in PTX, `_mma`); from M = 512 (FP4: 256), bounded
slabs decoded for cuBLAS (`_dequant`).

Public names (the backend protocol): NEEDS and matmul(x, packed, bias, *, e2m1). This module
checks arguments, reads the weight's facts, takes the launch's `Plan` (`_plan`: computed once per
key from the rules of `_table`, `_mma_table`, `_mma_flags` and `_device`, whose names are
re-exported here) and launches it: the kernels of `_kernels` (decoders in `_decode`), `_mma`
and `_dequant`. The launch settings a user may override (FP8 decode, PDL, a sweep's table,
split-K's reduction) are `softfp8.launch_settings` (`softfp8/_settings.py`). Triton itself is
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

from ..._choices import E2M1Decode
from ..._needs import Needs
from ..._settings import (FP8_DECODE_ENV, PDL_ENV, PDL_PREFETCH_ENV, SPLITK_REDUCE_ENV, TABLE_ENV,
                          current as current_settings, generation as settings_generation)
from ...formats import Format, PackedWeight, ScaleKind
from ..._checks import check_matrix_args
from .._facts import (codes_nan_free, known_fact, mx_row_exponents,  # noqa: F401 - re-exported
                      remember_fact)
from ._fastcall import note_split, record_call, start
from ._device import DeviceInfo, Kernel, LaunchConfig, device_info, uses_hardware_fp8
from ._mma_flags import mma_ring_whole, mma_x_in_step
from ._mma_table import (MMA_FORMATS, MMA_GROUPS_MAX_M, MMA_MAX_M, MMA_RING_STAGES,
                         MMA_RUN_TILES, MMA_RUNS, MMA_TILE_ROWS, MMA_WIDE_M, mma_config,
                         mma_gemv_runs, mma_layout, mma_ring_fits, mma_rows, mma_split,
                         mma_zero_fill, uses_mma_gemv)
from ._plan import Plan, WeightFacts, plan, plan_for_config, split_bytes
from ._splitk import counters, last_program_reduces
from ._table import (DEQUANT_MIN_M, DEQUANT_MIN_M_FP4, DEQUANT_MIN_SLAB_ROWS,
                     DEQUANT_SLAB_BYTES, dot_upcast, launch_config, pdl_auto, pdl_settings,
                     tiled_config, uses_ptx_decode)

__all__ = ["NEEDS", "INTERPRET", "matmul", "run", "split_bytes", "codes_nan_free",
           "known_fact", "remember_fact", "mx_row_exponents",  # the backend; the launch plan:
           "Plan", "WeightFacts", "plan", "plan_for_config",
           "Kernel", "LaunchConfig", "DeviceInfo", "device_info", "launch_config", "tiled_config",
           "mma_config", "mma_gemv_runs", "mma_layout", "mma_ring_fits", "mma_rows", "mma_split",
           "mma_zero_fill", "mma_ring_whole", "mma_x_in_step", "MMA_RING_STAGES",
           "uses_mma_gemv", "uses_hardware_fp8", "last_program_reduces",
           "uses_ptx_decode", "dot_upcast", "pdl_auto", "pdl_settings", "DEQUANT_MIN_M",
           "DEQUANT_MIN_M_FP4", "DEQUANT_MIN_SLAB_ROWS", "DEQUANT_SLAB_BYTES", "MMA_MAX_M",
           "MMA_GROUPS_MAX_M", "MMA_FORMATS", "MMA_RUNS", "MMA_RUN_TILES", "MMA_TILE_ROWS",
           "MMA_WIDE_M",
           "FP8_DECODE_ENV", "PDL_ENV", "PDL_PREFETCH_ENV", "TABLE_ENV", "SPLITK_REDUCE_ENV"]

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

NEEDS = Needs(
    formats=frozenset(Format),
    device_types=frozenset({"cuda", "cpu"} if INTERPRET else {"cuda"}),
    min_capability=(7, 0),
    packages=("triton",),
)


def _check(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None,
           e2m1: E2M1Decode | str, checked: bool = False) -> E2M1Decode:
    """The E2M1 decode to launch with (select for auto); unless `checked` (backends/__init__),
    the arguments checked first."""
    if not checked:
        check_matrix_args(x, packed, bias)
        why = NEEDS.why_not(packed.fmt, x.device, None)
        if why is not None:
            raise ValueError(f"x: the triton backend can't run on {x.device}: {why}")
    elif type(e2m1) is E2M1Decode and e2m1 is not E2M1Decode.AUTO:
        return e2m1  # dispatch's resolved choice
    e2m1 = E2M1Decode.parse(e2m1, arg="e2m1")
    return E2M1Decode.SELECT if e2m1 is E2M1Decode.AUTO else e2m1


def _weight_facts(packed: PackedWeight) -> tuple[WeightFacts, torch.Tensor | None]:
    """(what a plan reads of the weight, MXFP4's rows' exponents or None): each fact is found
    once per weight and kept (`_facts`), so this is a lookup on every call but the first."""
    e_rows = mx_row_exponents(packed) if packed.fmt is Format.MXFP4 else None
    has_scale = packed.spec.scale is ScaleKind.ROW and packed.scales is not None
    return WeightFacts(has_scale, codes_nan_free(packed), e_rows is not None), e_rows


def matmul(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None = None, *,
           e2m1: E2M1Decode | str = E2M1Decode.SELECT, checked: bool = False) -> torch.Tensor:
    """y = x @ W.T + bias for x [M, K]; y [M, N] in x's dtype, float32 accumulation.
    `checked`: backends/__init__."""
    e2m1 = _check(x, packed, bias, e2m1, checked)
    facts, e_rows = _weight_facts(packed)
    n, k = packed.shape
    p = plan(n, k, packed.padded_k, x.shape[0], packed.fmt, device_info(x.device), x.dtype,
             bias is not None, e2m1, facts, current_settings())
    return _launch(x, packed, bias, p, e2m1, e_rows)


_SETTINGS_READERS = (settings_generation,)
"""What a recorded call's replay must find unchanged besides the caller's: the launch settings
(`softfp8.launch_settings`), by their token (`_settings.generation`)."""


def eager_call(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None, *,
               e2m1: E2M1Decode | str, readers: tuple, y_shape: tuple[int, ...] | None = None,
               checked: bool = False):
    """`matmul` once, recorded for replays of the same call (`_fastcall`): (y, its LayerCall,
    UNREPLAYABLE or None: `record_call`). `readers`: what the caller's choice of this backend
    depended on (functions returning the settings' values); a replay finds those and the launch
    settings unchanged.
    `y_shape`: the shape of a replay's y (the caller's x may have more dimensions than x).
    `checked`: as matmul's."""
    if _SETTINGS_READERS[0] not in readers:  # dispatch's readers hold it already
        readers = readers + _SETTINGS_READERS
    return record_call(_checked_matmul if checked else matmul, x, packed, bias, e2m1, readers,
                       y_shape)


_checked_matmul = functools.partial(matmul, checked=True)


def run(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None, cfg: LaunchConfig, *,
        e2m1: E2M1Decode = E2M1Decode.SELECT, hw_fp8: bool = False) -> torch.Tensor:
    """Launch with explicit settings (tests and benchmarks use this to reach every variant)."""
    e2m1 = _check(x, packed, bias, e2m1)
    if hw_fp8 and packed.fmt not in (Format.E5M2, Format.E4M3):
        raise ValueError(f"hw_fp8: only e5m2/e4m3 codes have a hardware conversion, not {packed.fmt}")
    facts, e_rows = _weight_facts(packed)
    n, k = packed.shape
    p = plan_for_config(cfg, n, k, packed.padded_k, x.shape[0], packed.fmt,
                        device_info(x.device), x.dtype, bias is not None, e2m1, facts, hw_fp8,
                        current_settings())
    return _launch(x, packed, bias, p, e2m1, e_rows)


def not_current_device(x: torch.Tensor) -> bool:
    """Whether x lies on another GPU than the current one: Triton launches on the current
    device and its current stream, so the launcher makes x's device current first (a model
    spread over GPUs, e.g. transformers' device_map="auto", calls layers on cuda:1 while cuda:0
    is current)."""
    return x.is_cuda and x.device.index != torch.cuda.current_device()


def _launch(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None, p: Plan,
            e2m1: E2M1Decode, e_rows: torch.Tensor | None) -> torch.Tensor:
    """Allocate and launch `p` on arguments `_check` has passed. e_rows: MXFP4's rows'
    exponents where the plan asks for them (`Plan.row_e`)."""
    from . import _fma, _kernels as K_, _mma

    if not_current_device(x):
        with torch.cuda.device(x.device):
            return _launch(x, packed, bias, p, e2m1, e_rows)
    x = x.contiguous()
    if p.aligned_x and x.data_ptr() % 16:
        x = x.clone()  # the kernel reads x 16 bytes at a time
    if bias is not None:
        bias = bias.contiguous()  # the kernels index it as bias[n]: a strided view read wrong values
    m, n, _, rb, sb, _ = p.sizes
    w = packed.words.view(torch.uint8)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    s = packed.scales if packed.scales is not None else w
    g = e_rows if p.row_e else packed.global_scale if packed.global_scale is not None else w
    b = bias if bias is not None else w
    if p.cfg.kernel is Kernel.DEQUANT:
        from ._dequant import dequant_matmul

        return dequant_matmul(x, packed, bias, p, e2m1, w, s, g, b, y)
    split = p.split
    ws = torch.empty((split, m, n), dtype=torch.float32, device=x.device) if split > 1 else y
    cnt = counters(x.device, p.tiles) if split > 1 and p.last_reduces else None
    last = cnt is not None  # else splitk_reduce_kernel adds the parts (or there is no split)
    if split > 1:
        note_split(ws, last)
    fn = getattr(_mma if p.kernel.startswith("mma_") else _fma, p.kernel)
    start(fn, p.grid, (x, w, s, g, b, y, ws, cnt if last else w, *p.sizes),
          dict(p.options, LAST=last))
    if split > 1 and not last:
        start(K_.splitk_reduce_kernel, p.reduce_grid, (ws, s, packed.global_scale
                                                        if packed.global_scale is not None
                                                        else w, b, y, m, n, split),
              dict(p.reduce_options))
    return y
