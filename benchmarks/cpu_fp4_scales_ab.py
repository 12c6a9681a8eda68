"""The FP4 table GEMV with its block scales decoded in the loop (`gemv_nvfp4_raw`,
`gemv_mxfp4_raw`) against the one that decodes each row's scales before it (`gemv_nvfp4`,
`gemv_mxfp4`), called directly, each on its own copy of the same weight, interleaved round by
round in a new random order.

    python benchmarks/cpu_fp4_scales_ab.py [--shapes 256x4096:1,11008x4096:2,4096x11008:2]
        [--reps 40] [--table avx2|avx512] [--x fp32|bf16] [--fmt nvfp4|mxfp4]

A shape N x K : threads; 256 x 4096 fits the L2 (the loops alone), the others stream from
memory. --table: the AVX2 kernel (_numba_pshufb) or the AVX-512 one (_numba_lut, rows a pass as
numba_cpu picks them); by default the one numba_cpu runs here. --x bf16: the AVX-512 kernel's
bf16 products (_numba_dpbf16). --fmt mxfp4: the AVX-512 kernel only (the AVX2 one decodes E8M0
scales before its loop). Median ms a call. (Until 2026-12-03 this was cpu_nvfp4_scales_ab.py,
NVFP4 only.)
"""
from __future__ import annotations

import argparse
import os
import sys

import numba
import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import softfp8  # noqa: E402
from softfp8.backends import _numba_dpbf16 as D  # noqa: E402
from softfp8.backends import _numba_lut as L  # noqa: E402
from softfp8.backends import _numba_pshufb as P  # noqa: E402
from softfp8.backends import numba_cpu  # noqa: E402
from cpu_fp4_kernel_ab import kernel_call, shape_case, x_steps  # noqa: E402
from cpu_gemv import shuffled_medians  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="256x4096:1,11008x4096:2,4096x11008:2")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--table", choices=["avx2", "avx512"], default=None)
    ap.add_argument("--x", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--fmt", choices=["nvfp4", "mxfp4"], default="nvfp4")
    args = ap.parse_args()
    mx = args.fmt == "mxfp4"
    mod = {"avx2": P, "avx512": L, None: numba_cpu._fp4_table_kernels()}[args.table]
    if mod is None or not mod.available():
        sys.exit(f"numba does not target the {args.table or 'table'} kernel here")
    if args.x == "bf16" and (mod is not L or not D.available()):
        sys.exit("bf16 products need the AVX-512 kernel and AVX-512 BF16")
    if mx and mod is not L:
        sys.exit("only the AVX-512 kernel decodes E8M0 scales in its loop")
    print(f"# torch {torch.__version__}  numba {numba.__version__}  reps {args.reps}  "
          f"kernel {mod.__name__.rsplit('.', 1)[1]}  x {args.x}  {args.fmt}")
    for item in args.shapes.split(","):
        n, k, threads, w, x, chunk = shape_case(item)
        steps = x_steps(mod, x, args.fmt, args.x == "bf16")
        rows = numba_cpu._fp4_group(mod, k, args.fmt == "mxfp4", bf16=args.x == "bf16")
        calls, ys = {}, {}
        for name in ("before the loop", "in the loop"):
            ys[name] = y = np.empty(n, np.float32)
            calls[name] = kernel_call(mod, args.fmt, softfp8.quantize(w, args.fmt), steps, y,
                                      chunk, rows, in_loop=name == "in the loop")
        for fn in calls.values():
            fn()
        assert np.array_equal(*(y.view(np.uint32) for y in ys.values())), "results differ"
        med = shuffled_medians(calls, args.reps)
        print(f"{n}x{k}, {threads} thread(s), median ms: " + "  ".join(
            f"{key} {med[key] * 1e3:.3f}" for key in calls)
            + f"  in / before {med['in the loop'] / med['before the loop']:.3f}")


if __name__ == "__main__":
    main()
