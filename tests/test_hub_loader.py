"""softfp8.from_pretrained on full-precision checkpoints: quantized while loading, exactly as
quantize_model quantizes the model in memory; the skeleton, tied weights, shards, devices,
arguments, errors, and the memory bound."""
import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import diagonal
from hub_support import ARCHS, linear_names, tiny_model, write_dense
from torch import nn

import softfp8
from softfp8 import Format
from softfp8.hub import CheckpointError, Layout

PROMPT = torch.tensor([[3, 17, 42, 99, 7, 120, 64, 5]])
GEN = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)


def load(folder, fmt, **kw):
    return softfp8.from_pretrained(folder, fmt, backend="torch", **kw)


def converted_in_memory(model, fmt, **kw):
    model = copy.deepcopy(model)
    softfp8.quantize_model(model, fmt, backend="torch", progress=False, **kw)
    return model


def assert_bit_identical(a: nn.Module, b: nn.Module):
    """Same names, dtypes, shapes and bytes in every parameter and buffer, and the same logits."""
    sa = dict(a.named_parameters()) | dict(a.named_buffers())
    sb = dict(b.named_parameters()) | dict(b.named_buffers())
    assert sa.keys() == sb.keys()
    for key in sa:
        x, y = sa[key], sb[key]
        assert x.dtype == y.dtype and x.shape == y.shape, key
        assert torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)), key
    with torch.no_grad():
        assert torch.equal(a(PROMPT).logits, b(PROMPT).logits)


@pytest.mark.parametrize("fmt, arch", diagonal(Format, ARCHS))
def test_quantized_while_loading_equals_quantize_model(arch, fmt, tmp_path):
    model = tiny_model(arch)
    folder = write_dense(model, tmp_path / "m")
    q = load(folder, fmt)
    assert_bit_identical(converted_in_memory(model, fmt), q)
    assert all(isinstance(q.get_submodule(n), softfp8.Linear) for n in linear_names(model))
    report = q.softfp8_load_report
    assert report.layout is Layout.DENSE and report.fmt is fmt and not report.packed


def test_generate_matches_the_model_converted_in_memory(tmp_path):
    model = tiny_model("qwen2")
    folder = write_dense(model, tmp_path / "m")
    for fmt in ("e4m3", "nvfp4"):
        assert torch.equal(converted_in_memory(model, fmt).generate(PROMPT, **GEN),
                           load(folder, fmt).generate(PROMPT, **GEN))


def test_buffers_are_the_ones_transformers_makes(tmp_path):
    # The rotary tables are non-persistent buffers: not in the file, computed by the model's
    # own constructor (on the host, real, never meta).
    model = tiny_model("llama")
    q = load(write_dense(model, tmp_path / "m"), "e4m3")
    buffers = dict(model.named_buffers())
    loaded = {k: v for k, v in q.named_buffers() if "rotary" in k}
    assert loaded and all(torch.equal(v, buffers[k]) for k, v in loaded.items())
    assert not any(t.is_meta for t in (*q.parameters(), *q.buffers()))


def test_tied_lm_head_stays_tied_when_skipped(tmp_path):
    model = tiny_model("gemma")
    assert model.config.tie_word_embeddings
    q = load(write_dense(model, tmp_path / "m"), "e4m3", skip="lm_head")
    assert type(q.lm_head) is nn.Linear
    assert q.lm_head.weight is q.model.embed_tokens.weight  # one Parameter, as transformers ties
    assert_bit_identical(converted_in_memory(model, "e4m3", skip="lm_head"), q)


def test_tied_lm_head_quantized_from_the_embedding(tmp_path):
    model = tiny_model("llama", tie=True)
    q = load(write_dense(model, tmp_path / "m"), "mxfp4")
    assert isinstance(q.lm_head, softfp8.Linear) and "lm_head" in q.softfp8_load_report.quantized
    assert torch.equal(q.lm_head.words, softfp8.quantize(model.lm_head.weight, "mxfp4").words)
    assert q.model.embed_tokens.weight.dtype == torch.float32  # the embedding itself stays
    assert_bit_identical(converted_in_memory(model, "mxfp4"), q)


