"""The CUDA backend's kernels as data: one `Variant` per compiled kernel, its launch settings, and
`source(variant)`, the CUDA C text (`_text`) NVRTC compiles.

Every decode is integer bit operations plus at most one float32 multiply by a power of two, so a
GPU without FP8 units (and with fp16 arithmetic at 1/64 rate, as on a P40) runs it at fp32 speed:
no FP8 conversion instructions, no fp16 arithmetic, fp32 accumulation. The decoders mirror
`softfp8.decode` bit for bit. The multiply by 2^112 / 2^120 / 2^126 is exact only where float32
denormals are honoured: `COMPILE_OPTIONS` never asks for flush-to-zero, and the probe measures
that the compiled code keeps them (`ftz_cuda`).

The decoder block (`DECODERS`) is plain C++ as well as CUDA C, so the same text compiles on the
host, where the tests run it over every code. Kernels:

- `gemv`: M = 1..`GEMV_MAX_M` rows of x. One warp per `rows_per_warp(M)` weight rows; each
  lane reads the rows' packed words 16 bytes at a time (`uint4`), decodes them to float32 in
  registers and accumulates x . w for every row of x in float32; the warp then sums its lanes
  with shuffles. FP4 formats sum each block in float32 and scale it once (NVFP4: the E4M3 block
  scale times the tensor's fp32 scale; MXFP4: the E8M0 scale), or scale the weights at larger M
  (`PARTIAL_MAX_M`); FP8 formats scale the row's sum by its row scale.
- `dequant`: rows start..stop of the weight to float32 [rows, Kp] (one thread a 16-byte vector):
  larger M multiply such a slab with cuBLAS, the slab bounded in size.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ...formats import SPECS, Format
from ._text import COMMON, DECODERS, DEQUANT, GEMV

GEMV_MAX_M = 16
"""The largest M the GEMV kernel serves; more rows of x go through `dequant` and cuBLAS."""


def rows_per_warp(m: int) -> int:
    """Weight rows a warp reduces at once, reading (and converting) x once for all of them and
    keeping as many 16-byte weight loads in flight: four at M = 1 (PTX instructions a code,
    sm_61, fp16 x: 9.4 against 11.9 with two), two up to M = 4, one above, where M
    accumulators a row and M x vectors fill the registers (two rows spilled at M = 8 and 16
    with float32 x)."""
    return 4 if m == 1 else 2 if m <= 4 else 1


WARPS = 4
"""Warps a block (128 threads)."""


PARTIAL_MAX_M = 4
"""FP4 GEMV up to this M sums each block (16 codes) unscaled and scales the M sums (M multiplies a
block); above it, the 16 decoded weights are scaled instead (16 multiplies, M sums fewer
registers: the M sums spilled at M = 8 and 16 with float32 x, sm_61). Scaled weights are the
reference's bit for bit; scaled sums differ from it by float32 rounding only."""


def min_blocks(m: int) -> int:
    """`__launch_bounds__`'s blocks per SM for the GEMV at M rows of x: a register budget that
    keeps enough warps in flight to cover memory latency at small M (65536 / (128 * blocks)
    registers a thread: 85 at M = 1, whose four rows a warp spilled at 64), and lets the
    accumulators of larger M stay in registers. Without one, ptxas spilled a register of the
    NVFP4 M = 1 kernel for sm_61 at 72."""
    return 6 if m <= 2 else 4 if m <= 4 else 3 if m <= 8 else 2


COMPILE_OPTIONS: tuple[str, ...] = ()
"""NVRTC options on top of the architecture (which CuPy adds): none. Never --use_fast_math or
--ftz=true: the decodes multiply float32 denormals by powers of two and need them kept, which is
NVRTC's default; the PTX checks in CI reject any `.ftz` instruction."""


class XKind(str, enum.Enum):
    """The dtype of x (and y) as the kernel reads and writes it."""

    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"

    def __str__(self) -> str:
        return self.value


