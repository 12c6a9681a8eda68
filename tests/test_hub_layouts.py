"""softfp8.hub.layouts: every pre-quantized checkpoint layout, loaded code for code.

Each layout is written by its producer (compressed-tensors; transformers' fine-grained fp8 op) or
by a writer following it (fbgemm_fp8, ModelOpt: hub_support), then loaded with fmt=None: the
packed words hold the file's bytes, the scales are the file's, the logits match the producer's
own dequantized model within 1e-5 relative, and greedy generation gives the same tokens.
"""
import json
from pathlib import Path

import pytest
import torch
from conftest import rel_err
from hub_support import (compressed_tensors_reference, linear_names, nvfp4_tensors, tiny_model,
                         write_compressed_tensors, write_fbgemm_fp8, write_finegrained_fp8,
                         write_modelopt_nvfp4)
from safetensors.torch import load_file, save_file

import softfp8
from softfp8 import Format
from softfp8.hub import CheckpointError, Layout
from softfp8.quantize import unpack_codes

try:
    import compressed_tensors  # noqa: F401  the producer of its layouts, where it installs
    HAVE_CT = True
except ImportError:
    HAVE_CT = False
needs_ct = pytest.mark.skipif(not HAVE_CT, reason="needs compressed-tensors")
needs_b128 = pytest.mark.skipif(not hasattr(Format, "E4M3_B128"),
                                reason="needs the e4m3_b128 format")
PROMPT = torch.tensor([[3, 17, 42, 99, 7, 120, 64, 5]])


def load(folder, **kw):
    return softfp8.from_pretrained(folder, backend="torch", **kw)


def assert_same_model(ref, model):
    with torch.no_grad():
        y_ref, y = ref(PROMPT).logits, model(PROMPT).logits
    assert rel_err(y, y_ref) < 1e-5
    gen = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(ref.generate(PROMPT, **gen), model.generate(PROMPT, **gen))


def assert_codes_copied(model, folder, names, fmt, weight_key="weight"):
    """Each packed linear's words hold the checkpoint's code bytes, in order, nothing else."""
    sd = load_file(str(Path(folder) / "model.safetensors"))
    for name in names:
        lin = model.get_submodule(name)
        assert isinstance(lin, softfp8.Linear) and lin.fmt is fmt, name
        stored = sd[f"{name}.{weight_key}"].view(torch.uint8)
        n, k = lin.out_features, lin.in_features
        width = k if fmt in (Format.E4M3, "e4m3_b128") else k // 2
        words = lin.words.contiguous().view(torch.uint8)
        assert torch.equal(words[:, :width], stored), name
        assert not words[:, width:].any(), name  # padding is zero codes


# -- compressed-tensors, by compressed-tensors -----------------------------------------------

@needs_ct
@pytest.mark.parametrize("arch", ["llama", "qwen2", *(  # the others' names load as llama's do
    pytest.param(a, marks=pytest.mark.slow) for a in ("qwen3", "mistral", "gemma"))])
def test_ct_fp8_channel_every_arch(arch, tmp_path):
    model = tiny_model(arch)
    folder = write_compressed_tensors(model, tmp_path / "ct", "FP8_DYNAMIC")
    q = load(folder)
    names = linear_names(model)
    assert_codes_copied(q, folder, names, Format.E4M3)
    sd = load_file(str(folder / "model.safetensors"))
    for name in names:
        assert torch.equal(q.get_submodule(name).scales, sd[f"{name}.weight_scale"].reshape(-1))
    report = q.softfp8_load_report
    assert report.layout is Layout.CT_FP8 and set(report.packed) == set(names)
    assert "lm_head" in report.dense and type(q.lm_head) is torch.nn.Linear
    assert_same_model(compressed_tensors_reference(folder), q)


