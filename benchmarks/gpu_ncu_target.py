"""A few launches of the Triton GEMV kernels for Nsight Compute to read (no timing here).

    ncu --clock-control none --section SpeedOfLight -k regex:mma_gemv python3 benchmarks/gpu_ncu_target.py

Per format (default e5m2,e4m3,nvfp4) and shape N,K (default 22016,4096): the weight is quantized,
the table's launch runs twice (the first compiles), then --launches more times on the same x;
FP4 formats once per E2M1 decoder in --e2m1 (default inject; the backend's own default is select).
The FP8 decode is the software one (SOFTFP8_FP8_DECODE=integer: what a GPU without FP8 units runs).
"""
from __future__ import annotations

import argparse
import dataclasses
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
    ap.add_argument("--e2m1", default="inject",
                    help="FP4: comma list of E2M1 decoders to launch, each in turn")
    ap.add_argument("--ring", type=int, default=0,
                    help="also launch the table's setting with this many ring stages (2 warps, "
                         "depth 1: LaunchConfig.ring), after the table's own")
    args = ap.parse_args()
    n, k = (int(v) for v in args.shape.split(","))
    w = torch.randn(n, k, device="cuda") * 0.02
    x = torch.randn(args.m, k, device="cuda").half()
    for fmt in args.formats.split(","):
        packed = softfp8.quantize(w, fmt)
        cfg = tb.launch_config(n, k, args.m, packed.fmt, tb.device_info(x.device), x.dtype)
        fp4 = packed.fmt in (softfp8.Format.NVFP4, softfp8.Format.MXFP4)
        cfgs = [cfg]
        if args.ring and cfg.kernel is tb.Kernel.MMA_GEMV:
            cfgs.append(dataclasses.replace(cfg, num_warps=2, depth=1, ring=args.ring,
                                            block_n=tb.mma_rows(cfg.block_m, 2)))
        for e2m1 in args.e2m1.split(",") if fp4 else ["select"]:
            for c in cfgs:
                print(fmt, e2m1 if fp4 else "", c, flush=True)
                for _ in range(2 + args.launches):
                    tb.run(x, packed, None, c, e2m1=tb.E2M1Decode(e2m1))
                torch.cuda.synchronize()


if __name__ == "__main__":
    main()
