"""Tiny transformers models and checkpoint writers for the hub tests (no downloads).

compressed-tensors checkpoints are written by compressed-tensors itself (its compressors, with
scales from its own `calculate_qparams`, i.e. what llm-compressor's min-max observer computes);
fine-grained fp8 by transformers' own quantize op (`Fp8Quantize`); fbgemm_fp8 and ModelOpt
NVFP4, whose producers need a GPU, by the small writers below, following the producers' code
(fbgemm's per-row quantize; ModelOpt's layout as compressed-tensors' ModelOpt converter reads it).
Each writer returns the producer's dequantized weights: the model the producer means.
"""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

ARCHS = ("llama", "qwen2", "qwen3", "mistral", "gemma")
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                     -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def tiny_model(arch: str = "llama", *, seed: int = 0, hidden: int = 64, inter: int = 96,
               layers: int = 2, kv_heads: int = 2, tie: bool | None = None) -> nn.Module:
    """A float32 causal LM of `arch` with random weights: 2 layers, hidden 64 by default."""
    import transformers as tf

    common = dict(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=kv_heads, vocab_size=160,
                  max_position_embeddings=128)
    if tie is not None:
        common["tie_word_embeddings"] = tie
    cls = {"llama": (tf.LlamaConfig, tf.LlamaForCausalLM),
           "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM),  # q/k/v carry biases
           "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM),
           "mistral": (tf.MistralConfig, tf.MistralForCausalLM),
           "gemma": (tf.GemmaConfig, tf.GemmaForCausalLM)}[arch]  # ties lm_head to embed
    if arch == "gemma":
        common["head_dim"] = hidden // 4
    torch.manual_seed(seed)
    model = cls[1](cls[0](**common)).float().eval()
    with torch.no_grad():  # norms away from 1 so that loading them wrong shows
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def linear_names(model: nn.Module, ignore=("lm_head",)) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n not in ignore]


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def _save(model: nn.Module, folder: Path, tensors: dict, quant_config: dict | None,
          extra_files: dict | None = None, shards: int = 1) -> None:
    model.config.save_pretrained(folder)
    if quant_config is not None:
        doc = json.loads((folder / "config.json").read_text())
        doc["quantization_config"] = quant_config
        (folder / "config.json").write_text(json.dumps(doc, indent=1))
    for name, doc in (extra_files or {}).items():
        (folder / name).write_text(json.dumps(doc, indent=1))
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return
    keys = sorted(tensors)
    per = -(-len(keys) // shards)
    weight_map = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: tensors[k] for k in keys[i * per:(i + 1) * per]}
        save_file(part, str(folder / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in part})
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}))


def _state(model: nn.Module) -> dict:
    # What save_pretrained writes: tied copies dropped.
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    for target in getattr(model, "all_tied_weights_keys", {}) or {}:
        sd.pop(target, None)
    return sd


def write_dense(model: nn.Module, folder: Path, shards: int = 1,
                dtype: torch.dtype = torch.float32) -> Path:
    folder = _fresh(folder)
    _save(model, folder, {k: v.to(dtype) if v.is_floating_point() else v
                          for k, v in _state(model).items()}, None, shards=shards)
    return folder


# -- compressed-tensors, written by compressed-tensors ---------------------------------------

