"""The format tag a saved `softfp8.Linear` carries (`_extra_state`): its format and logical
shape, which the packed buffers alone can't tell, and the rule that a given argument and the
saved tag must agree. A leaf: only `formats` below it."""
from __future__ import annotations

import json
import operator
from dataclasses import dataclass

import torch

from .formats import Format

TAG_KEY = "_extra_state"  # torch's state_dict key for get_extra_state()


@dataclass(frozen=True)
class FormatTag:
    """What a saved Linear says about itself: its format and logical (N, K). The padded words
    can't tell K (K = 253 and 256 pack to the same width), nor E5M2 from E4M3 (both 4 codes a
    word, both fp32 row scales), so the tag travels with the buffers."""

    fmt: Format
    out_features: int
    in_features: int

    def to_tensor(self) -> torch.Tensor:
        text = json.dumps({"fmt": self.fmt.value, "out_features": self.out_features,
                           "in_features": self.in_features}, sort_keys=True)
        return torch.frombuffer(bytearray(text.encode()), dtype=torch.uint8)

    @classmethod
    def from_tensor(cls, tag: object) -> "FormatTag":
        """Parse a saved tag; anything else raises ValueError naming `_extra_state`."""
        expected = ("softfp8's format tag (a 1-D uint8 tensor of JSON: fmt, out_features, "
                    "in_features)")
        if not isinstance(tag, torch.Tensor) or tag.dtype != torch.uint8 or tag.dim() != 1:
            got = (f"{tag.dtype} of shape {tuple(tag.shape)}" if isinstance(tag, torch.Tensor)
                   else type(tag).__name__)
            raise ValueError(f"{TAG_KEY}: expected {expected}, got {got}")
        if tag.device.type == "meta":
            raise ValueError(f"{TAG_KEY}: expected {expected}, got a tensor on the meta device")
        try:
            info = json.loads(tag.cpu().numpy().tobytes().decode())
            fields = {key: info[key] for key in ("fmt", "out_features", "in_features")}
            n, k = (operator.index(fields[key]) for key in ("out_features", "in_features"))
            if isinstance(fields["out_features"], bool) or isinstance(fields["in_features"], bool):
                raise TypeError("a bool is not a size")
            fmt = Format.parse(fields["fmt"])
        except (ValueError, TypeError, KeyError, UnicodeDecodeError) as err:
            raise ValueError(f"{TAG_KEY}: expected {expected}; could not read it ({err})") from None
        return cls(fmt, n, k)

    def __str__(self) -> str:
        return f"{self.fmt} ({self.out_features}, {self.in_features})"


def agreeing(arg: str, given, saved):
    """`given` if the state_dict's tag agrees (or has none), the tag's value if not given."""
    if given is None and saved is None:
        raise ValueError(f"{arg}: the state_dict has no format tag ({TAG_KEY}), so {arg} must be "
                         "given")
    if given is not None and saved is not None and given != saved:
        raise ValueError(f"{arg}={given!s}, but the state_dict's {TAG_KEY} says {arg}={saved!s}; "
                         "expected them to agree")
    return saved if given is None else given
