"""`encode_minifloat`: float32 to a minifloat format's codes, round to nearest even.

`quantize` and `_scale_search` both encode with it, so it sits below both (it imports only
`formats`, for `MinifloatSpec`); quantize.py's docstring holds the policy for values a format
can't hold.
"""
from __future__ import annotations

import torch

from .formats import MinifloatSpec


def _f32_bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int32)


def encode_minifloat(x: torch.Tensor, spec: MinifloatSpec) -> torch.Tensor:
    """float32 `x` to `spec` codes (uint8), round to nearest even, with `quantize`'s policy.

    The rounding adds and subtracts ``2^(q + 23)``, a float32 whose unit in the last place is the
    target quantum ``2^q``; IEEE addition then rounds |x| to a multiple of 2^q, ties to even."""
    x = x.to(torch.float32)
    bits = _f32_bits(x)
    sign = (bits >> 31) & 1
    a = bits & 0x7FFFFFFF
    ax = a.view(torch.float32)
    emin = 1 - spec.bias
    m = spec.man_bits
    e = ((a >> 23) - 127).clamp(emin, 64)  # 64: far past every format's range, keeps bits finite
    q = e - m
    magic = ((q + 23 + 127) << 23).view(torch.float32)
    r = torch.where(ax < magic, (ax + magic) - magic, ax)  # inf/NaN pass through untouched
    rb = _f32_bits(r)
    er = (rb >> 23) - 127
    normal_code = ((er + spec.bias) << m) | ((rb >> (23 - m)) & ((1 << m) - 1))
    subnormal_code = (r * 2.0 ** (m - emin)).to(torch.int32)  # exact: r < 2^emin here
    code = torch.where(er >= emin, normal_code, subnormal_code)

    max_code = _max_finite_code(spec)
    over = (r > spec.max_finite) & (ax != float("inf"))
    is_inf, is_nan = ax == float("inf"), torch.isnan(x)
    inf_code = (0x1F << m) if spec.has_inf else max_code  # no inf: saturate, like torch's E4M3 cast
    code = torch.where(over | is_inf, inf_code, code)
    if spec.has_nan:
        code = torch.where(is_nan, (1 << (spec.bits - 1)) - 1, code)
    else:
        code = torch.where(is_nan, 0, code)
    return (code | (sign << (spec.bits - 1))).to(torch.uint8)


def _max_finite_code(spec: MinifloatSpec) -> int:
    top = (1 << spec.exp_bits) - 1
    if spec.has_inf:
        return ((top - 1) << spec.man_bits) | ((1 << spec.man_bits) - 1)
    if spec.has_nan:
        return (top << spec.man_bits) | ((1 << spec.man_bits) - 2)
    return (top << spec.man_bits) | ((1 << spec.man_bits) - 1)
