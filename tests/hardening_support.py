"""Shared helpers of the hardening tests: which backends run here, fp64 oracles, skip guards."""
from __future__ import annotations

import pytest
import torch

import softfp8
from softfp8 import Backend, Format
from softfp8.dispatch import BackendUnavailable, select

CONCRETE_BACKENDS = (Backend.NATIVE, Backend.TRITON, Backend.NUMBA, Backend.TORCH)


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


def require(attr: str, what: str):
    """softfp8.<attr>, or skip naming what has not landed yet (it runs once it is merged)."""
    if not hasattr(softfp8, attr):
        pytest.skip(f"softfp8.{attr} ({what}) is not in this build yet")
    return getattr(softfp8, attr)


def require_module(name: str):
    """Skip unless softfp8's submodule `name` exists in the checkout under test (an editable
    install elsewhere can otherwise lend a submodule of another checkout)."""
    import importlib.util
    import pathlib

    spec = importlib.util.find_spec(name)
    home = pathlib.Path(softfp8.__file__).resolve().parent
    if spec is None or spec.origin is None or home not in pathlib.Path(spec.origin).resolve().parents:
        pytest.skip(f"{name} is not in this build yet")
    return pytest.importorskip(name)
