"""softfp8 as a transformers quantizer (softfp8/hub/hf_quantizer.py): tiny Llama and Qwen2 models
built from configs (nothing downloaded), converted through `SoftFP8Config`, saved with
`save_pretrained` and loaded back through transformers, bit for bit; and what a damaged or foreign
folder does."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch
from conftest import diagonal
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import softfp8
from softfp8 import Format

transformers = pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.quantizers import auto as hf_auto  # noqa: E402

from softfp8.hub import hf_quantizer  # noqa: E402
from softfp8.hub.hf_quantizer import SoftFP8Config  # noqa: E402

GREEDY = dict(do_sample=False, pad_token_id=0, max_new_tokens=5, min_new_tokens=5)
# Small, and odd where it matters: hidden 80 and intermediate 200 are no multiple of FP4's
# 32-code row alignment, so every layer carries padding; Qwen2's q/k/v have biases.
SIZES = dict(hidden_size=80, intermediate_size=200, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, max_position_embeddings=64)
ARCHS = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM")}
LINEARS_PER_LAYER = 7


def tiny(arch: str, tie: bool = False, seed: int = 0):
    config_cls, model_cls = (getattr(transformers, name) for name in ARCHS[arch])
    torch.manual_seed(seed)
    return model_cls(config_cls(**SIZES, tie_word_embeddings=tie)).eval()


def load(path, **kwargs):
    return AutoModelForCausalLM.from_pretrained(str(path), **kwargs).eval()


def set_backend(model, backend="torch"):
    for module in model.modules():
        if isinstance(module, softfp8.Linear):
            module.backend = backend


def same_state(a: dict, b: dict) -> bool:
    """Same keys, and every tensor the same dtype, shape and bytes."""
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
        and torch.equal(a[k].reshape(-1).view(torch.uint8), b[k].reshape(-1).view(torch.uint8))
        for k in a)


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, SIZES["vocab_size"], (2, 6), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def fp_folders(tmp_path_factory):
    """Each architecture's full-precision model, and the folder it is saved in."""
    out = {}
    for arch in ARCHS:
        model = tiny(arch)
        path = tmp_path_factory.mktemp(f"{arch}-fp32")
        model.save_pretrained(path)
        out[arch] = (model, path)
    return out


# -- the round trip ---------------------------------------------------------------------------

@pytest.mark.parametrize("arch, fmt", diagonal(ARCHS, Format))
def test_quantize_on_load_save_and_reload_bit_exact(arch, fmt, fp_folders, ids, tmp_path):
    original, fp_path = fp_folders[arch]
    q = load(fp_path, quantization_config=SoftFP8Config(fmt=fmt, backend="torch"))
    layers = {n: m for n, m in q.named_modules() if isinstance(m, softfp8.Linear)}
    assert len(layers) == SIZES["num_hidden_layers"] * LINEARS_PER_LAYER
    assert type(q.lm_head) is torch.nn.Linear  # transformers' convention: the output layer stays
    # Each layer is softfp8.quantize of the saved weight, bit for bit, with the saved bias.
    name = "model.layers.1.self_attn.q_proj"
    packed = softfp8.quantize(original.get_submodule(name).weight, fmt)
    layer = q.get_submodule(name)
    assert layer.fmt is Format(fmt) and layer.backend is softfp8.Backend.TORCH
    for buffer in ("words", "scales", "global_scale"):
        mine, ref = getattr(layer, buffer), getattr(packed, buffer)
        assert (mine is None and ref is None) or torch.equal(mine, ref)
    if arch == "qwen2":
        assert torch.equal(layer.bias, original.get_submodule(name).bias)

    q.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    assert saved["quant_method"] == "softfp8" and saved["fmt"] == fmt
    assert saved["modules_to_not_convert"] == ["lm_head"] and "softfp8" in saved["requires"]
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as handle:
        assert handle.metadata()["quant_method"] == "softfp8"
        assert json.loads(handle.metadata()["softfp8_layers"])[name] == {
            "fmt": fmt, "shape": [SIZES["hidden_size"]] * 2}
        keys = set(handle.keys())
    assert {f"{name}.words", f"{name}._extra_state", f"{name}.weight"} <= keys

    again = load(tmp_path)
    set_backend(again)
    assert type(again.get_submodule(name)) is softfp8.Linear
    assert type(again.lm_head) is torch.nn.Linear
    # words, scales, global scales, biases and tags, bit for bit
    assert same_state(again.state_dict(), q.state_dict())
    with torch.no_grad():
        logits = q(ids).logits
        assert torch.equal(again(ids).logits, logits)
        assert not torch.equal(logits, original(ids).logits)  # it is the quantized model
    assert torch.equal(again.generate(ids, **GREEDY), q.generate(ids, **GREEDY))


