"""Host time to issue one batch-1 linear (what eager decoding pays per layer, GPU idle or not):
fp16 F.linear against softfp8.linear and a softfp8.Linear module per format (plain eager: the
op's implementation called directly, ops.run_linear), the custom op itself, and the Triton
backend's matmul, with the package check cached (now) and uncached (as before 079437d), then a
profile of softfp8.linear.

    python benchmarks/gpu_host_overhead.py [--calls 2000]

Mean microseconds per call over --calls calls issued back to back without synchronising (the
GPU work of a 4096 x 4096 GEMV, ~7 us on an H200, is shorter than the issue time, so the queue
never fills).
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
from softfp8 import dispatch, ops  # noqa: E402
from softfp8.backends import triton as tb  # noqa: E402


def host_us(fn, calls=50):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    w = torch.randn(4096, 4096, device="cuda") * 0.02
    x = torch.randn(1, 4096, device="cuda").half()
    w16 = w.half()
    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}  host {os.cpu_count()} cpus")
    print(f"fp16 F.linear                         {host_us(lambda: F.linear(x, w16), args.calls):7.1f} us")
    real = dispatch._installed
    for fmt in ("e5m2", "e4m3", "nvfp4"):
        p = softfp8.quantize(w, fmt)
        for label, installed in (("cached", real),
                                 ("uncached", lambda package, find: find(package) is not None)):
            dispatch._installed = installed
            try:
                with torch.no_grad():  # as generate() runs
                    lin = host_us(lambda: softfp8.linear(x, p), args.calls)
                n, k = p.shape
                op = host_us(lambda: ops.packed_linear(x, p.words, p.scales, p.global_scale,
                                                       p.fmt.value, n, k, None, "auto", "auto"),
                             args.calls)
                direct = host_us(lambda: tb.matmul(x, p), args.calls)
                module = softfp8.Linear.from_packed(p, None)
                with torch.no_grad():
                    mod = host_us(lambda: module(x), args.calls)
            finally:
                dispatch._installed = real
            print(f"{fmt:6} package check {label:9}  softfp8.linear {lin:7.1f} us   "
                  f"softfp8.Linear {mod:7.1f} us   through the op {op:7.1f} us   "
                  f"triton matmul {direct:7.1f} us", flush=True)
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
