"""Reference decoders: packed codes to float32, by integer bit operations in torch.

These are the oracles that every backend's decoder (Triton, Numba) mirrors in its own language,
and they run on any device torch runs on. Each takes integer codes (any integer dtype, values in
the format's range) and returns float32 of the same shape. None of them produces a denormal
intermediate except `decode_e2m1_to_f32_inject` (by design: see its docstring) and E8M0 code 0,
which *is* the denormal 2^-127.
"""
from __future__ import annotations

import torch

from .formats import E2M1_ELEMENT, E4M3_ELEMENT, E5M2_ELEMENT, MinifloatSpec

_F32_QUIET_NAN = 0x7FC00000
_F32_INF = 0x7F800000

E2M1_TO_FLOAT32 = torch.tensor(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    dtype=torch.float32,
)
"""The 16 E2M1 values by code: the table every E2M1 decoder is tested against."""


def _as_int32(codes: torch.Tensor) -> torch.Tensor:
    if codes.dtype.is_floating_point or codes.dtype == torch.bool:
        raise TypeError(f"codes: expected an integer tensor, got {codes.dtype}")
    return codes.to(torch.int32) & 0xFF


def _decode_minifloat(codes: torch.Tensor, spec: MinifloatSpec) -> torch.Tensor:
    """Normal codes are a re-bias of the exponent field; subnormals are an exact small integer times
    a power of two (a normal float32 for every format here); then the format's inf/NaN codes."""
    c = _as_int32(codes)
    m, e_bits = spec.man_bits, spec.exp_bits
    sign = (c >> (spec.bits - 1)) & 1
    exp = (c >> m) & ((1 << e_bits) - 1)
    man = c & ((1 << m) - 1)
    normal_bits = ((exp - spec.bias + 127) << 23) | (man << (23 - m))
    subnormal = man.to(torch.float32) * 2.0 ** (1 - spec.bias - m)  # exact: man < 2^m
    mag_bits = torch.where(exp == 0, subnormal.view(torch.int32), normal_bits)
    top = exp == (1 << e_bits) - 1
    if spec.has_inf:  # IEEE-like: all-ones exponent is inf (man 0) or NaN
        special = torch.where(man == 0, _F32_INF, _F32_QUIET_NAN).to(torch.int32)
        mag_bits = torch.where(top, special, mag_bits)
    elif spec.has_nan:  # "fn" formats: only all-ones exponent *and* mantissa is NaN
        mag_bits = torch.where(top & (man == (1 << m) - 1), _F32_QUIET_NAN, mag_bits)
    return (mag_bits | (sign << 31)).view(torch.float32)


def decode_e5m2_to_f32(codes: torch.Tensor) -> torch.Tensor:
    """E5M2 codes (0..255) to float32. In a kernel with fp16 activations, ``code << 8`` is already
    the fp16 bit pattern (E5M2 is fp16 with the low mantissa byte dropped)."""
    return _decode_minifloat(codes, E5M2_ELEMENT)


def decode_e4m3_to_f32(codes: torch.Tensor) -> torch.Tensor:
    """E4M3fn codes (0..255) to float32: bias 7, no infinities, 0x7F/0xFF are NaN."""
    return _decode_minifloat(codes, E4M3_ELEMENT)


def decode_e2m1_to_f32(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (0..15) to float32, select-based: the normalised float32 is built directly,
    so no denormal appears anywhere and the result is exact with or without FTZ/DAZ."""
    return _decode_minifloat(codes & 0xF, E2M1_ELEMENT)


def decode_e2m1_to_f32_inject(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (0..15) to float32 by exponent injection: ``e1 e0 m0`` go to float32 bits
    22..24 and the sign to bit 31, which is the value times 2^-126; one multiply by 2^126 restores it.

    The three bits land in the float32 exponent's lowest bit and the mantissa's top bit, so the
    exponent field is 0 or 1..3: codes with E2M1 exponent 0 become float32 *denormals* (the code
    for ±0.5 gives ±2^-127). Where denormals are honoured the multiply is exact for all 16 codes;
    where they flush (DAZ on a CPU, Apple GPUs, a GPU compiled with FTZ) ±0.5 reads as ±0 and the
    result is silently wrong, so the probe measures this per path and routes to
    `decode_e2m1_to_f32` there. The 2^126 can't be folded into the block scale instead: that
    product overflows float32 for every block scale >= 4 (2^2 * 2^126 = 2^128 > max float32).
    """
    c = _as_int32(codes) & 0xF
    bits = ((c & 0x7) << 22) | ((c >> 3) << 31)
    return bits.view(torch.float32) * 2.0 ** 126


def decode_e8m0(codes: torch.Tensor) -> torch.Tensor:
    """E8M0 codes (0..255) to float32: 2^(code - 127); code 0 is 2^-127 (a float32 denormal),
    0xFF is NaN. There is no sign and no zero."""
    c = _as_int32(codes)
    bits = torch.where(c == 0, 1 << 22, c << 23)
    return torch.where(c == 0xFF, _F32_QUIET_NAN, bits).to(torch.int32).view(torch.float32)
