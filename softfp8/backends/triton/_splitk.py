"""Split-K with no second kernel: the last program of a tile adds the parts.

With split > 1 every program of a tile (a block of output rows, and of x rows) writes its
float32 partial sums to ws[pid_k, M, N]; then it counts itself in on the tile's counter
(`_kernels._reduce_last`: a barrier, one acq_rel atomic add at GPU scope). The program that
counts last reads the parts back in order s = 0, 1, ... (the same float32, bit for bit, as
`splitk_reduce_kernel`), finishes and stores y, and sets the counter back to zero. Why: the
reduce kernel is one more launch a call (~30 us of Python in eager mode, one more node and
its gap in a CUDA graph; NVFP4 splits 5 of a layer's 7 linears at transformers' Llama shapes).

Counters are zero when a launch starts and only its own programs touch them, so no two
launches that could run at the same time may share one:
- outside graph capture, a region for each (device, stream): launches on one stream run in
  order (under PDL the kernels count after griddepcontrol.wait, when the previous kernel has
  finished);
- under capture, each captured launch gets counters of its own, never handed out again
  (replays of one graph are ordered; two graphs never share).
The pool is made, zeroed, outside capture, on the device's first split launch. Where it is
missing (the first split launch is being captured), a launch has more tiles than a region, the
regions or the capture area are used up, or SOFTFP8_SPLITK_REDUCE=kernel, the launcher runs
`splitk_reduce_kernel` as before.
"""
from __future__ import annotations

import functools
import os

import torch

from ..._env import raw_reader

SPLITK_REDUCE_ENV = "SOFTFP8_SPLITK_REDUCE"
"""'last' (default): the last program of a tile reduces; 'kernel': splitk_reduce_kernel."""
_REDUCE_MODES = ("last", "kernel")
_read_reduce = raw_reader(SPLITK_REDUCE_ENV)

REGION = 16384
"""Counters a stream's region holds: the most tiles one eager launch may have (lm_head at
128256 rows in 32-row tiles: 4008)."""
STREAM_REGIONS = 64
"""Streams with a region (torch hands out 32 pooled streams a priority, and the default one)."""
CAPTURE_COUNTERS = 1 << 20
"""Counters for captured launches, each taken once (a 32-layer model's graph takes ~20k)."""


@functools.lru_cache(maxsize=8)
def _parse(raw) -> bool:
    wanted = os.environ.get(SPLITK_REDUCE_ENV, "last").strip().lower()
    if wanted not in _REDUCE_MODES:
        raise ValueError(f"{SPLITK_REDUCE_ENV}={wanted!r} is not valid; expected one of "
                         f"{_REDUCE_MODES}")
    return wanted == "last"


def last_program_reduces() -> bool:
    """Whether split launches reduce in their last program (SOFTFP8_SPLITK_REDUCE, read each
    call through `_env`)."""
    return _parse(_read_reduce())


class _Pool:
    """One device's counters: STREAM_REGIONS regions, then the capture area."""

    def __init__(self, device: torch.device):
        self.counters = torch.zeros(STREAM_REGIONS * REGION + CAPTURE_COUNTERS, dtype=torch.int32,
                                    device=device)
        self.regions: dict[int, int] = {}  # stream handle -> region start
        self.captured = STREAM_REGIONS * REGION  # the capture area's next free counter


_POOLS: dict = {}


def _stream(device: torch.device) -> int:
    if device.type != "cuda":
        return 0  # Triton's interpreter: one program at a time, no streams
    return torch.cuda.current_stream(device).cuda_stream


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def counters(device: torch.device, tiles: int) -> torch.Tensor | None:
    """`tiles` zeroed counters no launch that may run beside this one uses, or None (the caller
    then runs splitk_reduce_kernel)."""
    key = (device.type, device.index)
    pool = _POOLS.get(key)
    capturing = _capturing(device)
    if pool is None:
        if capturing:
            return None  # zeroing a new pool here would be replayed with the graph
        pool = _POOLS[key] = _Pool(device)
    if tiles > REGION:
        return None
    if capturing:
        start = pool.captured
        if start + tiles > pool.counters.numel():
            return None
        pool.captured = start + tiles
        return pool.counters[start:start + tiles]
    stream = _stream(device)
    start = pool.regions.get(stream)
    if start is None:
        if len(pool.regions) == STREAM_REGIONS:
            return None
        start = pool.regions[stream] = len(pool.regions) * REGION
    return pool.counters[start:start + tiles]