def test_quantize_model_output_saves_and_reloads_through_both_entry_points(ids, tmp_path):
    """A model converted by hand (quantize_model, mixed formats, e5m2 with row scales, a tied
    lm_head converted too) saves as a sharded softfp8 checkpoint that the architecture's own class
    and the Auto class load back bit for bit."""
    model = tiny("qwen2", tie=True)
    softfp8.quantize_model(model, "e4m3", skip=["*.mlp.*"], progress=False)
    softfp8.quantize_model(model, "e5m2", skip=["down_proj"], row_scale=True, progress=False)
    softfp8.quantize_model(model, "mxfp4", progress=False)
    set_backend(model)
    assert type(model.lm_head) is softfp8.Linear
    model.save_pretrained(tmp_path, max_shard_size="30KB")  # a layer's tensors across shards
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 2
    saved = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    assert saved["fmt"] == "e4m3" and saved["modules_to_not_convert"] == []
    assert saved["modules_with_own_format"]["model.layers.0.mlp.up_proj"] == {
        "fmt": "e5m2", "row_scale": True}
    assert saved["modules_with_own_format"]["model.layers.1.mlp.down_proj"]["fmt"] == "mxfp4"
    with torch.no_grad():
        want = model(ids).logits
    for entry in (AutoModelForCausalLM, transformers.Qwen2ForCausalLM):
        again = entry.from_pretrained(str(tmp_path)).eval()
        set_backend(again)
        assert again.model.layers[0].mlp.up_proj.scales is not None
        assert same_state(again.state_dict(), model.state_dict())
        with torch.no_grad():
            assert torch.equal(again(ids).logits, want)
    # As after quantize_model, a dtype cast is allowed and leaves the packed tensors alone.
    packed = {k: v.clone() for k, v in again.state_dict().items()
              if k.endswith(("words", "scales"))}
    again.half()
    assert same_state({k: v for k, v in again.state_dict().items() if k in packed}, packed)
    assert again.model.layers[0].self_attn.q_proj.bias.dtype == torch.float16
    model.half()


# -- folders transformers must not load as random weights -------------------------------------

@pytest.fixture(scope="module")
def saved_e4m3(tmp_path_factory):
    model = tiny("llama")
    softfp8.quantize_model(model, "e4m3", skip="lm_head", progress=False)
    path = tmp_path_factory.mktemp("llama-e4m3")
    model.save_pretrained(path)
    return model, path


def test_without_softfp8_registered_transformers_refuses_the_folder(saved_e4m3, monkeypatch):
    _, path = saved_e4m3
    # What a process that never imported softfp8 has: no "softfp8" in transformers' registries.
    monkeypatch.delitem(hf_auto.AUTO_QUANTIZER_MAPPING, "softfp8")
    monkeypatch.delitem(hf_auto.AUTO_QUANTIZATION_CONFIG_MAPPING, "softfp8")
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        load(path)