@needs_ct
def test_ct_fp8_tensor_scales_differ_per_projection_and_stay_exact(tmp_path):
    # A tensor scale becomes every row's scale; q, k and v, which a fused kernel would put in
    # one matrix, each keep their own scale (they load as separate layers), exactly.
    model = tiny_model("llama")
    folder = write_compressed_tensors(model, tmp_path / "ct", "FP8")
    q = load(folder)
    sd = load_file(str(folder / "model.safetensors"))
    attn = "model.layers.0.self_attn"
    scales = {p: sd[f"{attn}.{p}.weight_scale"] for p in ("q_proj", "k_proj", "v_proj")}
    assert all(s.shape == (1,) for s in scales.values())
    assert len({s.item() for s in scales.values()}) == 3
    for p, s in scales.items():
        lin = q.get_submodule(f"{attn}.{p}")
        assert torch.equal(lin.scales, s.expand(lin.out_features))
    assert_codes_copied(q, folder, linear_names(model), Format.E4M3)
    assert_same_model(compressed_tensors_reference(folder), q)


@needs_ct
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("preset,fmt", [("NVFP4A16", Format.NVFP4), ("MXFP4A16", Format.MXFP4)])
def test_ct_fp4(arch, preset, fmt, tmp_path):
    model = tiny_model(arch)
    folder = write_compressed_tensors(model, tmp_path / "ct", preset)
    q = load(folder)
    names = linear_names(model)
    assert_codes_copied(q, folder, names, fmt, "weight_packed")
    sd = load_file(str(folder / "model.safetensors"))
    for name in names:
        lin, stored = q.get_submodule(name), sd[f"{name}.weight_scale"].view(torch.uint8)
        assert torch.equal(lin.scales[:, : stored.shape[1]], stored)
        if fmt is Format.NVFP4:  # stored as the reciprocal
            g = sd[f"{name}.weight_global_scale"]
            assert lin.global_scale.item() == (1.0 / g).item()
    assert_same_model(compressed_tensors_reference(folder), q)


@needs_ct
@needs_b128
def test_ct_fp8_block(tmp_path):
    model = tiny_model("llama", hidden=128, inter=320)  # 320: a partial tile along both axes
    folder = write_compressed_tensors(model, tmp_path / "ct", "FP8_BLOCK")
    q = load(folder)
    names = linear_names(model)
    assert_codes_copied(q, folder, names, Format.E4M3_B128)
    sd = load_file(str(folder / "model.safetensors"))
    for name in names:
        assert torch.equal(q.get_submodule(name).scales, sd[f"{name}.weight_scale"].float())
    assert_same_model(compressed_tensors_reference(folder), q)


