"""What the Triton backend's launch settings are keyed on and what they produce: the device
(`DeviceInfo`), the FP8 decode wanted (`LaunchSettings.fp8_decode`), the kernel and its
`LaunchConfig`.
Shared by `_table` (the settings) and `_mma_table` (Kernel.MMA_GEMV's). Pure Python."""
from __future__ import annotations

import enum
import functools
from dataclasses import dataclass

import torch

from ..._settings import FP8_DECODE_ENV, LaunchSettings, current
from ...formats import Format


class Kernel(str, enum.Enum):
    """Which kernel a launch uses."""

    GEMV = "gemv"
    """CUDA-core GEMV for M = 1 (and a few fp32 rows): weights read once, K kept in registers."""
    SMALL_M = "small_m"
    """tl.dot with one 16-row block of x (M = 2..16): weights read once for all rows."""
    TILED = "tiled"
    """tl.dot over a 2-D grid of output tiles, for larger M."""
    MMA_GEMV = "mma_gemv"
    """M <= 8 with fp16 activations on NVIDIA sm_80+: warp-level mma.sync with the per-thread
    decode written in PTX (`_mma`), no layout conversions in the loop; auto for FP4."""
    DEQUANT = "dequant"
    """Large M: decode block_n rows at a time into x's dtype (a bounded slab, never the whole
    weight) and multiply each slab with torch's GEMM (cuBLAS); compute-bound there, so the
    decode is a small fixed cost."""


@dataclass(frozen=True)
class LaunchConfig:
    """Launch settings. block_k is in codes (weights along K); split_k programs share one row
    block's K range and their partials are summed in a fixed order (by each tile's last
    program in eager launches, else a second kernel: `_splitk`). depth
    (Kernel.MMA_GEMV's run mapping only): loop steps of weights each thread holds in registers,
    1 or 2 (two buffers, each refilled after its own step). ring (Kernel.MMA_GEMV's run mapping
    only): stages of the shared-memory ring that carries each step to the threads (`_mma_ring`),
    0 for none."""

    kernel: Kernel
    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 2
    depth: int = 1
    ring: int = 0


@dataclass(frozen=True)
class DeviceInfo:
    """What the launch table is keyed on besides the shape."""

    sm_count: int
    capability: tuple[int, int] | None  # NVIDIA compute capability; None for ROCm/interpreter
    interpreter: bool


@functools.lru_cache(maxsize=None)
def device_info(device: torch.device) -> DeviceInfo:
    if device.type != "cuda":
        return DeviceInfo(sm_count=4, capability=None, interpreter=True)
    props = torch.cuda.get_device_properties(device)
    cap = None if torch.version.hip else (props.major, props.minor)
    return DeviceInfo(props.multi_processor_count, cap, interpreter=False)


def fp8_decode_wanted(settings: LaunchSettings | None = None) -> str:
    """The FP8 decode asked for: 'auto', 'integer' or 'hardware' (`softfp8.launch_settings`,
    default SOFTFP8_FP8_DECODE)."""
    return (settings or current()).fp8_decode


def uses_hardware_fp8(fmt: Format, info: DeviceInfo,
                      settings: LaunchSettings | None = None) -> bool:
    """The one place that picks hardware FP8 conversion: NVIDIA sm_89+ for E5M2 codes (same
    bits as the integer decode, checked per code by the GPU tests); integer decode elsewhere."""
    has_hw = info.capability is not None and info.capability >= (8, 9)
    wanted = fp8_decode_wanted(settings)
    if wanted == "hardware" and not has_hw:
        raise ValueError(f"{FP8_DECODE_ENV}=hardware: this GPU has no FP8 conversion "
                         "instructions (they need NVIDIA compute capability 8.9 or newer)")
    if wanted == "hardware":
        return fmt in (Format.E5M2, Format.E4M3)
    # auto: measured on the H200 (128256 x 4096; docs/decisions.md): the cvt is 10% faster
    # than the PTX prmt decode for E5M2 but 38% slower for E4M3, whose cvt.f16x2.e4m3 costs
    # more than a shift and the NaN fix-up on fp16 pairs.
    return fmt is Format.E5M2 and has_hw and wanted != "integer"
