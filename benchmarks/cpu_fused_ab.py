"""The fused small-M kernel's choices against the ones before them, in one process.

`_dp_rows.matmul_fused` on one 4096 x 4096 weight per format (the same weight for both, warm in
the L3; `--cold`: six of them in turn, 48-96 MiB, so each call reads its weight from DRAM as
an as-dispatched call after other work does), bf16 x, one thread, CPU time, round-robin,
medians:
- before: FP8 K blocks of `X_BLOCK_BYTES` at every M, FP4 one weight row a pass;
- after: FP8 past 8 rows and FP4 `PAIR_X_BLOCK_BYTES` blocks, FP4 two weight rows a pass
  (`FP4_PAIRS`), MXFP4's scales folded into the decoded values from `MXFP4_FOLD_MIN_ROWS` rows;
- `--fold`: before and after both the latter, MXFP4's scales never folded / folded at every M
  (where `MXFP4_FOLD_MIN_ROWS` comes from).

    NUMBA_NUM_THREADS=1 python benchmarks/cpu_fused_ab.py --m 2,4,8,12,16
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import softfp8
from softfp8.backends.numba import _dp_rows

F = _dp_rows._fused()
NEVER = 1 << 30
SETTINGS = {"before": (F.X_BLOCK_BYTES, False, NEVER),
            "after": (F.PAIR_X_BLOCK_BYTES, True, _dp_rows.MXFP4_FOLD_MIN_ROWS)}


def _set(name: str) -> None:
    F.PAIR_X_BLOCK_BYTES, _dp_rows.FP4_PAIRS, _dp_rows.MXFP4_FOLD_MIN_ROWS = SETTINGS[name]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--m", default="2,4,8,12,16")
    ap.add_argument("--formats", default="e5m2,e4m3,nvfp4,mxfp4")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--cold", action="store_true", help="six weights in turn (from DRAM)")
    ap.add_argument("--fold", action="store_true", help="MXFP4 unfolded vs folded scales")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.fold:
        SETTINGS["before"] = SETTINGS["after"][:2] + (NEVER,)
        SETTINGS["after"] = SETTINGS["after"][:2] + (1,)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} torch {torch.__version__} "
          f"loadavg {os.getloadavg()[0]:.1f}  bf16 x, 1 thread, CPU time, reps {args.reps} "
          f"(median), 4096x4096, {'cold' if args.cold else 'warm'}"
          f"{', fold' if args.fold else ''}", flush=True)
    g = torch.Generator().manual_seed(0)
    for fmt in args.formats.split(","):
        ws = [softfp8.quantize(torch.randn(4096, 4096, generator=g) * 0.02, fmt)
              for _ in range(6 if args.cold else 1)]
        w = ws[0]
        for m in (int(v) for v in args.m.split(",")):
            x = torch.randn(m, 4096, generator=g).bfloat16()
            ref = softfp8.linear(x.float(), w, backend="torch")
            times = {name: [] for name in SETTINGS}
            for name in SETTINGS:  # compile, warm, and check both against the reference
                _set(name)
                y = _dp_rows.matmul_fused(x, w, 1)
                assert float((y - ref).norm() / ref.norm()) <= 1e-5, (fmt, m, name)
            for _ in range(args.reps):
                for name in SETTINGS:
                    _set(name)
                    for wi in ws:
                        t = time.process_time()
                        _dp_rows.matmul_fused(x, wi, 1)
                        times[name].append(time.process_time() - t)
            med = {name: statistics.median(v) * 1e3 for name, v in times.items()}
            print(f"{fmt} M={m}: before {med['before']:.3f} ms  after {med['after']:.3f} ms  "
                  f"({med['before'] / med['after']:.2f}x)  [load {os.getloadavg()[0]:.1f}]",
                  flush=True)
        _set("after")


if __name__ == "__main__":
    main()
