"""How far the FP4 table GEMV's own time moves from one fresh process to the next on this machine:
the kernel called directly (x's steps made once), after a call on a second copy of the weight (so
each call streams from memory), in N processes one after another.

    python benchmarks/cpu_process_spread.py [--procs 8] [--shape 11008x4096] [--fmt nvfp4]
        [--reps 100]

Each process prints its median with numba's threads (as numba_cpu picks them) and with one,
and what /proc/stat says the CPUs did meanwhile (user, system, idle and steal ticks): where
both CPUs are busy with this process and nothing is stolen, a slow process is slow inside its
own threads (on a VM: the host's load on the same cores, which the guest cannot see).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

FIELDS = ("user", "system", "idle", "steal")
_COLUMN = {"user": 0, "system": 2, "idle": 3, "steal": 7}  # /proc/stat's order


def cpu_ticks() -> dict:
    """{cpuN: {field: ticks}} from /proc/stat (Linux)."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3] != " ":
                cols = line.split()
                out[cols[0]] = {k: int(cols[1 + i]) for k, i in _COLUMN.items()}
    return out


def one_process(shape: str, fmt: str, reps: int) -> None:
    import numba
    import numpy as np
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cpu_call_layers import layer
    from softfp8.backends import numba_cpu

    n, k = map(int, shape.split("x"))
    g = torch.Generator().manual_seed(0)
    w = torch.randn(n, k, generator=g) * 0.02
    x = torch.randn(1, k, generator=g)

    def median(threads: int) -> tuple[float, dict, dict]:
        """The kernel alone (cpu_call_layers' L0) with numba at `threads`, after a call on a
        second copy of the weight each round: median us, and /proc/stat before and after the
        rounds."""
        numba.set_num_threads(threads)
        call, other = layer(0, w, x, fmt), layer(0, w * 1.1, x, fmt)
        times = []
        before = cpu_ticks()
        for _ in range(reps):
            other()
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        return float(np.median(times)) * 1e6, before, cpu_ticks()

    threads = numba_cpu._threads(numba.config.NUMBA_NUM_THREADS)
    many, before, after = median(threads)
    single = median(1)[0]
    ticks = "  ".join(f"{c} " + " ".join(f"{f} {after[c][f] - before[c][f]}" for f in FIELDS)
                      for c in sorted(after))
    print(f"{threads} threads {many:7.0f} us  1 thread {single:7.0f} us  ({many / single:.2f})  "
          f"{ticks}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--shape", default="11008x4096")
    ap.add_argument("--fmt", default="nvfp4", choices=["nvfp4", "mxfp4"])
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child process
    args = ap.parse_args()
    if args.one:
        one_process(args.shape, args.fmt, args.reps)
        return
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  {args.shape} {args.fmt}  "
          f"median of {args.reps} direct kernel calls a process, each after one on another copy",
          flush=True)
    for _ in range(args.procs):
        subprocess.run([sys.executable, os.path.abspath(__file__), "--one", "--shape", args.shape,
                        "--fmt", args.fmt, "--reps", str(args.reps)], check=True)


if __name__ == "__main__":
    main()
