"""`softfp8.Linear`, a drop-in for `nn.Linear` on a packed weight (whole models: `convert`).

A `Linear` holds the packed words and scales as buffers and nothing else of the weight: no
full-precision copy exists at any time after conversion. Its state_dict is those buffers plus the
bias, bit for bit, and a format tag (`_extra_state`: a uint8 tensor of JSON naming the format and
the logical shape), so it round-trips through `torch.save`, safetensors and transformers'
`save_pretrained`, and a load into a layer of another format or width is refused.
"""
from __future__ import annotations

import torch
from torch import nn

from . import dispatch
from ._format_tag import TAG_KEY, FormatTag, agreeing
from ._kept import _KeptCall, _TensorStamp
from .dispatch import Backend, BackendUnavailable, E2M1Decode
from .formats import SPECS, Format, PackedWeight, ScaleKind, padded_k
from .ops import _plain_eager, _replayable, record_eager, run_linear
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
        self.register_buffer("global_scale", torch.ones((), dtype=torch.float32, device=device)
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
        module._prepare()
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
    def from_state_dict(cls, state_dict: dict[str, torch.Tensor], fmt: Format | str | None = None,
                        *, in_features: int | None = None, prefix: str = "",
                        backend: Backend | str = Backend.AUTO,
                        e2m1: E2M1Decode | str = E2M1Decode.AUTO) -> "Linear":
        """A Linear from a state_dict (e.g. `safetensors.torch.load_file`), tensors used as given.

        `fmt` and `in_features` come from the state_dict's format tag (`_extra_state`, written by
        every `Linear.state_dict()`); given as well, they must agree with it. A state_dict without
        a tag needs both (the padded words don't determine K). Every tensor is checked (shape,
        dtype, device, presence) and a bad one raises ValueError."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict: expected a dict, got {type(state_dict).__name__}")
        known = {prefix + name for name in (*_PACKED_BUFFERS, "bias", TAG_KEY)}
        extra = sorted(key for key in state_dict if key.startswith(prefix) and key not in known)
        if extra:
            raise ValueError(f"state_dict: unexpected keys {extra}; expected only "
                             f"{sorted(known)}")
        tag = state_dict.get(prefix + TAG_KEY)
        tag = None if tag is None else FormatTag.from_tensor(tag)
        fmt = agreeing("fmt", None if fmt is None else Format.parse(fmt), tag and tag.fmt)
        if in_features is not None and (isinstance(in_features, bool) or
                                        not isinstance(in_features, int) or in_features < 1):
            raise TypeError(f"in_features: expected a positive int, got {in_features!r}")
        in_features = agreeing("in_features", in_features, tag and tag.in_features)
        words = state_dict.get(prefix + "words")
        if not isinstance(words, torch.Tensor) or words.dim() != 2:
            raise ValueError(f"state_dict: expected a 2-D int32 tensor at {prefix}words, got "
                             f"{type(words).__name__ if words is None else tuple(words.shape)}")
        if tag is not None and words.shape[0] != tag.out_features:
            raise ValueError(f"{prefix}words: {words.shape[0]} rows, but the state_dict's "
                             f"{TAG_KEY} says out_features={tag.out_features}")
        spec = SPECS[fmt]
        width = padded_k(in_features, fmt) // spec.codes_per_word
        if words.shape[1] != width:
            hi = words.shape[1] * spec.codes_per_word
            lo = max(1, hi - spec.k_align + 1)
            fits = (f"in_features from {lo} to {hi}" if hi % spec.k_align == 0
                    else f"no in_features ({hi} codes is not a multiple of {spec.k_align})")
            raise ValueError(f"in_features={in_features}: {in_features} {fmt} codes pack into "
                             f"{width} words a row, but {prefix}words has {words.shape[1]} a row "
                             f"(that width fits {fits})")
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
        if torch.compiler.is_compiling():
            # traced: the op checks the layout; a PackedWeight built here would be traced too,
            # and its checks and the caches below guarded on every call
            return run_linear(x, w, s, g, fmt, self.out_features, self.in_features, self.bias,
                              backend, e2m1)
        if isinstance(x, torch.Tensor) and x.is_cuda:
            index = x.get_device()
            if index != torch._C._cuda_getDevice():
                # a model spread over GPUs (device_map) calls this layer on cuda:1 while cuda:0
                # is current: its kernels launch on its own device and stream, and its recorded
                # call (made and replayed with its device current) replays
                with torch.cuda.device(x.device):  # the class's forward: not a hook's wrapper
                    return type(self).forward(self, x)  # (accelerate's) set on the instance
        else:
            index = None
        # not self.bias: a registered bias is found by nn.Module.__getattr__, after two misses
        bias = self._parameters.get("bias", self.__dict__.get("bias"))
        calls = self.__dict__.get("_eager_calls")
        record = True
        if calls is not None and type(x) is torch.Tensor:
            kept = calls.get((x.shape, x.dtype, index))
            if kept is not None and kept.holds(w, s, g, bias) and _replayable(x, bias):
                y = kept.call.launch(x)
                if y is not None:
                    return y
                record = kept.call.records_again  # not a call whose launches can't replay
        packed, settled = self._validated(w, s, g)
        if record and settled and index is not None and _plain_eager(x, w, s, g, bias):
            recorded = record_eager(x, packed, bias, backend, e2m1)
            if recorded is not None:
                y, call = recorded
                if call is not None:
                    if calls is None:
                        calls = self.__dict__["_eager_calls"] = {}
                    calls[(x.shape, x.dtype, index)] = _KeptCall(call, w, s, g, bias)
                return y
        return run_linear(x, w, s, g, fmt, self.out_features, self.in_features, bias,
                          backend, e2m1, packed=packed)

    def _prepare(self) -> None:
        """The weight's facts, computed now rather than in a call (`_facts.prepare`); its tensors
        are this layer's settled ones (`_settled`)."""
        from .backends import _facts

        packed = self.packed
        self.__dict__["_settled_tensors"] = _TensorStamp(packed.words, packed.scales,
                                                         packed.global_scale)
        self.__dict__.pop("_seen_tensors", None)
        _facts.prepare(packed)

    def _settled(self, w, s, g) -> bool:
        """Whether the layer may keep references to these tensors (`_packed_kept`, recorded
        calls): they are the ones it was built, loaded or moved with, or the same at two calls
        in a row. Why: accelerate's offload hooks put new tensors into the buffers before each
        call and meta tensors after it, without `_apply`; a layer that kept the moved-in copy
        would keep every offloaded weight on the GPU. Tensors that differ from call to call are
        used and forgotten, with everything kept for the old ones."""
        d = self.__dict__
        settled, seen = d.get("_settled_tensors"), d.get("_seen_tensors")
        if settled is not None and settled.holds(w, s, g):
            return True
        if seen is not None and seen.holds(w, s, g):
            d["_settled_tensors"] = d.pop("_seen_tensors")
            return True
        d["_seen_tensors"] = _TensorStamp(w, s, g)
        d.pop("_packed_kept", None)
        self.forget_eager_calls()
        return False

    def forget_eager_calls(self) -> None:
        """Drop the recorded eager calls (`_KeptCall`); done on every device or dtype move and
        state_dict load, so a call is recorded again against the new tensors."""
        self.__dict__.pop("_eager_calls", None)

    def _validated(self, w, s, g) -> tuple[PackedWeight, bool]:
        """(`packed`, whether its tensors are settled, `_settled`). Kept while every buffer is the
        same tensor with the same shape, dtype and device (`.data =` changes those without a new
        tensor) and the format and features are unchanged: validating costs 6 us a call, this
        check ~1.5. In-place writes of values need no new check (they can't break the layout);
        load_state_dict checks what it copies in. Only settled tensors are kept, so a kept one
        is settled without asking."""
        stamp = (self._op_names[0], self.out_features, self.in_features) + tuple(
            None if t is None else (t.shape, t.dtype, t.device) for t in (w, s, g))
        kept = self.__dict__.get("_packed_kept")
        if (kept is not None and kept[0].words is w and kept[0].scales is s
                and kept[0].global_scale is g and kept[1] == stamp):
            return kept[0], True
        packed = PackedWeight(self.fmt, (self.out_features, self.in_features), w, s, g)
        settled = self._settled(w, s, g)
        if settled:
            self.__dict__["_packed_kept"] = (packed, stamp)
        return packed, settled

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

    def get_extra_state(self) -> torch.Tensor:
        """The format tag saved beside the buffers (module docstring): a tensor, so that
        safetensors and transformers' save_pretrained keep it like any other entry."""
        return FormatTag(self.fmt, self.out_features, self.in_features).to_tensor()

    def set_extra_state(self, state: torch.Tensor) -> None:
        """Check a loaded tag against this layer: another format or width raises ValueError."""
        self._check_tag(state)

    def _check_tag(self, state: object) -> None:
        theirs = FormatTag.from_tensor(state)
        mine = FormatTag(self.fmt, self.out_features, self.in_features)
        if theirs.fmt is not mine.fmt:
            raise ValueError(f"{TAG_KEY}: the state_dict's weight is {theirs} but this Linear is "
                             f"{mine}; one format's codes read as another's are wrong weights: "
                             f"build the layer with fmt={theirs.fmt.value!r}")
        if theirs != mine:
            raise ValueError(f"{TAG_KEY}: the state_dict holds a weight of in_features="
                             f"{theirs.in_features}, out_features={theirs.out_features}, but this "
                             f"Linear has in_features={mine.in_features}, out_features="
                             f"{mine.out_features} ({mine.fmt})")

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        # The tag first: an E5M2 row-scaled state has E4M3's shapes and dtypes exactly, so only
        # the tag tells that its codes mean other numbers (or that K differs within the padding).
        if prefix + TAG_KEY in state_dict:
            try:
                self._check_tag(state_dict[prefix + TAG_KEY])
            except ValueError as err:
                error_msgs.append(f"{prefix or 'Linear '}: {err}")
                return
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
        self.forget_eager_calls()
        bias = state_dict.get(prefix + "bias")
        if self.bias is not None and isinstance(bias, torch.Tensor) and bias.dtype != self.bias.dtype:
            error_msgs.append(f"{prefix}bias: expected {self.bias.dtype}, got {bias.dtype}")
            return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        if not error_msgs:
            self._prepare()

    def _apply(self, fn, recurse=True):
        # model.half() / .to(torch.bfloat16) cast every floating tensor; the fp32 scales must keep
        # their bits, so for packed buffers only the device part of a conversion is applied.
        self.forget_eager_calls()  # the bias may change dtype in place (param.data = ...)

        def keep_packed_dtype(t):
            out = fn(t)
            if out.dtype != t.dtype and any(t is getattr(self, n, None) for n in _PACKED_BUFFERS):
                out = t.to(out.device)
            return out
        out = super()._apply(keep_packed_dtype, recurse)
        self._prepare()
        return out
