"""softfp8 as a transformers quantizer (quant_method "softfp8").

After `import softfp8`:
- `AutoModelForCausalLM.from_pretrained(fp16_path, quantization_config=SoftFP8Config(fmt="nvfp4"))`
  loads the full-precision weights, then converts the model's `nn.Linear`s to `softfp8.Linear`
  one at a time (`quantize_model`: peak memory is the full-precision model plus one layer);
- `model.save_pretrained(dir)` of such a model, or of any transformers model converted with
  `softfp8.quantize_model`, writes the packed words, scales, global scales, biases and format
  tags, and a `quantization_config` naming softfp8 and saying which layers hold which format;
- `from_pretrained(dir)` builds those layers empty and loads the saved tensors into them bit for
  bit, after checking every one of them against the config (safetensors headers: name, dtype,
  shape) and every format tag against its layer.

Without softfp8, transformers does not know quant_method "softfp8" and would load such a folder
as a plain model with freshly initialised weights. So that this can't happen silently, the
checkpoint also holds, for every converted layer, a few bytes at `<layer>.weight` (the text
"softfp8"): a shape no `nn.Linear` has, which transformers refuses ("size mismatch", unless told
`ignore_mismatched_sizes=True`). The config's `requires` field says what is needed.
"""
from __future__ import annotations

import json
import re
import sys
import warnings
from collections import Counter

import torch
from torch import nn
from transformers.quantizers.base import HfQuantizer, get_keys_to_not_convert
from transformers.utils.quantization_config import QuantizationConfigMixin

from ..dispatch import Backend, E2M1Decode
from ..formats import Format
from .._convert import _skip_patterns, _skip_predicate, convert_linears
from ..modules import Linear
from .._version import __version__
from ._saved_check import check_saved_checkpoint

QUANT_METHOD = "softfp8"
# The transformers releases this integration is tested with (pyproject.toml's `hf` extra): the
# quantizer API changes between minor releases, so an older one is refused, a newer one warned of.
TESTED_TRANSFORMERS = ((5, 17), (5, 25))
REQUIRES = ("softfp8 (pip install softfp8): `import softfp8` before from_pretrained. Without it, "
            "transformers refuses this checkpoint's packed weights (size mismatch).")
# What every converted layer holds at `<layer>.weight`: see the module docstring.
GUARD_TEXT = b"softfp8"


def _version() -> str:
    return __version__


