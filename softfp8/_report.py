"""The probe's report as data: `Status`, `Check`, `DeviceReport`, `CapabilityReport`.

A leaf (no softfp8 imports): `capability` fills it in, `_probes` builds its checks, and
both import it, so neither imports the other for its types.
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

import torch


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
