"""Backends, what each needs, and `select()`: which backend runs a given (format, M, device).

The registry maps each `Backend` to a module under `softfp8.backends` (see that package's
docstring for what a module exposes). Nothing here matches GPU names: a backend states its static
needs as data (`Needs`), the probe measures what the machine does (`capability.probe()`), and the
routing policy below is data too:

- auto tries `AUTO_ORDER` (native, triton, cuda, numba, torch) and takes the first that runs, where
  "runs" means: auto uses it on this device type (`AUTO_DEVICE_TYPES`: never Triton for CPU
  tensors, even under TRITON_INTERPRET=1, where forcing it is allowed), its module is part of
  the build, its `NEEDS` are met, the probe measured YES for every check in `PROBED` on this
  device, activation quantization is allowed if the module sets `QUANTIZES_ACTIVATIONS`, and its
  optional `auto_accepts(fmt, m, device, report)` hook returns None (native needs the hook: it is
  used by auto only where its own measurements say it wins). The torch reference needs nothing.
- E2M1 decoding is injection only where the probe measured that denormals survive on the path
  that decodes (`E2M1_PATH`: the Triton kernel on that GPU, Numba on the CPU); select elsewhere.
- `select()` results are cached per (format, M bucket, device, arguments, settings, report),
  since `linear()` calls it on every call. What `backend`/`e2m1`/`activation_quant` defer to
  are the settings in force (`softfp8.launch_settings`, defaults from SOFTFP8_BACKEND,
  SOFTFP8_E2M1_DECODE, SOFTFP8_ACTIVATION_QUANT read once: `_settings`).
"""
from __future__ import annotations

import importlib
import importlib.util
import operator
import sys
from dataclasses import dataclass
from types import ModuleType

import torch

from . import _settings
from ._choices import ActivationQuant, Backend, E2M1Decode
from ._env import check_environment
from ._settings import ACTIVATION_QUANT_ENV, BACKEND_ENV, E2M1_DECODE_ENV  # noqa: F401
from .capability import CapabilityReport, DeviceReport, probe
from .formats import Format
from ._needs import Needs  # noqa: F401  (backends' NEEDS are Needs; named here too)


class BackendUnavailable(RuntimeError):
    """An explicitly requested backend can't run here; the message says what is missing."""


_MODULES: dict[Backend, str] = {
    Backend.NATIVE: "softfp8.backends.native",
    Backend.TRITON: "softfp8.backends.triton",
    Backend.CUDA: "softfp8.backends.cuda",
    Backend.NUMBA: "softfp8.backends.numba",
    Backend.TORCH: "softfp8.backends.reference",
}

AUTO_ORDER = (Backend.NATIVE, Backend.TRITON, Backend.CUDA, Backend.NUMBA, Backend.TORCH)

AUTO_DEVICE_TYPES: dict[Backend, frozenset[str]] = {
    Backend.NATIVE: frozenset({"cuda"}),
    Backend.TRITON: frozenset({"cuda"}),
    Backend.CUDA: frozenset({"cuda"}),
    Backend.NUMBA: frozenset({"cpu"}),
    Backend.TORCH: frozenset({"cpu", "cuda", "mps", "xpu"}),
}
"""Device types on which auto may pick each backend (an explicit request may go further)."""

PROBED: dict[Backend, tuple[str, ...]] = {
    Backend.NATIVE: ("float8", "scaled_mm"),
    Backend.TRITON: ("triton",),
    Backend.CUDA: ("cuda_kernels",),
    Backend.NUMBA: ("numba",),
    Backend.TORCH: (),
}
"""`DeviceReport` checks that must have measured YES on the device for the backend to run."""

E2M1_PATH: dict[Backend, str | None] = {
    Backend.NATIVE: None, Backend.TRITON: "ftz_triton", Backend.CUDA: "ftz_cuda",
    Backend.NUMBA: "ftz_numba", Backend.TORCH: None,
}
"""The FTZ check of the path that decodes E2M1 in each backend; None: it always selects."""

