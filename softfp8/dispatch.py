"""Backends, what each needs, and `select()`: which backend runs a given (format, M, device).

The registry maps each `Backend` to a module under `softfp8.backends` (see that package's
docstring for the two names a module exposes). Nothing here matches GPU names: a backend states
its needs as data and `Needs.why_not` says in words why it can't run somewhere.
"""
from __future__ import annotations

import enum
import importlib
import importlib.util
import operator
import os
from dataclasses import dataclass
from types import ModuleType

import torch

from .formats import Format

BACKEND_ENV = "SOFTFP8_BACKEND"
E2M1_DECODE_ENV = "SOFTFP8_E2M1_DECODE"


class _Choice(str, enum.Enum):
    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: "str | _Choice", *, arg: str):
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls(value.strip().lower())
            except ValueError:
                pass
        valid = ", ".join(repr(m.value) for m in cls)
        raise ValueError(f"{arg}={value!r} is not valid; expected one of {valid}")


class Backend(_Choice):
    """Which implementation runs a linear. Its lower-case string works wherever one is expected."""

    AUTO = "auto"
    """The fastest backend that is correct on this machine (the probe decides)."""
    NATIVE = "native"
    """torch float8 dtypes and torch._scaled_mm, on GPUs with FP8 units."""
    TRITON = "triton"
    """Triton kernels that decode the packed codes in registers; any GPU Triton supports."""
    NUMBA = "numba"
    """Numba-compiled parallel CPU kernels."""
    TORCH = "torch"
    """The pure-torch reference (dequantize + matmul): any device, the correctness oracle."""


class E2M1Decode(_Choice):
    """How FP4 E2M1 codes are decoded inside a kernel."""

    AUTO = "auto"
    """Injection where the probe measured that denormals survive on that path, else select."""
    INJECT = "inject"
    """Exponent injection and one multiply by 2^126: fewer instructions, wrong where FTZ/DAZ."""
    SELECT = "select"
    """Build the normalised float directly: exact everywhere."""


class BackendUnavailable(RuntimeError):
    """An explicitly requested backend can't run here; the message says what is missing."""


@dataclass(frozen=True)
class Needs:
    """What a backend requires of the machine; `why_not` explains a refusal in words."""

    formats: frozenset[Format]
    device_types: frozenset[str]
    min_capability: tuple[int, int] | None = None  # CUDA compute capability; ROCm is exempt
    packages: tuple[str, ...] = ()

    def why_not(self, fmt: Format, device: torch.device,
                capability: tuple[int, int] | None = None) -> str | None:
        """None if the backend can run `fmt` on `device`, else the reason in words."""
        if fmt not in self.formats:
            return f"it does not implement {fmt}"
        if device.type not in self.device_types:
            kinds = ", ".join(sorted(self.device_types))
            return f"it runs on {kinds} devices, not {device.type}"
        for package in self.packages:
            if importlib.util.find_spec(package) is None:
                return f"the package {package!r} is not installed (pip install {package})"
        if (self.min_capability is not None and capability is not None
                and capability < self.min_capability):
            need = ".".join(map(str, self.min_capability))
            have = ".".join(map(str, capability))
            return f"it needs compute capability {need} or newer, this GPU has {have}"
        return None


_MODULES: dict[Backend, str] = {
    Backend.NATIVE: "softfp8.backends.native",
    Backend.TRITON: "softfp8.backends.triton",
    Backend.NUMBA: "softfp8.backends.numba_cpu",
    Backend.TORCH: "softfp8.backends.reference",
}

AUTO_ORDER = (Backend.NATIVE, Backend.TRITON, Backend.NUMBA, Backend.TORCH)


def load(backend: Backend | str) -> ModuleType:
    """The module that implements `backend` (imported on first use)."""
    backend = Backend.parse(backend, arg="backend")
    if backend is Backend.AUTO:
        raise ValueError("backend='auto' names no module; call select() first")
    return importlib.import_module(_MODULES[backend])


def module_exists(backend: Backend) -> bool:
    return importlib.util.find_spec(_MODULES[backend]) is not None


@dataclass(frozen=True)
class Choice:
    """The outcome of `select`: the backend, the E2M1 decoder, and why."""

    backend: Backend
    e2m1: E2M1Decode
    reason: str


def requested_backend(backend: Backend | str = Backend.AUTO) -> Backend:
    """`backend`, or SOFTFP8_BACKEND's value when `backend` is auto."""
    backend = Backend.parse(backend, arg="backend")
    if backend is Backend.AUTO and os.environ.get(BACKEND_ENV):
        backend = Backend.parse(os.environ[BACKEND_ENV], arg=BACKEND_ENV)
    return backend


def requested_e2m1(e2m1: E2M1Decode | str = E2M1Decode.AUTO) -> E2M1Decode:
    e2m1 = E2M1Decode.parse(e2m1, arg="e2m1")
    if e2m1 is E2M1Decode.AUTO and os.environ.get(E2M1_DECODE_ENV):
        e2m1 = E2M1Decode.parse(os.environ[E2M1_DECODE_ENV], arg=E2M1_DECODE_ENV)
    return e2m1


def _capability(device: torch.device) -> tuple[int, int] | None:
    if device.type == "cuda" and torch.version.hip is None:
        try:
            return torch.cuda.get_device_capability(device)
        except (AssertionError, RuntimeError) as e:  # a CPU-only build, or no such GPU index
            raise BackendUnavailable(f"device={device}: torch can't use it here ({e})") from e
    return None


def _check_select_args(m: object, device: object) -> torch.device:
    try:
        rows = None if isinstance(m, bool) else operator.index(m)
    except TypeError:
        rows = None
    if rows is None:
        raise TypeError(f"m: expected an int (rows of x), got {type(m).__name__}")
    if rows < 0:
        raise ValueError(f"m: expected a non-negative number of rows, got {rows}")
    if isinstance(device, torch.device):
        return device
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device={device!r} is not a torch device; expected e.g. 'cpu', "
                         f"'cuda:0' or a torch.device") from e


def select(fmt: Format | str, m: int, device: torch.device | str, *,
           backend: Backend | str = Backend.AUTO,
           e2m1: E2M1Decode | str = E2M1Decode.AUTO) -> Choice:
    """The backend and E2M1 decoder for a linear of format `fmt` with `m` rows on `device`."""
    fmt = Format.parse(fmt)
    device = _check_select_args(m, device)
    wanted = requested_backend(backend)
    decode = requested_e2m1(e2m1)
    if decode is E2M1Decode.AUTO:
        decode = E2M1Decode.SELECT  # exact everywhere; the probe refines this
    cap = _capability(device)
    if wanted is not Backend.AUTO:
        reason = _why_not(wanted, fmt, device, cap)
        if reason is not None:
            raise BackendUnavailable(f"backend {wanted} can't run {fmt} on {device}: {reason}")
        return Choice(wanted, decode, "requested")
    refusals = []
    for candidate in AUTO_ORDER:
        reason = _why_not(candidate, fmt, device, cap)
        if reason is None:
            return Choice(candidate, decode, "; ".join(refusals) or "first choice")
        refusals.append(f"{candidate}: {reason}")
    raise BackendUnavailable(f"no backend can run {fmt} on {device}: " + "; ".join(refusals))


def _why_not(backend: Backend, fmt: Format, device: torch.device,
             cap: tuple[int, int] | None) -> str | None:
    if not module_exists(backend):
        return "it is not part of this build"
    return load(backend).NEEDS.why_not(fmt, device, cap)
