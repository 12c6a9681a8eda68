"""Where the AVX2 FP4 loop's time goes, measured (the CPU counterpart of gpu_mma_probe.py): the
package's table kernel (_numba_pshufb) against copies with parts of the decode taken out, each
built from the module's source text with one change (as cpu_fp4_chains_ab.py builds its B).
The copies give wrong results on purpose; timing only, 1 and 2 numba threads (the 2-vCPU
machine's second thread is sometimes the first core's sibling, sometimes a core of its own:
`vector scaling` says which, as in cpu_fp4_kernels.py).

- kernel:      the package
- no lookup:   each `vpshufb` table lookup replaced by an `or` (an operation any vector pipe
               takes), the high bytes with 0x30 so that every value stays a normal float far
               from the subnormals (or-ing the table in instead made high bytes 0x00-0x0F:
               subnormal products, 3-29% slower than the kernel; not a measure of anything)
- no decode:   the 8 vectors of a step made from the raw code words by `and`, `or` and `xor`
               only (normal floats in [0.5, 1), each vector its own): the kernel's loads,
               multiply-adds and scales without its lookups, interleaves and shifts
- torch fp16 mv: the fastest of torch's matrix-vector products here (cpu_gemv.py), same threads

    python benchmarks/cpu_fp4_ablate.py [--shapes 11008x4096,4096x11008] [--reps 15]
"""
import argparse
import importlib.util
import inspect
import os
import statistics
import sys
import tempfile
import time

import numba
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import softfp8  # noqa: E402
from cpu_fp4_kernels import median_ms, vector_scaling  # noqa: E402
from softfp8.backends import _numba_pshufb as A  # noqa: E402
from softfp8.formats import SPECS  # noqa: E402

LOOKUP = ("                hb = builder.call(pshufb, [high, idx])\n"
          "                lb = builder.call(pshufb, [low, idx])\n")
# the high bytes or-ed with 0x30: every value a normal float far from the subnormals
NO_LOOKUP = ("                hb = builder.or_(idx, ir.Constant(vb, [ir.Constant(i8, 0x30)]"
             " * 32))\n                lb = builder.or_(idx, low)\n")
VALUE = "                        val = builder.bitcast(bits, vf)\n"
# a normal float from the raw words: sign and mantissa kept, exponent 126, mantissa bits flipped
# by the vector's number (4p + 2h + sh) so that each of a step's 8 vectors differs
NO_DECODE = ("                        val = builder.bitcast(builder.xor(builder.or_(builder.and_("
             "builder.bitcast(raw, vi), ir.Constant(vi, [ir.Constant(i32, -2139095041)] * 8)), "
             "ir.Constant(vi, [ir.Constant(i32, 0x3F000000)] * 8)), ir.Constant(vi, [ir.Constant("
             "i32, (4 * p + 2 * h + sh) << 12)] * 8)), vf)\n")

VARIANTS = {
    "no lookup": ((LOOKUP, NO_LOOKUP),),
    "no decode": ((VALUE, NO_DECODE),),
}


def variant(name, edits):
    """_numba_pshufb with `edits` (old, new) applied to its source, imported from a temp file."""
    src = inspect.getsource(A)
    for old, new in edits:
        assert old in src, f"_numba_pshufb changed: update {name!r} in this script"
        src = src.replace(old, new)
    return from_source("pshufb_" + "".join(c if c.isalnum() else "_" for c in name), src)


