"""NVRTC through ctypes, for compiling the CUDA backend's kernels on a machine without a GPU (or
a driver): `compile_for(source, arch)` gives the PTX and ptxas's verbose log. NVRTC needs no
device; it comes as a wheel (`pip install nvidia-cuda-nvrtc-cu12`, CUDA 12: the last NVRTC that
compiles for sm_60/61/70). `load()` is None where it isn't installed, so tests can skip."""
from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass

PIP_PACKAGE = "nvidia-cuda-nvrtc-cu12"


@functools.lru_cache(maxsize=None)
def load() -> ctypes.CDLL | None:
    try:
        import nvidia.cuda_nvrtc as pkg
    except ImportError:
        return None
    for base in pkg.__path__:
        path = os.path.join(base, "lib", "libnvrtc.so.12")
        if os.path.exists(path):
            return ctypes.CDLL(path)
    return None


@dataclass(frozen=True)
class Compiled:
    ptx: str
    log: str


def _string(lib, prog, size_fn, get_fn) -> str:
    n = ctypes.c_size_t()
    getattr(lib, size_fn)(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    getattr(lib, get_fn)(prog, buf)
    return buf.value.decode(errors="replace")


def compile_for(source: str, arch: str, options: tuple[str, ...] = ()) -> Compiled:
    """PTX and log of `source` compiled for `arch` ("sm_61"), with ptxas -v (registers, spills).
    A compile error raises RuntimeError with NVRTC's log."""
    lib = load()
    if lib is None:
        raise RuntimeError(f"NVRTC is not installed (pip install {PIP_PACKAGE})")
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"softfp8.cu", 0, None, None)
    if rc:
        raise RuntimeError(f"nvrtcCreateProgram failed ({rc})")
    try:
        opts = [f"-arch={arch}", "--ptxas-options=-v", *options]
        arr = (ctypes.c_char_p * len(opts))(*(o.encode() for o in opts))
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        log = _string(lib, prog, "nvrtcGetProgramLogSize", "nvrtcGetProgramLog")
        if rc:
            raise RuntimeError(f"NVRTC failed to compile for {arch}:\n{log}")
        return Compiled(_string(lib, prog, "nvrtcGetPTXSize", "nvrtcGetPTX"), log)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
