"""A/B of dispatch's cache key on the CPU eager call: the key as it was before `_env` (three
`os.environ.get` a call) against the current one (`_env.raw_reader`), interleaved in one
process, on `softfp8.Linear` calls of a small layer (where Python is most of the call).

    python benchmarks/cpu_env_key_ab.py            # 256 x 512, E5M2 and NVFP4
    python benchmarks/cpu_env_key_ab.py --rounds 4 --calls 200 --formats e5m2   # quick

Prints the fastest and the median of the rounds, us a call, per format and key.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--formats", default="e5m2,nvfp4")
    ap.add_argument("--shape", default="256,512", help="out_features,in_features")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--calls", type=int, default=1000, help="calls a timed round")
    args = ap.parse_args(argv)

    import torch

    import softfp8
    from softfp8 import dispatch

    def env_get_key(fmt, m, device, backend, e2m1, activation_quant, report):
        env = os.environ  # the key before `_env`: encode and decode on every read
        return (fmt, m, device, backend, e2m1, activation_quant, env.get(dispatch.BACKEND_ENV),
                env.get(dispatch.E2M1_DECODE_ENV), env.get(dispatch.ACTIVATION_QUANT_ENV),
                id(report))

    keys = (("os.environ.get", env_get_key), ("raw_reader", dispatch._key))
    n, k = (int(v) for v in args.shape.split(","))
    torch.manual_seed(0)
    res: dict = {}
    try:
        with torch.no_grad():
            for fmt in args.formats.split(","):
                lin = softfp8.Linear.from_linear(torch.nn.Linear(k, n), fmt=fmt)
                x = torch.randn(1, k)
                for _ in range(500):
                    lin(x)
                for _ in range(args.rounds):
                    for name, key in keys:
                        dispatch._key = key
                        t0 = time.perf_counter()
                        for _ in range(args.calls):
                            lin(x)
                        res.setdefault((fmt, name), []).append(
                            (time.perf_counter() - t0) / args.calls * 1e6)
    finally:
        dispatch._key = keys[1][1]
    print(f"# softfp8.Linear {n}x{k}, fp32 x, {args.rounds} interleaved rounds of {args.calls} "
          f"calls; torch {torch.__version__}, {os.cpu_count()} cpus")
    for (fmt, name), v in res.items():
        print(f"{fmt:6s} key {name:15s} fastest {min(v):7.1f} us, median {statistics.median(v):7.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
