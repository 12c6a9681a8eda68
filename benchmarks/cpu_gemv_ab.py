"""The CPU GEMV of this checkout against the one of a git revision, in one process, interleaved.

    python benchmarks/cpu_gemv_ab.py --base HEAD~1 [--shapes 11008x4096,4096x11008]
        [--formats e5m2,e4m3,nvfp4,mxfp4] [--reps 20] [--x fp32|bf16|fp16] [--cold N]

A 2-vCPU VM moves by 20-40% from minute to minute (docs/decisions.md, Method), more than most changes
to a kernel; only calls interleaved round by round in one process compare. The revision's
`softfp8` package is unpacked (`git archive`) into a temporary folder as `softfp8_base` (its
imports are relative) and quantizes its own copy of the same weights; each round calls torch's
fp16 mv, then every format through both packages' `cpu_backend.matmul`, in a new random order a
round (`cpu_gemv.shuffled_medians`). Both results are compared first (same bits expected unless
a change says why not: the difference is printed). Numba compiles the base kernels afresh.
`--x` is the activations' dtype (both sides get the same x; torch's mv stays fp16). `--cold N`
then times each format's first call in a fresh process, with an empty numba cache and with it
filled (`cpu_gemv.cold_start`), the revision's and this checkout's in turn, N times.
"""
import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import time

import numba
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import softfp8  # noqa: E402
from cpu_gemv import DTYPES, cold_start, shuffled_medians  # noqa: E402
from softfp8.backends import numba as cpu_backend  # noqa: E402


def unpacked(rev: str) -> str:
    """A temporary folder holding the revision's softfp8 package."""
    where = tempfile.mkdtemp()
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "softfp8"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", where], input=archive, check=True)
    return where


def base_package(rev: str):
    """The revision's softfp8 as the module softfp8_base (from a temporary folder)."""
    where = unpacked(rev)
    os.rename(os.path.join(where, "softfp8"), os.path.join(where, "softfp8_base"))
    sys.path.insert(0, where)
    base = importlib.import_module("softfp8_base")
    try:  # the CPU backend's module, a package from the revision that moved it on
        return base, importlib.import_module("softfp8_base.backends.numba")
    except ImportError:
        return base, importlib.import_module("softfp8_base.backends.numba_cpu")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision to compare against")
    ap.add_argument("--shapes", default="11008x4096,4096x11008")
    ap.add_argument("--formats", default="e5m2,e4m3,nvfp4,mxfp4")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--x", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--cold", type=int, default=0, metavar="N",
                    help="then N rounds of cold starts, base and this (cpu_gemv.cold_start)")
    args = ap.parse_args()
    base, base_cpu = base_package(args.base)
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "softfp8"], check=True,
                           capture_output=True, text=True).stdout.strip()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  torch {torch.__version__}  numba "
          f"{numba.__version__}  threads {numba.get_num_threads()}  x {args.x}  base {args.base}"
          f"  this "
          f"{head}{' + uncommitted changes' if dirty else ''}; medians of {args.reps} rounds, ms"
          + "".join(f"  {k}={v}" for k, v in sorted(os.environ.items())
                    if k.startswith(("SOFTFP8_", "NUMBA_", "OMP_"))))
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.lower().split("x"))
        g = torch.Generator().manual_seed(0)
        w = torch.randn(n, k, generator=g) * 0.02
        x = torch.randn(1, k, generator=g)
        w16, x16 = w.half(), x[0].half()
        x = x.to(DTYPES[args.x])
        calls = {"torch fp16 mv": lambda: torch.mv(w16, x16)}
        for fmt in args.formats.split(","):
            pb, p = base.quantize(w, fmt), softfp8.quantize(w, fmt)
            calls[(fmt, "base")] = lambda pb=pb: base_cpu.matmul(x, pb, None)
            calls[(fmt, "this")] = lambda p=p: cpu_backend.matmul(x, p, None)
            diff = (calls[(fmt, "base")]() - calls[(fmt, "this")]()).abs().max().item()
            if diff:
                print(f"  {shape} {fmt}: results differ by up to {diff:.3g}")
        for fn in calls.values():
            fn()
        ms = {key: s * 1e3 for key, s in shuffled_medians(calls, args.reps).items()}
        fp16 = ms.pop("torch fp16 mv")
        print(f"{shape}: torch fp16 mv {fp16:.3f}")
        for fmt in args.formats.split(","):
            b, t = ms[(fmt, "base")], ms[(fmt, "this")]
            print(f"  {fmt:>6}: base {b:.3f} ({fp16 / b:.2f}x fp16)  this {t:.3f} "
                  f"({fp16 / t:.2f}x)  this/base {t / b:.3f}")
    if args.cold:
        cold_starts(args.base, args.formats.split(","), args.cold)


def cold_starts(rev: str, formats: list, rounds: int) -> None:
    """Each format's first call in a fresh process with an empty numba cache, then with that
    cache filled, for the revision's package and this checkout's, alternating, `rounds` times."""
    roots = {"base": unpacked(rev), "this": ROOT}
    print("cold start, 256x512 GEMV in a fresh process: first call with an empty cache / with "
          "it filled, s")
    for _ in range(rounds):
        for fmt in formats:
            cells = []
            for side, root in roots.items():
                with tempfile.TemporaryDirectory() as cache:
                    empty = cold_start(fmt, cache, root)[0]
                    filled = cold_start(fmt, cache, root)[0]
                cells.append(f"{side} {empty:.2f} / {filled:.3f}")
            print(f"  {fmt:>6}: " + "   ".join(cells), flush=True)


if __name__ == "__main__":
    main()
