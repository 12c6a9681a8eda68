"""`from_pretrained`: a transformers model whose linears are `softfp8.Linear`, read from a folder.

The model is built with its parameters on the meta device and its buffers real (the way
accelerate's ``init_empty_weights(include_buffers=False)`` does, so rotary tables come out as
transformers computes them); then the safetensors shards are read one tensor at a time and each
linear is packed as soon as its tensors are in. Peak memory is the packed model plus one layer's
full-precision weight on the device, plus the shard being read on the host.
"""
from __future__ import annotations

import contextlib
import enum
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from ..dispatch import Backend
from ..formats import Format, PackedWeight
from ..modules import Linear, _skip_predicate
from ..quantize import dequantize, quantize
from . import layouts
from .layouts import CheckpointError, CheckpointScheme, Layout


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
    device = _resolve_device(device_map)
    download = {k: hf_kwargs.pop(k) for k in ("revision", "token", "cache_dir", "local_files_only")
                if k in hf_kwargs}
    folder = _resolve_folder(name_or_path, download)
    config_doc = _read_json(folder / "config.json")
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
    dtype = _resolve_dtype(dtype, config)
    with _meta_parameters():
        model = auto_class.from_config(config, dtype=dtype, **hf_kwargs)
    model.eval()
    load = _Load(model, scheme, fmt, skip, dtype, device, backend, folder)
    load.run(_shard_files(folder))
    model.to(device)  # the real buffers (rotary tables), built on the host
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
        self.tied = _tied_keys(model)  # {"lm_head.weight": "model.embed_tokens.weight"}
        self.prefix = getattr(model, "base_model_prefix", "") or ""
        should_skip = _checked_skip(skip, model)
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
            raise CheckpointError(f"{self.folder}: no tensor for {_few(still_meta)}; expected "
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
        if any(p.search(name) for p in self.ignore_unexpected):
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
        module._parameters[attr] = nn.Parameter(t.to(self.device, self.dtype),
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
            packed = layouts.convert(self.scheme, name, tensors, shape, job.files, self.device)
        else:
            weight = tensors["weight"]
            self._check_dense_weight(name, weight, shape, job.files.get("weight"))
        tensors.clear()
        if job.mode is DENSE:
            if job.tied:
                module.weight = weight  # the very Parameter, as transformers ties it
            else:
                w = dequantize(packed, self.dtype) if packed is not None else weight.to(
                    self.device, self.dtype)
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
        return bias.to(self.device, self.dtype)

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
            lines.append(f"tensors the model has no place for: {_few(unexpected)}")
        expect = (f"a {self.scheme.layout} checkpoint stores "
                  f"{list(self.scheme.tensors)} per quantized linear"
                  if self.scheme.layout is not Layout.DENSE else "a full-precision checkpoint")
        raise CheckpointError(f"{self.folder}: the tensors disagree with the config "
                              f"({self.scheme.source}): " + "; ".join(lines) +
                              f". Expected: {expect}; supported: {layouts.SUPPORTED}")


def _few(items: list[str], n: int = 8) -> str:
    shown = ", ".join(items[:n])
    return shown + (f" and {len(items) - n} more" if len(items) > n else "")


# -- helpers ---------------------------------------------------------------------------------

@contextlib.contextmanager
def _meta_parameters():
    """Parameters made on the meta device, buffers real: accelerate's
    ``init_empty_weights(include_buffers=False)``, without the dependency."""
    register = nn.Module.register_parameter

    def on_meta(module, name, param):
        register(module, name, param)
        if param is not None:
            p = module._parameters[name]
            kwargs = p.__dict__.copy()
            kwargs["requires_grad"] = p.requires_grad
            module._parameters[name] = type(p)(p.to("meta"), **kwargs)

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


def _tied_keys(model: nn.Module) -> dict[str, str]:
    keys = getattr(model, "all_tied_weights_keys", None)
    if keys is None and hasattr(model, "get_expanded_tied_weights_keys"):
        keys = model.get_expanded_tied_weights_keys(all_submodels=True)
    return dict(keys or {})


def _checked_skip(skip, model: nn.Module):
    predicate = _skip_predicate(skip)
    if skip is None or callable(skip):
        return predicate
    patterns = (skip,) if isinstance(skip, str) else tuple(skip)
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    for p in patterns:
        if not any(_skip_predicate(p)(n, m) for n, m in linears):
            raise ValueError(f"skip: {p!r} matches no linear of the model; expected names or "
                             f"globs such as {[n for n, _ in linears[:3]] + ['lm_head']}")
    return predicate


def _resolve_device(device_map) -> torch.device:
    if device_map is None:
        return torch.device("cpu")
    if isinstance(device_map, dict):
        devices = {str(_resolve_device(d)) for d in device_map.values()}
        if len(devices) != 1:
            raise ValueError(f"device_map: maps modules to {sorted(devices)}; supported: one "
                             "device for the whole model")
        return torch.device(devices.pop())
    if isinstance(device_map, bool) or not isinstance(device_map, (str, int, torch.device)):
        raise TypeError(f"device_map: expected None, 'cpu', 'cuda', a device, an index or a dict, "
                        f"got {device_map!r}")
    try:
        device = torch.device(device_map)
    except RuntimeError as err:
        raise ValueError(f"device_map: {device_map!r} is not a device ({err}); expected None, "
                         "'cpu', 'cuda', 'cuda:N', an index or a dict") from None
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return device


def _resolve_dtype(dtype, config) -> torch.dtype:
    if dtype is None or dtype == "auto":
        dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype, None)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point or dtype.itemsize < 2:
            dtype = torch.float32
        return dtype
    if not isinstance(dtype, torch.dtype) or dtype not in (torch.float32, torch.float16,
                                                           torch.bfloat16):
        raise TypeError(f"dtype: expected torch.float32, torch.float16 or torch.bfloat16, got "
                        f"{dtype!r}")
    return dtype


def _resolve_folder(name_or_path, download: dict) -> Path:
    path = Path(name_or_path)
    if path.is_dir():
        return path
    if path.exists():
        raise ValueError(f"name_or_path: {path} is a file; expected a model folder or a Hub id")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ValueError(f"name_or_path: {name_or_path!r} is not a folder, and huggingface_hub "
                         "(needed to download a Hub id) is not installed") from None
    try:
        return Path(snapshot_download(str(name_or_path),
                                      allow_patterns=["*.json", "*.safetensors", "*.model",
                                                      "*.txt", "*.py"], **download))
    except Exception as err:  # offline, unknown id, gated repo: all the same to the caller
        raise ValueError(f"name_or_path: {name_or_path!r} is not a local folder and could not be "
                         f"downloaded from the Hub ({type(err).__name__}: {err}); expected a "
                         "folder with config.json and *.safetensors, or a reachable Hub id") from None


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path}: not found; expected a transformers model folder")
    return json.loads(path.read_text())


def _shard_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(_read_json(index).get("weight_map", {}).values()))
        files = [folder / n for n in names]
        lacking = [str(f) for f in files if not f.is_file()]
        if lacking:
            raise CheckpointError(f"{index}: names shards that are not there: {_few(lacking)}")
        return files
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    found = sorted(p.name for p in folder.iterdir())
    raise CheckpointError(f"{folder}: no model.safetensors or model.safetensors.index.json "
                          f"(found {_few(found)}); supported: safetensors checkpoints")