_KIND_NAMES = {"cuda": "CUDA/ROCm GPUs", "cpu": "the CPU", "mps": "Apple GPUs", "xpu": "XPUs"}
_MISSING = {"float8": "no float8 tensors", "scaled_mm": "no native FP8 matmul",
            "triton": "Triton can't run", "numba": "Numba can't run",
            "cuda_kernels": "the CUDA backend's kernels can't run"}


def load(backend: Backend | str) -> ModuleType:
    """The module that implements `backend` (imported on first use)."""
    if type(backend) is Backend and backend is not Backend.AUTO:
        # each eager layer call passes select()'s Backend: an imported module is in sys.modules
        # (what import_module returns first too, after ~1 us of its own machinery)
        module = sys.modules.get(_MODULES[backend])
        if module is not None:
            return module
    backend = Backend.parse(backend, arg="backend")
    if backend is Backend.AUTO:
        raise ValueError("backend='auto' names no module; call select() first")
    return importlib.import_module(_MODULES[backend])


def module_exists(backend: Backend) -> bool:
    try:
        return importlib.util.find_spec(_MODULES[backend]) is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class Choice:
    """The outcome of `select`: the backend, the E2M1 decoder, and why each was chosen."""

    backend: Backend
    e2m1: E2M1Decode
    reason: str
    e2m1_reason: str = ""


def _requested(value, cls, arg: str, settings: _settings.LaunchSettings | None = None):
    """(parsed choice, where it came from): the keyword unless it is auto/None, then the
    setting of the same name in force (`softfp8.launch_settings`, default from SOFTFP8_*)."""
    if value is not None:
        parsed = cls.parse(value, arg=arg)
        if parsed.value != "auto":
            return parsed, f"{arg}={parsed.value!r}"
    settings = settings or _settings.current()
    return cls(getattr(settings, arg)), settings.source(arg)


def requested_backend(backend: Backend | str = Backend.AUTO) -> Backend:
    """`backend`, or the backend setting (default SOFTFP8_BACKEND) when `backend` is auto."""
    return _requested(backend, Backend, "backend")[0]


def requested_e2m1(e2m1: E2M1Decode | str = E2M1Decode.AUTO) -> E2M1Decode:
    """`e2m1`, or the e2m1 setting (default SOFTFP8_E2M1_DECODE) when `e2m1` is auto."""
    return _requested(e2m1, E2M1Decode, "e2m1")[0]


def requested_activation_quant(activation_quant: ActivationQuant | str | None = None
                               ) -> ActivationQuant:
    """`activation_quant`, or the activation_quant setting (default SOFTFP8_ACTIVATION_QUANT,
    else allow) when None."""
    return _requested(activation_quant, ActivationQuant, "activation_quant")[0]


def m_bucket(m: int) -> int:
    """The M that select() decides for: M itself up to 16, then the next power of two."""
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"m: expected a positive int (rows of x), got {m!r}")
    return m if m <= 16 else 1 << (m - 1).bit_length()


_CACHE: dict[tuple, tuple[CapabilityReport, Choice]] = {}
_CACHE_LIMIT = 4096


