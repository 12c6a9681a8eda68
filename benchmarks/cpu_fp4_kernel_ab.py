"""The FP4 table GEMV kernel of this checkout against a git revision's, called directly (no
`numba_cpu.matmul` around it), each on its own copy of the same weight, interleaved round by
round in a new random order (`cpu_gemv.shuffled_medians`).

    python benchmarks/cpu_fp4_kernel_ab.py --base HEAD [--shapes 256x4096:1,512x4096:2,
        11008x4096:2] [--formats nvfp4,mxfp4] [--x fp32|bf16] [--reps 200]

A shape N x K : threads. Small shapes stay in the caches (the loop's own speed, where a change
to the loop shows first); 11008 x 4096 streams from memory. The kernel is the one numba_cpu
runs here (`_fp4_table_kernels`: the AVX-512 or the AVX2 module), with the block scales decoded
in its loop where it can (`gemv_*_raw`), rows a pass as numba_cpu picks them; --x bf16 gives
the AVX-512 kernel bf16 steps (`_numba_dpbf16`). The revision's package is unpacked as
cpu_gemv_ab.py does it. Median ms a call; the largest difference between the two results is
printed (a changed summation order moves the last bits).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

import numba
import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import softfp8  # noqa: E402
from cpu_gemv import shuffled_medians  # noqa: E402
from cpu_gemv_ab import base_package  # noqa: E402
from softfp8.backends import _numba_dpbf16, numba_cpu  # noqa: E402

BLOCK = {"nvfp4": 16, "mxfp4": 32}


def shape_case(item: str):
    """One "NxK:threads" item of --shapes (here and cpu_fp4_scales_ab.py): numba set to that many
    threads; (n, k, threads, w, x, chunk), w and x random from seed 0, chunk the backend's."""
    shape, threads = item.split(":")
    n, k = map(int, shape.split("x"))
    threads = int(threads)
    numba.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(n, k, generator=g) * 0.02, torch.randn(k, generator=g)
    return n, k, threads, w, x, numba_cpu._chunk(n, threads)


def x_steps(mod, x, fmt, bf16):
    """x's steps for table module `mod`'s GEMV: bf16 ones (_numba_dpbf16) or the module's own."""
    if bf16:
        return _numba_dpbf16.x_steps(x.to(torch.bfloat16), BLOCK[fmt])
    return mod.x_steps(x.numpy(), BLOCK[fmt])


def kernel_call(mod, fmt, packed, steps, y, chunk, rows, in_loop=None):
    """A call of mod's GEMV on `packed`: its block scales decoded in the loop where the module
    can (an older revision's may not), or as `in_loop` says (True: the codes must allow it;
    cpu_fp4_scales_ab.py)."""
    w, s = packed.words.numpy(), packed.scales.numpy()
    raw, check = {"nvfp4": ("gemv_nvfp4_raw", "loop_decodes"),
                  "mxfp4": ("gemv_mxfp4_raw", "loop_decodes_e8m0")}[fmt]
    can = hasattr(mod, raw) and hasattr(mod, check) and getattr(mod, check)(packed.scales)
    if in_loop is None:
        in_loop = can
    assert can or not in_loop, f"{mod.__name__} can't decode these {fmt} scales in its loop"
    kernel = getattr(mod, raw if in_loop else f"gemv_{fmt}")
    head = (w, s, np.float32(packed.global_scale.item())) if fmt == "nvfp4" else (w, s)
    return lambda: kernel(*head, *steps, y, chunk, *rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision to compare against")
    ap.add_argument("--shapes", default="256x4096:1,512x4096:2,11008x4096:2")
    ap.add_argument("--formats", default="nvfp4,mxfp4")
    ap.add_argument("--x", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--reps", type=int, default=200, help="rounds (a fifth for shapes over 1M "
                    "weights)")
    args = ap.parse_args()
    this = numba_cpu._fp4_table_kernels()
    if this is None:
        sys.exit("numba targets neither FP4 table kernel here")
    if args.x == "bf16" and not _numba_dpbf16.available():
        sys.exit("bf16 steps need AVX-512 BF16")
    name = this.__name__.rsplit(".", 1)[1]
    _, base_cpu = base_package(args.base)
    base = importlib.import_module(f"softfp8_base.backends.{name}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  torch {torch.__version__}  numba "
          f"{numba.__version__}  kernel {name}  x {args.x}  base {args.base}; median ms")
    for item in args.shapes.split(","):
        n, k, threads, w, x, chunk = shape_case(item)
        for fmt in args.formats.split(","):
            rows = numba_cpu._fp4_group(this, k, fmt == "mxfp4", bf16=args.x == "bf16")
            steps = x_steps(this, x, fmt, args.x == "bf16")
            calls, ys = {}, {}
            for side, mod in (("base", base), ("this", this)):
                ys[side] = y = np.empty(n, np.float32)
                calls[side] = kernel_call(mod, fmt, softfp8.quantize(w, fmt), steps, y, chunk,
                                          rows)
            for fn in calls.values():
                fn()
            diff = float(np.abs(ys["base"] - ys["this"]).max())
            med = shuffled_medians(calls, args.reps if n * k <= 1 << 20 else args.reps // 5)
            print(f"{n}x{k} {threads} thread(s) {fmt}: base {med['base'] * 1e3:.4f}  this "
                  f"{med['this'] * 1e3:.4f}  this/base {med['this'] / med['base']:.3f}  "
                  f"(results differ by up to {diff:.3g})", flush=True)


if __name__ == "__main__":
    main()
