"""`linear()`: y = x @ W.T + b with a packed W, on the backend dispatch picks (via softfp8/ops.py)."""
from __future__ import annotations

import torch

from ._checks import check_linear_args
from .dispatch import ActivationQuant, Backend, E2M1Decode
from .formats import PackedWeight
from .ops import run_linear


def linear(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None = None, *,
           backend: Backend | str = Backend.AUTO,
           e2m1: E2M1Decode | str = E2M1Decode.AUTO,
           activation_quant: ActivationQuant | str | None = None) -> torch.Tensor:
    """y = x @ W.T + bias for a packed W [N, K]; x is [..., K] (any M), y is [..., N] in x's dtype.

    `backend`, `e2m1` and `activation_quant` ("allow"/"forbid": may a backend quantize x, as
    native FP8 does?) override SOFTFP8_BACKEND, SOFTFP8_E2M1_DECODE, SOFTFP8_ACTIVATION_QUANT.
    Runs through the `softfp8::linear` custom op (softfp8/ops.py), so it compiles with
    `torch.compile(fullgraph=True)` and can be captured in a CUDA graph; a plain eager call
    that needs no autograd runs the op's implementation directly (`ops.run_linear`)."""
    check_linear_args(x, packed, bias)
    backend = Backend.parse(backend, arg="backend")
    e2m1 = E2M1Decode.parse(e2m1, arg="e2m1")
    n, k = packed.shape
    if activation_quant is not None:
        activation_quant = ActivationQuant.parse(activation_quant, arg="activation_quant").value
    return run_linear(x, packed.words, packed.scales, packed.global_scale, packed.fmt.value,
                      n, k, bias, backend.value, e2m1.value, activation_quant, checked=True)