def from_source(mod_name, src):
    """A module of softfp8.backends rebuilt from source text `src` (its relative imports made
    absolute), imported as `mod_name` from a temporary file."""
    src = src.replace("from ._numba", "from softfp8.backends._numba").replace(
        "from . import", "from softfp8.backends import")
    path = os.path.join(tempfile.mkdtemp(), mod_name + ".py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(mod_name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fp4_case(shape, fmt):
    """One "NxK" shape of one FP4 format as the row kernels take it: (packed weight, x, gemv),
    gemv(mod, y) a no-argument call of module `mod`'s parallel GEMV into y (chunk 344, as the
    backend) -- the kernel or any `variant` of it. Random weights and x, no seed."""
    n, k = map(int, shape.split("x"))
    p = softfp8.quantize(torch.randn(n, k) * 0.02, fmt)
    x = torch.randn(k)
    xs, xp = A.x_steps(x, SPECS[p.fmt].block)
    words, scales = p.words.numpy(), p.scales.numpy()
    g = np.float32(1.0) if fmt == "mxfp4" else np.float32(p.global_scale.item())

    def gemv(mod, y):
        if fmt == "mxfp4":
            return lambda: mod.gemv_mxfp4(words, scales, xs, xp, y, 344)
        return lambda: mod.gemv_nvfp4(words, scales, g, xs, xp, y, 344)
    return p, x, gemv


def rounds_ms(fns, rounds, reps):
    """{name: [median ms of `reps` calls, one a round]} over `rounds` rounds, each round calling
    every fn of `fns` in turn (interleaved, so that the machine's moods fall on all of them)."""
    res = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            res[name].append(median_ms(fn, reps))
    return res


def fastest_median(res):
    """"name fastest / median" of each `rounds_ms` entry, on one line."""
    return "   ".join(f"{m} {min(v):.3f} / {statistics.median(v):.3f}" for m, v in res.items())


def ab_rounds(b, formats, check):
    """The kernel (A) against module `b` (B) on 11008x4096 and 4096x11008 in each format: both
    called once, `check(shape, fmt, p, x, ys)` on their results (ys: {"A": y, "B": y}), then
    "fastest / median" of 4 interleaved rounds of 15 calls at 1 and 2 threads, one line each."""
    for shape in ("11008x4096", "4096x11008"):
        for fmt in formats:
            p, x, gemv = fp4_case(shape, fmt)
            ys = {m: np.empty(p.shape[0], np.float32) for m in "AB"}
            fns = {"A": gemv(A, ys["A"]), "B": gemv(b, ys["B"])}
            for fn in fns.values():
                fn()
            check(shape, fmt, p, x, ys)
            for threads in (1, 2):
                numba.set_num_threads(threads)
                print(f"{shape} {fmt} {threads}t  {fastest_median(rounds_ms(fns, 4, 15))}",
                      flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="11008x4096,4096x11008")
    ap.add_argument("--formats", default="mxfp4,nvfp4")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    if not A.available():
        raise SystemExit("needs AVX2 (numba's target)")
    mods = {"kernel": A, **{name: variant(name, edits) for name, edits in VARIANTS.items()}}
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} numba {numba.__version__}, torch "
          f"{torch.__version__}, vector scaling {vector_scaling():.2f}x: ms, fastest / median "
          f"of {args.rounds} rounds (interleaved), against the kernel and torch's fp16 mv")
    for shape in args.shapes.split(","):
        for fmt in args.formats.split(","):
            p, x, gemv = fp4_case(shape, fmt)
            y = np.empty(p.shape[0], np.float32)
            fns = {name: gemv(mod, y) for name, mod in mods.items()}
            w16, x16 = softfp8.dequantize(p).half(), x.half()
            fns["torch fp16 mv"] = lambda: torch.mv(w16, x16)  # cpu_gemv.py's fastest torch mv
            for threads in map(int, args.threads.split(",")):
                numba.set_num_threads(threads)
                torch.set_num_threads(threads)
                res = rounds_ms(fns, args.rounds, args.reps)
                base, mv = min(res["kernel"]), min(res["torch fp16 mv"])
                for name, v in res.items():
                    print(f"{shape} {fmt} {threads}t {name:13s} {min(v):6.3f} / "
                          f"{statistics.median(v):6.3f} ms  {min(v) / base:5.2f} of the kernel, "
                          f"{mv / min(v):5.2f}x the fp16 mv", flush=True)


if __name__ == "__main__":
    main()