class SoftFP8Config(QuantizationConfigMixin):
    """softfp8's `quantization_config` for transformers' `from_pretrained`.

    fmt:      the format of every converted layer ("e5m2", "e4m3", "nvfp4", "mxfp4").
    skip:     names/globs of `nn.Linear`s to keep (as `quantize_model`'s skip); None keeps
              transformers' usual ones (the output embedding and tied weights), [] none.
    backend, e2m1: the converted layers' settings (as `softfp8.Linear`'s).
    row_scale: E5M2 only: fp32 row scales (as `quantize(..., row_scale=True)`).
    modules_to_not_convert, modules_with_own_format: written by `save_pretrained`: the exact
              names of the `nn.Linear`s left in full precision, and of layers whose format or
              row scale differs from `fmt` / `row_scale` (name -> {"fmt", "row_scale"}). When
              present they decide which layers a load builds, not `skip`.
    """

    def __init__(self, fmt: Format | str = Format.E5M2, skip: list[str] | str | None = None,
                 backend: Backend | str = Backend.AUTO, e2m1: E2M1Decode | str = E2M1Decode.AUTO,
                 row_scale: bool | None = None, modules_to_not_convert: list[str] | None = None,
                 modules_with_own_format: dict[str, dict] | None = None, **saved):
        self.quant_method = QUANT_METHOD
        method = saved.pop("quant_method", QUANT_METHOD)
        if method != QUANT_METHOD:
            raise ValueError(f"quant_method={method!r}: SoftFP8Config is {QUANT_METHOD!r}")
        saved.pop("requires", None)  # written for people, read by no one
        saved.pop("softfp8_version", None)
        if saved:
            raise ValueError(f"SoftFP8Config: unknown fields {sorted(saved)}; expected fmt, skip, "
                             "backend, e2m1, row_scale, modules_to_not_convert, "
                             "modules_with_own_format (a config from a newer softfp8?)")
        self.fmt = Format.parse(fmt).value
        if callable(skip):
            raise TypeError("skip: a predicate can't be written to config.json; pass names or "
                            "globs, or convert with softfp8.quantize_model(model, skip=predicate)")
        patterns = _skip_patterns(skip)
        self.skip = None if patterns is None else list(patterns)
        self.backend = Backend.parse(backend, arg="backend").value
        self.e2m1 = E2M1Decode.parse(e2m1, arg="e2m1").value
        self.row_scale = _row_scale(self.fmt, row_scale, "row_scale")
        if modules_to_not_convert is not None and (
                not isinstance(modules_to_not_convert, (list, tuple))
                or not all(isinstance(n, str) for n in modules_to_not_convert)):
            raise TypeError(f"modules_to_not_convert: expected a list of module names, got "
                            f"{modules_to_not_convert!r}")
        self.modules_to_not_convert = (None if modules_to_not_convert is None
                                       else list(modules_to_not_convert))
        own = {}
        for name, spec in (modules_with_own_format or {}).items():
            if not isinstance(spec, dict) or set(spec) - {"fmt", "row_scale"} or "fmt" not in spec:
                raise ValueError(f"modules_with_own_format[{name!r}]: expected "
                                 f"{{'fmt': ..., 'row_scale': ...}}, got {spec!r}")
            layer_fmt = Format.parse(spec["fmt"], arg=f"modules_with_own_format[{name!r}]").value
            own[name] = {"fmt": layer_fmt, "row_scale": _row_scale(
                layer_fmt, spec.get("row_scale"), f"modules_with_own_format[{name!r}].row_scale")}
        self.modules_with_own_format = own or None

    def to_dict(self) -> dict:
        return {"quant_method": QUANT_METHOD, "fmt": self.fmt, "skip": self.skip,
                "backend": self.backend, "e2m1": self.e2m1, "row_scale": self.row_scale,
                "modules_to_not_convert": self.modules_to_not_convert,
                "modules_with_own_format": self.modules_with_own_format,
                "requires": REQUIRES, "softfp8_version": _version()}

    def layer_spec(self, name: str) -> tuple[Format, bool | None]:
        """The (format, row_scale) that layer `name` holds."""
        own = (self.modules_with_own_format or {}).get(name)
        if own is not None:
            return Format(own["fmt"]), own["row_scale"]
        return Format(self.fmt), self.row_scale


def check_transformers_version(version: str | None = None) -> None:
    """Refuse a transformers older than the tested range (its quantizer API differs), and warn
    of a newer one."""
    import transformers
    from packaging.version import Version

    found = Version(version or transformers.__version__)
    (lo_major, lo_minor), (hi_major, hi_minor) = TESTED_TRANSFORMERS
    if found.release[:2] < (lo_major, lo_minor):
        raise ImportError(f"softfp8's transformers integration needs transformers>="
                          f"{lo_major}.{lo_minor}, found {found}; pip install -U 'softfp8[hf]'")
    if found.release[:2] > (hi_major, hi_minor):
        warnings.warn(f"softfp8's transformers integration is tested with transformers "
                      f"{lo_major}.{lo_minor} to {hi_major}.{hi_minor}; found {found}",
                      UserWarning, stacklevel=3)


def _row_scale(fmt: str, value, arg: str) -> bool | None:
    if value is None:
        return None
    if not isinstance(value, bool):
        raise TypeError(f"{arg}: expected True, False or None, got {value!r}")
    if fmt != Format.E5M2.value:
        raise ValueError(f"{arg}: only applies to e5m2; {fmt} always has its own scales")
    return value


