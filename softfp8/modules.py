"""`softfp8.Linear`, a drop-in for `nn.Linear` on a packed weight, and `quantize_model`.

A `Linear` holds the packed words and scales as buffers and nothing else of the weight: no
full-precision copy exists at any time after conversion. Its state_dict is those buffers plus the
bias, bit for bit, so it round-trips through `torch.save` and safetensors.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from . import dispatch
from .dispatch import Backend, BackendUnavailable, E2M1Decode
from .formats import SPECS, Format, PackedWeight, ScaleKind, padded_k
from .ops import run_linear
from .quantize import quantize

_PACKED_BUFFERS = ("words", "scales", "global_scale")


def _op_names(fmt: Format | str, backend: Backend | str,
              e2m1: E2M1Decode | str) -> tuple[str, str, str]:
    """Linear's settings as forward hands them to the op (`Linear._op_names`): each one parsed
    (a bad value raises, naming it) and kept as its value."""
    return (Format.parse(fmt).value, Backend.parse(backend, arg="backend").value,
            E2M1Decode.parse(e2m1, arg="e2m1").value)


class Linear(nn.Module):
    """y = x @ W.T + b with W stored packed (`fmt`); a drop-in for `nn.Linear` at inference.

    Build one with `Linear.from_linear(linear, fmt=...)`, or `Linear.from_state_dict(...)` to load
    saved weights; the constructor itself makes zero-filled buffers of the right shapes and dtypes
    for `load_state_dict` to fill."""

    def __init__(self, in_features: int, out_features: int, fmt: Format | str = Format.E5M2, *,
                 bias: bool = True, row_scale: bool | None = None,
                 bias_dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                 backend: Backend | str = Backend.AUTO, e2m1: E2M1Decode | str = E2M1Decode.AUTO):
        super().__init__()
        fmt = Format.parse(fmt)
        spec = SPECS[fmt]
        if row_scale is not None and spec.scale_required:
            raise ValueError(f"row_scale: only applies to e5m2; {fmt} always has its own scales")
        self._op_names = _op_names(fmt, backend, e2m1)
        self.in_features, self.out_features = int(in_features), int(out_features)
        n, kp = self.out_features, padded_k(self.in_features, fmt)
        self.register_buffer("words", torch.zeros(n, kp // spec.codes_per_word, dtype=torch.int32,
                                                  device=device))
        scales = None
        if spec.scale is ScaleKind.ROW and (spec.scale_required or row_scale):
            scales = torch.ones(n, dtype=torch.float32, device=device)
        elif spec.scale is not ScaleKind.ROW:  # block codes, or E4M3_B128's fp32 tile scales
            scales = torch.zeros(spec.scales_shape(n, self.in_features), dtype=spec.scales_dtype,
                                 device=device)
        self.register_buffer("scales", scales)
        self.register_buffer("global_scale", torch.ones((), device=device)
                             if fmt is Format.NVFP4 else None)
        self.bias = (nn.Parameter(torch.zeros(n, dtype=bias_dtype, device=device),
                                  requires_grad=False) if bias else None)
        self.packed  # validate the layout once, here, rather than on a first forward

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_packed(cls, packed: PackedWeight, bias: torch.Tensor | None = None, *,
                    backend: Backend | str = Backend.AUTO,
                    e2m1: E2M1Decode | str = E2M1Decode.AUTO) -> "Linear":
        """A Linear around an existing PackedWeight; its tensors are used as they are (no copy)."""
        if not isinstance(packed, PackedWeight):
            raise TypeError(f"packed: expected a PackedWeight, got {type(packed).__name__}")
        n, k = packed.shape
        module = cls.__new__(cls)
        nn.Module.__init__(module)
        module._op_names = _op_names(packed.fmt, backend, e2m1)
        module.in_features, module.out_features = k, n
        for name in _PACKED_BUFFERS:
            module.register_buffer(name, getattr(packed, name))
        if bias is not None:
            if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (n,):
                raise ValueError(f"bias: expected a tensor of shape ({n},), got "
                                 f"{getattr(bias, 'shape', type(bias).__name__)}")
            if not bias.dtype.is_floating_point:
                raise TypeError(f"bias: expected a floating-point tensor, got {bias.dtype}")
            if bias.device != packed.device:
                raise ValueError(f"bias is on {bias.device} but the packed weight is on "
                                 f"{packed.device}; expected one device")
            bias = nn.Parameter(bias.detach(), requires_grad=False)
        module.bias = bias
        return module

    @classmethod
    def from_linear(cls, linear: nn.Linear, fmt: Format | str = Format.E5M2, *,
                    backend: Backend | str = Backend.AUTO,
                    e2m1: E2M1Decode | str = E2M1Decode.AUTO, **quantize_kwargs) -> "Linear":
        """Quantize `linear`'s weight to `fmt` on its device (extra kwargs go to `quantize`).

        The bias keeps its dtype and shares `linear`'s storage; the weight is not kept."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear: expected a torch.nn.Linear, got {type(linear).__name__}")
        if linear.weight is None or linear.weight.device.type == "meta":
            raise ValueError("linear: its weight is missing or on the meta device; expected real "
                             "values to quantize (use Linear(...) + load_state_dict for saved ones)")
        packed = quantize(linear.weight, fmt, **quantize_kwargs)
        bias = None if linear.bias is None else linear.bias.detach()
        return cls.from_packed(packed, bias, backend=backend, e2m1=e2m1)

    @classmethod
    def from_state_dict(cls, state_dict: dict[str, torch.Tensor], fmt: Format | str, *,
                        in_features: int, prefix: str = "", backend: Backend | str = Backend.AUTO,
                        e2m1: E2M1Decode | str = E2M1Decode.AUTO) -> "Linear":
        """A Linear from a state_dict (e.g. `safetensors.torch.load_file`), tensors used as given.

        `fmt` and `in_features` are needed because the padded words don't determine K; every
        tensor is checked (shape, dtype, device, presence) and a bad one raises ValueError."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict: expected a dict, got {type(state_dict).__name__}")
        known = {prefix + name for name in (*_PACKED_BUFFERS, "bias")}
        extra = sorted(key for key in state_dict if key.startswith(prefix) and key not in known)
        if extra:
            raise ValueError(f"state_dict: unexpected keys {extra}; expected only "
                             f"{sorted(known)}")
        words = state_dict.get(prefix + "words")
        if not isinstance(words, torch.Tensor) or words.dim() != 2:
            raise ValueError(f"state_dict: expected a 2-D int32 tensor at {prefix}words, got "
                             f"{type(words).__name__ if words is None else tuple(words.shape)}")
        packed = PackedWeight(fmt, (words.shape[0], in_features), words,
                              state_dict.get(prefix + "scales"),
                              state_dict.get(prefix + "global_scale"))
        return cls.from_packed(packed, state_dict.get(prefix + "bias"), backend=backend, e2m1=e2m1)

    # -- use ------------------------------------------------------------------------------------

    # fmt, backend and e2m1 are kept as their values, one tuple of str that forward hands to the
    # op. Why: under torch.compile dynamo guards a str by value, but an enum member (one object
    # shared by every layer) by identity, by value, by its type's MRO, and by a Python "is" guard
    # against the first layer that holds it: three such guards a layer (672 at 32 layers) made
    # the guard check of a converted 32-layer Llama 1.5-1.8x fp32's (E5M2) and 2.5-2.7x
    # (NVFP4); 1.1-1.3x and 1.6-1.8x with the values (benchmarks/cpu_compile_guards.py).
    @property
    def fmt(self) -> Format:
        return Format(self._op_names[0])

    @fmt.setter
    def fmt(self, value: Format | str) -> None:
        self._op_names = (Format.parse(value).value,) + self._op_names[1:]

    @property
    def backend(self) -> Backend:
        return Backend(self._op_names[1])

    @backend.setter
    def backend(self, value: Backend | str) -> None:
        names = self._op_names
        self._op_names = (names[0], Backend.parse(value, arg="backend").value, names[2])

    @property
    def e2m1(self) -> E2M1Decode:
        return E2M1Decode(self._op_names[2])

    @e2m1.setter
    def e2m1(self, value: E2M1Decode | str) -> None:
        self._op_names = self._op_names[:2] + (E2M1Decode.parse(value, arg="e2m1").value,)

    def __setstate__(self, state: dict) -> None:
        # A whole-module pickle (torch.save(model)) from before the settings became `_op_names`
        # (9ba3ca6) holds them as attributes: hidden behind the properties, and no `_op_names`
        # for forward. Taken over here, parsed as the constructors parse them.
        if "_op_names" not in state and "fmt" in state:
            state = dict(state)
            state["_op_names"] = _op_names(state.pop("fmt"), state.pop("backend", Backend.AUTO),
                                           state.pop("e2m1", E2M1Decode.AUTO))
        super().__setstate__(state)

    @property
    def packed(self) -> PackedWeight:
        """The weight as a PackedWeight (a view on this module's buffers; validated)."""
        return PackedWeight(self.fmt, (self.out_features, self.in_features), self.words,
                            self.scales, self.global_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        buffers = self._buffers  # not self.words: nn.Module.__getattr__ costs ~0.5 us a name
        w, s, g = buffers["words"], buffers["scales"], buffers["global_scale"]
        fmt, backend, e2m1 = self._op_names
        # traced (torch.compile): the op checks the layout; a PackedWeight built here would be
        # traced too, and its checks and the cache below guarded on every call
        packed = None if torch.compiler.is_compiling() else self._validated(w, s, g)
        return run_linear(x, w, s, g, fmt, self.out_features, self.in_features, self.bias,
                          backend, e2m1, packed=packed)

    def _validated(self, w, s, g) -> PackedWeight:
        """`packed`, kept while every buffer is the same tensor with the same shape, dtype and
        device (`.data =` changes those without a new tensor) and the format and features are
        unchanged: validating costs 6 us a call, this check ~1.5. In-place writes of values need
        no new check (they can't break the layout); load_state_dict checks what it copies in."""
        stamp = (self._op_names[0], self.out_features, self.in_features) + tuple(
            None if t is None else (t.shape, t.dtype, t.device) for t in (w, s, g))
        kept = self.__dict__.get("_packed_kept")
        if (kept is not None and kept[0].words is w and kept[0].scales is s
                and kept[0].global_scale is g and kept[1] == stamp):
            return kept[0]
        packed = self.packed
        self.__dict__["_packed_kept"] = (packed, stamp)
        return packed

    def selected_backend(self, m: int = 1) -> str:
        """The backend that will run a batch of `m` rows on this module's device, or why none."""
        try:
            choice = dispatch.select(self.fmt, m, self.words.device, backend=self.backend,
                                     e2m1=self.e2m1)
        except (BackendUnavailable, ValueError) as err:
            return f"none ({err})"
        return choice.backend.value

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"fmt={self.fmt}, bias={self.bias is not None}, device={self.words.device}, "
                f"backend={self.selected_backend(1)}")

    # -- state_dict and device moves ------------------------------------------------------------

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        # nn.Module would copy_ with a silent dtype cast (float scales into int32 words, say):
        # check the incoming packed tensors as a PackedWeight first, so corruption is an error.
        present = [prefix + name for name in _PACKED_BUFFERS if getattr(self, name) is not None]
        if all(key in state_dict for key in present):
            incoming = {name: state_dict.get(prefix + name) for name in _PACKED_BUFFERS}
            incoming = {name: (t.to(self.words.device) if isinstance(t, torch.Tensor) else t)
                        for name, t in incoming.items()}
            try:
                PackedWeight(self.fmt, (self.out_features, self.in_features), **incoming)
            except (TypeError, ValueError) as err:
                error_msgs.append(f"{prefix or 'Linear '}: corrupted packed weight for "
                                  f"{self.fmt} ({self.out_features}, {self.in_features}): {err}")
                return
        bias = state_dict.get(prefix + "bias")
        if self.bias is not None and isinstance(bias, torch.Tensor) and bias.dtype != self.bias.dtype:
            error_msgs.append(f"{prefix}bias: expected {self.bias.dtype}, got {bias.dtype}")
            return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    def _apply(self, fn, recurse=True):
        # model.half() / .to(torch.bfloat16) cast every floating tensor; the fp32 scales must keep
        # their bits, so for packed buffers only the device part of a conversion is applied.
        def keep_packed_dtype(t):
            out = fn(t)
            if out.dtype != t.dtype and any(t is getattr(self, n, None) for n in _PACKED_BUFFERS):
                out = t.to(out.device)
            return out
        return super()._apply(keep_packed_dtype, recurse)


# -- whole models ---------------------------------------------------------------------------

@dataclass(frozen=True)
class QuantizeSummary:
    """What `quantize_model` did; byte counts are of all parameters and buffers, deduplicated."""

    fmt: Format
    converted: tuple[str, ...]
    skipped: tuple[str, ...]
    bytes_before: int
    bytes_after: int

    def __str__(self) -> str:
        return (f"{len(self.converted)} linears to {self.fmt}, {len(self.skipped)} skipped; "
                f"{self.bytes_before / 2**20:.1f} MiB -> {self.bytes_after / 2**20:.1f} MiB")


def _skip_predicate(skip) -> Callable[[str, nn.Module], bool]:
    if skip is None:
        return lambda name, module: False
    if callable(skip):
        return skip
    patterns = (skip,) if isinstance(skip, str) else tuple(skip)
    if not all(isinstance(p, str) for p in patterns):
        raise TypeError(f"skip: expected a name/glob, a list of them or a predicate "
                        f"(name, module) -> bool, got {skip!r}")
    # "lm_head" matches the module named lm_head at any depth ("model.lm_head" too).
    return lambda name, module: any(fnmatch.fnmatchcase(name, p) or
                                    fnmatch.fnmatchcase(name, "*." + p) for p in patterns)


def model_bytes(model: nn.Module) -> int:
    """Bytes of all parameters and buffers, each storage counted once (tied weights)."""
    seen, total = set(), 0
    for t in (*model.parameters(), *model.buffers()):
        key = (t.device, t.untyped_storage().data_ptr()) if t.device.type != "meta" else id(t)
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def quantize_model(model: nn.Module, fmt: Format | str = Format.E5M2, *, skip=None,
                   backend: Backend | str = Backend.AUTO, e2m1: E2M1Decode | str = E2M1Decode.AUTO,
                   progress: bool = True, **quantize_kwargs) -> QuantizeSummary:
    """Replace every `nn.Linear` in `model` by a `softfp8.Linear` of format `fmt`, in place.

    skip: a module name or glob ("lm_head", "*.mlp.*"; a bare name matches at any depth), a list
    of them, or a predicate `(name, module) -> bool`. Layers are converted one at a time on their
    own device and each original weight is released as soon as its packed copy exists, so peak
    memory is the model plus one layer (a weight tied to another module, e.g. an lm_head sharing
    the embedding, lives on through that module)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    fmt = Format.parse(fmt)
    backend = Backend.parse(backend, arg="backend")
    e2m1 = E2M1Decode.parse(e2m1, arg="e2m1")
    if isinstance(model, nn.Linear):
        raise TypeError("model: is itself an nn.Linear; use softfp8.Linear.from_linear for one layer")
    should_skip = _skip_predicate(skip)
    before = model_bytes(model)
    # Names only: holding the modules themselves would keep every original weight alive.
    names = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    converted, skipped = [], []
    bar = _progress(names, fmt, progress)
    with torch.no_grad():
        for name in bar:
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name)
            original = getattr(parent, child)
            if should_skip(name, original):
                skipped.append(name)
                continue
            new = Linear.from_linear(original, fmt, backend=backend, e2m1=e2m1, **quantize_kwargs)
            setattr(parent, child, new)
            original.weight = None  # released now even if something else holds the module
            del original, new
            converted.append(name)
    return QuantizeSummary(fmt, tuple(converted), tuple(skipped), before, model_bytes(model))


def _progress(names: list[str], fmt: Format, enabled: bool):
    if not enabled:
        return names
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional: no bar, same result
        return names
    return tqdm(names, desc=f"softfp8 {fmt}", unit="layer")
