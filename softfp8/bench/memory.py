"""Device memory bandwidth: a copy (bytes read + bytes written) and pure reads.

Read methods: `torch.sum` of a float32 buffer (a reduction: reads every byte once, writes one
value), and on CUDA with triton installed a Triton read kernel (`_triton_read`: unrolled 16-byte
loads, one partial sum per program). The read bandwidth the bench uses is the fastest read
method measured in the same run: the best rate this card demonstrably sustains.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import torch

from .timing import Timing, measure

_ALIGN = 4096 * 8  # float32 values: the Triton read kernel's chunk, so every method reads the same buffer


@dataclass(frozen=True)
class Rate:
    """One bandwidth measurement: `nbytes` moved per call in `timing.seconds`."""

    name: str
    what: str
    nbytes: int
    timing: Timing

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.nbytes / self.timing.seconds

    def as_dict(self) -> dict:
        return {"name": self.name, "what": self.what, "bytes": self.nbytes,
                "GB_per_s": self.bandwidth / 1e9, **self.timing.as_dict()}


@dataclass(frozen=True)
class MemoryReport:
    copy: Rate
    reads: tuple[Rate, ...]
    skipped: tuple[str, ...]

    @property
    def best_read(self) -> Rate:
        return max(self.reads, key=lambda r: r.bandwidth)

    @property
    def read_bandwidth(self) -> float:
        return self.best_read.bandwidth

    def as_dict(self) -> dict:
        return {"copy": self.copy.as_dict(), "reads": [r.as_dict() for r in self.reads],
                "read_bandwidth_GB_per_s": self.read_bandwidth / 1e9,
                "read_method": self.best_read.name, "skipped": list(self.skipped)}


def measure_memory(device: torch.device, nbytes: int, *, warmup: int, reps: int,
                   graph: bool = True) -> MemoryReport:
    """Copy and read bandwidth on `device` over a buffer of about `nbytes` (rounded down)."""
    n = max(_ALIGN, (nbytes // 4) // _ALIGN * _ALIGN)
    # Random data, never zeros: some devices run faster on zeros than on real data.
    src = torch.randn(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    size = n * 4
    copy = Rate("copy", "dst.copy_(src), float32; bytes = read + written", 2 * size,
                measure([lambda: dst.copy_(src)], device, warmup=warmup, reps=reps, graph=graph))
    reads = [Rate("torch.sum", "torch.sum of a float32 buffer (reduction; reads each byte once)",
                  size, measure([lambda: torch.sum(src)], device, warmup=warmup, reps=reps,
                                graph=graph))]
    skipped = []
    why = _triton_unavailable(device)
    if why is None:
        try:
            from . import _triton_read

            out = torch.empty(n // _triton_read.CHUNK, dtype=torch.float32, device=device)
            timing = measure([lambda: _triton_read.read_sum(src, out)], device, warmup=warmup,
                             reps=reps, graph=graph)
            reads.append(Rate("triton-read", "Triton kernel: unrolled 16-byte loads, one partial "
                              "sum per 128 KiB", size, timing))
        except Exception as exc:  # noqa: BLE001 - a failed sub-measurement is reported, not fatal
            skipped.append(f"triton-read: {type(exc).__name__}: {str(exc)[:200]}")
    else:
        skipped.append(f"triton-read: {why}")
    del src, dst
    return MemoryReport(copy, tuple(reads), tuple(skipped))


def _triton_unavailable(device: torch.device) -> str | None:
    if device.type != "cuda":
        return f"needs a CUDA device, this is {device.type}"
    if importlib.util.find_spec("triton") is None:
        return "the package 'triton' is not installed"
    return None
