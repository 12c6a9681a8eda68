"""The choices a user names by string, and the one parser they share (a leaf: no softfp8 imports).

`ParsedEnum` is the base of every such enum (`Format`, `ScaleMethod`, and the dispatch choices
below): its members are their lower-case strings, and `parse` accepts a member or its string
(any case, surrounding spaces ignored) and refuses anything else with a ValueError naming the
argument, what was found and every valid value.
"""
from __future__ import annotations

import enum


class ParsedEnum(str, enum.Enum):
    """A str enum read from user input with `parse`; `str()` is the value ("e5m2", not
    "Format.E5M2"), in messages and reprs."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _words(cls) -> tuple[str, str, str]:
        """(the argument's default name, what a refused value is not, a hint after the valid
        values): "{arg}={value!r} is not {what}; expected one of {valid}{hint}"."""
        return "value", "valid", ""

    @classmethod
    def parse(cls, value, *, arg: str | None = None):
        """`value` as a member; anything else raises ValueError naming `arg` and the valid values."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls(value.strip().lower())
            except ValueError:
                pass
        default_arg, what, hint = cls._words()
        valid = ", ".join(repr(m.value) for m in cls)
        raise ValueError(f"{arg or default_arg}={value!r} is not {what}; expected one of {valid}"
                         f"{hint}")


class Backend(ParsedEnum):
    """Which implementation runs a linear. Its lower-case string works wherever one is expected."""

    AUTO = "auto"
    """The fastest backend that is correct on this machine (the probe decides)."""
    NATIVE = "native"
    """torch float8 dtypes and torch._scaled_mm, on GPUs with FP8 units."""
    TRITON = "triton"
    """Triton kernels that decode the packed codes in registers; any GPU Triton supports."""
    CUDA = "cuda"
    """CUDA C kernels compiled at run time by NVRTC (CuPy), decoding to float32 in registers:
    NVIDIA GPUs Triton can't reach (compute capability below 7.0, or Triton missing/failing)."""
    NUMBA = "numba"
    """Numba-compiled parallel CPU kernels."""
    TORCH = "torch"
    """The pure-torch reference (dequantize + matmul): any device, the correctness oracle."""


class E2M1Decode(ParsedEnum):
    """How FP4 E2M1 codes are decoded inside a kernel."""

    AUTO = "auto"
    """Injection where the probe measured that denormals survive on that path, else select."""
    INJECT = "inject"
    """Exponent injection and one multiply by 2^126: fewer instructions, wrong where FTZ/DAZ."""
    SELECT = "select"
    """Build the normalised float directly: exact everywhere."""


class ActivationQuant(ParsedEnum):
    """Whether a backend may quantize the activations (W8A8) as well as the weights."""

    ALLOW = "allow"
    """Backends that quantize activations (native FP8) may run where auto finds them faster."""
    FORBID = "forbid"
    """Weight-only backends only: activations keep their dtype, as in the reference."""
