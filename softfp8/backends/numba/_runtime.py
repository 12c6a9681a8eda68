"""What every Numba path of the CPU backend shares: numba and the kernel modules loaded on the
first call, the threads a call runs on, how rows are chunked over them, x padded to the packed K."""
from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=None)
def loaded():
    """numba, the kernel modules and a getter of numba's thread count, imported on the first call
    (not at import time). A cached call costs ~0.1 us; the `import` statements it replaces cost
    ~1-3 us each on every matmul."""
    import numba
    from numba.np.ufunc import parallel

    from . import _fp8_rows, _kernels, _smallm

    numba.get_num_threads()  # starts numba's threading layer, which sets the getter below
    # numba.get_num_threads() takes two locks a call in Python: ~40 us right after a GEMV, where
    # the ctypes getter it wraps takes ~7 (2-core Zen 3; docs/decisions.md, CPU (Numba): M = 1)
    threads = getattr(parallel, "_get_num_threads", None) or numba.get_num_threads
    return numba, _kernels, _fp8_rows, threads, _smallm


def threads_for(numba_threads: int) -> int:
    """Threads for a call: the fewer of numba's (`numba_threads`, its current setting) and
    torch's."""
    return max(1, min(numba_threads, torch.get_num_threads()))


def chunk_rows(rows: int, threads: int) -> int:
    # ~16 chunks per thread balance uneven progress (measured E5M2 11008x4096, 2 threads: 1.66 ms
    # against 2.55 ms with 4 per thread); multiples of 4 keep the four-row FP8 GEMV on its fast
    # path.
    c = max(4, -(-rows // (threads * 16)))
    return -(-c // 4) * 4



def padded_x(x: torch.Tensor, kp: int) -> torch.Tensor:
    m, k = x.shape
    if k == kp and x.is_contiguous():  # one op where it can (each costs 10-50 us after a GEMV)
        return x if x.dtype == torch.float32 else x.to(torch.float32)
    xp = torch.zeros((m, kp), dtype=torch.float32)
    xp[:, :k] = x
    return xp
