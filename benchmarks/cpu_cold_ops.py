"""What each small operation of a numba GEMV call costs when the caches are cold, as they are
right after the previous layer's kernel streamed its weight: each operation timed alone right
after a parallel 64 MB read, the median of --rounds, with `nothing` (the timing itself) beside.

    python benchmarks/cpu_cold_ops.py [--rounds 30]

Then the whole `numba_cpu.matmul` on a 64 x 4096 weight (a ~10 us kernel) against that kernel
called directly, each after the same read.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numba  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import softfp8  # noqa: E402
from softfp8.backends import numba_cpu  # noqa: E402
from softfp8.backends._facts import known_fact  # noqa: E402


@numba.njit(parallel=True)
def _stream(a):
    s = 0.0
    for i in numba.prange(a.shape[0]):
        s += a[i]
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    flush = np.ones(16 * 2 ** 20, np.float32)
    x = torch.randn(1, 4096)
    packed = softfp8.quantize(torch.randn(64, 4096), "mxfp4")
    numba_cpu.matmul(x, packed)
    getter = numba_cpu._numba()[3]
    table = numba_cpu._fp4_table_kernels()
    xn = x.numpy()[0]
    y = np.empty(64, np.float32)
    ops = {
        "nothing": lambda: None,
        "numba.get_num_threads()": numba.get_num_threads,
        "its ctypes getter": getter,
        "torch.get_num_threads()": torch.get_num_threads,
        "x.device.type": lambda: x.device.type,
        "x.is_cpu": lambda: x.is_cpu,
        "x.requires_grad": lambda: x.requires_grad,
        "x.detach()": x.detach,
        "x.numpy()": x.numpy,
        "words._version": lambda: packed.words._version,
        "np.empty((1, 11008))": lambda: np.empty((1, 11008), np.float32),
        "torch.from_numpy": lambda: torch.from_numpy(y),
        "_facts.known_fact": lambda: known_fact(packed, "no such fact"),
    }
    if table is not None:
        xs, xp = table.x_steps(xn, 32)
        words, scales = packed.words.numpy(), packed.scales.numpy()
        group = (1,) if table.ROWS > 1 else ()
        ops["x_steps (FP4 table)"] = lambda: table.x_steps(xn, 32)
        ops["FP4 kernel, 64 rows, direct"] = lambda: table.gemv_mxfp4(words, scales, xs, xp, y, 8,
                                                                      *group)
    ops["numba_cpu.matmul, 64 rows"] = lambda: numba_cpu.matmul(x, packed)
    times = {key: [] for key in ops}
    for _ in range(args.rounds):
        for key, fn in ops.items():
            _stream(flush)
            t = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t)
    print(f"# torch {torch.__version__}  numba {numba.__version__}  threads "
          f"{numba.get_num_threads()}  rounds {args.rounds}; us, median, each after a 64 MB read")
    for key, v in times.items():
        print(f"{key:>30}  {statistics.median(v) * 1e6:7.1f}")


if __name__ == "__main__":
    main()
