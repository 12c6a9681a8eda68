"""Shared helpers of the hardening tests: which backends run here, fp64 oracles, skip guards."""
from __future__ import annotations

import pytest
import torch

import softfp8
from softfp8 import Backend, Format
from softfp8.dispatch import BackendUnavailable, select

CONCRETE_BACKENDS = (Backend.NATIVE, Backend.TRITON, Backend.CUDA, Backend.NUMBA, Backend.TORCH)


def backends_for(fmt: Format | str = Format.E5M2, device: str = "cpu", m: int = 1) -> list[Backend]:
    """Every backend `select` accepts when forced, so new backends join the tests once merged."""
    found = []
    for b in CONCRETE_BACKENDS:
        try:
            select(fmt, m, device, backend=b)
        except BackendUnavailable:
            continue
        found.append(b)
    return found


def backend_format_pairs(device: str = "cpu") -> list:
    return [pytest.param(b, f, id=f"{b}-{f}") for f in Format for b in backends_for(f, device)]


def fp64_reference(x: torch.Tensor, packed, bias: torch.Tensor | None = None) -> torch.Tensor:
    y = x.double() @ softfp8.dequantize(packed).double().T
    return y if bias is None else y + bias.double()
