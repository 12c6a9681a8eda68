"""`from_pretrained`: a transformers model whose linears are `softfp8.Linear`, read from a folder.

The model is built with its parameters on the meta device and its buffers real (the way
accelerate's ``init_empty_weights(include_buffers=False)`` does, so rotary tables come out as
transformers computes them); then the safetensors shards are read one tensor at a time and each
linear is packed as soon as its tensors are in. Peak memory is the packed model plus one layer's
full-precision weight on the device (and, where it is quantized, `quantize`'s temporaries of a
chunk of its rows, about 120 MiB), plus the shard being read on the host.
"""
from __future__ import annotations

import enum
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from ..dispatch import Backend
from ..formats import Format
from ..modules import Linear
from ..quantize import dequantize, quantize
from . import layouts, repack
from .layouts import CheckpointError, CheckpointScheme, Layout
from .resolve import (checked_skip, few, meta_parameters, read_json, resolve_device, resolve_dtype,
                      resolve_folder, shard_files, tied_keys)


class Mode(str, enum.Enum):
    """What happens to one linear while loading."""

    KEEP_PACKED = "packed"
    """Stored quantized: its codes are copied into a softfp8.Linear of the checkpoint's format."""
    QUANTIZE = "quantize"
    """Stored in full precision: quantized to `fmt` on the device."""
    DENSE = "dense"
    """Kept (or, when skipped, decoded exactly) as a full-precision nn.Linear."""


KEEP_PACKED, QUANTIZE, DENSE = Mode.KEEP_PACKED, Mode.QUANTIZE, Mode.DENSE


@dataclass
class _Job:
    """One linear's load: the tensors it needs, those read so far (and their files)."""

    mode: Mode
    module: nn.Linear
    needs: set[str]
    stored_packed: bool  # the checkpoint holds it quantized
    tied: str | None  # the parameter its weight is tied to, or None
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    done: bool = False

    @property
    def lacking(self) -> list[str]:
        return sorted(self.needs - self.tensors.keys())


@dataclass(frozen=True)
class LoadReport:
    """What `from_pretrained` did (``model.softfp8_load_report``)."""

    folder: str
    layout: Layout
    fmt: Format | None
    packed: tuple[str, ...]  # linears kept in the checkpoint's own format, codes copied
    quantized: tuple[str, ...]  # full-precision linears quantized to `fmt` while loading
    dense: tuple[str, ...]  # linears left in full precision
    ignored: tuple[str, ...]  # checkpoint tensors not used (activation scales, tied copies)
    notes: tuple[str, ...]
    seconds: float
    bytes_read: int

    def __str__(self) -> str:
        return (f"{self.folder} ({self.layout}): {len(self.packed)} linears kept packed, "
                f"{len(self.quantized)} quantized to {self.fmt}, {len(self.dense)} dense; "
                f"{self.bytes_read / 2**30:.2f} GiB read in {self.seconds:.1f} s")