def write_compressed_tensors(model: nn.Module, folder: Path, preset: str,
                             ignore=("lm_head",)) -> Path:
    """`model` quantized by compressed-tensors' `preset` (FP8_DYNAMIC, FP8, FP8_BLOCK, NVFP4A16,
    MXFP4A16; activations dropped) and saved by it. `model` itself is not changed."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationConfig, QuantizationStrategy,
                                                 apply_quantization_config)
    from compressed_tensors.quantization.quant_scheme import preset_name_to_scheme
    from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam

    folder = _fresh(folder)
    model = copy.deepcopy(model)
    scheme = preset_name_to_scheme(preset, ["Linear"])
    scheme.input_activations = None
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": scheme},
                                                        ignore=list(ignore)))
    for _, mod in model.named_modules():
        if not hasattr(mod, "quantization_scheme"):
            continue
        args, w = mod.quantization_scheme.weights, mod.weight.data
        n, k = w.shape
        global_scale = None
        if args.strategy == QuantizationStrategy.CHANNEL:
            lo, hi = w.amin(1, keepdim=True), w.amax(1, keepdim=True)
        elif args.strategy == QuantizationStrategy.TENSOR:
            lo, hi = w.amin(), w.amax()
        elif args.strategy == QuantizationStrategy.BLOCK:
            bh, bw = args.block_structure
            t = torch.zeros(-(-n // bh) * bh, -(-k // bw) * bw, device=w.device)
            t[:n, :k] = w
            t = t.view(t.shape[0] // bh, bh, t.shape[1] // bw, bw)
            lo, hi = t.amin((1, 3)), t.amax((1, 3))
        else:
            g = w.view(n, k // args.group_size, args.group_size)
            lo, hi = g.amin(-1), g.amax(-1)
            if args.strategy == QuantizationStrategy.TENSOR_GROUP:
                global_scale = generate_gparam(w.amin(), w.amax())
                mod.weight_global_scale.data.copy_(global_scale)
        scale, _ = calculate_qparams(lo, hi, args, global_scale=global_scale)
        mod.weight_scale.data.copy_(scale.reshape(mod.weight_scale.shape))
    compressor = ModelCompressor.from_pretrained_model(model, None)
    compressor.compress_model(model)
    model.save_pretrained(folder)
    compressor.update_config(folder)
    return folder


def compressed_tensors_reference(folder: Path) -> nn.Module:
    """The producer's own dequantized model: transformers + compressed-tensors, decompressed.

    compressed-tensors decompresses FP4 through bfloat16 (`unpack_fp4_from_uint8`'s default
    dtype), rounding every NVFP4 weight to 8 significant bits; so FP4 weights are dequantized
    again here by compressed-tensors' own `dequantize`, in float32."""
    import warnings

    from compressed_tensors.compressors.mx_utils import decompress_mx_scale
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import dequantize
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = AutoModelForCausalLM.from_pretrained(
            folder, quantization_config=CompressedTensorsConfig(dequantize=True)).eval()
    qc = json.loads((folder / "config.json").read_text())["quantization_config"]
    args = QuantizationArgs(**qc["config_groups"]["group_0"]["weights"])
    if args.num_bits != 4:
        return ref
    sd = load_file(str(folder / "model.safetensors"))
    with torch.no_grad():
        for key, packed in sd.items():
            if not key.endswith(".weight_packed"):
                continue
            name = key[: -len(".weight_packed")]
            m, n = packed.shape
            scale = sd[f"{name}.weight_scale"]
            scale = (decompress_mx_scale(scale) if args.group_size == 32 else scale).float()
            w = dequantize(unpack_fp4_from_uint8(packed, m, 2 * n, dtype=torch.float32), scale,
                           args=args, global_scale=sd.get(f"{name}.weight_global_scale"),
                           dtype=torch.float32)
            ref.get_submodule(name).weight.copy_(w)
    return ref


# -- writers for producers that need a GPU ---------------------------------------------------

def _rebuild(model: nn.Module, weights: dict[str, torch.Tensor]) -> nn.Module:
    """A copy of `model` with the producer's dequantized weights put in."""
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for name, w in weights.items():
            ref.get_submodule(name).weight.copy_(w)
    return ref


