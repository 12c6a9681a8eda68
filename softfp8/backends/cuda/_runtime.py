"""CuPy glue: compile a `Variant` with NVRTC for a device (once per process; CuPy also keeps the
binary on disk), and launch it on torch's current stream with the tensors' own pointers."""
from __future__ import annotations

import functools

import numpy as np
import torch

from ._source import COMPILE_OPTIONS, Variant, source
from ._text import PROBE_NAME, PROBE_SOURCE


@functools.lru_cache(maxsize=None)
def _cupy():
    import cupy  # imported on the first launch, never at softfp8's import

    return cupy


@functools.lru_cache(maxsize=None)
def kernel(device_index: int, variant: Variant):
    """The compiled kernel of `variant` on GPU `device_index` (CuPy picks the architecture)."""
    return _function(device_index, source(variant), variant.name)


def _function(device_index: int, code: str, name: str):
    cupy = _cupy()
    with cupy.cuda.Device(device_index):
        module = cupy.RawModule(code=code, options=COMPILE_OPTIONS)
        return module.get_function(name)  # compiles here, for this device's architecture


_STREAMS: dict = {}


def _stream(device: torch.device):
    """CuPy's handle on torch's current stream of `device` (kept per stream: ~20 us to make)."""
    ptr = torch.cuda.current_stream(device).cuda_stream
    key = (device.index, ptr)
    stream = _STREAMS.get(key)
    if stream is None:
        stream = _cupy().cuda.ExternalStream(ptr, device.index)
        _STREAMS[key] = stream
    return stream


def ptr(t: torch.Tensor | None) -> np.uint64:
    """A kernel argument for `t`'s data (0 for None): a pointer is 8 bytes, as np.uint64."""
    return np.uint64(0 if t is None else t.data_ptr())


def launch(device: torch.device, variant: Variant, grid: int, block: int, args: tuple) -> None:
    fn = kernel(device.index, variant)
    cupy = _cupy()
    with cupy.cuda.Device(device.index), _stream(device):
        fn((grid,), (block,), args)


def probe_values(device: torch.device) -> tuple[float, float, float]:
    """The probe kernel's three values on `device` (see `_text.PROBE_SOURCE`), synchronised."""
    with torch.cuda.device(device):
        codes = torch.tensor([1, 9, 1], dtype=torch.int32, device=device)
        out = torch.full((3,), float("nan"), device=device)
        fn = _function(device.index, PROBE_SOURCE, PROBE_NAME)
        cupy = _cupy()
        with cupy.cuda.Device(device.index), _stream(device):
            fn((1,), (1,), (ptr(codes), ptr(out)))
        torch.cuda.synchronize(device)
        return tuple(out.cpu().tolist())


def versions() -> str:
    """CuPy's version and its NVRTC's, for reports."""
    cupy = _cupy()
    try:
        major, minor = cupy.cuda.nvrtc.getVersion()
        nvrtc = f", NVRTC {major}.{minor}"
    except Exception:
        nvrtc = ""
    return f"CuPy {cupy.__version__}{nvrtc}"
