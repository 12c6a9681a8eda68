"""Timing: CUDA graphs replayed between CUDA events on GPUs, perf_counter on the CPU; medians.

A measurement is of a *pass*: a list of calls run in order (one GEMV on each rotated copy of a
weight, or every linear of a model). On CUDA the pass is captured once as a CUDA graph, so
launch gaps and Python (dispatch) overhead stay out of the numbers, and each replay is timed by a
pair of events; where capture fails, the pass runs eagerly between the events and the timing says
so. On the CPU each call is timed alone with perf_counter, round-robin over the pass.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median and the spread of the samples (min, max), and how it was taken;
    `window`: CUDA, when (time.time() seconds) the warm-up started, the timed replays were
    enqueued and the last of them ended, for the GPU clocks seen meanwhile (`clocks.annotate`);
    `warm`: CUDA, seconds a call in each ~10 ms chunk of the warm-up, in order."""

    seconds: float
    low: float
    high: float
    samples: int
    method: str
    window: tuple[float, float, float] | None = None
    warm: tuple[float, ...] = ()

    def as_dict(self) -> dict:
        out = {"ms": self.seconds * 1e3, "ms_min": self.low * 1e3, "ms_max": self.high * 1e3,
               "samples": self.samples, "method": self.method}
        if self.window is not None:
            out["window_s"] = list(self.window)
        if self.warm:
            out["warm_ms"] = [round(w * 1e3, 6) for w in self.warm]
        return out


def measure(calls: Sequence[Callable[[], object]], device: torch.device, *, warmup: int,
            reps: int, graph: bool = True, host_pass: bool = False,
            warm_each: bool = False) -> Timing:
    """Median seconds per call of `calls` (see the module docstring).

    CUDA: `warmup` passes (at least one: kernels compile there), then `reps` timed replays.
    CPU: `warmup` single calls (with `warm_each`, at least one of each call: a softfp8
    weight's first call computes what the weight keeps, e.g. an E4M3 weight's NaN scan, many
    times a call's time; docs/decisions.md), then `reps` timed single calls, both round-robin
    over `calls`
    (CPU calls take milliseconds, so per-call timing is precise; where a warm-up call shows
    that `reps` calls would take over HOST_BUDGET_S, fewer are taken, at least MIN_HOST_REPS,
    and `samples` says how many);
    with `host_pass`, the CPU times whole passes instead (a model's token: a plain loop, since
    there are no CUDA graphs on the CPU) and reports seconds per call = pass time / len(calls)."""
    if not calls:
        raise ValueError("calls: expected at least one call to time")
    if reps < 1 or warmup < 0:
        raise ValueError(f"reps={reps}, warmup={warmup}: expected reps >= 1 and warmup >= 0")
    if device.type == "cuda":
        return _measure_cuda(calls, device, warmup=warmup, reps=reps, graph=graph)
    if host_pass:
        return _measure_host_pass(calls, warmup=warmup, reps=reps)
    return _measure_host(calls, warmup=max(warmup, len(calls)) if warm_each else warmup,
                         reps=reps)


def _measure_host_pass(calls, *, warmup: int, reps: int) -> Timing:
    samples = []
    for i in range(warmup + reps):
        t0 = time.perf_counter()
        for call in calls:
            call()
        if i >= warmup:
            samples.append((time.perf_counter() - t0) / len(calls))
    return Timing(statistics.median(samples), min(samples), max(samples), reps,
                  "cpu: plain loop over the pass (no CUDA graphs on the CPU), perf_counter per "
                  "pass, median")


HOST_BUDGET_S = 5.0  # per variant: slow CPU variants (the torch reference) get fewer samples
MIN_HOST_REPS = 3


