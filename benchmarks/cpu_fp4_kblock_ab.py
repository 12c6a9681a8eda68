"""A/B (tried and dropped, BENCHMARKS.md fifteenth session): the AVX2 FP4 table kernel
(_numba_pshufb) with K in blocks of `sb` steps (64 codes a step) so x's block stays in L1 while
a chunk of rows passes over it, against the package's rows-over-all-K (sb 0). Interleaved, the
fastest of 25 rounds, 2 numba threads; also checks that every variant gives the same y.

    python benchmarks/cpu_fp4_kblock_ab.py
"""
import os
import sys
import time

import numba as nb
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import softfp8  # noqa: E402
from softfp8.backends import _numba_pshufb as L  # noqa: E402
from softfp8.backends import numba_cpu as NC  # noqa: E402
from softfp8.backends._numba_decode import _JIT, e4m3_i32_div256, e8m0_i32  # noqa: E402
from softfp8.backends._numba_kernels import _mx_select, _nv_select  # noqa: E402

SW = L.STEP_WORDS

@nb.njit(**_JIT)
def _nv_rows_kb(words, scales, g, xs, xp, y, r0, r1, sb):
    nblk = scales.shape[1]
    steps = xs.shape[0]
    tail = steps * SW // 2
    sc = np.empty((1, nblk), np.float32)
    acc = np.zeros(r1 - r0, np.float32)
    post = np.float32(256.0) * g
    s0 = 0
    while s0 < steps:
        s1 = min(steps, s0 + sb)
        for r in range(r0, r1):
            for b in range(s0 * 4, s1 * 4):
                sc[0, b] = e4m3_i32_div256(scales[r, b])
            acc[r - r0] += L._nv_rows(words, r, s0, s1, xs, sc)[0]
        s0 = s1
    for r in range(r0, r1):
        a = acc[r - r0]
        for b in range(tail, nblk):
            a += _nv_select(words, r, b, xp) * e4m3_i32_div256(scales[r, b])
        y[r] = a * post

@nb.njit(**_JIT)
def _mx_rows_kb(words, scales, xs, xp, y, r0, r1, sb):
    nblk = scales.shape[1]
    steps = xs.shape[0]
    tail = steps * SW // 4
    sc = np.empty((1, nblk), np.float32)
    acc = np.zeros(r1 - r0, np.float32)
    s0 = 0
    while s0 < steps:
        s1 = min(steps, s0 + sb)
        for r in range(r0, r1):
            for b in range(s0 * 2, s1 * 2):
                sc[0, b] = e8m0_i32(scales[r, b])
            acc[r - r0] += L._mx_rows(words, r, s0, s1, xs, sc)[0]
        s0 = s1
    for r in range(r0, r1):
        a = acc[r - r0]
        for b in range(tail, nblk):
            a += _mx_select(words, r, b, xp) * e8m0_i32(scales[r, b])
        y[r] = a

@nb.njit(parallel=True, **_JIT)
def gemv_nv_kb(words, scales, g, xs, xp, y, chunk, sb):
    n = words.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _nv_rows_kb(words, scales, g, xs, xp, y, c * chunk, min(n, (c + 1) * chunk), sb)

@nb.njit(parallel=True, **_JIT)
def gemv_mx_kb(words, scales, xs, xp, y, chunk, sb):
    n = words.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _mx_rows_kb(words, scales, xs, xp, y, c * chunk, min(n, (c + 1) * chunk), sb)

def setup(n, k, fmt):
    w = torch.randn(n, k) * 0.02
    p = softfp8.quantize(w, fmt)
    x = torch.randn(k)
    words = p.words.numpy()
    scales = p.scales.numpy()
    mx = fmt == "mxfp4"
    kp = words.shape[1] * 8
    xn = np.zeros(kp, np.float32)
    xn[:k] = x.numpy()
    block = 32 if mx else 16
    xs, xpn = L.x_steps(xn, block)
    g = np.float32(1.0) if mx else np.float32(p.global_scale.item())
    return words, scales, g, xs, xpn, mx
def run(args, chunk, sb):
    words, scales, g, xs, xpn, mx = args
    y = np.empty(words.shape[0], np.float32)
    if sb == 0 and mx:
        L.gemv_mxfp4(words, scales, xs, xpn, y, chunk)
    elif sb == 0:
        L.gemv_nvfp4(words, scales, g, xs, xpn, y, chunk)
    elif mx:
        gemv_mx_kb(words, scales, xs, xpn, y, chunk, sb)
    else:
        gemv_nv_kb(words, scales, g, xs, xpn, y, chunk, sb)
    return y


def main():
    if not L.available():
        raise SystemExit("needs AVX2 (the _numba_pshufb kernel)")
    nb.set_num_threads(2)
    print(f"torch {torch.__version__} numba {nb.__version__}; ms, fastest of 25 rounds")
    for n, k in ((4096, 11008), (11008, 4096)):
        for fmt in ("nvfp4", "mxfp4"):
            a = setup(n, k, fmt)
            chunk = NC._chunk(n, 2)
            ref = run(a, chunk, 0)
            variants = [0, 16, 32, 64]
            for sb in variants:
                y = run(a, chunk, sb)
                assert np.allclose(y, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max()), sb
            best = {sb: 1e9 for sb in variants}
            for rnd in range(25):
                for sb in variants:
                    t = time.perf_counter()
                    run(a, chunk, sb)
                    best[sb] = min(best[sb], time.perf_counter() - t)
            print(f"{n}x{k} {fmt} chunk {chunk}: "
                  + "  ".join(f"sb{sb} {best[sb] * 1e3:.3f}" for sb in variants), flush=True)


if __name__ == "__main__":
    main()