class SoftFP8HfQuantizer(HfQuantizer):
    """transformers' side of softfp8 (module docstring): converts after loading full-precision
    weights, or builds empty softfp8 layers that a softfp8 checkpoint's tensors are loaded into."""

    requires_calibration = False
    quantization_config: SoftFP8Config

    def validate_environment(self, *args, **kwargs) -> None:
        # Any device torch runs on is fine (a backend is picked per layer and per call); the
        # transformers release is what can be wrong.
        check_transformers_version()

    def param_needs_quantization(self, model, param_name: str, **kwargs) -> bool:
        return False  # nothing is quantized while loading; see _process_model_after_weight_loading

    def is_serializable(self, *args, **kwargs) -> bool:
        return True

    @property
    def is_trainable(self) -> bool:
        return False

    @property
    def is_compileable(self) -> bool:
        # softfp8's linear is a torch custom op with a fake kernel: generate() may compile the
        # model (static cache) as it would without a quantizer, as after quantize_model.
        return True

    def _process_model_before_weight_loading(self, model, checkpoint_files=None, **kwargs):
        if not self.pre_quantized:
            return model  # the full-precision weights load into the model's own nn.Linears
        plan = _layer_plan(model, self.quantization_config)
        config = self.quantization_config
        for name, (fmt, row_scale) in plan.items():
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name)
            old = getattr(parent, child)
            bias = old.bias
            setattr(parent, child, Linear(
                old.in_features, old.out_features, fmt, bias=bias is not None,
                row_scale=row_scale if fmt is Format.E5M2 else None,
                bias_dtype=torch.float32 if bias is None else bias.dtype,
                device=old.weight.device, backend=config.backend, e2m1=config.e2m1))
        _untie(model, plan)
        if checkpoint_files:
            check_saved_checkpoint(model, plan, [str(f) for f in checkpoint_files])
        # The guard bytes at `<layer>.weight` are expected: not reported as unexpected keys.
        guards = {rf"(^|\.){re.escape(name)}\.weight$" for name in plan}
        model._keys_to_ignore_on_load_unexpected = set(
            model._keys_to_ignore_on_load_unexpected or ()) | guards
        self._planned = tuple(plan)
        return model

    def _process_model_after_weight_loading(self, model, **kwargs):
        # transformers refuses .half() / .float() on a model whose `is_quantized` is set (its
        # quantized layers would be cast); softfp8.Linear keeps its packed bits through any dtype
        # cast (Linear._apply), so those stay allowed, as after quantize_model.
        model.is_quantized = False
        config = self.quantization_config
        if self.pre_quantized:
            for name in self._planned:
                layer = model.get_submodule(name)
                try:
                    layer.packed  # every buffer's dtype, shape and device, as PackedWeight checks
                except (TypeError, ValueError) as err:
                    raise ValueError(f"{name}: the loaded {layer.fmt} weight is not valid: "
                                     f"{err}") from None
            return model
        skip = config.skip
        if skip is None:  # transformers' usual: the output embedding and tied weights stay
            linears = {n for n, m in model.named_modules() if isinstance(m, nn.Linear)}
            skip = sorted(set(get_keys_to_not_convert(model)) & linears)
        kwargs = {"row_scale": True} if config.row_scale else {}
        convert_linears(model, config.fmt, skip=skip, backend=config.backend, e2m1=config.e2m1,
                        progress=False, **kwargs)
        # what softfp8.quantize_model adds after its swap (this module is above convert.py)
        attach_to_pretrained_model(model, skip=skip, backend=config.backend, e2m1=config.e2m1)
        return model

    def get_state_dict_and_metadata(self, model, *args, **kwargs):
        """The tensors save_pretrained writes (the guards added) and the safetensors metadata; the
        config is first brought up to date with the model's layers as they are now."""
        describe(model, self.quantization_config)
        model.config.quantization_config = self.quantization_config
        state_dict = dict(model.state_dict())
        tags = {}
        for name, module in model.named_modules():
            if isinstance(module, Linear):
                state_dict[f"{name}.weight"] = torch.frombuffer(bytearray(GUARD_TEXT),
                                                                dtype=torch.uint8)
                tags[name] = {"fmt": module.fmt.value, "shape": [module.out_features,
                                                                 module.in_features]}
        metadata = {"quant_method": QUANT_METHOD, "softfp8_version": _version(),
                    "softfp8_layers": json.dumps(tags, sort_keys=True)}
        return state_dict, metadata


