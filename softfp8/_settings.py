"""The GPU kernels' launch settings, and how a user overrides them: `launch_settings(...)`.

    with softfp8.launch_settings(fp8_decode="integer", pdl="off"):
        y = model(x)                      # every launch inside plans with these settings

`LaunchSettings` holds what the Triton backend's launch plan reads besides the shapes, the
device and the weight (`backends/triton/_plan.py`):

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

The defaults come from the environment, read once, on first use: SOFTFP8_FP8_DECODE,
SOFTFP8_PDL, SOFTFP8_PDL_PREFETCH, SOFTFP8_TRITON_TABLE, SOFTFP8_SPLITK_REDUCE (an invalid value
raises naming the variable and what it takes, `_env.SETTINGS`). `launch_settings` overrides
them for its block, in this thread or asyncio task (a `contextvars.ContextVar`); blocks nest.
Why not the environment on every call: reading and parsing eight variables cost each eager call
microseconds, and a setting changed mid-run reached some caches and not others. A process that
changes os.environ after its first launch calls `reload_environment()`.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from dataclasses import dataclass

from ._env import SETTINGS

FP8_DECODE_ENV = "SOFTFP8_FP8_DECODE"
PDL_ENV = "SOFTFP8_PDL"
PDL_PREFETCH_ENV = "SOFTFP8_PDL_PREFETCH"
TABLE_ENV = "SOFTFP8_TRITON_TABLE"
SPLITK_REDUCE_ENV = "SOFTFP8_SPLITK_REDUCE"

_ENV_OF = {"fp8_decode": FP8_DECODE_ENV, "pdl": PDL_ENV, "pdl_prefetch": PDL_PREFETCH_ENV,
           "table": TABLE_ENV, "splitk_reduce": SPLITK_REDUCE_ENV}
"""Each field and the variable that gives its default."""


@dataclass(frozen=True)
class LaunchSettings:
    """The launch settings (the module docstring says what each means). Checked when made: a
    value a field does not take raises ValueError naming the field and the valid values."""

    fp8_decode: str = "auto"
    pdl: str = "auto"
    pdl_prefetch: int | None = None
    table: str | None = None
    splitk_reduce: str = "last"

    def __post_init__(self) -> None:
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
            h = hash((self.fp8_decode, self.pdl, self.pdl_prefetch, self.table,
                      self.splitk_reduce))
            object.__setattr__(self, "_hash", h)
        return h


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
    return LaunchSettings(**values)


_DEFAULT: list = []  # [LaunchSettings] once read
_OVERRIDE: contextvars.ContextVar = contextvars.ContextVar("softfp8_launch_settings", default=None)


def reload_environment() -> LaunchSettings:
    """Read the SOFTFP8_* defaults again (after os.environ changed); returns them."""
    _DEFAULT[:] = [from_environment()]
    return _DEFAULT[0]


def current() -> LaunchSettings:
    """The settings launches plan with now: the innermost `launch_settings` block's, else the
    environment's (read on the first call)."""
    s = _OVERRIDE.get()
    if s is not None:
        return s
    return _DEFAULT[0] if _DEFAULT else reload_environment()


@contextlib.contextmanager
def launch_settings(**overrides):
    """Launch with these settings inside the block (fields of `LaunchSettings`: fp8_decode,
    pdl, pdl_prefetch, table, splitk_reduce); the others stay as they are. Yields the
    LaunchSettings in force. A recorded eager call (`_fastcall`) replays only under the
    settings it was recorded with."""
    unknown = set(overrides) - set(_ENV_OF)
    if unknown:
        raise TypeError(f"launch_settings: unknown setting(s) {sorted(unknown)}; expected some "
                        f"of {list(_ENV_OF)}")
    settings = dataclasses.replace(current(), **overrides)
    token = _OVERRIDE.set(settings)
    try:
        yield settings
    finally:
        _OVERRIDE.reset(token)
