"""A/B (tried and dropped, BENCHMARKS.md sixteenth session): the AVX2 FP4 table kernel
(_numba_pshufb) whose per-step sums are one chain of 4 multiply-adds per scale half (A, the
package) against two chains of 2 added at the end (B: the dependency chain a step halved, one
add more). B is the package's module with that one change, built from its source text into a
temporary directory. 1 and 2 numba threads, 4 interleaved rounds of 15 calls, fastest and median
round; also checks that A and B agree.

    python benchmarks/cpu_fp4_chains_ab.py
"""
import os
import sys
import time

import numba
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_fp4_ablate as ab  # noqa: E402
from softfp8.backends import _numba_pshufb as A  # noqa: E402

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
    return ab.variant("two chains", ((ONE_CHAIN, TWO_CHAINS), (ONE_FMA, TWO_FMA)))


def main():
    if not A.available():
        raise SystemExit("needs AVX2 (numba's target)")
    B = variant_b()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} numba {numba.__version__}: ms, fastest / median "
          f"of 4 rounds")
    for shape in ("11008x4096", "4096x11008"):
        for fmt in ("nvfp4", "mxfp4"):
            p, _, gemv = ab.fp4_case(shape, fmt)
            ys = {m: np.empty(p.shape[0], np.float32) for m in "AB"}
            fns = {"A": gemv(A, ys["A"]), "B": gemv(B, ys["B"])}
            for fn in fns.values():
                fn()
            assert np.allclose(ys["A"], ys["B"], rtol=1e-5, atol=1e-6), "A and B differ"
            for threads in (1, 2):
                numba.set_num_threads(threads)
                print(f"{shape} {fmt} {threads}t  {ab.fastest_median(ab.rounds_ms(fns, 4, 15))}",
                      flush=True)

if __name__ == "__main__":
    main()
