"""Where an FP4 numba_cpu.matmul call's time goes beyond its kernel, layer by layer, in the rounds
the issue's command runs (torch's fp32 and fp16 mv interleaved, each round in a new random order:
`cpu_gemv.shuffled_medians`), each layer on its own copy of the weight:

    python benchmarks/cpu_call_layers.py [--shape 11008x4096] [--fmt nvfp4] [--reps 30] [--seeds 3]

L0 the GEMV kernel alone (x's steps and y made once); L1 with x's steps made each call from a
float32 numpy x, as numba_cpu makes them (`row_steps` where whole steps cover the padded K, since
the twenty-fourth session; else `x_steps`); L2 with that x taken from the torch tensor each call
(`x.numpy()`, or `_x_row`); L3 with y allocated and returned as a tensor; L4 the whole
`numba_cpu.matmul`. Medians, ms.
(Session 23's receipt has a layer Lx, the GEMV making x's steps itself from x.numpy(): a change
measured and not kept, BENCHMARKS.md log.)
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import softfp8  # noqa: E402
from cpu_gemv import shuffled_medians  # noqa: E402
from softfp8.backends import numba_cpu  # noqa: E402


def layer(level: int, w: torch.Tensor, x: torch.Tensor, fmt: str):
    """The call of layer `level` (module docstring) on its own quantized copy of w."""
    p = softfp8.quantize(w, fmt)
    if level == 4:
        return lambda: numba_cpu.matmul(x, p)
    numba_cpu.matmul(x, p)  # loads the kernels
    plan = numba_cpu._plan(p)
    if not hasattr(plan, "kernel"):
        raise SystemExit("this CPU runs the bit-operation FP4 kernels: no table kernel to time")
    n, kp = plan.n, plan.kp
    chunk = numba_cpu._chunk(n, numba_cpu._threads(numba_cpu._numba()[3]()))
    head = (plan.words, plan.scales) if plan.mx else (plan.words, plan.scales, plan.g)

    def kernel(xs, xp, y):
        plan.kernel(*head, xs, xp, y, chunk, *plan.group)

    if plan.row_steps is not None:  # numba_cpu's route for float32 x where steps cover Kp
        def numpy_x():
            return np.ascontiguousarray(x.numpy())

        def steps(xn):
            return plan.row_steps(xn, kp), plan.no_planes
    else:
        def numpy_x():
            return numba_cpu._x_row(x, kp)

        def steps(xn):
            return plan.table.x_steps(xn, plan.block)

    xr = numpy_x()
    xs, xp = steps(xr)
    y = np.empty(n, np.float32)
    if level == 0:
        return lambda: kernel(xs, xp, y)
    if level == 1:
        return lambda: kernel(*steps(xr), y)
    if level == 2:
        return lambda: kernel(*steps(numpy_x()), y)

    def full():
        yn = np.empty((1, n), np.float32)
        kernel(*steps(numpy_x()), yn[0])
        return torch.from_numpy(yn)
    return full


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="11008x4096")
    ap.add_argument("--fmt", default="nvfp4", choices=["nvfp4", "mxfp4"])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    n, k = map(int, args.shape.split("x"))
    g = torch.Generator().manual_seed(0)
    w = torch.randn(n, k, generator=g) * 0.02
    x = torch.randn(1, k, generator=g)
    calls = {}
    for name, dt in (("fp32", torch.float32), ("fp16", torch.float16)):
        wd, xd = w.to(dt), x[0].to(dt)
        calls[f"torch {name} mv"] = (lambda wd=wd, xd=xd: torch.mv(wd, xd))
    for level in range(5):
        calls[f"L{level}"] = layer(level, w, x, args.fmt)
    ref = calls["L4"]()[0].numpy()
    for fn in calls.values():
        for _ in range(3):
            fn()
    print(f"# {args.shape} {args.fmt}  torch {torch.__version__}  threads {torch.get_num_threads()}"
          f"  medians of {args.reps} rounds, ms (L0 kernel, L1 +x steps, L2 +x from torch, "
          f"L3 +y, L4 numba_cpu.matmul)")
    for seed in range(args.seeds):
        ms = shuffled_medians(calls, args.reps, seed)
        print("  ".join(f"{key} {v * 1e3:.3f}" for key, v in ms.items()), flush=True)
    y = calls["L3"]()[0].numpy()
    assert np.array_equal(y, ref), "the layers' result differs from numba_cpu.matmul's"


if __name__ == "__main__":
    main()
