"""The packed weight formats: one spec per format, and the `PackedWeight` that holds one weight.

Layout (DESIGN.md §2): codes live in int32 words, consecutive along K, little-endian. An FP8 row
holds 4 codes per word (code ``4*i + j`` in bits ``8j..8j+7`` of word ``i``); an FP4 row holds 8
(code ``8*i + j`` in bits ``4j..4j+3``, so each byte carries the even code in its low nibble, as
torch's ``float4_e2m1fn_x2`` does). K is padded with zero codes to ``spec.k_align`` so that every
row starts on a 16-byte boundary and kernels can issue aligned 16-byte loads; the padding never
shows: ``shape`` is the logical (N, K).
"""
from __future__ import annotations

import enum
import operator
from dataclasses import dataclass, replace

import torch

from ._choices import ParsedEnum


class Format(ParsedEnum):
    """A packed weight format. Its lower-case string (``"e5m2"``) works wherever one is expected."""

    E5M2 = "e5m2"
    """FP8 E5M2 (bias 15, has inf/NaN); optional fp32 scale per output row. Decode is ``code << 8``."""
    E4M3 = "e4m3"
    """FP8 E4M3fn (bias 7, no inf, NaN = 0x7F/0xFF, max 448); fp32 scale per output row."""
    NVFP4 = "nvfp4"
    """FP4 E2M1 codes; one E4M3 scale per 16 weights along K and one fp32 scale per tensor."""
    MXFP4 = "mxfp4"
    """FP4 E2M1 codes; one E8M0 (power of two) scale per 32 weights along K (OCP MX v1.0)."""
    E4M3_B128 = "e4m3_b128"
    """FP8 E4M3fn codes as E4M3's; one fp32 multiplier per 128 x 128 tile of the [N, K] weight
    (the layout of fine-grained FP8 checkpoints: transformers' ``weight_scale_inv``,
    compressed-tensors ``strategy: block``)."""

    @classmethod
    def _words(cls) -> tuple[str, str, str]:
        return "fmt", "a softfp8 format", ""


class ScaleKind(str, enum.Enum):
    """How a format scales its codes along K."""

    NONE = "none"
    ROW = "row"  # one fp32 per output row
    BLOCK_E4M3 = "block_e4m3"  # E4M3 code per block of K, times one fp32 per tensor
    BLOCK_E8M0 = "block_e8m0"  # E8M0 code (power of two) per block of K
    TILE_F32 = "tile_f32"  # one fp32 per tile of block_n rows x block codes along K


@dataclass(frozen=True)
class MinifloatSpec:
    """One element type: sign, `exp_bits`, `man_bits`, exponent `bias`, and its largest finite value."""

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    max_finite: float
    has_inf: bool
    has_nan: bool

    @property
    def bits(self) -> int:
        return 1 + self.exp_bits + self.man_bits


E5M2_ELEMENT = MinifloatSpec("e5m2", 5, 2, 15, 57344.0, has_inf=True, has_nan=True)
E4M3_ELEMENT = MinifloatSpec("e4m3fn", 4, 3, 7, 448.0, has_inf=False, has_nan=True)
E2M1_ELEMENT = MinifloatSpec("e2m1", 2, 1, 1, 6.0, has_inf=False, has_nan=False)