def _measure_host(calls, *, warmup: int, reps: int) -> Timing:
    slowest = 0.0
    for i in range(warmup):
        t0 = time.perf_counter()
        calls[i % len(calls)]()
        slowest = max(slowest, time.perf_counter() - t0)
    if slowest * reps > HOST_BUDGET_S:
        reps = max(min(reps, MIN_HOST_REPS), int(HOST_BUDGET_S / slowest))
    samples = []
    for i in range(warmup, warmup + reps):
        call = calls[i % len(calls)]
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return Timing(statistics.median(samples), min(samples), max(samples), reps,
                  "cpu perf_counter per call, median")


WARM_GPU_S = 0.2
"""Before the timed replays, the GPU runs the pass untimed until it has been busy this long (by
its own events, not a count of passes). Measured on the H200 (benchmarks/gpu_head_modes.py
--trace; docs/decisions.md): right after quantizing, the 128256 x 4096 M = 1 GEMV
ran at 132-135 us for the first 50-54 ms of back-to-back replays, then at 116-119 us from
one 2.5 ms window to the next, both formats, in both processes. With a 50 ms warm-up (at most
1000 passes), each bench run timed the vocabulary head at one of two speeds
(0.121 or 0.136 ms) as the warm-up ended just before or just after that step. The cause is not
established (the SM clock nvidia-smi reports is 1980 MHz in both; a clock that comes up after
~50 ms of load fits). With 3 warm-up passes, 50 replays right after quantizing took 135.6 us,
timed again at once 120.2."""

WARM_CHUNK_S = 0.01  # GPU time enqueued between syncs while warming


def _warm_clocks(step: Callable[[], object]) -> tuple[int, list[float]]:
    """Run `step` untimed until the GPU has been busy WARM_GPU_S, in chunks of about
    WARM_CHUNK_S each timed by events (a sync between chunks: small steps enqueue faster than
    the host can, large ones slower). Returns how many passes ran and each chunk's seconds a
    pass (whether a slow measurement was slow through its warm-up too)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    step()
    end.record()
    end.synchronize()
    busy = max(start.elapsed_time(end) / 1e3, 1e-6)
    chunk = max(1, min(2000, int(WARM_CHUNK_S / busy)))
    passes = 1
    per_pass = []
    while busy < WARM_GPU_S:
        start.record()
        for _ in range(chunk):
            step()
        end.record()
        end.synchronize()
        took = start.elapsed_time(end) / 1e3
        busy += took
        passes += chunk
        per_pass.append(took / chunk)
    return passes, per_pass


def _measure_cuda(calls, device: torch.device, *, warmup: int, reps: int, graph: bool) -> Timing:
    def run_pass() -> None:
        for call in calls:
            call()

    with torch.cuda.device(device):
        # Warm up on a side stream, as graph capture requires (kernels compile here too).
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(max(warmup, 1)):
                run_pass()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        method = "cuda graph of the pass, replays timed by cuda events, median"
        step = run_pass
        if graph:
            try:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    run_pass()
                torch.cuda.synchronize()
                step = g.replay
                step()  # one replay before timing: the first pays for uploading the graph
            except Exception as exc:  # noqa: BLE001 - any capture failure falls back, and says so
                torch.cuda.synchronize()  # a sticky error raises here and fails the variant
                method = (f"eager pass timed by cuda events, median (graph capture failed: "
                          f"{type(exc).__name__}: {str(exc)[:120]})")
                step = run_pass
        else:
            method = "eager pass timed by cuda events, median (--no-graph)"
        t0 = time.time()
        passes, warm = _warm_clocks(step)
        method += f"; {passes} untimed passes first (>= {WARM_GPU_S * 1e3:g} ms busy)"
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(reps)]
        t_timed = time.time()
        for start, end in events:
            start.record()
            step()
            end.record()
        torch.cuda.synchronize()  # raises here if any launch failed
        t1 = time.time()
    per_call = [s.elapsed_time(e) / 1e3 / len(calls) for s, e in events]
    return Timing(statistics.median(per_call), min(per_call), max(per_call), reps, method,
                  (t0, t_timed, t1), tuple(w / len(calls) for w in warm))
