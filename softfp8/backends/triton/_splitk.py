"""Split-K with no second kernel in eager mode: the last program of a tile adds the parts.

With split > 1 every program of a tile (a block of output rows, and of x rows) writes its
float32 partial sums to ws[pid_k, M, N]; then it counts itself in on the tile's counter
(`_kernels._reduce_last`: a barrier, one acq_rel atomic add at GPU scope). The program that
counts last reads the parts back in order s = 0, 1, ... (the same float32, bit for bit, as
`splitk_reduce_kernel`), finishes and stores y, and sets the counter back to zero.

Eager only. Why: eager decoding is host-bound (~100 us of Python a linear on the H200's host)
and the reduce kernel is a second launch. Under CUDA graph capture the reduce kernel stays:
measured on the H200 (docs/decisions.md), a graph of every linear of a token ran 0.7-2.7%
slower for NVFP4/MXFP4 with the fused reduce, 8-bit unchanged; and again (0.6-3.5%, 8-bit
too) with the reduce a called function, which took the FP4 kernel's registers
back from 128 to 100: so not the registers, but each program's wait on its atomic and the last
program's serial reads at the kernel's end, where a separate reduce under PDL costs less.

Counters are zero when a launch starts and only its own programs touch them, so two launches
that could run at the same time never share one: a region for each (device, stream); launches
on one stream run in order (under PDL the kernels count after griddepcontrol.wait, when the
previous kernel has finished; Triton's interpreter: a region a thread). Where a launch has
more tiles than a region, the regions are used up, the stream is capturing, or
splitk_reduce="kernel" (`softfp8.launch_settings`), the launcher runs `splitk_reduce_kernel`.
"""
from __future__ import annotations

import threading

import torch

from ..._choices import ParsedEnum as _Choice
from ..._settings import LaunchSettings, current
from .._facts import made_apart as _made_apart


class SplitKReduce(_Choice):
    """LaunchSettings.splitk_reduce (default SOFTFP8_SPLITK_REDUCE): who adds the parts of a
    split launch."""

    LAST = "last"
    """(default) each tile's last program, in eager launches; captured ones keep the kernel."""
    KERNEL = "kernel"
    """splitk_reduce_kernel, always."""


REGION = 16384
"""Counters a stream's region holds: the most tiles one eager launch may have (lm_head at
128256 rows in 32-row tiles: 4008)."""
STREAM_REGIONS = 64
"""Streams with a region (torch hands out 32 pooled streams a priority, and the default one)."""


def last_program_reduces(settings: LaunchSettings | None = None) -> bool:
    """Whether split launches reduce in their last program (`LaunchSettings.splitk_reduce`;
    default: the current settings)."""
    return (settings or current()).splitk_reduce == SplitKReduce.LAST.value


class _Pool:
    """One device's counters: STREAM_REGIONS regions of REGION."""

    def __init__(self, device: torch.device):
        # zeroed on that thread's (default) stream; _region synchronises before any use
        self.counters = _made_apart(device, lambda: torch.zeros(
            STREAM_REGIONS * REGION, dtype=torch.int32, device=device))
        self.regions: dict[int, int] = {}  # stream handle -> region start


_POOLS: dict = {}
_LOCK = threading.Lock()  # a pool's making and its regions' handing out (threads may race)


def _stream(device: torch.device) -> int:
    if device.type != "cuda":
        return threading.get_ident()  # Triton's interpreter: a thread's launches run in order
    return torch.cuda.current_stream(device).cuda_stream


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def counters(device: torch.device, tiles: int) -> torch.Tensor | None:
    """`tiles` zeroed counters no launch that may run beside this one uses, or None (the caller
    then runs splitk_reduce_kernel)."""
    if tiles > REGION or _capturing(device):
        return None
    key = (device.type, device.index)
    stream = _stream(device)
    pool = _POOLS.get(key)
    start = pool.regions.get(stream) if pool is not None else None
    if start is None:
        pool, start = _region(key, device, stream)
        if start is None:
            return None
    return pool.counters[start:start + tiles]


def _region(key, device: torch.device, stream: int) -> tuple[_Pool, int | None]:
    """The pool of `device` (made, zeroed and synchronised the first time) and the start of
    `stream`'s region in it (None once STREAM_REGIONS streams have one)."""
    with _LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _Pool(device)
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # zeroed on this stream; others use it too
            _POOLS[key] = pool
        start = pool.regions.get(stream)
        if start is None and len(pool.regions) < STREAM_REGIONS:
            start = pool.regions[stream] = len(pool.regions) * REGION
        return pool, start