def clear_cache() -> None:
    """Forget cached select() results (tests that swap backend modules call this), and every
    recorded eager call's choice with them (`_settings.invalidate`)."""
    _CACHE.clear()
    _settings.invalidate()


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
           e2m1: E2M1Decode | str = E2M1Decode.AUTO,
           activation_quant: ActivationQuant | str | None = None,
           report: CapabilityReport | None = None) -> Choice:
    """The backend and E2M1 decoder for a linear of format `fmt` with `m` rows on `device`.

    `backend`/`e2m1` auto and `activation_quant` None defer to the settings of those names
    (`softfp8.launch_settings`; defaults SOFTFP8_BACKEND, SOFTFP8_E2M1_DECODE,
    SOFTFP8_ACTIVATION_QUANT, read once). `report` defaults to `probe()`.
    An explicit backend that can't run raises BackendUnavailable naming what is missing."""
    if type(m) is int and m >= 1 and type(device) is torch.device and (
            device.type == "cpu" or device.index is not None):
        # an eager layer call's arguments: look the cache up before checking them (a key with
        # a bad device was never stored; m is a positive int, so m_bucket can't raise)
        if report is None:
            report = probe()
        hit = _cached(_key(fmt, m_bucket(m), device, backend, e2m1, activation_quant, report))
        if hit is not None:
            return hit
    device = _check_select_args(m, device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BackendUnavailable(f"device={device}: torch can't use a CUDA device here "
                                 "(no GPU, or a CPU-only build of torch)")
    if report is None:
        report = probe()
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", _current_cuda_index())
    key = _key(fmt, m_bucket(m), device, backend, e2m1, activation_quant, report)
    hit = _cached(key)
    if hit is not None:
        return hit
    check_environment()  # every SOFTFP8_* setting, also those no backend here reads
    settings = key[-2]  # the settings in force, as the key holds them
    choice = _select(Format.parse(fmt), m_bucket(m), device, report, backend, e2m1,
                     activation_quant, settings)
    try:
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = (report, choice)  # the report rides along so its id can't be reused
    except TypeError:  # an unhashable argument that the parsers accepted: not kept
        pass
    return choice


def _key(fmt, m, device, backend, e2m1, activation_quant, report) -> tuple:
    """select()'s cache key: its arguments, the settings in force (one interned object:
    `_settings`), the report's id."""
    return (fmt, m, device, backend, e2m1, activation_quant, _settings.current(), id(report))


SETTINGS_READERS = (_settings.generation,)
"""What a choice depends on besides its arguments and the probe: a recorded eager call
(`ops.record_eager`) is replayed only while each of these returns what it did then -- the
settings' token, which also covers the launch settings and `clear_cache`."""


def _cached(key: tuple) -> Choice | None:
    try:
        hit = _CACHE.get(key)
    except TypeError:  # an unhashable argument: let the parsers name it
        return None
    return None if hit is None else hit[1]


def _current_cuda_index() -> int:
    try:
        return torch.cuda.current_device()
    except Exception:
        return 0


def refusal(backend: Backend | str, fmt: Format | str, device: torch.device | str,
            report: CapabilityReport | None = None) -> str | None:
    """None if an explicit request of `backend` can run `fmt` on `device`, else why not, in the
    words select() would raise BackendUnavailable with. `report` defaults to `probe()`."""
    backend = Backend.parse(backend, arg="backend")
    if backend is Backend.AUTO:
        raise ValueError("backend='auto' is no backend of its own; name one")
    device = _check_select_args(1, device)
    report = probe() if report is None else report
    return _refusal(backend, Format.parse(fmt), 1, device, report.device(device), report,
                    ActivationQuant.ALLOW, auto=False)


def _select(fmt: Format, m: int, device: torch.device, report: CapabilityReport,
            backend, e2m1, activation_quant, settings: _settings.LaunchSettings) -> Choice:
    wanted, wanted_from = _requested(backend, Backend, "backend", settings)
    decode, decode_from = _requested(e2m1, E2M1Decode, "e2m1", settings)
    actq, actq_from = _requested(activation_quant, ActivationQuant, "activation_quant", settings)
    dev = report.device(device)
    where = f"{fmt} on {device}"
    if wanted is not Backend.AUTO:
        if actq is ActivationQuant.FORBID and _quantizes_activations(wanted):
            raise BackendUnavailable(
                f"backend {wanted} ({wanted_from}) quantizes activations, but {actq_from} "
                f"forbids that: choose a weight-only backend, or allow activation quantization")
        reason = _refusal(wanted, fmt, m, device, dev, report, actq, auto=False)
        if reason is not None:
            raise BackendUnavailable(
                f"backend {wanted} ({wanted_from}) can't run {where}: {reason}")
        return _choice(wanted, f"requested by {wanted_from}", device, dev, decode, decode_from)
    refusals = []
    for candidate in AUTO_ORDER:
        reason = _refusal(candidate, fmt, m, device, dev, report, actq, auto=True)
        if reason is None:
            why = f"auto: {candidate} is the first of {' > '.join(AUTO_ORDER)} that runs {where}"
            if refusals:
                why += " (" + "; ".join(refusals) + ")"
            return _choice(candidate, why, device, dev, decode, decode_from)
        refusals.append(f"not {candidate}: {reason}")
    raise BackendUnavailable(f"no backend can run {where}: " + "; ".join(refusals))


def _choice(backend: Backend, why: str, device: torch.device, dev: DeviceReport | None,
            decode: E2M1Decode, decode_from: str) -> Choice:
    e2m1, e2m1_why = _decoder(backend, device, dev, decode, decode_from)
    return Choice(backend, e2m1, why, e2m1_why)


def _quantizes_activations(backend: Backend) -> bool:
    if not module_exists(backend):
        return False
    try:
        return bool(getattr(load(backend), "QUANTIZES_ACTIVATIONS", False))
    except Exception:
        return False


def _refusal(backend: Backend, fmt: Format, m: int, device: torch.device,
             dev: DeviceReport | None, report: CapabilityReport, actq: ActivationQuant, *,
             auto: bool) -> str | None:
    """None if `backend` may run `fmt` on `device` (as auto, or as an explicit request)."""
    if auto and device.type not in AUTO_DEVICE_TYPES[backend]:
        if backend is Backend.TRITON and device.type == "cpu":
            return ("auto never picks Triton for CPU tensors (its interpreter is for debugging: "
                    "backend='triton' with TRITON_INTERPRET=1)")
        kinds = " and ".join(_KIND_NAMES.get(k, k) for k in sorted(AUTO_DEVICE_TYPES[backend]))
        return f"auto uses it on {kinds} only"
    if not module_exists(backend):
        return f"{_MODULES[backend]} is not part of this build"
    try:
        module = load(backend)
    except Exception as exc:
        return f"{_MODULES[backend]} failed to import ({type(exc).__name__}: {exc})"
    if actq is ActivationQuant.FORBID and getattr(module, "QUANTIZES_ACTIVATIONS", False):
        return "it quantizes activations, and activation quantization is forbidden"
    reason = module.NEEDS.why_not(fmt, device, dev.capability if dev is not None else None)
    if reason is not None:
        return reason
    for name in PROBED[backend]:
        if dev is None:
            return f"the probe found no device {device}"
        check = getattr(dev, name)
        if check is None or not check.is_yes:
            detail = "not applicable" if check is None else f"{check.status}: {check.detail}"
            return f"{_MISSING[name]} on {device} ({detail})"
    if auto:
        hook = getattr(module, "auto_accepts", None)
        if hook is None and backend is Backend.NATIVE:
            return "it has no auto_accepts hook, so only an explicit request uses it"
        if hook is not None:
            try:
                why = hook(fmt, m, device, report)
            except Exception as exc:
                return f"its auto_accepts hook failed ({type(exc).__name__}: {exc})"
            if why is not None:
                return str(why)
    return None


_PATH_NAME = {"ftz_triton": "the Triton kernel", "ftz_numba": "Numba",
              "ftz_cuda": "the CUDA backend's kernel"}


def _decoder(backend: Backend, device: torch.device, dev: DeviceReport | None,
             decode: E2M1Decode, decode_from: str) -> tuple[E2M1Decode, str]:
    """(E2M1 decoder, why): inject only where denormals were measured to survive on the path."""
    path = E2M1_PATH[backend]
    check = getattr(dev, path, None) if (dev is not None and path is not None) else None
    if decode is not E2M1Decode.AUTO:
        why = f"requested by {decode_from}"
        if decode is E2M1Decode.INJECT and check is not None and check.is_yes:
            why += f" (note: this path flushes denormals, so +-0.5 decode as +-0: {check.detail})"
        return decode, why
    if path is None:
        return E2M1Decode.SELECT, f"{backend} decodes E2M1 by selection (exact everywhere)"
    if check is not None and check.is_no:
        return E2M1Decode.INJECT, f"inject: measured exact in {_PATH_NAME[path]} ({check.detail})"
    if check is not None and check.is_yes:
        return E2M1Decode.SELECT, (f"select: {_PATH_NAME[path]} flushes denormals, so injection "
                                   f"would read +-0.5 as +-0 ({check.detail})")
    detail = "not measured" if check is None else check.detail
    return E2M1Decode.SELECT, (f"select: FTZ in {_PATH_NAME[path]} on {device} is unknown "
                               f"({detail}); selection is exact either way")
