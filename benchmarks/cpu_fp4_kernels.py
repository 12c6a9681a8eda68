"""The numba FP4 table GEMVs called directly, with no torch call between them: 1 and 2 threads,
one row or four rows a pass (AVX-512 `_numba_lut`; the AVX2 `_numba_pshufb` runs one), per
shape (what `cpu_gemv.py` measures interleaved with torch); and, single thread, what decoding
every row's block scales costs alone (the row kernels decode a row's scales before its loop).

    python benchmarks/cpu_fp4_kernels.py [--shapes 11008x4096,4096x11008] [--reps 20]

Median ms per call after 3 warm-up calls; chunk 344 rows. The machine's two-thread vector
scaling (`cpu_threads.py`) is printed before and after: it moves these numbers by up to 2x.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numba
import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import softfp8  # noqa: E402
from softfp8.backends import _numba_lut, _numba_pshufb  # noqa: E402
from softfp8.formats import SPECS  # noqa: E402
from cpu_gemv import vector_scaling  # noqa: E402
from softfp8.backends._numba_decode import _JIT, e4m3_i32_div256, e8m0_i32  # noqa: E402


@numba.njit(**_JIT)
def _decode_scales_nv(scales, sc):
    for r in range(scales.shape[0]):  # as _nvfp4_rows: one row's scales at a time, into sc
        for b in range(scales.shape[1]):
            sc[0, b] = e4m3_i32_div256(scales[r, b])
    return sc[0, 0]


@numba.njit(**_JIT)
def _decode_scales_mx(scales, sc):
    for r in range(scales.shape[0]):
        for b in range(scales.shape[1]):
            sc[0, b] = e8m0_i32(scales[r, b])
    return sc[0, 0]


def median_ms(fn, reps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="11008x4096,4096x11008")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    L = _numba_lut if _numba_lut.available() else _numba_pshufb
    if not L.available():
        raise SystemExit("the FP4 table kernels need AVX-512 or AVX2 (numba's target)")
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  numba {numba.__version__}  {L.__name__}  "
          f"vector scaling {vector_scaling():.2f}x")
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        for fmt in ("nvfp4", "mxfp4"):
            p = softfp8.quantize(torch.randn(n, k) * 0.02, fmt)
            xs, xp = L.x_steps(torch.randn(k), SPECS[p.fmt].block)
            y = np.empty(n, np.float32)
            words, scales = p.words.numpy(), p.scales.numpy()
            g = np.float32(1.0) if fmt == "mxfp4" else np.float32(p.global_scale.item())
            cells = []
            for threads in (1, 2):
                numba.set_num_threads(threads)
                for group in sorted({1, L.ROWS}):
                    rows = (group,) if L is _numba_lut else ()  # AVX2: one row a pass
                    if fmt == "mxfp4":
                        fn = (lambda rows=rows: L.gemv_mxfp4(words, scales, xs, xp, y, 344, *rows))
                    else:
                        fn = (lambda rows=rows: L.gemv_nvfp4(words, scales, g, xs, xp, y, 344,
                                                            *rows))
                    cells.append(f"{threads}t {group}r {median_ms(fn, args.reps):6.3f}")
            numba.set_num_threads(1)
            sc = np.empty((1, scales.shape[1]), np.float32)
            dec = _decode_scales_mx if fmt == "mxfp4" else _decode_scales_nv
            cells.append(f"scales alone 1t {median_ms(lambda: dec(scales, sc), args.reps):6.3f}")
            print(f"{shape:>11} {fmt}:  " + "  ".join(cells), flush=True)
    print(f"# vector scaling at end {vector_scaling():.2f}x")


if __name__ == "__main__":
    main()