@dataclass(frozen=True)
class FormatSpec:
    """Everything a kernel or the quantizer needs to know about a format, as data."""

    fmt: Format
    element: MinifloatSpec
    scale: ScaleKind
    block: int | None  # weights per block scale along K, or None
    scale_required: bool  # False: the scale is optional (E5M2)
    block_n: int | None = None  # TILE_F32: rows per tile along N (one scale per block_n rows)

    @property
    def bits(self) -> int:
        return self.element.bits

    @property
    def codes_per_word(self) -> int:
        return 32 // self.bits

    @property
    def k_align(self) -> int:
        """K is padded to this many codes: one 16-byte vector, and a whole number of blocks (FP4's
        blocks; E4M3_B128 pads as E4M3 does, so its last 128-code tile along K may be partial)."""
        return 128 // self.bits

    def scales_shape(self, n: int, k: int) -> tuple[int, ...] | None:
        """The shape of `PackedWeight.scales` for a logical (n, k) weight (None: no scales)."""
        if self.scale is ScaleKind.ROW:
            return (n,)
        if self.scale is ScaleKind.TILE_F32:
            return (-(-n // self.block_n), -(-k // self.block))
        if self.scale is ScaleKind.NONE:
            return None
        return (n, -(-k // self.k_align) * self.k_align // self.block)

    @property
    def scales_dtype(self) -> torch.dtype:
        """float32 for row and tile scales, uint8 codes for block scales."""
        return torch.float32 if self.scale in (ScaleKind.ROW, ScaleKind.TILE_F32) else torch.uint8


SPECS: dict[Format, FormatSpec] = {
    Format.E5M2: FormatSpec(Format.E5M2, E5M2_ELEMENT, ScaleKind.ROW, None, scale_required=False),
    Format.E4M3: FormatSpec(Format.E4M3, E4M3_ELEMENT, ScaleKind.ROW, None, scale_required=True),
    Format.NVFP4: FormatSpec(Format.NVFP4, E2M1_ELEMENT, ScaleKind.BLOCK_E4M3, 16, scale_required=True),
    Format.MXFP4: FormatSpec(Format.MXFP4, E2M1_ELEMENT, ScaleKind.BLOCK_E8M0, 32, scale_required=True),
    Format.E4M3_B128: FormatSpec(Format.E4M3_B128, E4M3_ELEMENT, ScaleKind.TILE_F32, 128,
                                 scale_required=True, block_n=128),
}


def padded_k(k: int, fmt: Format) -> int:
    """K rounded up to the format's alignment (codes)."""
    align = SPECS[fmt].k_align
    return -(-k // align) * align


@dataclass(frozen=True)
class PackedWeight:
    """One quantized weight of logical shape (N, K).

    words:        int32 [N, Kp / codes_per_word], codes packed along K (module docstring).
    scales:       E5M2/E4M3: fp32 [N] row scales (None for unscaled E5M2);
                  NVFP4: uint8 [N, Kp / 16] E4M3 codes; MXFP4: uint8 [N, Kp / 32] E8M0 codes;
                  E4M3_B128: fp32 [ceil(N / 128), ceil(K / 128)], one multiplier per 128 x 128
                  tile (w[n, k] = e4m3(code[n, k]) * scales[n // 128, k // 128]).
    global_scale: NVFP4 only: fp32 scalar tensor, the per-tensor scale.
    """

    fmt: Format
    shape: tuple[int, int]
    words: torch.Tensor
    scales: torch.Tensor | None = None
    global_scale: torch.Tensor | None = None

    def __post_init__(self) -> None:
        # A PackedWeight can come from a state_dict or a user: check every invariant a kernel
        # relies on, so a corrupted one is a clear error here, never a wrong read there.
        object.__setattr__(self, "fmt", Format.parse(self.fmt))
        spec = SPECS[self.fmt]
        n, k = _check_shape(self.shape)
        object.__setattr__(self, "shape", (n, k))
        kp = padded_k(k, self.fmt)
        _expect(self.words, "words", torch.int32, (n, kp // spec.codes_per_word))
        if spec.scale is ScaleKind.ROW:
            if self.scales is None:
                if spec.scale_required:
                    raise ValueError(f"scales: {self.fmt} needs fp32 row scales of shape ({n},), got None")
            else:
                _expect(self.scales, "scales", torch.float32, (n,))
        else:
            _expect(self.scales, "scales", spec.scales_dtype, spec.scales_shape(n, k))
        if self.fmt is Format.NVFP4:
            _expect(self.global_scale, "global_scale", torch.float32, ())
        elif self.global_scale is not None:
            raise ValueError(f"global_scale: only nvfp4 has one, got a tensor for {self.fmt}")
        for name, t in (("scales", self.scales), ("global_scale", self.global_scale)):
            if t is not None and t.device != self.words.device:
                raise ValueError(f"{name} is on {t.device} but words are on {self.words.device}; "
                                 "expected one device")

    @property
    def spec(self) -> FormatSpec:
        return SPECS[self.fmt]

    @property
    def out_features(self) -> int:
        return self.shape[0]

    @property
    def in_features(self) -> int:
        return self.shape[1]

    @property
    def padded_k(self) -> int:
        return self.words.shape[1] * self.spec.codes_per_word

    @property
    def device(self) -> torch.device:
        return self.words.device

    @property
    def nbytes(self) -> int:
        """Bytes a matmul must read: words and scales."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(t for t in (self.words, self.scales, self.global_scale) if t is not None)

    def to(self, device: torch.device | str) -> "PackedWeight":
        """The same weight on `device` (the packed words move, nothing is decoded)."""
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return replace(self, words=move(self.words), scales=move(self.scales),
                       global_scale=move(self.global_scale))

    def __repr__(self) -> str:
        n, k = self.shape
        return f"PackedWeight({self.fmt}, shape=({n}, {k}), device={self.device}, nbytes={self.nbytes})"


def _check_shape(shape: object) -> tuple[int, int]:
    # Strict on purpose: int() would silently truncate 5.5 to 5, and the string "57" would
    # unpack as (5, 7). operator.index accepts exactly the integer types (numpy's included).
    bad = TypeError(f"shape: expected a pair of ints (N, K), got {shape!r}")
    if not isinstance(shape, (tuple, list, torch.Size)) or len(shape) != 2:
        raise bad
    try:
        n, k = (operator.index(d) for d in shape if not isinstance(d, bool))
    except (TypeError, ValueError):
        raise bad from None
    if n < 1 or k < 1:
        raise ValueError(f"shape: expected two positive sizes (N, K), got ({n}, {k})")
    return n, k


def _expect(t: torch.Tensor | None, name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    if t is None:
        raise ValueError(f"{name}: missing; expected a {dtype} tensor of shape {shape}")
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a {dtype} tensor of shape {shape}, got {type(t).__name__}")
    if t.dtype != dtype or tuple(t.shape) != shape:
        raise ValueError(f"{name}: expected a {dtype} tensor of shape {shape}, "
                         f"got {t.dtype} of shape {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor")