@needs_ct
def test_fp4_nibble_order_low_nibble_is_the_even_element(tmp_path):
    # Not assumed: a weight whose even and odd elements differ goes through compressed-tensors'
    # packer, and the loaded layer must decode element k to the value written at k.
    model = tiny_model("llama")
    name = "model.layers.0.mlp.down_proj"
    lin = model.get_submodule(name)
    row = torch.tensor([6.0, 0.5, -1.0, 4.0, 0.0, -6.0, 1.5, 3.0] * (lin.in_features // 8))
    with torch.no_grad():
        lin.weight.copy_(row.expand_as(lin.weight))
    for preset, fmt in (("NVFP4A16", Format.NVFP4), ("MXFP4A16", Format.MXFP4)):
        folder = write_compressed_tensors(model, tmp_path / preset, preset)
        stored = load_file(str(folder / "model.safetensors"))[f"{name}.weight_packed"]
        loaded = load(folder).get_submodule(name)
        codes = unpack_codes(loaded.words, fmt, loaded.in_features)
        assert torch.equal(codes[0, :8], torch.tensor([7, 1, 10, 6, 0, 15, 3, 5],
                                                      dtype=torch.uint8)), preset
        assert stored[0, 0].item() == 7 | (1 << 4)  # low nibble: element 0
        assert torch.equal(softfp8.dequantize(loaded.packed)[0, :8], row[:8]), preset


# -- layouts written by a writer following the producer ---------------------------------------

def test_fbgemm_fp8(tmp_path):
    model = tiny_model("qwen2")
    folder, ref = write_fbgemm_fp8(model, tmp_path / "fb")
    q = load(folder)
    assert q.softfp8_load_report.layout is Layout.FBGEMM_FP8
    assert_codes_copied(q, folder, linear_names(model), Format.E4M3)
    assert_same_model(ref, q)


def test_finegrained_fp8_per_tensor(tmp_path):
    model = tiny_model("mistral")
    folder, ref = write_finegrained_fp8(model, tmp_path / "fg", block=None)
    q = load(folder)
    assert q.softfp8_load_report.layout is Layout.HF_FP8
    assert_codes_copied(q, folder, linear_names(model), Format.E4M3)
    assert_same_model(ref, q)


@needs_b128
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_finegrained_fp8_block(arch, tmp_path):
    # whole tiles (k and v too): transformers' op leaves other shapes unquantized
    model = tiny_model(arch, hidden=128, inter=256, kv_heads=4)
    folder, ref = write_finegrained_fp8(model, tmp_path / "fg")
    q = load(folder)
    assert q.softfp8_load_report.layout is Layout.HF_FP8_BLOCK
    assert_codes_copied(q, folder, linear_names(model), Format.E4M3_B128)
    sd = load_file(str(folder / "model.safetensors"))
    for name in linear_names(model):
        assert torch.equal(q.get_submodule(name).scales, sd[f"{name}.weight_scale_inv"])
    assert_same_model(ref, q)


@pytest.mark.parametrize("block", [[128, 128], None], ids=["block", "tensor"])
def test_the_writers_fp8_dequantize_is_transformers_own(block):
    """`write_finegrained_fp8`'s fallback for transformers without `_dequantize_fp8_weight`
    gives that function's very bits (scales that differ per block, a partial block of rows)."""
    from types import SimpleNamespace

    import hub_support
    from transformers.integrations import finegrained_fp8 as hf

    if not hasattr(hf, "_dequantize_fp8_weight"):
        pytest.skip("this transformers has no _dequantize_fp8_weight to compare with")
    g = torch.Generator().manual_seed(3)
    w = torch.randn(384, 256, generator=g) * torch.rand(384, 1, generator=g) * 4
    config = SimpleNamespace(weight_block_size=block, scale_fmt="float")
    out = hf.Fp8Quantize(SimpleNamespace(quantization_config=config))._quantize_one("a.weight", w)
    codes, scale_inv = out["a.weight"], out["a.weight_scale_inv"]
    assert codes.dtype == torch.float8_e4m3fn and (block is None or scale_inv.shape == (3, 2))
    assert torch.equal(hub_support._dequantize_blocks(codes, scale_inv, block, torch.float32),
                       hf._dequantize_fp8_weight(codes, scale_inv, block, torch.float32))


@pytest.mark.parametrize("arch", ["llama", "gemma"])
def test_modelopt_nvfp4(arch, tmp_path):
    model = tiny_model(arch)
    folder, ref = write_modelopt_nvfp4(model, tmp_path / "mo")
    q = load(folder)
    report = q.softfp8_load_report
    assert report.layout is Layout.MODELOPT_NVFP4
    assert any(k.endswith("input_scale") for k in report.ignored)
    assert_codes_copied(q, folder, linear_names(model), Format.NVFP4)
    sd = load_file(str(folder / "model.safetensors"))
    for name in linear_names(model):
        assert torch.equal(q.get_submodule(name).global_scale, sd[f"{name}.weight_scale_2"])
    assert_same_model(ref, q)


@needs_ct
def test_modelopt_writer_agrees_with_compressed_tensors_converter():
    # The writer's layout (nibble order, weight_scale_2 a multiplier) as compressed-tensors'
    # ModelOpt converter reads it: converted and decompressed by compressed-tensors, the
    # weight is the writer's dequantized one.
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.entrypoints.convert.converters.modelopt_nvfp4 import (
        ModelOptNvfp4Converter)
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    torch.manual_seed(1)
    w = torch.randn(24, 64)
    packed, scale, scale_2 = nvfp4_tensors(w)
    tensors = ModelOptNvfp4Converter(targets=["re:.*proj$"]).process(
        {"a.proj.weight": packed, "a.proj.weight_scale": scale, "a.proj.weight_scale_2": scale_2})
    args = QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16)
    theirs = dequantize(unpack_fp4_from_uint8(tensors["a.proj.weight_packed"], 24, 64,
                                              dtype=torch.float32),
                        tensors["a.proj.weight_scale"].float(), args=args,
                        global_scale=tensors["a.proj.weight_global_scale"], dtype=torch.float32)
    ours = softfp8.dequantize(softfp8.hub.repack.convert(
        softfp8.hub.layouts.detect(Path("."), {"quantization_config": {
            "quant_method": "modelopt", "quant_algo": "NVFP4"}}),
        "a.proj", {"weight": packed, "weight_scale": scale, "weight_scale_2": scale_2},
        (24, 64), {}, torch.device("cpu")))
    assert rel_err(ours, theirs) < 1e-6 and rel_err(ours, w) < 0.15


# -- skip and the checkpoint's own unquantized layers -----------------------------------------

@needs_ct
def test_skipping_a_packed_layer_decodes_it_exactly(tmp_path):
    model = tiny_model("llama")
    folder = write_compressed_tensors(model, tmp_path / "ct", "FP8_DYNAMIC")
    packed = load(folder)
    q = load(folder, skip="model.layers.1.mlp.*")
    for p in ("gate_proj", "up_proj", "down_proj"):
        name = f"model.layers.1.mlp.{p}"
        lin = q.get_submodule(name)
        assert type(lin) is torch.nn.Linear and name in q.softfp8_load_report.dense
        assert torch.equal(lin.weight, softfp8.dequantize(packed.get_submodule(name).packed))


@needs_ct
def test_fmt_quantizes_what_the_checkpoint_left_unquantized(tmp_path):
    model = tiny_model("llama")
    folder = write_compressed_tensors(model, tmp_path / "ct", "FP8_DYNAMIC")
    q = load(folder, fmt="nvfp4")
    report = q.softfp8_load_report
    assert report.quantized == ("lm_head",) and q.lm_head.fmt is Format.NVFP4
    assert all(q.get_submodule(n).fmt is Format.E4M3 for n in report.packed)  # not re-encoded


# -- errors ------------------------------------------------------------------------------------

def edit_config(folder: Path, **changes):
    doc = json.loads((folder / "config.json").read_text())
    doc["quantization_config"].update(changes)
    (folder / "config.json").write_text(json.dumps(doc))


def edit_tensors(folder: Path, change):
    path = folder / "model.safetensors"
    sd = load_file(str(path))
    change(sd)
    save_file(sd, str(path), metadata={"format": "pt"})


@pytest.fixture(scope="module")
def fbgemm_folder(tmp_path_factory):
    return write_fbgemm_fp8(tiny_model("llama"), tmp_path_factory.mktemp("fb") / "m")[0]


def copy_of(folder: Path, tmp_path: Path) -> Path:
    import shutil
    return Path(shutil.copytree(folder, tmp_path / "copy"))


@pytest.mark.parametrize("change,match", [
    (dict(quant_method="bitsandbytes"), r"quant_method is 'bitsandbytes'; supported: "),
    (dict(quant_method="fp8", weight_block_size=[64, 64]),
     r"weight_block_size is \[64, 64\]; supported: \[128, 128\] or none"),
])
def test_unknown_settings_name_file_found_and_supported(fbgemm_folder, tmp_path, change, match):
    folder = copy_of(fbgemm_folder, tmp_path)
    edit_config(folder, **change)
    with pytest.raises(CheckpointError, match=match) as err:
        load(folder)
    assert str(folder / "config.json") in str(err.value)


@needs_ct
@pytest.mark.parametrize("group_change,match", [
    ({"weights": {"type": "int", "num_bits": 8, "strategy": "channel", "symmetric": True}},
     r"weights type='int', num_bits=8, strategy='channel'.*; supported: compressed-tensors"),
    ({"weights": {"type": "float", "num_bits": 8, "strategy": "block",
                  "block_structure": [64, 64], "symmetric": True}},
     r"strategy='block', .*block_structure=\[64, 64\]"),
    ({"weights": {"type": "float", "num_bits": 8, "strategy": "channel", "symmetric": False}},
     r"symmetric is false; supported: symmetric only"),
])
def test_compressed_tensors_unsupported_scheme(tmp_path, group_change, match):
    folder = write_compressed_tensors(tiny_model("llama"), tmp_path / "ct", "FP8_DYNAMIC")
    doc = json.loads((folder / "config.json").read_text())
    doc["quantization_config"]["config_groups"]["group_0"].update(group_change)
    (folder / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match=match):
        load(folder)


@needs_ct
@pytest.mark.parametrize("changes,match", [
    (dict(quantization_status="frozen"), r"quantization_status is 'frozen'; supported: "),
    (dict(transform_config={"config_groups": {"u": {"type": "hadamard"}}}),
     r"transform_config is set .*supported: none"),
])
def test_compressed_tensors_unsupported_state(tmp_path, changes, match):
    folder = write_compressed_tensors(tiny_model("llama"), tmp_path / "ct", "FP8_DYNAMIC")
    edit_config(folder, **changes)
    with pytest.raises(CheckpointError, match=match):
        load(folder)


def test_mis_shaped_scale_names_file_tensor_found_and_supported(fbgemm_folder, tmp_path):
    folder = copy_of(fbgemm_folder, tmp_path)
    key = "model.layers.0.self_attn.o_proj.weight_scale"
    edit_tensors(folder, lambda sd: sd.update({key: sd[key].reshape(-1)}))
    with pytest.raises(CheckpointError) as err:
        load(folder)
    msg = str(err.value)
    assert str(folder / "model.safetensors") in msg and key in msg
    assert "found torch.float32 of shape (64,)" in msg and "supported: torch.float32" in msg
    assert "(64, 1)" in msg


def test_missing_scale_is_an_error(fbgemm_folder, tmp_path):
    folder = copy_of(fbgemm_folder, tmp_path)
    key = "model.layers.1.mlp.up_proj.weight_scale"
    edit_tensors(folder, lambda sd: sd.pop(key))
    with pytest.raises(CheckpointError, match=r"model.layers.1.mlp.up_proj: missing "
                                              r"\['weight_scale'\] \(found \['weight'\]\)"):
        load(folder)


def test_full_precision_weight_where_the_config_says_quantized(fbgemm_folder, tmp_path):
    folder = copy_of(fbgemm_folder, tmp_path)
    key = "model.layers.0.mlp.gate_proj.weight"
    edit_tensors(folder, lambda sd: sd.update({key: sd[key].float()}))
    with pytest.raises(CheckpointError, match=rf"tensor {key}: found torch.float32 of shape "
                                              r"\(96, 64\); supported: torch.float8_e4m3fn"):
        load(folder)


def test_quantized_weight_where_the_config_says_unquantized(fbgemm_folder, tmp_path):
    folder = copy_of(fbgemm_folder, tmp_path)
    edit_config(folder, modules_to_not_convert=["model.layers.0.mlp"])
    with pytest.raises(CheckpointError, match=r"layers.0.mlp.\w+_proj.weight: found "
                                              r"torch.float8_e4m3fn .*"
                                              r"leaves this layer unquantized"):
        load(folder)


def test_modelopt_other_algorithms_are_refused(tmp_path):
    folder, _ = write_modelopt_nvfp4(tiny_model("llama"), tmp_path / "mo")
    doc = json.loads((folder / "hf_quant_config.json").read_text())
    doc["quantization"]["quant_algo"] = "FP8"
    (folder / "hf_quant_config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match=r"hf_quant_config.json: quant_algo is 'FP8'; "
                                              r"supported: 'NVFP4'"):
        load(folder)


@pytest.mark.skipif(hasattr(Format, "E4M3_B128"), reason="only without the e4m3_b128 format")
def test_block_checkpoint_without_the_block_format_says_so(tmp_path):
    folder, _ = write_finegrained_fp8(tiny_model("llama", hidden=128, inter=256, kv_heads=4),
                                      tmp_path / "fg")
    with pytest.raises(CheckpointError, match=r"fp8 block checkpoint needs softfp8's e4m3_b128"):
        load(folder)


def test_modules_to_not_convert_stay_in_full_precision(tmp_path):
    model = tiny_model("llama")
    folder, _ = write_fbgemm_fp8(model, tmp_path / "fb")
    name = "model.layers.1.mlp.down_proj"
    weight = model.get_submodule(name).weight.detach().clone()
    edit_config(folder, modules_to_not_convert=[name])
    edit_tensors(folder, lambda sd: (sd.pop(f"{name}.weight_scale"),
                                     sd.update({f"{name}.weight": weight})))
    q = load(folder)
    assert type(q.get_submodule(name)) is torch.nn.Linear
    assert torch.equal(q.get_submodule(name).weight, weight)
    assert name in q.softfp8_load_report.dense
    assert isinstance(q.get_submodule("model.layers.1.mlp.up_proj"), softfp8.Linear)
