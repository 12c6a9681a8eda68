"""Model presets: the fused linear shapes of one decoder layer, the layer count, the lm_head.

Shapes are (N, K) = (out_features, in_features) in the fused layouts inference engines use:
qkv (q, k and v projections stacked), o, gate_up (gate and up stacked), down; the `-hf` presets
keep transformers' separate q, k, v, gate and up projections.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """One linear: `name` (qkv, o, ...), `n` out_features, `k` in_features."""

    name: str
    n: int
    k: int

    def __post_init__(self) -> None:
        if not (isinstance(self.n, int) and isinstance(self.k, int)) or self.n < 1 or self.k < 1:
            raise ValueError(f"shape {self.name!r}: expected two positive ints N, K, "
                             f"got {self.n!r}, {self.k!r}")

    @property
    def label(self) -> str:
        return f"{self.name} {self.n}x{self.k}"


@dataclass(frozen=True)
class Preset:
    """A model's linears: `layer_shapes` repeated `layers` times, then `head` (lm_head) once."""

    name: str
    layers: int
    layer_shapes: tuple[Shape, ...]
    head: Shape | None = None

    def shapes(self) -> tuple[Shape, ...]:
        """Each distinct linear once (what `shapes`, `small-m` and `prefill` time); linears of
        one N x K share a row named by all of them ("q/k/v/o")."""
        names: dict[tuple[int, int], list[str]] = {}
        for s in self.layer_shapes + ((self.head,) if self.head is not None else ()):
            names.setdefault((s.n, s.k), []).append(s.name)
        return tuple(Shape("/".join(v), n, k) for (n, k), v in names.items())

    def token_linears(self, *, head: bool = True, layers: int | None = None) -> tuple[Shape, ...]:
        """Every linear one token runs through, in order (what `token` replays); `layers` of
        them where given (the bench's --layers), else the model's."""
        body = self.layer_shapes * (self.layers if layers is None else layers)
        return body + ((self.head,) if head and self.head is not None else ())


def _layer(qkv: int, o: int, gate_up: int, down: tuple[int, int]) -> tuple[Shape, ...]:
    return (Shape("qkv", qkv, o), Shape("o", o, o), Shape("gate_up", gate_up, o),
            Shape("down", *down))


def _hf_layer(hidden: int, kv: int, inter: int) -> tuple[Shape, ...]:
    """transformers' own modules: q, k, v, gate and up each a Linear of its own."""
    return (Shape("q", hidden, hidden), Shape("k", kv, hidden), Shape("v", kv, hidden),
            Shape("o", hidden, hidden), Shape("gate", inter, hidden), Shape("up", inter, hidden),
            Shape("down", hidden, inter))


# hidden 4096; llama2-7b: 32 q/kv heads (qkv = 3 x 4096), intermediate 11008 (gate_up = 2 x 11008).
# llama3-8b and mistral-7b: 8 kv heads of 128 (qkv = 4096 + 2 x 1024), intermediate 14336.
PRESETS: dict[str, Preset] = {
    "llama2-7b": Preset("llama2-7b", 32, _layer(12288, 4096, 22016, (4096, 11008))),
    "llama3-8b": Preset("llama3-8b", 32, _layer(6144, 4096, 28672, (4096, 14336)),
                        head=Shape("lm_head", 128256, 4096)),
    "mistral-7b": Preset("mistral-7b", 32, _layer(6144, 4096, 28672, (4096, 14336)),
                         head=Shape("lm_head", 32000, 4096)),
    # hidden 2048, 32 q heads and 8 kv heads of 64 (qkv = 2048 + 2 x 512), intermediate 8192,
    # 16 layers: a model a CPU runs, the CPU default of small-m, prefill and token (CPU_PRESET)
    "llama3.2-1b": Preset("llama3.2-1b", 16, _layer(3072, 2048, 16384, (2048, 8192)),
                          head=Shape("lm_head", 128256, 2048)),
    # the same models as transformers' LlamaForCausalLM holds them (what quantize_model converts)
    "llama2-7b-hf": Preset("llama2-7b-hf", 32, _hf_layer(4096, 4096, 11008),
                           head=Shape("lm_head", 32000, 4096)),
    "llama3-8b-hf": Preset("llama3-8b-hf", 32, _hf_layer(4096, 1024, 14336),
                           head=Shape("lm_head", 128256, 4096)),
}


CPU_PRESET = "llama3.2-1b"
"""The preset small-m, prefill and token take on a CPU unless told (a 7-8B model's shapes ran past
150 s there printing nothing, and token's copies of every weight needed 14 GB)."""


def preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        valid = ", ".join(repr(p) for p in PRESETS)
        raise ValueError(f"--preset={name!r} is not a preset; expected one of {valid}") from None


def parse_shape(text: str) -> Shape:
    """'N,K' (or 'NxK') as a custom Shape."""
    parts = text.replace("x", ",").split(",")
    try:
        n, k = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"--shape={text!r}: expected N,K (two positive integers, e.g. 4096,11008)")
    return Shape("custom", n, k)
