"""What the Numba backend's tests share: a packed weight of random normal values, by format."""
from __future__ import annotations

import torch

import softfp8


def quantized(fmt: str, n: int, k: int, seed: int):
    """(PackedWeight of an [n, k] normal weight in `fmt`, the generator for what comes next);
    "e5m2_rowscale": E5M2 with per-row scales, on a weight three times wider."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    if fmt == "e5m2_rowscale":
        return softfp8.quantize(w * 3, "e5m2", row_scale=True), g
    return softfp8.quantize(w, fmt), g
