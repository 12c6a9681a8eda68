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
    ab.ab_rounds(B, ("nvfp4", "mxfp4"), agree)


def agree(shape, fmt, p, x, ys):
    assert np.allclose(ys["A"], ys["B"], rtol=1e-5, atol=1e-6), "A and B differ"


if __name__ == "__main__":
    main()
