"""A few launches of the Triton GEMV kernels for Nsight Compute to read (no timing here).

    ncu --clock-control none --section SpeedOfLight -k regex:mma_gemv python3 benchmarks/gpu_ncu_target.py

Per format (default e5m2,e4m3,nvfp4) and shape N,K (default 22016,4096): the weight is quantized,
the table's launch runs twice (the first compiles), then --launches more times on the same x.
The FP8 decode is the software one (SOFTFP8_FP8_DECODE=integer: what a GPU without FP8 units runs).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.setdefault("SOFTFP8_FP8_DECODE", "integer")

import torch  # noqa: E402

import softfp8  # noqa: E402
from softfp8.backends import triton as tb  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", default="e5m2,e4m3,nvfp4")
    ap.add_argument("--shape", default="22016,4096")
    ap.add_argument("--m", type=int, default=1)
    ap.add_argument("--launches", type=int, default=2)
    args = ap.parse_args()
    n, k = (int(v) for v in args.shape.split(","))
    w = torch.randn(n, k, device="cuda") * 0.02
    x = torch.randn(args.m, k, device="cuda").half()
    for fmt in args.formats.split(","):
        packed = softfp8.quantize(w, fmt)
        cfg = tb.launch_config(n, k, args.m, packed.fmt, tb.device_info(x.device), x.dtype)
        print(fmt, cfg, flush=True)
        for _ in range(2 + args.launches):
            tb.matmul(x, packed)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