_FMT_ID = {Format.E5M2: 0, Format.E4M3: 1, Format.NVFP4: 2, Format.MXFP4: 3}
_X_ID = {XKind.F32: 0, XKind.F16: 1, XKind.BF16: 2}


@dataclass(frozen=True)
class Variant:
    """One compiled kernel. `specials`: the weight holds codes whose decode needs the slow fix
    (E5M2 inf/NaN, E4M3 NaN, NVFP4 NaN block scales); without them the fix is left out.
    `inject`: FP4 E2M1 by exponent injection (needs denormals) instead of selection; the GEMV
    above `PARTIAL_MAX_M` always selects.
    `m`: rows of x (GEMV only). `x`, `bias`: dtypes of x/y and of the bias (None: no bias)."""

    kernel: str  # "gemv" or "dequant"
    fmt: Format
    m: int = 1
    x: XKind = XKind.F32
    bias: XKind | None = None
    specials: bool = True
    inject: bool = False
    row_scale: bool = True  # E5M2 may have none

    @property
    def name(self) -> str:
        """The kernel's (extern "C") symbol."""
        parts = [f"softfp8_{self.kernel}", str(self.fmt)]
        if self.kernel == "gemv":
            parts += [f"m{self.m}", str(self.x), f"b{self.bias or 'none'}"]
        parts += ["sp" if self.specials else "nosp", "inj" if self.inject else "sel",
                  "rs" if self.row_scale else "nors"]
        return "_".join(parts)

    def __post_init__(self) -> None:
        if self.kernel not in ("gemv", "dequant"):
            raise ValueError(f"kernel: expected 'gemv' or 'dequant', got {self.kernel!r}")
        if not 1 <= self.m <= GEMV_MAX_M:
            raise ValueError(f"m: expected 1..{GEMV_MAX_M} rows of x, got {self.m}")
        if self.kernel == "gemv" and self.m > PARTIAL_MAX_M and self.inject:
            # The decode is shared by M multiply-adds a weight there, so injection saves little,
            # and selection needs fewer registers (injection spilled at M = 16, float32 x).
            object.__setattr__(self, "inject", False)


def source(variant: Variant) -> str:
    """The CUDA C text of `variant`: its settings as macros, the decoders, its kernel."""
    bias = "3" if variant.bias is None else str(_X_ID[variant.bias])
    fp4 = variant.fmt in (Format.NVFP4, Format.MXFP4)
    head = "\n".join([
        f"#define SF8_NAME {variant.name}",
        f"#define SF8_FMT {_FMT_ID[variant.fmt]}",
        f"#define SF8_M {variant.m}",
        f"#define SF8_X {_X_ID[variant.x]}",
        f"#define SF8_BIAS {bias}",
        f"#define SF8_SPECIALS {'true' if variant.specials else 'false'}",
        f"#define SF8_INJECT {int(variant.inject)}",
        f"#define SF8_ROW_SCALE {int(variant.row_scale)}",
        f"#define SF8_ROWS {rows_per_warp(variant.m)}",
        f"#define SF8_WARPS {WARPS}",
        f"#define SF8_MIN_BLOCKS {min_blocks(variant.m)}",
        f"#define SF8_HALVES {1 if not fp4 else 2}",
        f"#define SF8_SCALE_W {int(fp4 and variant.m > PARTIAL_MAX_M)}",
        f"#define SF8_PARTIAL {int(fp4 and variant.m <= PARTIAL_MAX_M)}",
    ])
    body = GEMV if variant.kernel == "gemv" else DEQUANT
    return f"{head}\n{DECODERS}\n{COMMON}\n{body}"


def codes_per_vector(fmt: Format) -> int:
    """Codes in one 16-byte vector of a row: 16 (FP8) or 32 (FP4)."""
    return 4 * SPECS[fmt].codes_per_word


