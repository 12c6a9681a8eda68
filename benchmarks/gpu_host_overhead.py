"""Host time to issue one batch-1 linear (what eager decoding pays per layer, GPU idle or not):
fp16 F.linear against softfp8.linear and a softfp8.Linear module per format (plain eager: the
op's implementation called directly, ops.run_linear), the custom op itself, and the Triton
backend's matmul, with the package check cached (now) and uncached (as before 079437d), NVFP4's
split launch also with SOFTFP8_SPLITK_REDUCE=kernel (a second launch), then a profile of
softfp8.linear.

    python benchmarks/gpu_host_overhead.py [--calls 2000]

Each cell: the fastest of --rounds rounds of --calls calls issued back to back without
synchronising (the GPU work of a 4096 x 4096 GEMV, ~7 us on an H200, is shorter than the issue
time, so the queue never fills), us a call; the rounds of all cells interleaved so that the
host's drift hits every cell alike (a mean over 2000 calls in a row moved 2x between two runs
of one commit).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import softfp8  # noqa: E402
from softfp8 import _needs, ops  # noqa: E402
from softfp8.backends import triton as tb  # noqa: E402


def round_us(fn, calls):
    """us a call over `calls` back-to-back calls, the GPU idle before and after."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / calls * 1e6


def with_settings(fn, **settings):
    """fn, run by fastest_us under `softfp8.launch_settings(**settings)`."""
    fn.settings = settings
    return fn


def _in_env(fn, calls):
    import softfp8

    with softfp8.launch_settings(**getattr(fn, "settings", {})):
        return round_us(fn, calls)


def fastest_us(cells, calls, rounds):
    """{label: the fastest round's us a call} over `rounds` interleaved rounds of every cell."""
    for fn in cells.values():  # warm-up: compilation, caches
        _in_env(fn, 20)
    best = {label: float("inf") for label in cells}
    for _ in range(rounds):
        for label, fn in cells.items():
            best[label] = min(best[label], _in_env(fn, calls))
    return best


def _uncached(package, find):
    return find(package) is not None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    w = torch.randn(4096, 4096, device="cuda") * 0.02
    x = torch.randn(1, 4096, device="cuda").half()
    w16 = w.half()
    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}  host {os.cpu_count()} "
          f"cpus; the fastest of {args.rounds} interleaved rounds of {args.calls} calls")
    real = _needs._installed
    cells = {"fp16 F.linear": lambda: F.linear(x, w16)}
    for fmt in ("e5m2", "e4m3", "nvfp4"):
        p = softfp8.quantize(w, fmt)
        n, k = p.shape
        module = softfp8.Linear.from_packed(p, None)

        def uncached(fn):  # the package check as before 079437d: find_spec on every call
            def call():
                _needs._installed = _uncached
                try:
                    fn()
                finally:
                    _needs._installed = real
            return call
        lin = (lambda p=p: softfp8.linear(x, p))
        cells[f"{fmt} softfp8.linear"] = lin
        cells[f"{fmt} softfp8.linear, check uncached"] = uncached(lin)
        cells[f"{fmt} softfp8.Linear"] = (lambda m=module: m(x))
        cells[f"{fmt} through the op"] = (
            lambda p=p, n=n, k=k: ops.packed_linear(x, p.words, p.scales, p.global_scale,
                                                    p.fmt.value, n, k, None, "auto", "auto"))
        cells[f"{fmt} triton matmul"] = (lambda p=p: tb.matmul(x, p))
        if fmt == "nvfp4":  # split 2 at 4096 x 4096 on the H200: the reduce kernel's launch
            cells[f"{fmt} triton matmul, reduce kernel"] = with_settings(
                lambda p=p: tb.matmul(x, p), splitk_reduce="kernel")
            cells[f"{fmt} softfp8.Linear, reduce kernel"] = with_settings(
                lambda m=module: m(x), splitk_reduce="kernel")
    with torch.no_grad():  # as generate() runs
        best = fastest_us(cells, args.calls, args.rounds)
    for label, us in best.items():
        print(f"{label:40s} {us:7.1f} us")
    p = softfp8.quantize(w, "e5m2")
    prof = cProfile.Profile()
    prof.enable()
    with torch.no_grad():
        for _ in range(500):
            softfp8.linear(x, p)
    prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
    print(out.getvalue())


if __name__ == "__main__":
    main()
