"""`linear()`: y = x @ W.T + b with a packed W, on the backend dispatch picks (via softfp8/ops.py)."""
from __future__ import annotations

import torch

from .dispatch import ActivationQuant, Backend, E2M1Decode
from .formats import PackedWeight
from .ops import run_linear

ACTIVATION_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_linear_args(x: object, packed: object, bias: object) -> None:
    """Raise TypeError/ValueError naming the argument for anything a backend must not see."""
    if not isinstance(packed, PackedWeight):
        raise TypeError(f"packed: expected a PackedWeight (from softfp8.quantize), "
                        f"got {type(packed).__name__}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in ACTIVATION_DTYPES:
        raise TypeError(f"x: expected float32, float16 or bfloat16 activations, got {x.dtype}")
    n, k = packed.shape
    if x.dim() < 1 or x.shape[-1] != k:
        raise ValueError(f"x: expected a last dimension of {k} (the weight's in_features), "
                         f"got shape {tuple(x.shape)}")
    if x.device != packed.device:
        raise ValueError(f"x is on {x.device} but the packed weight is on {packed.device}; "
                         "expected one device")
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"bias: expected a torch.Tensor or None, got {type(bias).__name__}")
        if tuple(bias.shape) != (n,):
            raise ValueError(f"bias: expected shape ({n},), got {tuple(bias.shape)}")
        if not bias.dtype.is_floating_point:
            raise TypeError(f"bias: expected a floating-point tensor, got {bias.dtype}")
        if bias.device != packed.device:
            raise ValueError(f"bias is on {bias.device} but the packed weight is on "
                             f"{packed.device}; expected one device")


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
