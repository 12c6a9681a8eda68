"""What a second thread buys on this CPU: a vector-throughput loop and a latency-bound loop, run
by 1 thread and then by N threads (numba prange, each thread the same work on its own data).

    python benchmarks/cpu_threads.py [--threads 2] [--reps 3]

Scaling = N x the work / time, over 1 x the work / time. Two physical cores give ~N on both
loops; two hardware threads of one core (SMT siblings, which a VM may present as two "cores")
give ~1 on the throughput loop, since they share one core's vector units, but more on the
latency loop, which leaves those units idle. The numba GEMV of issue 6 is the first kind.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numba as nb
import numpy as np


@nb.njit(fastmath=True, cache=True)
def _dot_loop(a, b, reps):
    """Vector FMAs on L1-resident arrays (2 x 8 KiB): throughput-bound."""
    t = 0.0
    for _ in range(reps):
        s = np.float32(0)
        for i in range(a.size):
            s += a[i] * b[i]
        t += s
    return t


@nb.njit(cache=True)
def _chase_loop(nxt, reps):
    """A dependent chain of loads through a 256 KiB permutation: latency-bound."""
    j = 0
    for _ in range(reps):
        j = nxt[j]
    return j


@nb.njit(parallel=True, cache=True)
def _dot_par(a, b, reps, n):
    out = np.zeros(n)
    for t in nb.prange(n):
        out[t] = _dot_loop(a[t], b[t], reps)
    return out


@nb.njit(parallel=True, cache=True)
def _chase_par(nxt, reps, n):
    out = np.zeros(n, np.int64)
    for t in nb.prange(n):
        out[t] = _chase_loop(nxt[t], reps)
    return out


def _time(fn, reps):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    n = args.threads
    rng = np.random.default_rng(0)
    a = rng.random((n, 2048), dtype=np.float32)
    b = rng.random((n, 2048), dtype=np.float32)
    nxt = np.stack([rng.permutation(1 << 15) for _ in range(n)]).astype(np.int64)
    dot_reps, chase_reps = 100_000, 20_000_000
    _dot_par(a, b, 10, n)  # compile (or load from the cache)
    _chase_par(nxt, 10, n)
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  {platform.machine()}  cpus {os.cpu_count()}  "
          f"numba {nb.__version__} ({nb.config.THREADING_LAYER})  loadavg {os.getloadavg()[0]:.2f}")
    for name, par, data, reps in (("vector FMA loop (throughput)", _dot_par, (a, b), dot_reps),
                                  ("pointer chase (latency)", _chase_par, (nxt,), chase_reps)):
        nb.set_num_threads(1)
        one = _time(lambda: par(*[d[:1] for d in data], reps, 1), args.reps)
        nb.set_num_threads(n)
        many = _time(lambda: par(*data, reps, n), args.reps)
        print(f"{name:30}  1 thread {one * 1e3:8.1f} ms   {n} threads x {n} work "
              f"{many * 1e3:8.1f} ms   scaling {n * one / many:4.2f}x")


if __name__ == "__main__":
    main()
