"""A/B (tried and dropped, BENCHMARKS.md sixteenth session): the AVX2 FP4 table kernel
(_numba_pshufb) whose per-step sums are one chain of 4 multiply-adds per scale half (A, the
package) against two chains of 2 added at the end (B: the dependency chain a step halved, one
add more). B is the package's module with that one change, built from its source text into a
temporary directory. 1 and 2 numba threads, 4 interleaved rounds of 15 calls, fastest and median
round; also checks that A and B agree.

    python benchmarks/cpu_fp4_chains_ab.py
"""
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
from cpu_fp4_kernels import median_ms  # noqa: E402
from softfp8.backends import _numba_pshufb as A  # noqa: E402
from softfp8.formats import SPECS  # noqa: E402

ONE_CHAIN = """            part = [None, None]
            for p, idx in enumerate((builder.and_(raw, nibble), hi_n)):"""
TWO_CHAINS = """            part = [[None, None], [None, None]]
            for p, idx in enumerate((builder.and_(raw, nibble), hi_n)):"""
ONE_FMA = (" " * 24 + "part[h] = builder.fmul(val, xvec) if part[h] is None else builder.call(\n"
           + " " * 28 + "fma, [val, xvec, part[h]])")
TWO_FMA = """                        c = part[h][sh]
                        part[h][sh] = builder.fmul(val, xvec) if c is None else builder.call(
                            fma, [val, xvec, c])
            part = [builder.fadd(part[h][0], part[h][1]) for h in range(2)]"""


def variant_b():
    src = inspect.getsource(A)
    assert ONE_CHAIN in src and ONE_FMA in src, "_numba_pshufb changed: update this A/B"
    src = src.replace(ONE_CHAIN, TWO_CHAINS).replace(ONE_FMA, TWO_FMA)
    src = src.replace("from ._numba", "from softfp8.backends._numba")
    path = os.path.join(tempfile.mkdtemp(), "pshufb_two_chains.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("pshufb_two_chains", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    if not A.available():
        raise SystemExit("needs AVX2 (numba's target)")
    B = variant_b()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} numba {numba.__version__}: ms, fastest / median "
          f"of 4 rounds")
    for shape in ("11008x4096", "4096x11008"):
        n, k = map(int, shape.split("x"))
        for fmt in ("nvfp4", "mxfp4"):
            p = softfp8.quantize(torch.randn(n, k) * 0.02, fmt)
            xs, xp = A.x_steps(torch.randn(k), SPECS[p.fmt].block)
            words, scales = p.words.numpy(), p.scales.numpy()
            g = np.float32(1.0) if fmt == "mxfp4" else np.float32(p.global_scale.item())
            ys = {m: np.empty(n, np.float32) for m in "AB"}

            def call(mod, y):
                if fmt == "mxfp4":
                    return lambda: mod.gemv_mxfp4(words, scales, xs, xp, y, 344)
                return lambda: mod.gemv_nvfp4(words, scales, g, xs, xp, y, 344)
            fns = {"A": call(A, ys["A"]), "B": call(B, ys["B"])}
            for fn in fns.values():
                fn()
            assert np.allclose(ys["A"], ys["B"], rtol=1e-5, atol=1e-6), "A and B differ"
            for threads in (1, 2):
                numba.set_num_threads(threads)
                res = {m: [] for m in fns}
                for _ in range(4):
                    for m, fn in fns.items():
                        res[m].append(median_ms(fn, 15))
                print(f"{shape} {fmt} {threads}t  " + "   ".join(
                    f"{m} {min(v):.3f} / {statistics.median(v):.3f}" for m, v in res.items()),
                    flush=True)


if __name__ == "__main__":
    main()
