"""Checkpoints made by llmcompressor itself (GPTQ and AWQ; NVFP4, MXFP4, FP8) through
`softfp8.from_pretrained`, with no llmcompressor installed.

tests/fixtures/llmcompressor/ is written by benchmarks/make_llmcompressor_fixture.py (its docstring
has the recipe): a two-layer Llama cut out of SmolLM2-135M-Instruct's real weights, in bfloat16
(`original/`), llmcompressor's compressed checkpoints of it, and the token ids of its calibration
and held-out texts. Checked:
- every quantized linear's packed words hold the file's code bytes and its scales the file's
  scales (NVFP4's tensor scale: the reciprocal of the stored one, as `hub/layouts.py` converts);
- softfp8's reference decode equals compressed-tensors' own `dequantize` in float32 (where
  compressed-tensors installs): bit for bit, but for the documented last bit of NVFP4's fl(1/G);
- on the held-out text, GPTQ's errors are below softfp8's data-free `mse` quantization of the
  same weights: each linear's output error on the inputs it sees in the full-precision model,
  and the logits' error. AWQ (smoothing, then round-to-nearest with absmax scales) rescales the
  norms in front of the linears, so only its logits compare; they are below data-free absmax's.

`python tests/test_llmcompressor_checkpoints.py` prints the table in docs/quality.md.
"""
from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import softfp8
from softfp8 import Format

FIXTURE = Path(__file__).parent / "fixtures" / "llmcompressor"
META = json.loads((FIXTURE / "texts.json").read_text())
SCHEMES = {"nvfp4a16": Format.NVFP4, "mxfp4a16": Format.MXFP4, "fp8_dynamic": Format.E4M3}
CHECKPOINTS = [f"{a}-{s}" for a in ("gptq", "awq") for s in SCHEMES]

try:
    import compressed_tensors  # noqa: F401  the library that wrote these checkpoints
    HAVE_CT = True
except ImportError:
    HAVE_CT = False


def fmt_of(checkpoint: str) -> Format:
    return SCHEMES[checkpoint.split("-", 1)[1]]


@functools.lru_cache(maxsize=None)
def load(checkpoint: str):
    return softfp8.from_pretrained(FIXTURE / checkpoint, backend="torch",
                                   dtype=torch.float32).eval()


@functools.lru_cache(maxsize=None)
def stored(checkpoint: str) -> dict[str, torch.Tensor]:
    return load_file(str(FIXTURE / checkpoint / "model.safetensors"))


@functools.lru_cache(maxsize=None)
def original():
    """The full-precision model (float32 activations over its bfloat16 weights), its linears'
    names, their weights, the inputs each sees on the held-out text and the held-out logits."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(FIXTURE / "original", dtype=torch.float32).eval()
    names = tuple(n for n, m in model.named_modules()
                  if isinstance(m, torch.nn.Linear) and n != "lm_head")
    weights = {n: model.get_submodule(n).weight.detach().clone() for n in names}
    seen = {n: [] for n in names}
    hooks = [model.get_submodule(n).register_forward_hook(
        lambda _m, args, _out, n=n: seen[n].append(args[0].reshape(-1, args[0].shape[-1])))
        for n in names]
    logits = held_out_logits(model)
    for h in hooks:
        h.remove()
    inputs = {n: torch.cat(v).double() for n, v in seen.items()}
    return model, names, weights, inputs, logits


def held_out_logits(model) -> list[torch.Tensor]:
    with torch.no_grad():
        return [model(torch.tensor([ids])).logits[0].double() for ids in META["held_out"]]


def logits_error(model) -> float:
    """Mean over the held-out sentences of ||logits - full precision's|| / ||full precision's||."""
    ref = original()[4]
    got = held_out_logits(model)
    return sum(((g - r).norm() / r.norm()).item() for g, r in zip(got, ref)) / len(ref)


def layer_error(weights: dict[str, torch.Tensor]) -> float:
    """Mean over the linears of ||x Wq^T - x W^T|| / ||x W^T||, x the held-out inputs each linear
    sees in the full-precision model."""
    _, names, w0, inputs, _ = original()
    errs = []
    for n in names:
        ref = inputs[n] @ w0[n].double().T
        errs.append(((inputs[n] @ weights[n].double().T - ref).norm() / ref.norm()).item())
    return sum(errs) / len(errs)


def checkpoint_weights(checkpoint: str) -> dict[str, torch.Tensor]:
    model = load(checkpoint)
    return {n: softfp8.dequantize(model.get_submodule(n).packed) for n in original()[1]}


@functools.lru_cache(maxsize=None)
def data_free(fmt: Format, scales: str) -> tuple[float, float]:
    """(layer error, logits error) of softfp8's own quantization of the original weights."""
    model, names, w0, _, _ = original()
    q = {n: softfp8.dequantize(softfp8.quantize(w0[n], fmt, scales=scales)) for n in names}
    try:
        for n in names:
            model.get_submodule(n).weight.data = q[n]
        return layer_error(q), logits_error(model)
    finally:
        for n in names:
            model.get_submodule(n).weight.data = w0[n]


# -- loading: codes and scales as stored ----------------------------------------------------