def _untie(model: nn.Module, converted) -> None:
    """Forget ties to a converted layer's weight (an lm_head tied to the embedding, converted by
    `quantize_model(skip=None)`): it has no `weight` to tie; its packed copy is what is saved."""
    tied = getattr(model, "all_tied_weights_keys", None)
    if not tied:
        return
    weights = {f"{name}.weight" for name in converted}
    for target, source in list(tied.items()):
        if target in weights or source in weights:
            del tied[target]


def describe(model: nn.Module, config: SoftFP8Config) -> SoftFP8Config:
    """Set `config`'s fmt, row_scale, modules_to_not_convert and modules_with_own_format to what
    `model` holds now (the most common format is `fmt`; the others are listed by name)."""
    layers = {n: m for n, m in model.named_modules() if isinstance(m, Linear)}
    if not layers:
        raise ValueError("model: has no softfp8.Linear to save as a softfp8 checkpoint")
    kinds = {n: (m.fmt.value, (m.scales is not None) if m.fmt is Format.E5M2 else None)
             for n, m in layers.items()}
    (fmt, row_scale), _ = Counter(kinds.values()).most_common(1)[0]
    config.fmt, config.row_scale = fmt, row_scale
    config.modules_to_not_convert = [n for n, m in model.named_modules()
                                     if isinstance(m, nn.Linear)]
    config.modules_with_own_format = {n: {"fmt": f, "row_scale": r}
                                      for n, (f, r) in kinds.items() if (f, r) != (fmt, row_scale)
                                      } or None
    return config


def _layer_plan(model: nn.Module, config: SoftFP8Config) -> dict[str, tuple[Format, bool | None]]:
    """Which nn.Linear of `model` becomes which softfp8 layer, as the config says."""
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    known = set(linears)
    cls = type(model).__name__
    if config.modules_to_not_convert is not None:
        keep = set(config.modules_to_not_convert)
        strangers = sorted(keep - known)
        if strangers:
            raise ValueError(f"quantization_config.modules_to_not_convert names {strangers}, "
                             f"which {cls} has no nn.Linear of; the checkpoint is for another "
                             "model")
    else:
        skip = config.skip
        if skip is None:
            skip = sorted(set(get_keys_to_not_convert(model)) & known)
        keep_it = _skip_predicate(skip)
        keep = {n for n in linears if keep_it(n, None)}
    own = config.modules_with_own_format or {}
    strangers = sorted(set(own) - known)
    if strangers:
        raise ValueError(f"quantization_config.modules_with_own_format names {strangers}, which "
                         f"{cls} has no nn.Linear of; the checkpoint is for another model")
    return {n: config.layer_spec(n) for n in linears if n not in keep}


