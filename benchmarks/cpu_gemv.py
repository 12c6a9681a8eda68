"""CPU GEMV (M = 1): the numba backend per format against torch's fp32, bf16 and fp16 mv.

    python benchmarks/cpu_gemv.py [--shapes 11008x4096,4096x11008] [--reps 50] [--formats e4m3,...]

Everything runs in one process on the same weights: each timing is the median of `--reps`
calls after warm-up, and numba and torch calls are interleaved round by round so that a busy
machine slows both alike, each round in a new random order (`shuffled_medians`), so that the
slot right after torch's calls (where numba's idle workers must be woken) falls on every entry
alike. Cold start is measured in a child process with an empty NUMBA_CACHE_DIR (first call =
compilation), and again with that cache filled (load from disk).
The header and the last line give the machine's two-thread vector scaling right then
(`cpu_threads.py`): a VM's two vCPUs may sit on two cores (~2x) or on one core's two hardware
threads (~1x), and that moves the numba GEMV by up to 2x between runs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import softfp8  # noqa: E402
from softfp8.backends import numba as cpu_backend
from softfp8.backends.numba import _gemv, _runtime  # noqa: E402
from softfp8.dispatch import E2M1Decode  # noqa: E402

VARIANTS = [("e5m2", "-", "fp32"), ("e4m3", "-", "fp32"), ("e4m3_b128", "-", "fp32"),
            ("nvfp4", "select", "fp32"),
            ("nvfp4", "inject", "fp32"), ("mxfp4", "select", "fp32"), ("mxfp4", "inject", "fp32"),
            ("nvfp4", "select", "bf16"), ("mxfp4", "select", "bf16")]
"""(format, E2M1 decoder, activation dtype): x reaches cpu_backend.matmul as float32, or rounded to
bf16 as a bf16 model passes it (the FP4 kernel then multiplies bf16 values where the CPU has
AVX-512 BF16: _dpbf16), the same x torch's bf16 mv gets."""
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
"""Activation dtypes by name (this script's VARIANTS, cpu_gemv_ab.py and cpu_hugepages_ab.py)."""
TARGET = {"e5m2": 1.5, "e4m3": 1.5, "e4m3_b128": 1.5, "nvfp4": 2.5, "mxfp4": 2.5}

_COLD = """
import json, sys, time, torch
sys.path.insert(0, {root!r})
import softfp8
from softfp8.backends import numba as cpu_backend
from softfp8.dispatch import E2M1Decode
p = softfp8.quantize(torch.randn(256, 512), {fmt!r})
x = torch.randn(1, 512)
t = time.perf_counter(); cpu_backend.matmul(x, p, None, e2m1=E2M1Decode.SELECT); first = time.perf_counter() - t
t = time.perf_counter(); cpu_backend.matmul(x, p, None, e2m1=E2M1Decode.SELECT); second = time.perf_counter() - t
print(json.dumps([first, second]))
"""


def cold_start(fmt: str, cache_dir: str, root: str = ROOT) -> tuple[float, float]:
    """(first, second) call of a 256 x 512 GEMV in a fresh process with NUMBA_CACHE_DIR
    `cache_dir`, seconds; `root` holds the softfp8 package it imports (cpu_gemv_ab.py --cold
    gives a revision's)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", _COLD.format(root=root, fmt=fmt)], env=env,
                         capture_output=True, text=True, check=True)
    first, second = json.loads(out.stdout.strip().splitlines()[-1])
    return first, second


def vector_scaling() -> float:
    """2 threads x the work of a vector-throughput loop over 1 thread's time (cpu_threads.py)."""
    import numba
    import numpy as np

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cpu_threads

    n = max(2, numba.get_num_threads())
    a = np.random.default_rng(0).random((n, 2048), dtype=np.float32)
    previous = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = cpu_threads._time(lambda: cpu_threads._dot_par(a[:1], a[:1], 50_000, 1), 3)
        numba.set_num_threads(n)
        many = cpu_threads._time(lambda: cpu_threads._dot_par(a, a, 50_000, n), 3)
    finally:
        numba.set_num_threads(previous)
    return n * one / many


