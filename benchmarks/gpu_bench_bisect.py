"""Bisect why `softfp8-bench shapes` times the 128256 x 4096 E5M2 head at 136 us on the H200 when
every other harness (gpu_timing_method.py, sweep_gemv.py) says 118-120: the bench's own steps,
one at a time in one process, each followed by the same measurement (timing.measure of
softfp8.linear on the bench's weight and x).

    python benchmarks/gpu_bench_bisect.py [--shape 128256,4096] [--fmt e5m2]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

from softfp8 import linear  # noqa: E402
from softfp8.bench import commands, workload  # noqa: E402
from softfp8.bench.presets import Shape  # noqa: E402
from softfp8.bench.timing import measure  # noqa: E402
from softfp8.dispatch import Backend  # noqa: E402
from softfp8.formats import Format  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="128256,4096")
    ap.add_argument("--fmt", default="e5m2")
    a = ap.parse_args()
    n, k = map(int, a.shape.split(","))
    dev = torch.device("cuda")
    l2, _ = workload.l2_bytes(dev)
    s = workload.Settings(dev, torch.float16, 3, 50, True, l2, 4.0, 0, 0.05, 0)
    sh = Shape("custom", n, k)
    fmt = Format(a.fmt)
    w = workload.random_weight(sh, s)
    x = workload.random_x(1, k, torch.float16, s)
    packed = workload.make_packed(w, fmt, 0)

    def probe(step: str) -> None:
        t = measure([lambda: linear(x, packed, backend=Backend.TRITON)], dev, warmup=3, reps=50)
        print(f"{step:58s} measure(): {t.seconds * 1e6:7.1f} us", flush=True)

    def bench_row(step: str, **kw) -> None:
        r = workload.time_softfp8(sh, 1, fmt, [Backend.TRITON], s, None, packed, **kw)[0]
        print(f"{step:58s} bench row: {r.get('ms', float('nan')) * 1e3:7.1f} us "
              f"(copies {r.get('copies')})", flush=True)

    import time
    probe("1 fresh weight")
    probe("2 again")
    commands.memory(s, 1024)
    probe("3 after the bench's memory() (1 GiB copy/read)")
    probe("4 again")
    commands.memory(s, 1024)
    time.sleep(1.0)
    probe("5 after memory(), then 1 s idle")
    commands.memory(s, 1024)
    torch.cuda.synchronize()
    big = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    big.fill_(1)
    probe("6 after memory(), then a 1 GiB fill")
    del big
    commands.memory(s, 1024)
    junk = torch.randn(1 << 28, device=dev)
    s2 = junk.sum()
    probe("7 after memory(), then a 1 GiB randn + sum")
    del junk, s2
    commands.memory(s, 1024)
    for _ in range(3):
        linear(x, packed, backend=Backend.TRITON)
    probe("8 after memory(), then 3 eager calls")
    commands.memory(s, 1024)
    measure([lambda: linear(x, packed, backend=Backend.TRITON)], dev, warmup=0, reps=1)
    probe("9 after memory(), then one short measure()")
    p2 = workload.clone_packed(packed)
    t = measure([lambda: linear(x, p2, backend=Backend.TRITON)], dev, warmup=3, reps=50)
    print(f"{'10 a fresh clone of the weight':58s} measure(): {t.seconds * 1e6:7.1f} us", flush=True)
    commands.memory(s, 1024)
    t = measure([lambda: linear(x, p2, backend=Backend.TRITON)], dev, warmup=3, reps=50)
    print(f"{'11 the clone after memory()':58s} measure(): {t.seconds * 1e6:7.1f} us", flush=True)
    print(torch.cuda.get_device_name(), torch.__version__, __import__("triton").__version__)


if __name__ == "__main__":
    main()