def attach_to_pretrained_model(model: nn.Module, *, skip=None,
                               backend: Backend | str = Backend.AUTO,
                               e2m1: E2M1Decode | str = E2M1Decode.AUTO) -> bool:
    """Give a transformers model whose layers were converted outside from_pretrained (by
    `quantize_model`, or built from packed weights) softfp8's quantizer and config, so that its
    save_pretrained writes a softfp8 checkpoint. Returns whether it did: any other model, one
    with no softfp8.Linear, or one already quantized otherwise, is left alone."""
    modeling = sys.modules.get("transformers.modeling_utils")
    if modeling is None or not isinstance(model, modeling.PreTrainedModel):
        return False
    current = getattr(model, "hf_quantizer", None)
    if isinstance(current, SoftFP8HfQuantizer):
        return True  # its config is brought up to date from the layers when saving
    converted = [n for n, m in model.named_modules() if isinstance(m, Linear)]
    if not converted:
        return False
    if current is not None:
        warnings.warn(f"model: already quantized by {type(current).__name__}; its save_pretrained "
                      "will not write softfp8's quantization_config", UserWarning, stacklevel=3)
        return False
    patterns = _skip_patterns(skip)
    config = describe(model, SoftFP8Config(skip=None if patterns is None else list(patterns),
                                           backend=backend, e2m1=e2m1))
    _untie(model, converted)
    model.hf_quantizer = SoftFP8HfQuantizer(config, pre_quantized=False)
    model.config.quantization_config = config
    model.quantization_method = QUANT_METHOD  # not `is_quantized`: see the quantizer
    return True


def load_pretrained(name_or_path, *, model_class=None, backend: Backend | str | None = None,
                    e2m1: E2M1Decode | str | None = None, **hf_kwargs) -> nn.Module:
    """A softfp8 checkpoint (config.json's quant_method "softfp8") loaded through transformers:
    `model_class.from_pretrained(name_or_path, **hf_kwargs)` (AutoModelForCausalLM by default),
    its softfp8 layers then set to `backend` / `e2m1` where given (the saved config's otherwise).
    Any other checkpoint raises ValueError: this is the loader for softfp8's own layout only."""
    register()
    backend = None if backend is None else Backend.parse(backend, arg="backend")
    e2m1 = None if e2m1 is None else E2M1Decode.parse(e2m1, arg="e2m1")
    if model_class is None:
        from transformers import AutoModelForCausalLM as model_class
    model = model_class.from_pretrained(name_or_path, **hf_kwargs)
    if not isinstance(getattr(model, "hf_quantizer", None), SoftFP8HfQuantizer):
        found = getattr(getattr(model.config, "quantization_config", None), "quant_method", None)
        raise ValueError(f"{name_or_path}: not a softfp8 checkpoint (config.json's "
                         f"quantization_config has quant_method {found!r}, expected "
                         f"{QUANT_METHOD!r})")
    for module in model.modules():
        if isinstance(module, Linear):
            if backend is not None:
                module.backend = backend
            if e2m1 is not None:
                module.e2m1 = e2m1
    return model


def register() -> None:
    """Register SoftFP8Config and SoftFP8HfQuantizer under quant_method "softfp8" (idempotent;
    a "softfp8" registered by someone else is an error naming it)."""
    from transformers.quantizers import auto

    for table, ours in ((auto.AUTO_QUANTIZATION_CONFIG_MAPPING, SoftFP8Config),
                        (auto.AUTO_QUANTIZER_MAPPING, SoftFP8HfQuantizer)):
        theirs = table.get(QUANT_METHOD)
        if theirs is not None and theirs.__qualname__ != ours.__qualname__:
            raise RuntimeError(f"transformers already has quant_method {QUANT_METHOD!r}: "
                               f"{theirs.__module__}.{theirs.__qualname__}")
    if QUANT_METHOD not in auto.AUTO_QUANTIZATION_CONFIG_MAPPING:
        auto.register_quantization_config(QUANT_METHOD)(SoftFP8Config)
    if QUANT_METHOD not in auto.AUTO_QUANTIZER_MAPPING:
        auto.register_quantizer(QUANT_METHOD)(SoftFP8HfQuantizer)


if "transformers.quantizers.auto" in sys.modules:
    # imported by this module's own imports: _hf_hook left registering to this module, whole now
    register()

__all__ = ["QUANT_METHOD", "SoftFP8Config", "SoftFP8HfQuantizer", "attach_to_pretrained_model",
           "check_transformers_version", "describe", "load_pretrained", "register"]
