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
import enum
import importlib.util
import os
import platform
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

TRITON_INTERPRET_ENV = "TRITON_INTERPRET"


class Status(str, enum.Enum):
    """The answer to a check's question (each `DeviceReport` field documents its question)."""

    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"
    """The sub-probe could not answer (it failed, or was not run); `detail` says why."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Check:
    """One measured fact: the answer, what was measured (or why it is unknown), and a value."""

    status: Status
    detail: str
    value: float | str | tuple | None = None

    @classmethod
    def yes(cls, detail: str, value: float | str | tuple | None = None) -> "Check":
        return cls(Status.YES, detail, value)

    @classmethod
    def no(cls, detail: str, value: float | str | tuple | None = None) -> "Check":
        return cls(Status.NO, detail, value)

    @classmethod
    def unknown(cls, detail: str) -> "Check":
        return cls(Status.UNKNOWN, detail)

    @property
    def is_yes(self) -> bool:
        return self.status is Status.YES

    @property
    def is_no(self) -> bool:
        return self.status is Status.NO


NOT_PROBED = Check.unknown("not probed")


class Runtime(str, enum.Enum):
    """What drives a device."""

    CPU = "cpu"
    CUDA = "cuda"
    ROCM = "rocm"  # torch calls it "cuda" too; told apart by torch.version.hip
    MPS = "mps"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class DeviceReport:
    """One device and what was measured on it. Checks that don't apply to it are None."""

    device: str
    """torch's name for it: "cpu", "cuda:0", "mps"."""
    runtime: Runtime
    name: str = ""
    capability: tuple[int, int] | None = None
    """CUDA compute capability; None on ROCm, CPU and MPS."""
    arch: str | None = None
    """"sm_90", a ROCm gcnArchName such as "gfx942:sramecc+:xnack-", or the CPU's machine type."""
    memory_bytes: int | None = None
    float8: Check = NOT_PROBED
    """Does torch hold float8_e4m3fn/e5m2 tensors on this device (a round trip, exact)?"""
    scaled_mm: Check = NOT_PROBED
    """Does a tiny torch._scaled_mm (FP8 x FP8) run here and give the right product?"""
    ftz_torch: Check = NOT_PROBED
    """Do torch elementwise ops flush denormals here (inject-decode of E2M1 1, 9 != +0.5, -0.5)?"""
    triton: Check | None = NOT_PROBED
    """Can Triton compile and launch a kernel for this device here?"""
    ftz_triton: Check | None = NOT_PROBED
    """Does a Triton kernel on this device flush denormals (the same decode in the kernel)?"""
    cuda_kernels: Check | None = None
    """NVIDIA GPUs only: can CuPy compile (NVRTC) and launch the CUDA backend's kernels here,
    with float32 denormals kept (its decodes need them)?"""
    ftz_cuda: Check | None = None
    """NVIDIA GPUs only: does the CUDA backend's kernel flush denormals (the inject decode)?"""
    numba: Check | None = None
    """CPU only: can Numba compile and run a nopython function here?"""
    ftz_numba: Check | None = None
    """CPU only: does Numba-compiled code flush denormals on the calling thread?"""
    bandwidth: Check | None = None
    """Measured memory bandwidth, GB/s in `value` (only with probe(bandwidth=True))."""

    @property
    def type(self) -> str:
        return torch.device(self.device).type

    @property
    def native_fp8(self) -> bool:
        """torch itself runs FP8 ops here: float8 tensors and _scaled_mm both measured working.
        They work on CPUs too, so this is not whether backend='native' runs here:
        `dispatch.refusal(Backend.NATIVE, ...)` says that (the probe's "native FP8" line)."""
        return self.float8.is_yes and self.scaled_mm.is_yes


@dataclass(frozen=True)
class Versions:
    """Package versions; None where the package is not installed."""

    python: str | None = None
    torch: str | None = None
    cuda: str | None = None
    hip: str | None = None
    triton: str | None = None
    numba: str | None = None
    softfp8: str | None = None


@dataclass(frozen=True)
class CapabilityReport:
    """Everything the probe measured. Frozen; build one by hand in tests (defaults: a bare CPU)."""

    versions: Versions = field(default_factory=Versions)
    devices: tuple[DeviceReport, ...] = (DeviceReport("cpu", Runtime.CPU),)
    triton: Check = NOT_PROBED
    """Can Triton compile and launch here at all (on some device), and if not, why?"""
    triton_interpret: bool = False
    """TRITON_INTERPRET=1 was set: Triton kernels run in its interpreter, CPU tensors included."""
    thread_denormals: str = "unknown"
    """The calling thread's FTZ/DAZ mode when probed (the cache key)."""
    probe_seconds: float = 0.0

    def device(self, device: torch.device | str) -> DeviceReport | None:
        """The report for `device`, or None if the probe did not find it."""
        d = torch.device(device)
        if d.type == "cuda":
            key = f"cuda:{0 if d.index is None else d.index}"
        else:
            key = d.type
        for dev in self.devices:
            if dev.device == key:
                return dev
        return None

    @property
    def gpus(self) -> tuple[DeviceReport, ...]:
        return tuple(d for d in self.devices if d.runtime in (Runtime.CUDA, Runtime.ROCM))

    def to_dict(self) -> dict:
        """Plain JSON-able data (enums as their strings)."""
        return _plain(dataclasses.asdict(self))


def _plain(obj):
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


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

    from . import __version__
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