def fp4_kernel() -> str:
    """Which FP4 GEMV cpu_backend runs here: the AVX-512 or AVX2 table (and for bf16 activations
    the bf16 products), or the bit operations."""
    table = _gemv._fp4_table_kernels()
    if table is None:
        return "_kernels (bit ops)"
    name = table.__name__.rsplit(".", 1)[-1]
    products = _gemv._bf16_products(table, _gemv._fp4_lut_setting())
    return name + (" + _dpbf16" if products else "")


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def shuffled_medians(calls: dict, reps: int, seed: int = 0) -> dict:
    """{key: median seconds} of `reps` interleaved rounds, each calling every entry of `calls`
    once (contention hits every entry alike) in its own random order: what a call follows moves
    its time (the first numba call after torch's calls pays for waking numba's idle workers, and a
    weight that fits the L3 may still be there from the call before), so every entry must follow
    every other alike. (Until 2026-12-02 the order rotated by one entry a round, which keeps each
    entry's neighbours: the first numba entry followed torch's fp16 mv in nearly every round.)"""
    rng = random.Random(seed)
    samples = {key: [] for key in calls}
    order = list(calls.items())
    for _ in range(reps):
        rng.shuffle(order)
        for key, fn in order:
            samples[key].append(timed(fn))
    return {key: statistics.median(v) for key, v in samples.items()}


def bench_shape(n: int, k: int, reps: int, variants=VARIANTS) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(n, k, generator=g) * 0.02
    x = torch.randn(1, k, generator=g)
    torch_calls = {}
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        wd, xd = w.to(dt), x[0].to(dt)
        torch_calls[name] = (lambda wd=wd, xd=xd: torch.mv(wd, xd))
    calls = dict(torch_calls)
    for fmt, dec, xdt in variants:
        p = softfp8.quantize(w, fmt)  # each its own weight: none is in the L3 from another
        e2m1 = E2M1Decode.INJECT if dec == "inject" else E2M1Decode.SELECT
        xd = x.to(DTYPES[xdt])
        calls[(fmt, dec, xdt)] = (lambda p=p, e2m1=e2m1, xd=xd: cpu_backend.matmul(xd, p, None,
                                                                                 e2m1=e2m1))
    for fn in calls.values():  # warm-up (and compile, or load from the cache)
        for _ in range(3):
            fn()
    ms = {key: s * 1e3 for key, s in shuffled_medians(calls, reps).items()}
    best_torch = min(ms[t] for t in torch_calls)
    return [dict(shape=f"{n}x{k}", fmt=fmt, e2m1=dec, x=xdt, numba_ms=ms[(fmt, dec, xdt)],
                 fp32_ms=ms["fp32"], bf16_ms=ms["bf16"], fp16_ms=ms["fp16"],
                 speedup=best_torch / ms[(fmt, dec, xdt)], target=TARGET[fmt])
            for fmt, dec, xdt in variants]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="11008x4096,4096x11008")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json", help="also write the rows as JSON to this file")
    ap.add_argument("--formats", help="comma list: time only these formats' variants, and "
                    "skip the cold starts (e.g. e4m3,e4m3_b128)")
    args = ap.parse_args()
    wanted = None if args.formats is None else set(args.formats.split(","))
    variants = [v for v in VARIANTS if wanted is None or v[0] in wanted]
    import numba

    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  {platform.processor() or platform.machine()}  "
          f"torch {torch.__version__}  numba {numba.__version__}  threads numba "
          f"{numba.get_num_threads()} torch {torch.get_num_threads()} -> "
          f"{_runtime.threads_for(numba.get_num_threads())}  "
          f"loadavg {os.getloadavg()[0]:.2f}  vector scaling {vector_scaling():.2f}x  "
          f"FP4 kernel {fp4_kernel()}")
    rows = []
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.lower().split("x"))
        rows += bench_shape(n, k, args.reps, variants)
    head = (f"{'shape':>11} {'format':>6} {'e2m1':>6} {'x':>4} {'numba ms':>9} {'fp32 ms':>8} "
            f"{'bf16 ms':>8} {'fp16 ms':>8} {'speedup':>8} {'target':>7}")
    print(head)
    for r in rows:
        ok = "ok" if r["speedup"] >= r["target"] else "MISS"
        print(f"{r['shape']:>11} {r['fmt']:>6} {r['e2m1']:>6} {r['x']:>4} {r['numba_ms']:9.3f} "
              f"{r['fp32_ms']:8.3f} {r['bf16_ms']:8.3f} {r['fp16_ms']:8.3f} "
              f"{r['speedup']:7.2f}x {r['target']:5.1f}x {ok}")
    print("\ncold start, 256x512 GEMV in a fresh process: first call (s), second call (ms)")
    with tempfile.TemporaryDirectory() as cache:
        for fmt in TARGET if wanted is None else ():
            compiled = cold_start(fmt, cache)
            cached = cold_start(fmt, cache)
            print(f"  {fmt:>6}: empty cache {compiled[0]:.2f} s / {compiled[1] * 1e3:.2f} ms;  "
                  f"filled cache {cached[0]:.3f} s / {cached[1] * 1e3:.2f} ms")
    print(f"loadavg at end {os.getloadavg()[0]:.2f}; vector scaling at end {vector_scaling():.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