@pytest.mark.parametrize("checkpoint", CHECKPOINTS)
def test_codes_and_scales_are_the_files(checkpoint):
    model, sd, fmt = load(checkpoint), stored(checkpoint), fmt_of(checkpoint)
    report = model.softfp8_load_report
    names = original()[1]
    assert len(names) == 14
    for name in names:
        lin = model.get_submodule(name)
        assert isinstance(lin, softfp8.Linear) and lin.fmt is fmt, name
        n, k = lin.out_features, lin.in_features
        words = lin.words.contiguous().view(torch.uint8)
        if fmt is Format.E4M3:
            assert torch.equal(words[:, :k], sd[f"{name}.weight"].view(torch.uint8)), name
            assert torch.equal(lin.scales, sd[f"{name}.weight_scale"].float().reshape(n)), name
            continue
        assert torch.equal(words[:, : k // 2], sd[f"{name}.weight_packed"]), name
        assert not words[:, k // 2:].any(), name  # padding: zero codes
        scale_bytes = sd[f"{name}.weight_scale"].view(torch.uint8)
        assert torch.equal(lin.scales[:, : scale_bytes.shape[1]], scale_bytes), name
        if fmt is Format.NVFP4:
            big_g = sd[f"{name}.weight_global_scale"]
            assert lin.global_scale.item() == (1.0 / big_g.float()).item(), name
    # lm_head is tied to the embedding and llmcompressor was told to leave it alone
    assert not isinstance(model.lm_head, softfp8.Linear), report


@pytest.mark.skipif(not HAVE_CT, reason="needs compressed-tensors")
@pytest.mark.parametrize("checkpoint", CHECKPOINTS)
def test_decode_equals_compressed_tensors_dequantize(checkpoint):
    from compressed_tensors.compressors.mx_utils import decompress_mx_scale
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    model, sd, fmt = load(checkpoint), stored(checkpoint), fmt_of(checkpoint)
    qc = json.loads((FIXTURE / checkpoint / "config.json").read_text())["quantization_config"]
    args = QuantizationArgs(**qc["config_groups"]["group_0"]["weights"])
    for name in original()[1]:
        scale = sd[f"{name}.weight_scale"]
        if fmt is Format.E4M3:
            # in float32: with the bfloat16 scale as stored, compressed-tensors would round the
            # products to bfloat16 (the model's dtype), which is not what the file holds
            ref = dequantize(sd[f"{name}.weight"], scale.float(), args=args, dtype=torch.float32)
        else:
            packed = sd[f"{name}.weight_packed"]
            scale = (decompress_mx_scale(scale) if fmt is Format.MXFP4 else scale).float()
            codes = unpack_fp4_from_uint8(packed, packed.shape[0], 2 * packed.shape[1],
                                          dtype=torch.float32)
            ref = dequantize(codes, scale, args=args, dtype=torch.float32,
                             global_scale=sd.get(f"{name}.weight_global_scale"))
        got = softfp8.dequantize(model.get_submodule(name).packed)
        if fmt is Format.NVFP4 and math.frexp(sd[f"{name}.weight_global_scale"].item())[0] != 0.5:
            # compressed-tensors divides by G, softfp8 multiplies by fl(1/G): a block scale may
            # differ in its last bit, and so a weight by at most two float32 roundings
            assert torch.equal(got == 0, ref == 0), name
            assert ((got - ref).abs() <= ref.abs() * 2.0**-22).all(), name
        else:
            assert torch.equal(got.view(torch.int32), ref.view(torch.int32)), name


# -- quality: the calibrated checkpoints against data-free quantization ----------------------

@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_gptq_beats_data_free_mse_on_held_out_text(scheme):
    fmt, checkpoint = SCHEMES[scheme], f"gptq-{scheme}"
    mse_layer, mse_logits = data_free(fmt, "mse")
    gptq_layer = layer_error(checkpoint_weights(checkpoint))
    gptq_logits = logits_error(load(checkpoint))
    assert gptq_layer < mse_layer, (gptq_layer, mse_layer)
    assert gptq_logits < mse_logits, (gptq_logits, mse_logits)


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_awq_beats_data_free_absmax_on_held_out_text(scheme):
    absmax_logits = data_free(SCHEMES[scheme], "absmax")[1]
    awq_logits = logits_error(load(f"awq-{scheme}"))
    assert awq_logits < absmax_logits, (awq_logits, absmax_logits)


def table() -> str:
    """docs/quality.md's table: every error this module compares."""
    lines = ["| format | quantized by | mean layer err | logits err |", "|---|---|---|---|"]
    for scheme, fmt in SCHEMES.items():
        for scales in ("absmax", "mse"):
            layer, logits = data_free(fmt, scales)
            lines.append(f"| {fmt} | softfp8 {scales} (data-free) | {layer:.4f} | {logits:.4f} |")
        gptq = f"gptq-{scheme}"
        lines.append(f"| {fmt} | llmcompressor GPTQ ({scheme.upper()}) | "
                     f"{layer_error(checkpoint_weights(gptq)):.4f} | "
                     f"{logits_error(load(gptq)):.4f} |")
        lines.append(f"| {fmt} | llmcompressor AWQ + RTN ({scheme.upper()}) | - | "
                     f"{logits_error(load(f'awq-{scheme}')):.4f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
