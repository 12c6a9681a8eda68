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

    from softfp8.bench import cli, report
    probe("1 fresh weight")
    cli.main(["shapes", "--shape", a.shape, "--backends", "triton", "--formats", a.fmt,
              "--out", "/tmp/bisect-shapes.json"])
    probe("2 after softfp8-bench shapes in this process")
    report.probe_report()
    probe("3 after the bench's probe_report()")
    r = workload.time_softfp8(sh, 1, fmt, [Backend.TRITON], s, None, packed)[0]
    print(f"{'4 time_softfp8 on this weight':58s} bench row: {r['ms'] * 1e3:7.1f} us", flush=True)
    print(torch.cuda.get_device_name(), torch.__version__, __import__("triton").__version__)


if __name__ == "__main__":
    main()
