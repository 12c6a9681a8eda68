"""Host time of one batch-1 linear on the CPU backend, per entry point: `cpu_backend.matmul` (the
backend alone), `softfp8.linear` and a `softfp8.Linear` module, against fp16 and fp32
`F.linear` on the same shape in the same process. On a small shape the kernel is ~10 us and the
rest is Python around it; a 7B model calls 224 linears a token.

    python benchmarks/cpu_call_overhead.py [--shapes 256x512,4096x4096] [--rounds 15]

Each cell: the fastest of --rounds rounds of back-to-back calls (us a call), the rounds of all
cells interleaved so that the machine's drift hits every cell alike.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numba  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import softfp8  # noqa: E402
from softfp8.backends import numba as cpu_backend  # noqa: E402

FORMATS = ("e5m2", "e4m3", "nvfp4", "mxfp4")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="256x512,4096x4096")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  {platform.machine()}  torch {torch.__version__}  "
          f"numba {numba.__version__}  threads {torch.get_num_threads()}  softfp8 from "
          f"{os.path.dirname(softfp8.__file__)}")
    print(f"{'shape':>10} {'format':>6} {'matmul us':>10} {'linear us':>10} {'Linear us':>10} "
          f"{'fp16 us':>9} {'fp32 us':>9} {'Linear x fp16':>13}")
    torch.manual_seed(0)
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        w = torch.randn(n, k) * 0.02
        x = torch.randn(1, k)
        w16, x16 = w.half(), x.half()
        calls = max(10, 100_000 // max(1, n * k // 4096))  # ~0.1-0.5 s a cell and round
        for fmt in FORMATS:
            p = softfp8.quantize(w, fmt)
            module = softfp8.Linear.from_packed(p, None)
            cells = {"matmul": lambda: cpu_backend.matmul(x, p),
                     "linear": lambda: softfp8.linear(x, p),
                     "Linear": lambda: module(x),
                     "fp16": lambda: F.linear(x16, w16),
                     "fp32": lambda: F.linear(x, w)}
            best = dict.fromkeys(cells, float("inf"))
            with torch.no_grad():
                for fn in cells.values():
                    for _ in range(5):
                        fn()
                for _ in range(args.rounds):
                    for name, fn in cells.items():
                        t = time.perf_counter()
                        for _ in range(calls):
                            fn()
                        best[name] = min(best[name], (time.perf_counter() - t) / calls * 1e6)
            print(f"{shape:>10} {fmt:>6} {best['matmul']:10.1f} {best['linear']:10.1f} "
                  f"{best['Linear']:10.1f} {best['fp16']:9.1f} {best['fp32']:9.1f} "
                  f"{best['fp16'] / best['Linear']:12.2f}x", flush=True)


if __name__ == "__main__":
    main()
