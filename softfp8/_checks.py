"""`check_linear_args`: what every entry to a packed linear refuses, in one place.

It imports only `formats` (whose one softfp8 import is the leaf `_choices`), so every entry
point imports it without a cycle. The checks run once per call: `linear()` checks and passes
`checked=True` on, `ops` checks what reaches it unchecked (the custom op's implementation, a
layer's call) and calls the backend's `matmul(..., checked=True)`; a backend's `matmul` called
directly (checked=False, the default) checks its own arguments (`check_matrix_args`, and what
it needs of the device).
"""
from __future__ import annotations

import torch

from .formats import PackedWeight

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


def check_matrix_args(x: object, packed: object, bias: object) -> None:
    """`check_linear_args` for a backend's `matmul`, which takes x as [M, K] (ops flattens x's
    leading dimensions first)."""
    check_linear_args(x, packed, bias)
    if x.dim() != 2:
        raise ValueError(f"x: expected a 2-D [M, K] tensor, got shape {tuple(x.shape)}")
