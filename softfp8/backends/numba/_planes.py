"""x as the FP4 row kernels' select path reads it past their whole steps: planes xp[j, b] =
x[block * b + j]. A leaf module: the table kernels (_lut, _pshufb) and the bf16 steps (_dpbf16)
all build them, and none of them imports another for it."""
from __future__ import annotations

import functools

import numpy as np


def select_planes(xn, block, step_codes):
    """The planes xp[j, b] = xn[block * b + j] that the row kernels' select path reads for the
    blocks past their whole steps of `step_codes` codes (_lut's and _pshufb's);
    when the steps cover xn, an empty [block, 0] array of the same type, which no kernel indexes
    (right after a GEMV the planes' copy costs ~4 us)."""
    if xn.shape[0] % step_codes == 0:
        return no_planes(block)
    return np.ascontiguousarray(xn.reshape(-1, block).T)


@functools.lru_cache(maxsize=8)
def no_planes(block: int) -> np.ndarray:
    return np.zeros((block, 0), np.float32)
