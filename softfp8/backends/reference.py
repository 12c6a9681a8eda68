"""The reference backend: dequantize, then torch matmul, on whatever device the tensors are on.

It is the oracle every other backend is tested against, and the last resort of auto dispatch
(MPS, GPUs Triton can't target, missing packages). It does materialise the weight, a slab of
rows at a time to bound the memory, and computes in float32.
"""
from __future__ import annotations

import torch

from .._checks import check_matrix_args
from .._choices import E2M1Decode
from .._needs import Needs
from ..formats import Format, PackedWeight
from ..quantize import dequantize_rows

NEEDS = Needs(formats=frozenset(Format), device_types=frozenset({"cpu", "cuda", "mps", "xpu"}))

_SLAB_ELEMENTS = 1 << 24  # 64 MiB of float32 weight at a time


def matmul(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None = None, *,
           e2m1: E2M1Decode = E2M1Decode.SELECT, checked: bool = False) -> torch.Tensor:
    """y = x @ dequantize(packed).T + bias, in float32, returned in x's dtype.

    `e2m1` is accepted for the common signature; the reference always decodes E2M1 by selection,
    which is exact whatever the denormal mode. `checked`: backends/__init__."""
    if not checked:
        check_matrix_args(x, packed, bias)
    n, k = packed.shape
    xf = x.to(torch.float32)
    rows = max(1, _SLAB_ELEMENTS // max(k, 1))
    slabs = [(start, min(n, start + rows)) for start in range(0, n, rows)]
    if torch.is_grad_enabled() and (x.requires_grad or (bias is not None and bias.requires_grad)):
        # matmul(out=...) refuses autograd; the oracle should give x (and bias) a gradient.
        y = torch.cat([xf @ dequantize_rows(packed, a, b).T for a, b in slabs], dim=1)
    else:
        y = torch.empty((x.shape[0], n), dtype=torch.float32, device=x.device)
        for a, b in slabs:
            torch.matmul(xf, dequantize_rows(packed, a, b).T, out=y[:, a:b])
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(x.dtype)