def from_pretrained(name_or_path: str | Path, fmt: Format | str | None = None, *,
                    auto_class=None, device_map=None, dtype: torch.dtype | None = None,
                    skip=None, backend: Backend | str = Backend.AUTO, **hf_kwargs) -> nn.Module:
    """A transformers model from `name_or_path` with every `nn.Linear` a `softfp8.Linear`.

    name_or_path: a local folder, or a Hub id (downloaded with ``huggingface_hub``).
    fmt: the format full-precision linears are quantized to while loading. A pre-quantized
        checkpoint (compressed-tensors, fbgemm_fp8, fine-grained fp8, ModelOpt NVFP4) keeps its
        own format whatever `fmt` says: its codes are copied, never decoded and re-encoded;
        `fmt` then applies only to the linears it left in full precision (e.g. lm_head).
        None with a full-precision checkpoint is an error.
    auto_class: the transformers Auto class (default AutoModelForCausalLM).
    device_map: None or "cpu", "cuda" / "cuda:1" / a torch.device / an int, or a dict of module
        names to one device (all on one device: spreading a model over devices is not done).
    dtype: of everything not packed (embeddings, norms, biases, dense linears); default the
        config's dtype.
    skip: linears to keep in full precision (names, globs or a predicate, as `quantize_model`);
        a skipped pre-quantized linear is decoded exactly to `dtype`.
    hf_kwargs: to the config and model constructors (trust_remote_code, attn_implementation...);
        revision / token / cache_dir / local_files_only go to the download.
    The returned model carries ``softfp8_load_report`` (a `LoadReport`)."""
    start = time.perf_counter()
    import transformers

    fmt = None if fmt is None else Format.parse(fmt)
    backend = Backend.parse(backend, arg="backend")
    device = resolve_device(device_map)
    download = {k: hf_kwargs.pop(k) for k in ("revision", "token", "cache_dir", "local_files_only")
                if k in hf_kwargs}
    folder = resolve_folder(name_or_path, download)
    config_doc = read_json(folder / "config.json")
    qc = config_doc.get("quantization_config")
    if isinstance(qc, dict) and qc.get("quant_method") == "softfp8":
        # softfp8's own checkpoint (save_pretrained): packed already, loaded by transformers
        # through softfp8's quantizer; fmt and skip were fixed when it was saved
        if fmt is not None or skip is not None:
            raise ValueError(f"{folder}: a softfp8 checkpoint keeps the formats it was saved in; "
                             f"expected fmt=None and skip=None, got fmt={fmt}, skip={skip!r}")
        from .hf_quantizer import load_pretrained

        kwargs = dict(hf_kwargs)
        if device_map is not None:
            kwargs["device_map"] = str(device)
        if dtype is not None:
            kwargs["dtype"] = dtype
        return load_pretrained(folder, model_class=auto_class, backend=backend, **kwargs)
    scheme = layouts.detect(folder, config_doc)
    if scheme.layout is Layout.DENSE and fmt is None:
        raise ValueError(f"fmt: None, but {folder} holds a full-precision checkpoint (no "
                         "quantization_config); pass fmt='e4m3', 'e5m2', 'nvfp4' or 'mxfp4' to "
                         "quantize it while loading")
    auto_class = auto_class or transformers.AutoModelForCausalLM
    remote = {k: hf_kwargs[k] for k in ("trust_remote_code",) if k in hf_kwargs}
    config = transformers.AutoConfig.from_pretrained(folder, **remote)
    if hasattr(config, "quantization_config"):
        # The skeleton must be plain nn.Linears: transformers would otherwise build its own
        # quantized modules (or refuse, without the GPU they need).
        del config.quantization_config
    dtype = resolve_dtype(dtype, config)
    with meta_parameters():
        model = auto_class.from_config(config, dtype=dtype, **hf_kwargs)
    model.eval()
    load = _Load(model, scheme, fmt, skip, dtype, device, backend, folder)
    load.run(shard_files(folder))
    model.to(device)  # the real buffers (rotary tables), built on the host
    if (folder / "generation_config.json").is_file():  # as transformers' from_pretrained does
        model.generation_config = transformers.GenerationConfig.from_pretrained(folder)
    model.softfp8_load_report = LoadReport(
        str(folder), scheme.layout, fmt, tuple(load.done[KEEP_PACKED]),
        tuple(load.done[QUANTIZE]), tuple(load.done[DENSE]), tuple(load.ignored), scheme.notes,
        time.perf_counter() - start, load.bytes_read)
    return model


# -- the load itself --------------------------------------------------------------------------

