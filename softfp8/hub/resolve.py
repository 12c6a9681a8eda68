"""What `from_pretrained` needs before it reads a tensor: the folder, its shards, the device,
the dtype, the skip list, and a model skeleton whose parameters take no memory."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch
from torch import nn

from .._convert import _skip_predicate
from .layouts import CheckpointError


@contextlib.contextmanager
def meta_parameters():
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


def tied_keys(model: nn.Module) -> dict[str, str]:
    keys = getattr(model, "all_tied_weights_keys", None)
    if keys is None and hasattr(model, "get_expanded_tied_weights_keys"):
        keys = model.get_expanded_tied_weights_keys(all_submodels=True)
    return dict(keys or {})


def checked_skip(skip, model: nn.Module):
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


def resolve_device(device_map) -> torch.device:
    if device_map is None:
        return torch.device("cpu")
    if isinstance(device_map, dict):
        devices = {str(resolve_device(d)) for d in device_map.values()}
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
        index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        device = torch.device("cuda", index)
    return device


def resolve_dtype(dtype, config) -> torch.dtype:
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


def resolve_folder(name_or_path, download: dict) -> Path:
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
                         "folder with config.json and *.safetensors, or a reachable "
                         "Hub id") from None


def read_json(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path}: not found; expected a transformers model folder")
    return json.loads(path.read_text())


def shard_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(read_json(index).get("weight_map", {}).values()))
        files = [folder / n for n in names]
        lacking = [str(f) for f in files if not f.is_file()]
        if lacking:
            raise CheckpointError(f"{index}: names shards that are not there: {few(lacking)}")
        return files
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    found = sorted(p.name for p in folder.iterdir())
    raise CheckpointError(f"{folder}: no model.safetensors or model.safetensors.index.json "
                          f"(found {few(found)}); supported: safetensors checkpoints")


def few(items: list[str], n: int = 8) -> str:
    shown = ", ".join(items[:n])
    return shown + (f" and {len(items) - n} more" if len(items) > n else "")