def test_shards_load_the_same_as_one_file(tmp_path):
    model = tiny_model("mistral")
    one = load(write_dense(model, tmp_path / "one"), "nvfp4")
    many = write_dense(model, tmp_path / "many", shards=3)
    assert len(list(many.glob("*.safetensors"))) == 3
    assert_bit_identical(one, load(many, "nvfp4"))


def test_dtype_and_bf16_checkpoints(tmp_path):
    from transformers import AutoModelForCausalLM

    folder = write_dense(tiny_model("qwen2"), tmp_path / "m", dtype=torch.bfloat16)
    q = load(folder, "e4m3", dtype=torch.bfloat16)
    assert q.model.embed_tokens.weight.dtype == torch.bfloat16
    assert q.model.layers[0].self_attn.q_proj.bias.dtype == torch.bfloat16
    # against transformers' own load in bfloat16 (whose rotary table stays float32), converted
    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
    softfp8.quantize_model(ref, "e4m3", backend="torch", progress=False)
    assert_bit_identical(ref, q)
    with pytest.raises(TypeError, match=r"dtype: expected torch.float32, torch.float16 or "
                                        r"torch.bfloat16, got torch.int8"):
        load(folder, "e4m3", dtype=torch.int8)


def test_base_model_from_a_causal_lm_checkpoint(tmp_path):
    from transformers import AutoModel

    model = tiny_model("llama")
    q = load(write_dense(model, tmp_path / "m"), "e5m2", auto_class=AutoModel)
    ref = converted_in_memory(model.model, "e5m2")
    assert q.softfp8_load_report.ignored == ("lm_head.weight",)  # the head a base model lacks
    with torch.no_grad():
        assert torch.equal(q(PROMPT).last_hidden_state, ref(PROMPT).last_hidden_state)


def test_device_map_forms(tmp_path):
    folder = write_dense(tiny_model("llama"), tmp_path / "m")
    for device_map in (None, "cpu", {"": "cpu"}, {"model": "cpu", "lm_head": "cpu"}):
        q = load(folder, "e4m3", device_map=device_map)
        assert {t.device.type for t in (*q.parameters(), *q.buffers())} == {"cpu"}
    with pytest.raises(ValueError, match=r"device_map: maps modules to \['cpu', 'meta'\]; "
                                         r"supported: one device"):
        load(folder, "e4m3", device_map={"model": "cpu", "lm_head": "meta"})
    with pytest.raises(ValueError, match=r"device_map: 'gpu0' is not a device"):
        load(folder, "e4m3", device_map="gpu0")


# -- arguments and errors -----------------------------------------------------------------------

def test_fmt_none_on_a_full_precision_checkpoint(tmp_path):
    folder = write_dense(tiny_model("llama"), tmp_path / "m")
    with pytest.raises(ValueError, match=r"fmt: None, but .* holds a full-precision checkpoint"):
        softfp8.from_pretrained(folder)
    with pytest.raises(ValueError, match=r"fmt='e3m4' is not a softfp8 format"):
        softfp8.from_pretrained(folder, "e3m4")


def test_skip_names_that_match_nothing(tmp_path):
    folder = write_dense(tiny_model("llama"), tmp_path / "m")
    with pytest.raises(ValueError, match=r"skip: 'lm_haed' matches no linear of the model"):
        load(folder, "e4m3", skip=["lm_head", "lm_haed"])
    q = load(folder, "e4m3", skip=["*.mlp.*"])
    assert all(type(m) is nn.Linear for n, m in q.named_modules() if ".mlp." in n
               and isinstance(m, nn.Linear))


def test_not_a_folder_and_no_network(tmp_path, monkeypatch):
    import huggingface_hub

    def offline(*args, **kwargs):
        raise OSError("no network")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(ValueError, match=r"'someone/model' is not a local folder and could not "
                                         r"be downloaded from the Hub \(OSError: no network\)"):
        softfp8.from_pretrained("someone/model", "e4m3")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"is a file; expected a model folder"):
        softfp8.from_pretrained(tmp_path / "file", "e4m3")


