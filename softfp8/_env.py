"""softfp8's environment settings: what each SOFTFP8_* variable takes (`SETTINGS`,
`check_environment`).

The settings dispatch, the launch plan and the backends read are `softfp8.launch_settings`,
whose defaults `_settings` reads from these variables once; no call reads the environment.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Callable


# -- what each SOFTFP8_* variable takes ----------------------------------------------------------
# One table, so that a typo is an error wherever the variable would be read, and on the first
# select() of any call even where no backend reads it (SOFTFP8_FP8_DECODE on a CPU): a setting
# that is silently ignored looks like one that took effect.


@dataclass(frozen=True)
class Setting:
    """A SOFTFP8_* variable and the values it takes (case and surrounding space ignored; empty
    counts as unset). `values`: the words it takes; otherwise `accepts` decides, and `expected`
    says what it takes in words."""

    name: str
    values: tuple[str, ...] = ()
    expected: str = ""
    accepts: Callable[[str], bool] | None = None

    def check(self, raw: str) -> str:
        """`raw` as the reader compares it (stripped; lower-case where `values` are words), or
        ValueError naming the variable, the value and what it takes."""
        value = raw.strip()
        if self.values:
            if value.lower() in self.values:
                return value.lower()
            valid = ", ".join(repr(v) for v in self.values)
            raise ValueError(f"{self.name}={raw!r} is not valid; expected one of {valid}")
        if self.accepts is not None and not self.accepts(value):
            raise ValueError(f"{self.name}={raw!r} is not valid; expected {self.expected}")
        return value


def _multiple_of_16(value: str) -> bool:
    return value.isdigit() and int(value) % 16 == 0


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("SOFTFP8_BACKEND", ("auto", "native", "triton", "cuda", "numba", "torch")),
    Setting("SOFTFP8_E2M1_DECODE", ("auto", "inject", "select")),
    Setting("SOFTFP8_ACTIVATION_QUANT", ("allow", "forbid")),
    Setting("SOFTFP8_FP8_DECODE", ("auto", "integer", "hardware")),
    Setting("SOFTFP8_PDL", ("auto", "off", "early", "late")),
    Setting("SOFTFP8_PDL_PREFETCH", expected="a multiple of 16 (bytes)", accepts=_multiple_of_16),
    Setting("SOFTFP8_TRITON_TABLE", expected="the path of a sweep receipt "
            "(benchmarks/sweep_gemv.py --out FILE)", accepts=os.path.isfile),
    Setting("SOFTFP8_SPLITK_REDUCE", ("last", "kernel")),
    Setting("SOFTFP8_NUMBA_FP4_LUT", ("1", "0", "avx2", "avx512")),
)}
"""Every variable softfp8 reads, by name. The backends' own parsers read theirs where they use
them; the values listed here are checked against those parsers' choices by the tests."""

_WARNED: set[str] = set()


def check_environment() -> None:
    """Raise ValueError for the first SOFTFP8_* variable set to a value it does not take; warn
    once about a SOFTFP8_* name that no setting has (a misspelt name is read by nothing).
    `dispatch.select` runs this before each routing decision it has not made before."""
    for name, value in os.environ.items():
        if not name.startswith("SOFTFP8_"):
            continue
        setting = SETTINGS.get(name)
        if setting is None:
            if name not in _WARNED:
                _WARNED.add(name)
                warnings.warn(f"{name} is set, but softfp8 reads no such variable (it reads "
                              f"{', '.join(SETTINGS)})", stacklevel=3)
        elif value.strip():
            setting.check(value)
