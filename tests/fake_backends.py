"""Stand-in backend modules for routing tests: registered in sys.modules under the registry's
names, so select() finds them exactly as it would find the real ones (find_spec, import, NEEDS,
QUANTIZES_ACTIVATIONS, auto_accepts). Their matmul is the reference, except that FP4 weights are
decoded the way `e2m1` says, on the calling thread, so a wrong decoder choice under FTZ shows."""
from __future__ import annotations

import importlib.machinery
import sys
import types

import torch

from softfp8 import dispatch
from softfp8.decode import decode_e2m1_to_f32, decode_e2m1_to_f32_inject
from softfp8.dispatch import Backend, E2M1Decode, Needs
from softfp8.formats import SPECS, Format
from softfp8.quantize import dequantize, unpack_codes

NATIVE_MIN_M = 64  # the fake native backend's "measured crossover"


def matmul(x, packed, bias=None, *, e2m1=E2M1Decode.SELECT, checked=False):
    w = dequantize(packed)  # exact: decodes E2M1 by selection
    if SPECS[packed.fmt].bits == 4 and e2m1 is E2M1Decode.INJECT:
        codes = unpack_codes(packed.words, packed.fmt, packed.shape[1])
        sel, inj = decode_e2m1_to_f32(codes), decode_e2m1_to_f32_inject(codes)
        # Where injection differs (flushed +-0.5) the weight is what an inject kernel computes.
        w = torch.where(sel != 0, w * (inj / torch.where(sel != 0, sel, 1.0)), w)
    y = x.float() @ w.T
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


def native_auto_accepts(fmt, m, device, report):
    if m < NATIVE_MIN_M:
        return f"at M={m} the weight-only path is faster (fake crossover M={NATIVE_MIN_M})"
    return None


SPECS_BY_BACKEND = {
    Backend.NATIVE: dict(NEEDS=Needs(formats=frozenset({Format.E4M3, Format.E5M2}),
                                     device_types=frozenset({"cuda"})),
                         QUANTIZES_ACTIVATIONS=True, auto_accepts=native_auto_accepts),
    Backend.TRITON: dict(NEEDS=Needs(formats=frozenset(Format),
                                     device_types=frozenset({"cuda", "cpu"}),
                                     min_capability=(7, 0), packages=("triton",))),
    Backend.CUDA: dict(NEEDS=Needs(formats=frozenset(Format), device_types=frozenset({"cuda"}))),
    Backend.NUMBA: dict(NEEDS=Needs(formats=frozenset(Format), device_types=frozenset({"cpu"}),
                                    packages=("numba",))),
}


def install(monkeypatch, *backends: Backend, **overrides) -> dict[Backend, types.ModuleType]:
    """Register fake modules for `backends` (default: native, triton, cuda, numba) for one test."""
    made = {}
    for backend in backends or tuple(SPECS_BY_BACKEND):
        name = dispatch._MODULES[backend]
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)
        module.matmul = matmul
        attrs = {**SPECS_BY_BACKEND[backend], **overrides.get(backend.value, {})}
        for attr, value in attrs.items():
            if value is not None:
                setattr(module, attr, value)
        monkeypatch.setitem(sys.modules, name, module)
        made[backend] = module
    dispatch.clear_cache()
    monkeypatch.setattr(dispatch, "_CACHE", {})  # and a fresh cache for this test
    return made


def remove(monkeypatch, *backends: Backend) -> None:
    """Make `backends` absent from the build for one test (even where the real module exists):
    a None entry in sys.modules makes find_spec return None and import fail."""
    for backend in backends:
        monkeypatch.setitem(sys.modules, dispatch._MODULES[backend], None)
    monkeypatch.setattr(dispatch, "_CACHE", {})


def mock_gpus(monkeypatch, caps, *, hip=None, arch="gfx942:sramecc+:xnack-") -> None:
    """torch.cuda as on a machine with GPUs of compute capabilities `caps` (ROCm if `hip`)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(caps))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: caps[i])
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i=0: types.SimpleNamespace(
        name=f"Fake GPU {i}", total_memory=(i + 1) << 34, major=caps[i][0], minor=caps[i][1],
        gcnArchName=arch))
    monkeypatch.setattr(torch.version, "hip", hip)
