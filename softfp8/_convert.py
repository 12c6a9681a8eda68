"""The layer swap behind `quantize_model`: every `nn.Linear` of a model replaced by a
`softfp8.Linear`, in place, one layer at a time; `QuantizeSummary` says what it did. The skip
rules (names, globs, a predicate) live here too, shared by the checkpoint loaders
(`softfp8.hub`). Nothing here knows transformers: `convert.quantize_model` and the hub's
quantizer, both above this module, add what a transformers model needs."""
from __future__ import annotations

import fnmatch
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from .dispatch import Backend, E2M1Decode
from .formats import Format
from .modules import Linear

@dataclass(frozen=True)
class QuantizeSummary:
    """What `quantize_model` did; byte counts are of all parameters and buffers, deduplicated."""

    fmt: Format
    converted: tuple[str, ...]
    skipped: tuple[str, ...]
    bytes_before: int
    bytes_after: int
    unmatched_skip: tuple[str, ...] = ()  # skip names/globs that matched no nn.Linear

    def __str__(self) -> str:
        unmatched = (f"; skip matched nothing for {list(self.unmatched_skip)}"
                     if self.unmatched_skip else "")
        return (f"{len(self.converted)} linears to {self.fmt}, {len(self.skipped)} skipped; "
                f"{self.bytes_before / 2**20:.1f} MiB -> {self.bytes_after / 2**20:.1f} MiB"
                f"{unmatched}")


def _skip_patterns(skip) -> tuple[str, ...] | None:
    """`skip` as a tuple of names/globs, or None for a predicate or no skip; bad input raises."""
    if skip is None or callable(skip):
        return None
    patterns = ((skip,) if isinstance(skip, str) else
                tuple(skip) if isinstance(skip, (list, tuple, set, frozenset)) else None)
    if patterns is None or not all(isinstance(p, str) for p in patterns):
        bad = skip if patterns is None else next(p for p in patterns if not isinstance(p, str))
        raise TypeError(f"skip: expected a module name or glob, a list of them, or a predicate "
                        f"(name, module) -> bool; got {type(bad).__name__} {bad!r}")
    return patterns


def _matches(name: str, pattern: str) -> bool:
    # "lm_head" matches the module named lm_head at any depth ("model.lm_head" too).
    return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, "*." + pattern)


def _skip_predicate(skip) -> Callable[[str, nn.Module], bool]:
    patterns = _skip_patterns(skip)
    if patterns is None:
        return skip if callable(skip) else (lambda name, module: False)
    return lambda name, module: any(_matches(name, p) for p in patterns)


def _unmatched(patterns: tuple[str, ...] | None, names: list[str]) -> tuple[str, ...]:
    return tuple(p for p in patterns or () if not any(_matches(n, p) for n in names))


def model_bytes(model: nn.Module) -> int:
    """Bytes of all parameters and buffers, each storage counted once (tied weights)."""
    seen, total = set(), 0
    for t in (*model.parameters(), *model.buffers()):
        key = (t.device, t.untyped_storage().data_ptr()) if t.device.type != "meta" else id(t)
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def convert_linears(model: nn.Module, fmt: Format | str = Format.E5M2, *, skip=None,
                    backend: Backend | str = Backend.AUTO,
                    e2m1: E2M1Decode | str = E2M1Decode.AUTO, progress: bool = True,
                    stacklevel: int = 2, **quantize_kwargs) -> QuantizeSummary:
    """`softfp8.quantize_model` without its last step (a transformers model's quantization
    config, which `softfp8.hub` adds): the layer swap that the hub's quantizer runs too.
    `stacklevel`: the warning about an unmatched skip name points at the caller that many frames
    up."""
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
    unmatched = _unmatched(_skip_patterns(skip), names)
    if unmatched:
        # A warning, not an error: a skip list is often shared by several architectures
        # ("lm_head", "output", "score"), so a name absent here is not necessarily a mistake, and
        # every layer is still converted exactly as asked. But a typo or a container's name
        # ("mlp" names no nn.Linear: "mlp.*" does) would quietly quantize a layer meant to stay
        # full precision, so it is said now and kept in the summary (`unmatched_skip`) for a
        # caller that wants to refuse.
        warnings.warn(f"skip: {list(unmatched)} matched no nn.Linear of this model, so nothing "
                      f"was skipped for them; names are matched as globs against the full "
                      f"module names (e.g. {names[0] if names else 'model.layers.0.mlp.up_proj'!r}"
                      "), a bare name at any depth", UserWarning, stacklevel=stacklevel)
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
            if original.weight is not None and original.weight.device.type == "meta":
                raise ValueError(
                    f"{name}: its weight is on the meta device (not loaded, or offloaded by a "
                    "device_map to the CPU or disk: accelerate moves it in per call); expected "
                    "real values. Convert first, then place: quantize_model(model), then "
                    "accelerate.dispatch_model(model, device_map, offload_buffers=True)")
            new = Linear.from_linear(original, fmt, backend=backend, e2m1=e2m1, **quantize_kwargs)
            hook = getattr(original, "_hf_hook", None)
            if hook is not None:  # a device_map entry of its own: its input must still move
                from accelerate.hooks import add_hook_to_module

                add_hook_to_module(new, hook)
            setattr(parent, child, new)
            original.weight = None  # released now even if something else holds the module
            del original, new
            converted.append(name)
    summary = QuantizeSummary(fmt, tuple(converted), tuple(skipped), before, model_bytes(model),
                              unmatched)
    return summary


def _progress(names: list[str], fmt: Format, enabled: bool):
    if not enabled:
        return names
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional: no bar, same result
        return names
    return tqdm(names, desc=f"softfp8 {fmt}", unit="layer")
