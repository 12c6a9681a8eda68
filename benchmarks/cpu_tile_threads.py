"""torch's and numba's OpenMP pools in one process: a numba tile decode right after torch's
matmul, in numba's pool (parallel) and on the calling thread, beside the matmuls themselves.

    python benchmarks/cpu_tile_threads.py
    OMP_WAIT_POLICY=passive python benchmarks/cpu_tile_threads.py
    NUMBA_THREADING_LAYER=workqueue python benchmarks/cpu_tile_threads.py

Round-robin, 7 rounds, medians (ms): `torch bf16` one 128 x 4096 @ 4096 x 4096 bf16 matmul;
`dq` 1024 x 4096 E5M2 rows into a bf16 tile in numba's pool (2 threads), `dq1` the same on one
thread; `mm` the tile's matmul; `tiles` four (dq, mm) pairs, `tiles_dq1` four (dq1, mm).
"""
import os
import statistics
import time

import numba
import numpy as np
import torch

import softfp8
from softfp8.backends.numba import _smallm as S


@numba.njit(parallel=True, cache=False)
def _parallel_decode(codes, w, chunk):
    for c in numba.prange((w.shape[0] + chunk - 1) // chunk):
        S.dequantize_rows_bf16(S.E5M2, codes, np.zeros((1, 1), np.uint8), np.float32(1),
                               c * chunk, w[c * chunk:min(w.shape[0], (c + 1) * chunk)])


def main() -> None:
    w = torch.randn(4096, 4096) * 0.02
    p = softfp8.quantize(w, "e5m2")
    x = torch.randn(128, 4096).bfloat16()
    wb = w.bfloat16()
    codes = p.words.view(torch.uint8).numpy()
    tile = torch.empty(1024, 4096, dtype=torch.bfloat16)
    tn = tile.view(torch.uint16).numpy()
    scales = np.zeros((1, 1), np.uint8)

    def dq():
        _parallel_decode(codes, tn, 64)

    def dq1():
        S.dequantize_rows_bf16(S.E5M2, codes, scales, np.float32(1), 0, tn)

    def mm():
        torch.matmul(x, tile.T)

    def tiles(decode):
        for _ in range(4):
            decode()
            mm()

    variants = {"torch bf16": lambda: x @ wb.T, "dq": dq, "dq1": dq1, "mm": mm,
                "tiles": lambda: tiles(dq), "tiles_dq1": lambda: tiles(dq1)}
    for f in variants.values():
        f()
    res = {k: [] for k in variants}
    for _ in range(7):
        for k, f in variants.items():
            t = time.perf_counter()
            f()
            res[k].append((time.perf_counter() - t) * 1e3)
    print(f"numba {numba.threading_layer()}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}: "
          + "  ".join(f"{k} {statistics.median(v):.2f}" for k, v in res.items())
          + f"  (loadavg {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