def write_fbgemm_fp8(model: nn.Module, folder: Path) -> tuple[Path, nn.Module]:
    """fbgemm_fp8 as transformers' FbgemmFp8HfQuantizer saves it: e4m3 weight, fp32 weight_scale
    [out, 1] from fbgemm's quantize_fp8_per_row (amax / 448 per row)."""
    folder = _fresh(folder)
    sd, deq = _state(model), {}
    for name in linear_names(model):
        w = sd[f"{name}.weight"].float()
        scale = (w.abs().amax(1, keepdim=True) / 448.0).clamp_min(1e-12)
        codes = (w / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
        sd[f"{name}.weight"], sd[f"{name}.weight_scale"] = codes, scale
        deq[name] = codes.float() * scale
    _save(model, folder, sd, {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                              "modules_to_not_convert": None})
    return folder, _rebuild(model, deq)


def write_finegrained_fp8(model: nn.Module, folder: Path,
                          block: tuple[int, int] | None = (128, 128)) -> tuple[Path, nn.Module]:
    """transformers' fine-grained fp8, quantized by transformers' own op (`Fp8Quantize`) and
    dequantized by its own `_dequantize_fp8_weight` where that exists (transformers 5.17, on the
    GPU machine, lacks it: there each block's codes times its `weight_scale_inv`)."""
    from types import SimpleNamespace

    from transformers.integrations import finegrained_fp8 as hf

    dequantize = getattr(hf, "_dequantize_fp8_weight", _dequantize_blocks)
    folder = _fresh(folder)
    config = SimpleNamespace(weight_block_size=None if block is None else list(block),
                             scale_fmt="float")
    op = hf.Fp8Quantize(SimpleNamespace(quantization_config=config))
    sd, deq = _state(model), {}
    for name in linear_names(model):
        key = f"{name}.weight"
        out = op._quantize_one(key, sd[key].float())
        if out[key].dtype != torch.float8_e4m3fn:
            raise AssertionError(f"transformers left {key} unquantized (shape not whole blocks)")
        sd.update(out)
        deq[name] = dequantize(out[key], out[f"{name}.weight_scale_inv"],
                               None if block is None else list(block), torch.float32)
    _save(model, folder, sd, {"quant_method": "fp8", "activation_scheme": "dynamic",
                              "weight_block_size": None if block is None else list(block),
                              "modules_to_not_convert": None})
    return folder, _rebuild(model, deq)


def _dequantize_blocks(codes: torch.Tensor, scale_inv: torch.Tensor, block: list[int] | None,
                       dtype: torch.dtype) -> torch.Tensor:
    """e4m3 codes [N, K] times their block's multiplier (`weight_scale_inv` [ceil(N / bn),
    ceil(K / bk)], or one per tensor where `block` is None), as `dtype`."""
    w = codes.to(torch.float32)
    if block is None:
        return (w * scale_inv.to(torch.float32)).to(dtype)
    bn, bk = block
    n, k = w.shape
    s = scale_inv.to(torch.float32).repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
    return (w * s).to(dtype)


def nvfp4_tensors(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ModelOpt's NVFP4 of `w` [N, K]: packed uint8 [N, K/2] (even element in the low nibble),
    e4m3 block scales [N, K/16], fp32 weight_scale_2 (a multiplier: amax / (6 * 448))."""
    n, k = w.shape
    scale_2 = (w.abs().amax() / (6.0 * 448.0)).float()
    blocks = w.float().view(n, k // 16, 16)
    scale = (blocks.abs().amax(-1) / (6.0 * scale_2)).to(torch.float8_e4m3fn)
    per = scale.float() * scale_2
    x = blocks / torch.where(per > 0, per, 1.0)[..., None]
    # nearest magnitude (a tie goes to the lower code, not to even: fine for a test writer)
    codes = (x.abs().unsqueeze(-1) - E2M1[:8].to(w.device)).abs().argmin(-1)
    codes = (codes | (x < 0).to(torch.int64) << 3).view(n, k).to(torch.uint8)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed, scale, scale_2


def write_modelopt_nvfp4(model: nn.Module, folder: Path) -> tuple[Path, nn.Module]:
    """ModelOpt NVFP4 (hf_quant_config.json, no quantization_config in config.json)."""
    folder = _fresh(folder)
    sd, deq = _state(model), {}
    for name in linear_names(model):
        packed, scale, scale_2 = nvfp4_tensors(sd[f"{name}.weight"])
        sd[f"{name}.weight"], sd[f"{name}.weight_scale"] = packed, scale
        sd[f"{name}.weight_scale_2"] = scale_2
        sd[f"{name}.input_scale"] = torch.tensor(0.01)
        codes = torch.stack((packed & 0xF, packed >> 4), -1).flatten(-2).long()
        n, k = codes.shape
        deq[name] = (E2M1.to(codes.device)[codes].view(n, k // 16, 16)
                     * (scale.float() * scale_2)[..., None]).view(n, k)
    hf_quant = {"producer": {"name": "modelopt", "version": "0.29.0"},
                "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None,
                                 "group_size": 16, "exclude_modules": ["lm_head"]}}
    _save(model, folder, sd, None, {"hf_quant_config.json": hf_quant})
    return folder, _rebuild(model, deq)