def _rewrite(src, dst, *, config=None, tensors=None):
    """A copy of folder `src` in `dst` with config.json's quantization_config and the tensors
    changed by the given functions."""
    dst.mkdir()
    for item in src.iterdir():
        (dst / item.name).write_bytes(item.read_bytes())
    if config is not None:
        data = json.loads((dst / "config.json").read_text())
        config(data["quantization_config"])
        (dst / "config.json").write_text(json.dumps(data))
    if tensors is not None:
        sd = load_file(str(dst / "model.safetensors"))
        tensors(sd)
        save_file(sd, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


LAYER = "model.layers.0.self_attn.o_proj"


@pytest.mark.parametrize("config, tensors, error, match", [
    # a config that says e5m2 + row scales: the same shapes and dtypes as e4m3, so only the tags
    # tell; before the tags, this loaded "all keys matched" with 99.9% wrong weights
    (lambda c: c.update(fmt="e5m2", row_scale=True), None, ValueError,
     r"weight is e4m3 \((\d+), (\d+)\) but this Linear is e5m2 \(\1, \2\)"),
    (None, lambda sd: sd.pop(f"{LAYER}.scales"), ValueError,
     rf"{LAYER}.scales: missing from the checkpoint \(model.safetensors\)"),
    (None, lambda sd: sd.__setitem__(f"{LAYER}.scales", sd[f"{LAYER}.scales"].half()),
     ValueError, rf"model.safetensors: tensor {LAYER}.scales: found F16 of shape \(80,\)"),
    (None, lambda sd: sd.__setitem__(f"{LAYER}.words", sd[f"{LAYER}.words"][:, :-1].clone()),
     ValueError, r"words: found I32 of shape \(80, 19\).*expects I32 of shape \(80, 20\)"),
    (None, lambda sd: sd.pop(f"{LAYER}._extra_state"), ValueError, "_extra_state: missing"),
    (None, lambda sd: sd.__setitem__(f"{LAYER}.global_scale", torch.ones(())), ValueError,
     r"global_scale'\] are not part of"),
    (lambda c: c.update(modules_to_not_convert=["lm_head", "model.nothing"]), None, ValueError,
     r"names \['model.nothing'\], which LlamaForCausalLM has no nn.Linear of"),
    (lambda c: c.update(fmt="int4"), None, ValueError, "fmt='int4' is not a softfp8 format"),
    (lambda c: c.update(block_size=64), None, ValueError, r"unknown fields \['block_size'\]"),
])
def test_a_damaged_folder_is_refused_naming_what_and_where(saved_e4m3, tmp_path, config, tensors,
                                                           error, match):
    _, path = saved_e4m3
    bad = _rewrite(path, tmp_path / "bad", config=config, tensors=tensors)
    with pytest.raises(error, match=match):
        load(bad)


# -- the config and the registration ----------------------------------------------------------

def test_config_round_trips_and_refuses_bad_values():
    config = SoftFP8Config(fmt="NVFP4", skip="lm_head", backend="torch", e2m1="select")
    data = config.to_dict()
    assert data["fmt"] == "nvfp4" and data["skip"] == ["lm_head"] and data["backend"] == "torch"
    assert SoftFP8Config.from_dict(json.loads(json.dumps(data))).to_dict() == data
    assert softfp8.SoftFP8Config is SoftFP8Config
    with pytest.raises(TypeError, match="predicate can't be written"):
        SoftFP8Config(skip=lambda name, module: True)
    with pytest.raises(TypeError, match="skip: expected"):
        SoftFP8Config(skip=3)
    with pytest.raises(ValueError, match="row_scale: only applies to e5m2"):
        SoftFP8Config(fmt="e4m3", row_scale=True)
    with pytest.raises(ValueError, match="backend"):
        SoftFP8Config(backend="cuda-magic")
    with pytest.raises(ValueError, match="quant_method='fp8'"):
        SoftFP8Config.from_dict({"quant_method": "fp8", "fmt": "e4m3"})


def test_registered_with_transformers_and_idempotent():
    assert hf_auto.AUTO_QUANTIZATION_CONFIG_MAPPING["softfp8"] is SoftFP8Config
    assert hf_auto.AUTO_QUANTIZER_MAPPING["softfp8"] is hf_quantizer.SoftFP8HfQuantizer
    quantizer = hf_quantizer.SoftFP8HfQuantizer(SoftFP8Config("e4m3"), pre_quantized=True)
    # generate() compiles a softfp8 model with a static cache as it would a plain one
    assert quantizer.is_compileable and quantizer.is_serializable() and not quantizer.is_trainable
    hf_quantizer.register()  # again: nothing changes, nothing raises


def test_import_softfp8_leaves_transformers_unimported_until_it_loads_its_registry():
    code = ("import sys, softfp8\n"
            "assert 'transformers' not in sys.modules, 'import softfp8 imported transformers'\n"
            "from transformers.quantizers import auto\n"
            "print(auto.AUTO_QUANTIZER_MAPPING['softfp8'].__module__)\n")
    root = str(pathlib.Path(__file__).resolve().parents[1])  # this checkout, not an installed one
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get(
        "PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "softfp8.hub.hf_quantizer"


def test_transformers_outside_the_tested_range():
    with pytest.raises(ImportError, match=r"needs transformers>=5.17, found 4.57.1"):
        hf_quantizer.check_transformers_version("4.57.1")
    with pytest.warns(UserWarning, match="tested with transformers 5.17 to 5.25; found 5.31.0"):
        hf_quantizer.check_transformers_version("5.31.0")
    hf_quantizer.check_transformers_version("5.17.0")  # the range's ends: silent
    hf_quantizer.check_transformers_version("5.25.2")


# -- softfp8.save_pretrained and the loader for softfp8's own checkpoints -----------------------

def test_save_pretrained_adds_the_model_card_line_and_loads_back(saved_e4m3, ids, tmp_path):
    model, _ = saved_e4m3
    (tmp_path / "README.md").write_text("# my model\n")
    softfp8.save_pretrained(model, tmp_path)
    softfp8.save_pretrained(model, tmp_path)  # again: the line is there once
    card = (tmp_path / "README.md").read_text()
    assert card.startswith("# my model\n") and card.count("pip install softfp8") == 1
    fresh = tmp_path / "fresh"
    softfp8.save_pretrained(model, fresh)
    assert (fresh / "README.md").read_text().startswith("---\nlibrary_name: transformers\n")
    again = hf_quantizer.load_pretrained(fresh, backend="torch", e2m1="select")
    layer = again.model.layers[0].mlp.up_proj
    assert (layer.backend, layer.e2m1) == (softfp8.Backend.TORCH, softfp8.E2M1Decode.SELECT)
    assert same_state(again.state_dict(), model.state_dict())
    with pytest.raises(TypeError, match="expected a transformers PreTrainedModel, got Sequential"):
        softfp8.save_pretrained(torch.nn.Sequential(softfp8.Linear(16, 8, "e4m3")), tmp_path)
    with pytest.raises(ValueError, match="has no softfp8.Linear"):
        softfp8.save_pretrained(tiny("llama"), tmp_path)


def test_softfp8_from_pretrained_reads_softfp8_checkpoints(saved_e4m3, ids):
    """softfp8.from_pretrained, the one entry point, hands a softfp8 checkpoint to transformers'
    loader through softfp8's quantizer: bit for bit; fmt or skip for it is an error."""
    model, path = saved_e4m3
    again = softfp8.from_pretrained(str(path), backend="torch")
    assert again.model.layers[0].mlp.up_proj.backend is softfp8.Backend.TORCH
    assert same_state(again.state_dict(), model.state_dict())
    set_backend(model)
    with torch.no_grad():
        assert torch.equal(again(ids).logits, model(ids).logits)
    with pytest.raises(ValueError, match="keeps the formats it was saved in"):
        softfp8.from_pretrained(str(path), "nvfp4")


def test_load_pretrained_refuses_a_checkpoint_that_is_not_softfp8(fp_folders):
    _, fp_path = fp_folders["llama"]
    with pytest.raises(ValueError, match="not a softfp8 checkpoint.*quant_method None"):
        hf_quantizer.load_pretrained(fp_path)


def test_bf16_model_round_trips_with_fp32_scales(fp_folders, tmp_path, ids):
    # (Loaded with dtype=bfloat16, not cast with .to(): a cast also rounds the rotary table,
    # which transformers keeps in fp32, so the logits would differ for a reason not softfp8's.)
    _, fp_path = fp_folders["qwen2"]
    model = load(fp_path, dtype=torch.bfloat16,
                 quantization_config=SoftFP8Config(fmt="nvfp4", backend="torch"))
    model.save_pretrained(tmp_path)
    again = load(tmp_path, dtype=torch.bfloat16)
    set_backend(again)
    layer = again.model.layers[0].self_attn.k_proj
    assert layer.global_scale.dtype == torch.float32 and layer.bias.dtype == torch.bfloat16
    assert same_state(again.state_dict(), model.state_dict())
    with torch.no_grad():
        assert torch.equal(again(ids).logits, model(ids).logits)


# -- on a GPU (run there with -m gpu): device_map placement, tags read from device tensors -------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("fmt", list(Format))
def test_gpu_quantize_on_load_and_reload_with_device_map(fmt, fp_folders, ids, tmp_path):
    _, fp_path = fp_folders["llama"]
    q = load(fp_path, quantization_config=SoftFP8Config(fmt=fmt), device_map="cuda",
             dtype=torch.float16)
    q.save_pretrained(tmp_path)
    again = load(tmp_path, device_map="cuda", dtype=torch.float16)
    layer = again.model.layers[0].mlp.down_proj
    assert isinstance(layer, softfp8.Linear) and layer.words.is_cuda
    # unscaled E5M2 has no scales; every other format's come back on the GPU too
    assert (layer.scales is None) == (fmt is Format.E5M2)
    assert layer.scales is None or layer.scales.is_cuda
    assert same_state({k: v.cpu() for k, v in again.state_dict().items()},
                      {k: v.cpu() for k, v in q.state_dict().items()})
    cuda_ids = ids.cuda()
    with torch.no_grad():  # the same kernels on the same packed weights: the same logits
        assert torch.equal(again(cuda_ids).logits, q(cuda_ids).logits)
    assert torch.equal(again.generate(cuda_ids, **GREEDY), q.generate(cuda_ids, **GREEDY))