def test_hub_id_goes_to_snapshot_download(tmp_path, monkeypatch):
    import huggingface_hub

    folder = write_dense(tiny_model("llama"), tmp_path / "m")
    calls = []

    def download(repo_id, **kwargs):
        calls.append((repo_id, kwargs.get("revision")))
        return str(folder)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    q = softfp8.from_pretrained("someone/model", "e4m3", revision="abc", backend="torch")
    assert calls == [("someone/model", "abc")] and isinstance(q.lm_head, softfp8.Linear)


def test_missing_and_unexpected_tensors(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = write_dense(tiny_model("llama"), tmp_path / "m")
    path = folder / "model.safetensors"
    sd = load_file(str(path))
    norm = sd.pop("model.layers.1.input_layernorm.weight")
    save_file(sd, str(path))
    with pytest.raises(CheckpointError, match=r"no tensor for model.layers.1.input_layernorm"):
        load(folder, "e4m3")
    sd["model.layers.1.input_layernorm.weight"] = norm
    sd["model.layers.0.mlp.extra.weight"] = torch.zeros(2)
    sd.pop("model.layers.0.mlp.up_proj.weight")
    save_file(sd, str(path))
    with pytest.raises(CheckpointError) as err:
        load(folder, "e4m3")
    msg = str(err.value)
    assert "linear model.layers.0.mlp.up_proj: missing ['weight']" in msg
    assert "no place for: model.layers.0.mlp.extra.weight (model.safetensors, F32)" in msg


def test_wrong_shapes_say_file_tensor_found_expected(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = write_dense(tiny_model("llama"), tmp_path / "m")
    path = folder / "model.safetensors"
    sd = load_file(str(path))
    key = "model.layers.0.mlp.up_proj.weight"
    sd[key] = sd[key][:, :32].clone()
    save_file(sd, str(path))
    with pytest.raises(CheckpointError, match=r"model.safetensors: tensor model.layers.0.mlp."
                                              r"up_proj.weight: found torch.float32 of shape "
                                              r"\(96, 32\); expected .* of shape \(96, 64\)"):
        load(folder, "e4m3")


def test_folder_without_safetensors(tmp_path):
    model = tiny_model("llama")
    model.config.save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match=r"no model.safetensors or model.safetensors.index"):
        load(tmp_path, "e4m3")


# -- memory ---------------------------------------------------------------------------------

MEMORY_SCRIPT = textwrap.dedent("""
    import json, resource, sys, torch
    import transformers, softfp8
    from transformers.models.llama import modeling_llama  # imports done before the baseline
    from softfp8.convert import model_bytes

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    base = peak()
    model = softfp8.from_pretrained(sys.argv[1], sys.argv[2], backend="torch")
    print(json.dumps({"base": base, "peak": peak(), "model": model_bytes(model)}))
""")


@pytest.mark.slow
def test_peak_host_memory_is_the_packed_model_plus_one_shard(tmp_path):
    # A float32 checkpoint of ~130 MiB in 8 shards, loaded as e4m3 (~32 MiB): the process's
    # peak resident memory may grow by the packed model + the largest shard + two of the
    # largest weight in float32 (one read, one chunk's quantize temporaries) + 24 MiB of slack,
    # never by the checkpoint. MALLOC_MMAP_THRESHOLD_ fixes glibc's threshold for returning
    # large freed blocks to the system (it otherwise rises after the first free, and freed
    # blocks stay resident), so that resident memory follows the memory in use.
    model = tiny_model("llama", hidden=512, inter=2048, layers=8, kv_heads=4)
    folder = write_dense(model, tmp_path / "m", shards=8)
    del model
    shards = [p.stat().st_size for p in folder.glob("*.safetensors")]
    out = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, str(folder), "e4m3"],
                         capture_output=True, text=True, check=True,
                         env=dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072",
                                  PYTHONPATH=str(Path(softfp8.__file__).parents[1])))
    r = json.loads(out.stdout.strip().splitlines()[-1])
    grew = r["peak"] - r["base"]
    bound = r["model"] + max(shards) + 2 * (2048 * 512 * 4) + 24 * 2**20
    assert bound < 0.7 * sum(shards)  # the bound catches a load that keeps what it read
    assert grew < bound, (grew / 2**20, bound / 2**20, sum(shards) / 2**20)