class _Load:
    """One pass over the shards: dense tensors to their parameters, linears packed when whole."""

    def __init__(self, model, scheme: CheckpointScheme, fmt, skip, dtype, device, backend, folder):
        self.model, self.scheme, self.fmt, self.dtype = model, scheme, fmt, dtype
        self.device, self.backend, self.folder = device, backend, folder
        self.ignored: list[str] = []
        self.bytes_read = 0
        self.done: dict[Mode, list[str]] = {mode: [] for mode in Mode}
        self.tied = tied_keys(model)  # {"lm_head.weight": "model.embed_tokens.weight"}
        self.prefix = getattr(model, "base_model_prefix", "") or ""
        should_skip = checked_skip(skip, model)
        self.jobs: dict[str, _Job] = {}
        for name, module in model.named_modules():
            if not isinstance(module, nn.Linear):
                continue
            tied = self.tied.get(f"{name}.weight")
            stored_packed = scheme.quantizes(name, module) and tied is None
            if stored_packed:
                mode = DENSE if should_skip(name, module) else KEEP_PACKED
                needs = set(scheme.tensors)
            else:
                mode = QUANTIZE if fmt is not None and not should_skip(name, module) else DENSE
                needs = set() if tied else {"weight"}
            if module.bias is not None:
                needs.add("bias")
            self.jobs[name] = _Job(mode, module, needs, stored_packed, tied)
        self.params = dict(model.named_parameters(remove_duplicate=False))
        self.buffers = dict(model.named_buffers())
        self.modules = {name for name, _ in model.named_modules()}
        ignore = getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ()
        self.ignore_unexpected = [re.compile(p) for p in ignore]

    def run(self, shards: list[Path]) -> None:
        from safetensors import safe_open

        unexpected: list[str] = []
        with torch.no_grad():
            for path in shards:
                # One shard open at a time (its mapping is released on close); one tensor read
                # at a time, and dropped as soon as it is placed.
                with safe_open(str(path), framework="pt", device="cpu") as f:
                    for key in f.keys():
                        self._take(key, f, path, unexpected)
            # Tied linears last: their weight is their source's, loaded by now.
            for name, job in self.jobs.items():
                if job.tied and not job.lacking and not job.done:
                    self._linear(name, job)
        missing = [n for n, j in self.jobs.items() if not j.done]
        if missing or unexpected:
            self._fail(missing, unexpected)
        still_meta = [n for n, p in self.model.named_parameters() if p.is_meta]
        if still_meta:
            raise CheckpointError(f"{self.folder}: no tensor for {few(still_meta)}; expected "
                                  "every parameter of the model in the checkpoint")

    def _take(self, key: str, f, path: Path, unexpected: list[str]) -> None:
        name = self._model_key(key)
        owner, _, attr = name.rpartition(".")
        job = self.jobs.get(owner)
        if job is not None and attr in job.needs and attr not in job.tensors:
            t = f.get_tensor(key)
            self.bytes_read += t.numel() * t.element_size()
            job.tensors[attr], job.files[attr] = t, str(path)
            if not job.lacking and not job.tied:
                self._linear(owner, job)
            return
        if name in self.tied or (job is not None and attr in layouts.ACTIVATION_TENSORS):
            self.ignored.append(key)  # a tied copy (transformers ties it too), an activation scale
            return
        if job is None and name in self.params:
            t = f.get_tensor(key)
            self.bytes_read += t.numel() * t.element_size()
            self._set_param(name, t, path)
            return
        if name in self.buffers:
            t = f.get_tensor(key)
            buf = self.buffers[name]
            if t.shape != buf.shape:
                raise CheckpointError(f"{path}: tensor {key}: found shape {tuple(t.shape)}; "
                                      f"expected {tuple(buf.shape)} for buffer {name}")
            buf.copy_(t)
            return
        if any(p.search(name) for p in self.ignore_unexpected) or self._head_of_task_model(key):
            self.ignored.append(key)
            return
        unexpected.append(f"{key} ({path.name}, {f.get_slice(key).get_dtype()})")

    def _model_key(self, key: str) -> str:
        if key.rpartition(".")[0] in self.modules or not self.prefix:
            return key
        # A base model (AutoModel) from a task checkpoint, or the other way round.
        if key.startswith(self.prefix + "."):
            return key[len(self.prefix) + 1:]
        return f"{self.prefix}.{key}"

    def _head_of_task_model(self, key: str) -> bool:
        # A base model (AutoModel) loaded from a task checkpoint has no place for the task's
        # head (lm_head, score): transformers drops those tensors too.
        return bool(self.prefix) and not hasattr(self.model, self.prefix) and not key.startswith(
            self.prefix + ".")

    def _set_param(self, name: str, t: torch.Tensor, path) -> None:
        module_name, _, attr = name.rpartition(".")
        module = self.model.get_submodule(module_name)
        old = module._parameters[attr]
        if tuple(t.shape) != tuple(old.shape):
            raise CheckpointError(f"{path}: tensor {name}: found shape {tuple(t.shape)}; expected "
                                  f"{tuple(old.shape)} (the model's config)")
        if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise CheckpointError(f"{path}: tensor {name}: found {t.dtype}; expected float32, "
                                  "float16 or bfloat16 for a layer the config leaves unquantized")
        module._parameters[attr] = nn.Parameter(_own(t, self.device, self.dtype),
                                                requires_grad=old.requires_grad)

    def _linear(self, name: str, job: _Job) -> None:
        parent_name, _, child = name.rpartition(".")
        parent = self.model.get_submodule(parent_name)
        module, tensors = job.module, job.tensors
        shape = (module.out_features, module.in_features)
        bias = tensors.pop("bias", None)
        if bias is not None:
            bias = self._checked_bias(name, bias, shape[0], job.files.get("bias"))
        packed = weight = None
        if job.tied:
            weight = self.model.get_parameter(job.tied)
            if weight.is_meta:
                raise CheckpointError(f"{self.folder}: {name}.weight is tied to {job.tied}, which "
                                      "the checkpoint does not hold")
        elif job.stored_packed:
            packed = repack.convert(self.scheme, name, tensors, shape, job.files, self.device)
        else:
            weight = tensors["weight"]
            self._check_dense_weight(name, weight, shape, job.files.get("weight"))
        tensors.clear()
        if job.mode is DENSE:
            if job.tied:
                module.weight = weight  # the very Parameter, as transformers ties it
            else:
                w = (dequantize(packed, self.dtype) if packed is not None
                     else _own(weight, self.device, self.dtype))
                module.weight = nn.Parameter(w, requires_grad=False)
            module.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        else:
            if job.mode is QUANTIZE:
                packed = quantize(weight.detach().to(self.device), self.fmt)
            setattr(parent, child, Linear.from_packed(packed, bias, backend=self.backend))
        job.done = True
        self.done[job.mode].append(name)

    def _checked_bias(self, name, bias, n, path) -> torch.Tensor:
        if tuple(bias.shape) != (n,) or bias.dtype not in (torch.float32, torch.float16,
                                                           torch.bfloat16):
            raise CheckpointError(f"{path}: tensor {name}.bias: found {bias.dtype} of shape "
                                  f"{tuple(bias.shape)}; expected a float tensor of shape ({n},)")
        return _own(bias, self.device, self.dtype)

    def _check_dense_weight(self, name, w, shape, path) -> None:
        if tuple(w.shape) != shape or w.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise CheckpointError(
                f"{path}: tensor {name}.weight: found {w.dtype} of shape {tuple(w.shape)}; "
                f"expected float32/float16/bfloat16 of shape {shape}: the config "
                f"({self.scheme.source}) leaves this layer unquantized")

    def _fail(self, missing: list[str], unexpected: list[str]) -> None:
        lines = []
        for name in missing[:8]:
            job = self.jobs[name]
            have = sorted(job.tensors)
            lines.append(f"linear {name}: missing {job.lacking} (found {have or 'nothing'})")
        if len(missing) > 8:
            lines.append(f"and {len(missing) - 8} more linears")
        if unexpected:
            lines.append(f"tensors the model has no place for: {few(unexpected)}")
        expect = (f"a {self.scheme.layout} checkpoint stores "
                  f"{list(self.scheme.tensors)} per quantized linear"
                  if self.scheme.layout is not Layout.DENSE else "a full-precision checkpoint")
        raise CheckpointError(f"{self.folder}: the tensors disagree with the config "
                              f"({self.scheme.source}): " + "; ".join(lines) +
                              f". Expected: {expect}; supported: {layouts.SUPPORTED}")


def _own(t: torch.Tensor, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """`t` on `device` in `dtype`, in memory of its own. A tensor read from a safetensors file
    is a view of the file's mapping, and one such view kept in the model would keep the whole
    shard mapped: host memory would grow by every shard read, not one."""
    return t.to(device, dtype, copy=True)
