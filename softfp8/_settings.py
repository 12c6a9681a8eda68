"""softfp8's settings -- which backend and decoders dispatch picks, and the GPU kernels' launch
settings -- and how a user overrides them: `launch_settings(...)`.

    with softfp8.launch_settings(backend="triton", fp8_decode="integer", pdl="off"):
        y = model(x)                      # every call inside dispatches and plans with these

`LaunchSettings` holds what `dispatch.select` and the Triton backend's launch plan
(`backends/triton/_plan.py`) read besides their arguments, the device and the weight:

- backend: "auto" | "native" | "triton" | "cuda" | "numba" | "torch" -- the backend a call's
  `backend="auto"` defers to (`dispatch.select`).
- e2m1: "auto" | "inject" | "select" -- the E2M1 decoder a call's `e2m1="auto"` defers to.
- activation_quant: "allow" | "forbid" -- whether a backend may quantize x (native W8A8),
  where a call's `activation_quant` is None.
- fp8_decode: "auto" | "integer" | "hardware" -- how 8-bit codes become fp16: `integer` forces
  the bit-operation decode even on sm_89+ (an H200 then measures what a T4 user gets);
  `hardware` on a GPU without FP8 conversions is an error. auto: `_device.uses_hardware_fp8`.
- pdl: "auto" | "off" | "early" | "late" -- programmatic dependent launch on NVIDIA sm_90+
  (`_table.pdl_auto` says what auto picks and why).
- pdl_prefetch: bytes of each program's weights prefetched to L2 before the PDL wait (a
  multiple of 16); None: the rule's.
- table: the path of a sweep receipt (`benchmarks/sweep_gemv.py --out FILE`) whose fastest
  setting per (N, K, M, format) replaces the built-in table's for exactly those shapes.
- splitk_reduce: "last" | "kernel" -- who adds the parts of a split launch (`_splitk`).
- numba_fp4_lut: "1" | "0" | "avx2" | "avx512" -- the Numba backend's FP4 table kernels: all
  this CPU runs ("1"), none (the bit-operation kernels), the AVX2 one only, or the AVX-512 one
  without bf16 products (`backends/numba/_gemv._fp4_table_kernels`); for comparisons, or a CPU
  that misreports its features.

The defaults come from the environment, read once, on first use: SOFTFP8_BACKEND,
SOFTFP8_E2M1_DECODE, SOFTFP8_ACTIVATION_QUANT, SOFTFP8_FP8_DECODE, SOFTFP8_PDL,
SOFTFP8_PDL_PREFETCH, SOFTFP8_TRITON_TABLE, SOFTFP8_SPLITK_REDUCE, SOFTFP8_NUMBA_FP4_LUT (an
invalid value raises naming the variable and what it takes, `_env.SETTINGS`). `launch_settings` overrides them for
its block, in this thread or asyncio task (a `contextvars.ContextVar`); blocks nest. Why not the
environment on every call: reading and parsing nine variables cost each eager call
microseconds, and a setting changed mid-run reached some caches and not others. A process that
changes os.environ after its first call runs `reload_environment()`.

Each distinct LaunchSettings in force is one object (interned) with a token (`generation()`):
a recorded eager call (`backends/triton/_fastcall.py`) replays only while the token it was
recorded under is the current one, one integer compare; `invalidate()` (`dispatch.clear_cache`)
gives every object a new token.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import itertools
from dataclasses import dataclass

from ._env import SETTINGS

FP8_DECODE_ENV = "SOFTFP8_FP8_DECODE"
PDL_ENV = "SOFTFP8_PDL"
PDL_PREFETCH_ENV = "SOFTFP8_PDL_PREFETCH"
TABLE_ENV = "SOFTFP8_TRITON_TABLE"
SPLITK_REDUCE_ENV = "SOFTFP8_SPLITK_REDUCE"
BACKEND_ENV = "SOFTFP8_BACKEND"
E2M1_DECODE_ENV = "SOFTFP8_E2M1_DECODE"
ACTIVATION_QUANT_ENV = "SOFTFP8_ACTIVATION_QUANT"
NUMBA_FP4_LUT_ENV = "SOFTFP8_NUMBA_FP4_LUT"

_ENV_OF = {"backend": BACKEND_ENV, "e2m1": E2M1_DECODE_ENV,
           "activation_quant": ACTIVATION_QUANT_ENV, "fp8_decode": FP8_DECODE_ENV,
           "pdl": PDL_ENV, "pdl_prefetch": PDL_PREFETCH_ENV, "table": TABLE_ENV,
           "splitk_reduce": SPLITK_REDUCE_ENV, "numba_fp4_lut": NUMBA_FP4_LUT_ENV}
"""Each field and the variable that gives its default."""


@dataclass(frozen=True, kw_only=True)
class LaunchSettings:
    """The settings (the module docstring says what each means). Checked when made: a value a
    field does not take raises ValueError naming the field and the valid values. `from_env`:
    the fields whose value came from their SOFTFP8_* variable (`source` names it)."""

    backend: str = "auto"
    e2m1: str = "auto"
    activation_quant: str = "allow"
    fp8_decode: str = "auto"
    pdl: str = "auto"
    pdl_prefetch: int | None = None
    table: str | None = None
    splitk_reduce: str = "last"
    numba_fp4_lut: str = "1"
    from_env: frozenset = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "from_env", frozenset(self.from_env))
        for name, env in _ENV_OF.items():
            value = getattr(self, name)
            if value is None:
                continue
            if name == "pdl_prefetch":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value % 16:
                    raise ValueError(f"launch_settings(pdl_prefetch={value!r}) is not valid; "
                                     f"expected a multiple of 16 (bytes), or None for the rule's")
                continue
            try:
                checked = SETTINGS[env].check(str(value))
            except ValueError as e:
                raise ValueError(f"launch_settings({name}={value!r}) is not valid; "
                                 f"{str(e).split('; ', 1)[1]}") from None
            object.__setattr__(self, name, checked)

    def __hash__(self) -> int:  # a plan's cache key hashes it on every call: once is enough
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(dataclasses.astuple(self))
            object.__setattr__(self, "_hash", h)
        return h

    def source(self, name: str) -> str:
        """Where field `name`'s value comes from, in words: "SOFTFP8_BACKEND=torch",
        "launch_settings(backend='torch')" or "default"."""
        value = getattr(self, name)
        if name in self.from_env:
            return f"{_ENV_OF[name]}={value}"
        if value == _FIELD_DEFAULTS[name]:
            return "default"
        return f"launch_settings({name}={value!r})"


def from_environment(environ=None) -> LaunchSettings:
    """LaunchSettings from the SOFTFP8_* variables (unset or empty: the field's default); an
    invalid value raises naming the variable (`_env.SETTINGS`)."""
    import os

    environ = os.environ if environ is None else environ
    values = {}
    for name, env in _ENV_OF.items():
        raw = (environ.get(env) or "").strip()
        if raw:
            value = SETTINGS[env].check(raw)
            values[name] = int(value) if name == "pdl_prefetch" else value
    return LaunchSettings(**values, from_env=frozenset(values))


_FIELD_DEFAULTS = {f.name: f.default for f in dataclasses.fields(LaunchSettings)}
_DEFAULT: list = []  # [LaunchSettings] once read
_OVERRIDE: contextvars.ContextVar = contextvars.ContextVar("softfp8_launch_settings", default=None)
_IN_FORCE: dict = {}  # LaunchSettings -> the one object of that value put in force
_TOKENS = itertools.count(1)


def _interned(settings: LaunchSettings) -> LaunchSettings:
    """The one object equal to `settings` that is put in force, with its token."""
    kept = _IN_FORCE.get(settings)
    if kept is None:
        kept = _IN_FORCE[settings] = settings
        object.__setattr__(kept, "_token", next(_TOKENS))
    return kept


def reload_environment() -> LaunchSettings:
    """Read the SOFTFP8_* defaults again (after os.environ changed); returns them."""
    _DEFAULT[:] = [_interned(from_environment())]
    return _DEFAULT[0]


def current() -> LaunchSettings:
    """The settings calls dispatch and plan with now: the innermost `launch_settings` block's,
    else the environment's (read on the first call)."""
    s = _OVERRIDE.get()
    if s is not None:
        return s
    return _DEFAULT[0] if _DEFAULT else reload_environment()


def generation() -> int:
    """The token of the settings in force (module docstring): equal at two calls only while
    the same settings were in force at both and nothing was invalidated in between."""
    s = _OVERRIDE.get()
    if s is None:
        s = _DEFAULT[0] if _DEFAULT else reload_environment()
    return s._token


def invalidate() -> None:
    """New tokens for every settings object in force: no call recorded before replays."""
    for s in list(_IN_FORCE.values()):  # a copy: another thread may add one meanwhile
        object.__setattr__(s, "_token", next(_TOKENS))


@contextlib.contextmanager
def launch_settings(**overrides):
    """Dispatch and launch with these settings inside the block (fields of `LaunchSettings`:
    backend, e2m1, activation_quant, fp8_decode, pdl, pdl_prefetch, table, splitk_reduce,
    numba_fp4_lut);
    the others stay as they are. Yields the LaunchSettings in force. A recorded eager call
    (`_fastcall`) replays only under the settings it was recorded with."""
    unknown = set(overrides) - set(_ENV_OF)
    if unknown:
        raise TypeError(f"launch_settings: unknown setting(s) {sorted(unknown)}; expected some "
                        f"of {list(_ENV_OF)}")
    base = current()
    settings = _interned(dataclasses.replace(base, **overrides,
                                             from_env=base.from_env - set(overrides)))
    token = _OVERRIDE.set(settings)
    try:
        yield settings
    finally:
        _OVERRIDE.reset(token)
