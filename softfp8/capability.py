"""What this machine can do, measured: `probe() -> CapabilityReport`.

The report is what the dispatcher routes by, so every fact in it that decides correctness is
*measured* on the path that will use it, never inferred from a GPU's name: native FP8 is a tiny
`torch._scaled_mm` actually run; FTZ is the exponent-injection decode of the E2M1 codes for
+0.5 and -0.5 actually run in torch ops, in a Triton kernel and in a Numba function. A sub-probe
that fails is reported as UNKNOWN with its reason; `probe()` never raises.

Caching. The report is cached per process, and keyed by the calling thread's denormal mode:
FTZ/DAZ live in a per-thread CPU register (MXCSR on x86, FPCR on Arm), so the CPU sub-probes run
on the calling thread, and a thread that turned flushing on (``torch.set_flush_denormal(True)``)
gets a report measured in that mode. Reading the mode costs two Python float operations, so a
cached call is a dict lookup.

Tests build a `CapabilityReport` by hand (every check defaults to "not probed") or run
`collect(facts=...)` with chosen measurements injected, and pass it to `dispatch.select(report=)`.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import platform
import struct
import threading
import time
from collections.abc import Mapping

import torch

from ._report import (NOT_PROBED, CapabilityReport, Check, DeviceReport, Runtime, Status,
                      Versions)
from ._version import __version__

TRITON_INTERPRET_ENV = "TRITON_INTERPRET"


# --- the calling thread's denormal mode, read with Python floats (which obey MXCSR/FPCR) -------
# Built from bit patterns at import (no arithmetic), and kept in module globals so the compiler
# can't constant-fold the operations below at compile time under a different mode.
_SMALLEST_SUBNORMAL = struct.unpack("<d", struct.pack("<q", 1))[0]
_SMALLEST_NORMAL = struct.unpack("<d", struct.pack("<q", 1 << 52))[0]
_HALF = 0.5
_ZERO = 0.0


def thread_denormal_mode() -> tuple[bool, bool]:
    """(FTZ, DAZ) of the calling thread: FTZ flushes denormal results, DAZ denormal inputs."""
    ftz = _SMALLEST_NORMAL * _HALF == _ZERO
    daz = not (_SMALLEST_SUBNORMAL > _ZERO)
    return ftz, daz


def _mode_text(mode: tuple[bool, bool]) -> str:
    return f"FTZ {'on' if mode[0] else 'off'}, DAZ {'on' if mode[1] else 'off'}"


# --- collecting -------------------------------------------------------------------------------
Facts = Mapping[tuple[str, str], Check]
"""Injected measurements: (device name or "*", DeviceReport field) -> Check; for tests."""


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def _version(package: str) -> str | None:
    if not _installed(package):
        return None
    from importlib import metadata
    for dist in (package, f"pytorch-{package}", f"pytorch-{package}-rocm"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "installed (version unknown)"


def _enumerate() -> list[DeviceReport]:
    """Every device torch sees, with names and sizes but no measurement yet."""
    from . import _probes
    devices = [DeviceReport("cpu", Runtime.CPU, name=_probes.cpu_name(), arch=platform.machine(),
                            memory_bytes=_probes.cpu_memory(), numba=NOT_PROBED,
                            ftz_numba=NOT_PROBED)]
    try:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a broken driver is "no usable GPU", not a crash
        gpus = 0
    rocm = getattr(torch.version, "hip", None) is not None
    for i in range(gpus):
        try:
            props = torch.cuda.get_device_properties(i)
            cap = tuple(torch.cuda.get_device_capability(i))
        except Exception as exc:
            devices.append(DeviceReport(f"cuda:{i}", Runtime.ROCM if rocm else Runtime.CUDA,
                                        name=f"unreadable ({_probes.describe(exc)})"))
            continue
        if rocm:
            arch = str(getattr(props, "gcnArchName", "")) or None
        else:
            arch = f"sm_{cap[0]}{cap[1]}"
        devices.append(DeviceReport(
            f"cuda:{i}", Runtime.ROCM if rocm else Runtime.CUDA, name=str(props.name),
            capability=None if rocm else (int(cap[0]), int(cap[1])), arch=arch,
            memory_bytes=int(getattr(props, "total_memory", 0)) or None,
            cuda_kernels=None if rocm else NOT_PROBED, ftz_cuda=None if rocm else NOT_PROBED))
    try:
        mps = torch.backends.mps.is_available()
    except Exception:
        mps = False
    if mps:
        devices.append(DeviceReport("mps", Runtime.MPS, name="Apple GPU (Metal)", triton=Check.no(
            "Triton has no Metal backend"), ftz_triton=None))
    return devices


def collect(*, bandwidth: bool = False, facts: Facts | None = None) -> CapabilityReport:
    """Run every sub-probe now, uncached, on the calling thread; `facts` replaces the sub-probes
    it names with the given results (tests use it to stand in for hardware that isn't here)."""
    from . import _probes
    start = time.perf_counter()
    facts = dict(facts or {})
    interpret = os.environ.get(TRITON_INTERPRET_ENV, "").strip().lower() in ("1", "true", "on", "yes")
    try:
        devices = _enumerate()
    except Exception as exc:
        devices = [DeviceReport("cpu", Runtime.CPU, name=f"unreadable ({_probes.describe(exc)})")]
    triton_version = _version("triton")
    probes = _probes.SubProbes(triton_installed=triton_version is not None,
                               numba_installed=_installed("numba"), interpret=interpret,
                               cupy_installed=_installed("cupy"))

    def fact(dev: DeviceReport, name: str, run) -> Check:
        given = facts.get((dev.device, name), facts.get(("*", name)))
        return given if given is not None else _probes.guarded(run)

    measured = []
    for dev in devices:
        changes = {"float8": fact(dev, "float8", lambda: probes.float8(dev)),
                   "scaled_mm": fact(dev, "scaled_mm", lambda: probes.scaled_mm(dev)),
                   "ftz_torch": fact(dev, "ftz_torch", lambda: probes.ftz_torch(dev))}
        if dev.triton is not None:
            changes["triton"] = fact(dev, "triton", lambda: probes.triton(dev))
        if dev.ftz_triton is not None:
            changes["ftz_triton"] = fact(dev, "ftz_triton", lambda: probes.ftz_triton(dev))
        if dev.cuda_kernels is not None:
            changes["cuda_kernels"] = fact(dev, "cuda_kernels", lambda: probes.cuda_kernels(dev))
        if dev.ftz_cuda is not None:
            changes["ftz_cuda"] = fact(dev, "ftz_cuda", lambda: probes.ftz_cuda(dev))
        if dev.runtime is Runtime.CPU:
            changes["numba"] = fact(dev, "numba", probes.numba)
            changes["ftz_numba"] = fact(dev, "ftz_numba", probes.ftz_numba)
        if bandwidth:
            changes["bandwidth"] = fact(dev, "bandwidth", lambda: probes.bandwidth(dev))
        measured.append(dataclasses.replace(dev, **changes))

    versions = Versions(python=platform.python_version(), torch=torch.__version__,
                        cuda=getattr(torch.version, "cuda", None),
                        hip=getattr(torch.version, "hip", None), triton=triton_version,
                        numba=_version("numba"), softfp8=__version__)
    return CapabilityReport(versions=versions, devices=tuple(measured),
                            triton=_probes.triton_summary(measured, triton_version, interpret),
                            triton_interpret=interpret,
                            thread_denormals=_mode_text(thread_denormal_mode()),
                            probe_seconds=round(time.perf_counter() - start, 3))


# --- the per-process cache ---------------------------------------------------------------------
_CACHE: dict[tuple[bool, bool], CapabilityReport] = {}
_LOCK = threading.Lock()


def _usable(report: CapabilityReport | None, bandwidth: bool) -> bool:
    return report is not None and (not bandwidth or all(d.bandwidth is not None
                                                         for d in report.devices))


def probe(refresh: bool = False, *, bandwidth: bool = False) -> CapabilityReport:
    """What this machine can do, measured (see the module docstring). Cached per process and per
    calling thread's denormal mode; `refresh=True` measures again; `bandwidth=True` adds the
    measured memory bandwidth of each device (seconds). Never raises."""
    key = thread_denormal_mode()
    if not refresh:
        report = _CACHE.get(key)  # a dict read is atomic: no lock on the hot path
        if _usable(report, bandwidth):
            return report
    with _LOCK:  # one thread measures; the others wait and take its report
        report = _CACHE.get(key)
        if refresh or not _usable(report, bandwidth):
            try:
                report = collect(bandwidth=bandwidth)
            except Exception as exc:  # a bug in a sub-probe must not take the caller down
                from ._probes import describe
                report = CapabilityReport(devices=(DeviceReport(
                    "cpu", Runtime.CPU, name=f"probe failed ({describe(exc)})"),),
                    thread_denormals=_mode_text(key))
            _CACHE[key] = report
        return report


def clear_cache() -> None:
    """Forget every cached report (the next probe() measures again)."""
    with _LOCK:
        _CACHE.clear()


__all__ = ["CapabilityReport", "Check", "DeviceReport", "Runtime", "Status", "Versions",
           "clear_cache", "collect", "probe", "thread_denormal_mode"]
