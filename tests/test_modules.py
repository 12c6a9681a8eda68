"""softfp8.Linear and quantize_model: conversion, state_dict/safetensors, .to, repr, memory."""
import gc
import weakref

import pytest
import torch
from conftest import rel_err
from torch import nn

import softfp8
from softfp8 import Format

FORMATS = list(Format)


def make_linear(n=40, k=300, bias=True, seed=0):
    torch.manual_seed(seed)
    return nn.Linear(k, n, bias=bias)


def same_tensors(a: dict, b: dict) -> bool:
    """Identical keys, dtypes, shapes and bytes (bit-exact, NaN-safe)."""
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if not torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)):
            return False
    return True


@pytest.mark.parametrize("fmt", FORMATS)
def test_from_linear_matches_functional_linear_and_holds_no_full_weight(fmt):
    lin = make_linear()
    q = softfp8.Linear.from_linear(lin, fmt)
    x = torch.randn(2, 3, 300)
    packed = softfp8.quantize(lin.weight, fmt)
    torch.testing.assert_close(q(x), softfp8.linear(x, packed, lin.bias), rtol=0, atol=0)
    assert q.bias.dtype == lin.bias.dtype and not q.bias.requires_grad
    # Only packed buffers and the bias: nothing of shape [N, K] in a floating dtype.
    tensors = dict(q.named_parameters()) | dict(q.named_buffers())
    assert set(tensors) <= {"words", "scales", "global_scale", "bias"}
    assert all(not (t.is_floating_point() and t.shape == lin.weight.shape)
               for t in tensors.values())
    assert sum(t.numel() * t.element_size() for n, t in tensors.items() if n != "bias") \
        == packed.nbytes < lin.weight.numel() * 2


def test_from_linear_keeps_bias_dtype_and_passes_quantize_kwargs():
    lin = make_linear().to(torch.bfloat16)
    q = softfp8.Linear.from_linear(lin, "e5m2", row_scale=True)
    assert q.bias.dtype == torch.bfloat16 and q.scales.dtype == torch.float32
    y = q(torch.randn(1, 300, dtype=torch.bfloat16))
    assert y.dtype == torch.bfloat16
    with pytest.raises(TypeError, match="linear: expected a torch.nn.Linear"):
        softfp8.Linear.from_linear(nn.Conv1d(3, 3, 1), "e5m2")


@pytest.mark.parametrize("fmt", FORMATS)
def test_state_dict_round_trip_is_bit_exact(fmt):
    q = softfp8.Linear.from_linear(make_linear(), fmt)
    sd = q.state_dict()
    fresh = softfp8.Linear(300, 40, fmt)
    assert not same_tensors(fresh.state_dict(), sd)
    fresh.load_state_dict(sd)
    assert same_tensors(fresh.state_dict(), sd)
    x = torch.randn(4, 300)
    assert torch.equal(fresh(x), q(x))


@pytest.mark.parametrize("fmt", FORMATS)
def test_safetensors_round_trip_is_bit_exact(fmt, tmp_path):
    from safetensors.torch import load_file, save_file

    q = softfp8.Linear.from_linear(make_linear(n=33, k=77), fmt)
    path = tmp_path / "layer.safetensors"
    save_file(q.state_dict(), str(path))
    loaded = load_file(str(path))
    assert same_tensors(loaded, q.state_dict())
    back = softfp8.Linear.from_state_dict(loaded, fmt, in_features=77)
    assert same_tensors(back.state_dict(), q.state_dict())
    x = torch.randn(3, 77)
    assert torch.equal(back(x), q(x))


def test_unscaled_e5m2_has_no_scales_and_scaled_one_does():
    lin = make_linear()
    assert softfp8.Linear.from_linear(lin, "e5m2").scales is None
    assert "scales" in softfp8.Linear(300, 40, "e5m2", row_scale=True).state_dict()
    sd = softfp8.Linear.from_linear(lin, "e5m2", row_scale=True).state_dict()
    with pytest.raises(RuntimeError, match="Unexpected key.*scales"):
        softfp8.Linear(300, 40, "e5m2").load_state_dict(sd)


@pytest.mark.parametrize("corrupt, match", [
    (lambda sd: sd.__setitem__("words", sd["words"][:, :-1].clone()), "words: expected"),
    (lambda sd: sd.__setitem__("words", sd["words"].float()), "words: expected.*int32"),
    (lambda sd: sd.__setitem__("scales", sd["scales"].double()), "scales: expected.*float32"),
    (lambda sd: sd.__setitem__("scales", sd["scales"][:-1].clone()), r"scales: expected.*\(40,\)"),
    (lambda sd: sd.pop("scales"), "Missing key.*scales"),
    (lambda sd: sd.__setitem__("bias", sd["bias"].half()), "bias: expected torch.float32"),
])
def test_corrupted_state_dict_raises_clearly(corrupt, match):
    q = softfp8.Linear.from_linear(make_linear(), "e4m3")
    sd = {k: v.clone() for k, v in q.state_dict().items()}
    corrupt(sd)
    target = softfp8.Linear(300, 40, "e4m3")
    with pytest.raises(RuntimeError, match=match):
        target.load_state_dict(sd)


@pytest.mark.parametrize("corrupt, exc, match", [
    (lambda sd: sd.pop("scales"), ValueError, "scales: missing"),
    (lambda sd: sd.pop("global_scale"), ValueError, "global_scale: missing"),
    (lambda sd: sd.__setitem__("scales", sd["scales"].float()), ValueError, "scales.*uint8"),
    (lambda sd: sd.pop("words"), ValueError, "words"),
    (lambda sd: sd.__setitem__("extra", torch.zeros(1)), ValueError, "unexpected keys.*extra"),
])
def test_from_state_dict_rejects_corruption(corrupt, exc, match):
    sd = dict(softfp8.Linear.from_linear(make_linear(), "nvfp4").state_dict())
    corrupt(sd)
    with pytest.raises(exc, match=match):
        softfp8.Linear.from_state_dict(sd, "nvfp4", in_features=300)


@pytest.mark.parametrize("fmt", FORMATS)
def test_dtype_casts_move_bias_but_never_touch_packed_bits(fmt):
    q = softfp8.Linear.from_linear(make_linear(), fmt)
    before = {k: v.clone() for k, v in q.state_dict().items() if k != "bias"}
    q.half()
    assert q.bias.dtype == torch.float16
    assert same_tensors({k: v for k, v in q.state_dict().items() if k != "bias"}, before)
    q.to("cpu", torch.bfloat16)
    assert q.bias.dtype == torch.bfloat16
    assert same_tensors({k: v for k, v in q.state_dict().items() if k != "bias"}, before)


def test_to_device_moves_every_buffer():
    q = softfp8.Linear.from_linear(make_linear(), "nvfp4")
    meta = q.to("meta")
    assert all(t.device.type == "meta" for t in (*meta.buffers(), *meta.parameters()))
    if torch.cuda.is_available():
        q = softfp8.Linear.from_linear(make_linear(), "nvfp4").cuda()
        assert all(t.is_cuda for t in (*q.buffers(), *q.parameters()))
        assert q(torch.randn(2, 300, device="cuda")).is_cuda


def test_repr_shows_format_shape_and_backend(monkeypatch):
    q = softfp8.Linear.from_linear(make_linear(), "mxfp4")
    chosen = softfp8.dispatch.select("mxfp4", 1, "cpu").backend.value
    text = repr(q)
    assert "in_features=300" in text and "out_features=40" in text
    assert "fmt=mxfp4" in text and f"backend={chosen}" in text
    monkeypatch.setenv("SOFTFP8_BACKEND", "native")
    softfp8._settings.reload_environment()  # read once: a change after the first call needs this
    assert "backend=none (backend native (SOFTFP8_BACKEND=native) can't run" in repr(q)
    with softfp8.launch_settings(backend="torch"):
        assert "backend=torch" in repr(q)


def test_forward_validates_its_input():
    q = softfp8.Linear.from_linear(make_linear(), "e5m2")
    with pytest.raises(ValueError, match="x: expected a last dimension of 300"):
        q(torch.randn(2, 301))
    with pytest.raises(TypeError, match="x: expected float32"):
        q(torch.ones(2, 300, dtype=torch.int64))


def test_forward_sees_replaced_and_rewritten_buffers():
    # forward keeps its validated PackedWeight between calls: a buffer written in place, a
    # buffer replaced, and one whose .data changed shape must all be seen, never a stale layout.
    q = softfp8.Linear.from_linear(make_linear(n=8, k=64, bias=False), "e4m3")
    x = torch.randn(1, 64)
    first = q(x)
    with torch.no_grad():
        q.scales.mul_(2)  # in place: the same tensors, new values (a power of two: exact)
    assert torch.equal(q(x), first * 2)
    other = softfp8.Linear.from_linear(make_linear(n=8, k=64, bias=False, seed=1), "e4m3")
    q.words = other.words.clone()  # new buffer tensors
    q.scales = other.scales.clone()
    assert torch.equal(q(x), other(x)) and not torch.equal(q(x), first * 2)
    q.in_features = 60  # the module's own fields are part of what was validated
    with pytest.raises(ValueError, match="x: expected a last dimension of 60"):
        q(x)
    q.in_features = 64
    q.words.data = torch.zeros(8, 8, dtype=torch.int32)  # same tensor, a shape the layout can't have
    with pytest.raises(ValueError, match="words"):
        q(x)


def test_gradients_flow_to_activations_and_bias():
    lin = make_linear(n=8, k=16)
    q = softfp8.Linear.from_linear(lin, "e4m3")
    q.bias.requires_grad_(True)
    x = torch.randn(3, 16, requires_grad=True)
    q(x).square().sum().backward()
    w = softfp8.dequantize(q.packed)
    xr = x.detach().clone().requires_grad_(True)
    br = q.bias.detach().clone().requires_grad_(True)
    (xr @ w.T + br).square().sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(q.bias.grad, br.grad)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 64)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 64))
                                    for _ in range(3))
        self.lm_head = nn.Linear(64, 10, bias=False)

    def forward(self, ids):
        h = self.embed(ids)
        for block in self.blocks:
            h = h + block(h)
        return self.lm_head(h)


def test_quantize_model_converts_skips_and_summarises():
    torch.manual_seed(0)
    model = Tiny()
    ids = torch.randint(0, 10, (2, 5))
    ref = model(ids).detach()
    summary = softfp8.quantize_model(model, "e4m3", skip="lm_head", progress=False)
    assert summary.converted == tuple(f"blocks.{i}.{j}" for i in range(3) for j in (0, 2))
    assert summary.skipped == ("lm_head",)
    assert type(model.lm_head) is nn.Linear
    assert all(isinstance(model.blocks[i][j], softfp8.Linear) for i in range(3) for j in (0, 2))
    assert summary.bytes_after < summary.bytes_before == sum(
        p.numel() * 4 for p in Tiny().parameters())
    assert summary.bytes_after == softfp8.convert.model_bytes(model)
    with pytest.raises(dataclass_frozen_error()):
        summary.fmt = Format.E5M2
    err = rel_err(model(ids), ref)
    print(f"\nTiny model, e4m3: logits error {err:.2%}")
    assert 0 < err < 0.1


def dataclass_frozen_error():
    import dataclasses
    return dataclasses.FrozenInstanceError


@pytest.mark.parametrize("skip, expected_skipped", [
    ("blocks.1.*", ("blocks.1.0", "blocks.1.2")),
    (["lm_head", "blocks.0.0"], ("blocks.0.0", "lm_head")),
    (lambda name, m: m.out_features == 96, ("blocks.0.0", "blocks.1.0", "blocks.2.0")),
    ("0", ("blocks.0.0", "blocks.1.0", "blocks.2.0")),  # a bare name matches at any depth
])
def test_quantize_model_skip_forms(skip, expected_skipped):
    summary = softfp8.quantize_model(Tiny(), "e5m2", skip=skip, progress=False)
    assert summary.skipped == expected_skipped
    assert len(summary.converted) + len(summary.skipped) == 7


def test_quantize_model_bad_arguments():
    with pytest.raises(TypeError, match="model: expected a torch.nn.Module"):
        softfp8.quantize_model("model")
    with pytest.raises(ValueError, match="fmt='int4'"):
        softfp8.quantize_model(Tiny(), "int4")
    with pytest.raises(TypeError, match="skip: expected"):
        softfp8.quantize_model(Tiny(), skip=[3])


def test_quantize_model_frees_each_original_weight_as_it_goes():
    model = Tiny()
    order = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    refs = {n: weakref.ref(model.get_submodule(n).weight) for n in order}
    alive_at_each_step = []

    def skip(name, module):
        # Called just before `name` is converted: every earlier weight must already be gone.
        gc.collect()
        done = order[:order.index(name)]
        alive_at_each_step.append([n for n in done if refs[n]() is not None])
        return False

    softfp8.quantize_model(model, "nvfp4", skip=skip, progress=False)
    gc.collect()
    assert len(alive_at_each_step) == len(order)
    assert all(alive == [] for alive in alive_at_each_step)
    assert all(r() is None for r in refs.values())


def test_quantize_model_progress_bar_can_be_shown(capsys):
    softfp8.quantize_model(Tiny(), "e5m2", progress=True)
    assert "softfp8 e5m2" in capsys.readouterr().err


def test_whole_module_pickles_round_trip_and_old_ones_load():
    """torch.save of a module pickles its __dict__: the settings travel as `_op_names`; a pickle
    made before that held `fmt`, `backend` and `e2m1` as attributes and still loads."""
    import io
    import pickle

    from softfp8.dispatch import Backend, E2M1Decode

    layer = softfp8.Linear.from_linear(nn.Linear(64, 24), "nvfp4", backend="torch", e2m1="select")
    x = torch.randn(3, 64)
    buf = io.BytesIO()
    torch.save(layer, buf)
    buf.seek(0)
    again = torch.load(buf, weights_only=False)
    assert again._op_names == layer._op_names and torch.equal(again(x), layer(x))
    old = dict(layer.__dict__)
    del old["_op_names"]
    old.update(fmt=Format.NVFP4, backend=Backend.TORCH, e2m1=E2M1Decode.SELECT)
    restored = pickle.loads(pickle.dumps(old))  # what unpickling hands __setstate__
    loaded = softfp8.Linear.__new__(softfp8.Linear)
    loaded.__setstate__(restored)
    assert (loaded.fmt, loaded.backend, loaded.e2m1) == (Format.NVFP4, Backend.TORCH,
                                                          E2M1Decode.SELECT)
    assert "fmt" not in loaded.__dict__ and torch.equal(loaded(x), layer(x))
    bad = dict(old, fmt="fp7")
    with pytest.raises(ValueError, match="fp7"):
        softfp8.Linear.__new__(softfp8.Linear).__setstate__(bad)


# -- the format tag: a state_dict says which format and width it holds ----------------------

def test_state_dict_carries_its_format_and_width():
    q = softfp8.Linear.from_linear(make_linear(n=8, k=253), "nvfp4")
    tag = q.state_dict()["_extra_state"]
    assert tag.dtype == torch.uint8
    assert softfp8.modules.FormatTag.from_tensor(tag) == softfp8.modules.FormatTag(
        Format.NVFP4, 8, 253)


@pytest.mark.parametrize("saved, target", [("e5m2", "e4m3"), ("e4m3", "e5m2"),
                                           ("nvfp4", "mxfp4"), ("mxfp4", "nvfp4")])
def test_loading_one_format_into_another_raises_naming_both(saved, target):
    # e5m2 with row scales has e4m3's shapes and dtypes exactly (and the FP4 pairs differ only in
    # their scales' width at some K): without the tag this loaded with "All keys matched".
    kwargs = {"row_scale": True} if saved == "e5m2" else {}
    sd = softfp8.Linear.from_linear(make_linear(k=256), saved, **kwargs).state_dict()
    layer = softfp8.Linear(256, 40, target, **({"row_scale": True} if target == "e5m2" else {}))
    with pytest.raises(RuntimeError, match=rf"weight is {saved} \(40, 256\) but this Linear is "
                                           rf"{target} \(40, 256\)"):
        layer.load_state_dict(sd)


def test_loading_another_width_within_the_padding_raises_naming_in_features():
    sd = softfp8.Linear.from_linear(make_linear(k=256), "e4m3").state_dict()
    with pytest.raises(RuntimeError, match="in_features=256.*this Linear has in_features=253"):
        softfp8.Linear(253, 40, "e4m3").load_state_dict(sd)


def test_from_state_dict_checks_the_logical_width():
    sd = softfp8.Linear.from_linear(make_linear(k=256), "e4m3").state_dict()
    with pytest.raises(ValueError, match="in_features=253, but the state_dict's _extra_state says "
                                         "in_features=256"):
        softfp8.Linear.from_state_dict(sd, "e4m3", in_features=253)
    with pytest.raises(ValueError, match="fmt=e5m2, but the state_dict's _extra_state says "
                                         "fmt=e4m3"):
        softfp8.Linear.from_state_dict(sd, "e5m2", in_features=256)
    # Both read from the tag when not given.
    back = softfp8.Linear.from_state_dict(sd)
    assert (back.fmt, back.in_features, back.out_features) == (Format.E4M3, 256, 40)
    # A state_dict without a tag: the width must at least fit the words, and the message says
    # which in_features would.
    untagged = {k: v for k, v in sd.items() if k != "_extra_state"}
    with pytest.raises(ValueError, match=r"in_features=300: .*words has 64 a row \(that width fits "
                                         r"in_features from 241 to 256\)"):
        softfp8.Linear.from_state_dict(untagged, "e4m3", in_features=300)
    with pytest.raises(ValueError, match="no format tag.*fmt must be given"):
        softfp8.Linear.from_state_dict(untagged, in_features=256)
    with pytest.raises(TypeError, match="in_features: expected a positive int"):
        softfp8.Linear.from_state_dict(sd, "e4m3", in_features=256.0)


@pytest.mark.parametrize("tag", [
    torch.zeros(3),  # not uint8
    torch.frombuffer(bytearray(b'{"fmt": "e4m3"'), dtype=torch.uint8),  # cut short
    torch.frombuffer(bytearray(b'{"fmt": "fp7", "in_features": 300, "out_features": 40}'),
                     dtype=torch.uint8),
])
def test_a_damaged_tag_is_refused(tag):
    sd = dict(softfp8.Linear.from_linear(make_linear(), "e4m3").state_dict())
    sd["_extra_state"] = tag
    with pytest.raises(RuntimeError, match="_extra_state: expected softfp8's format tag"):
        softfp8.Linear(300, 40, "e4m3").load_state_dict(sd)


# -- quantize_model's skip ------------------------------------------------------------------

@pytest.mark.parametrize("skip", [123, b"lm_head", {"lm_head": True}, ["lm_head", None]])
def test_quantize_model_skip_of_the_wrong_type_is_a_clear_type_error(skip):
    model = Tiny()
    with pytest.raises(TypeError, match=r"skip: expected a module name or glob, a list of them, "
                                        r"or a predicate \(name, module\) -> bool; got"):
        softfp8.quantize_model(model, "e4m3", skip=skip, progress=False)
    assert type(model.lm_head) is nn.Linear  # refused before converting anything


def test_quantize_model_reports_skip_names_that_match_nothing():
    model = Tiny()
    with pytest.warns(UserWarning, match=r"skip: \['lm_haed', 'blocks'\] matched no nn.Linear"):
        summary = softfp8.quantize_model(model, "e4m3", skip=["lm_haed", "blocks", "0"],
                                         progress=False)
    assert summary.unmatched_skip == ("lm_haed", "blocks")
    assert "skip matched nothing for ['lm_haed', 'blocks']" in str(summary)
    assert summary.skipped == ("blocks.0.0", "blocks.1.0", "blocks.2.0")


def test_constructor_keeps_fp32_scales_under_another_default_dtype():
    # transformers builds models under its dtype as torch's default (bf16, say): the scales'
    # dtype is the format's, never the default's.
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        layer = softfp8.Linear(64, 8, "nvfp4", device="meta")
        row = softfp8.Linear(64, 8, "e5m2", row_scale=True)
    finally:
        torch.set_default_dtype(before)
    assert layer.global_scale.dtype == torch.float32 and row.scales.dtype == torch.float32


# -- models placed with accelerate (device_map, CPU and disk offload) --------------------------

def _tiny_llama():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, max_position_embeddings=64,
        tie_word_embeddings=False)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


GREEDY = dict(do_sample=False, pad_token_id=0, max_new_tokens=4)
TINY_MAP = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu",
            "model.layers.1": "disk", "model.norm": "cpu", "lm_head": "cpu"}


@pytest.fixture(scope="module")
def tiny_converted():
    """A tiny Llama converted to NVFP4 on backend auto (numba here) and to E4M3 on torch, each
    with the tokens greedy generate() gives before any placement."""
    ids = torch.randint(0, 256, (1, 5), generator=torch.Generator().manual_seed(1))
    out = {}
    for fmt, backend in ((Format.NVFP4, "auto"), (Format.E4M3, "torch")):
        model = _tiny_llama()
        softfp8.quantize_model(model, fmt, backend=backend, progress=False)
        with torch.no_grad():
            out[backend] = (model, model.generate(ids, **GREEDY))
    return ids, out


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("placement", ["cpu_offload", "disk_offload", "device_map"])
def test_accelerate_offload_generates_the_same_tokens_and_keeps_no_moved_in_weight(
        tiny_converted, backend, placement, tmp_path, monkeypatch):
    """Packed weights offloaded to RAM or disk and moved in by accelerate's hooks at each call:
    the same tokens as the model never placed, and no layer keeps a moved-in copy after its call
    (which, on a GPU, would keep every offloaded weight resident)."""
    import copy

    accelerate = pytest.importorskip("accelerate")
    ids, models = tiny_converted
    model, want = models[backend]
    model = copy.deepcopy(model)
    cpu = torch.device("cpu")
    if placement == "cpu_offload":
        accelerate.cpu_offload(model, execution_device=cpu, offload_buffers=True)
    elif placement == "disk_offload":
        accelerate.disk_offload(model, str(tmp_path), execution_device=cpu, offload_buffers=True)
    else:
        accelerate.dispatch_model(model, device_map=TINY_MAP, main_device="cpu",
                                  offload_dir=str(tmp_path), offload_buffers=True)
    down = model.model.layers[1].mlp.down_proj
    assert down.words.device.type == "meta"  # offloaded between calls
    # a move from RAM to a GPU makes new tensors at every call; a "move" from RAM to the CPU
    # hands over the offloaded tensor itself: copy it, as the GPU would
    import accelerate.hooks

    move = accelerate.hooks.set_module_tensor_to_device

    def move_as_to_another_device(module, name, device, value=None, **kwargs):
        value = value.clone() if value is not None and value.device.type != "meta" else value
        return move(module, name, device, value=value, **kwargs)

    monkeypatch.setattr(accelerate.hooks, "set_module_tensor_to_device", move_as_to_another_device)
    with torch.no_grad():
        got = model.generate(ids, **GREEDY)
    assert torch.equal(got, want)
    assert down.words.device.type == "meta" and down.words.dtype == torch.int32
    # what a layer keeps of a call's tensors (the validated layout, recorded launches) would hold
    # the moved-in copy: nothing is kept for tensors that change at every call
    layers = [m for m in model.modules() if isinstance(m, softfp8.Linear)
              and m.words.device.type == "meta"]  # the offloaded ones (all, or layers.1's 7)
    assert len(layers) == (7 if placement == "device_map" else 15)
    kept = [name for m in layers for name in ("_packed_kept", "_eager_calls") if name in m.__dict__]
    assert not kept


def test_layer_settles_on_tensors_set_in_place_of_its_own():
    """Buffers replaced without _apply (accelerate's set_module_tensor_to_device at dispatch):
    used at once, kept from the second call that finds them again."""
    set_module_tensor_to_device = pytest.importorskip("accelerate.utils").set_module_tensor_to_device

    layer = softfp8.Linear.from_linear(make_linear(n=8, k=64), "mxfp4", backend="torch")
    x = torch.randn(2, 64)
    want = layer(x)
    assert "_packed_kept" in layer.__dict__
    for name in ("words", "scales", "bias"):
        set_module_tensor_to_device(layer, name, "cpu", value=getattr(layer, name).clone())
    assert torch.equal(layer(x), want) and "_packed_kept" not in layer.__dict__
    assert torch.equal(layer(x), want) and layer.__dict__["_packed_kept"][0].words is layer.words


def test_accelerate_dtype_cast_of_row_scales_is_an_error_not_a_wrong_result():
    set_module_tensor_to_device = pytest.importorskip("accelerate.utils").set_module_tensor_to_device

    layer = softfp8.Linear.from_linear(make_linear(n=8, k=64), "e4m3", backend="torch")
    # load_checkpoint_in_model(dtype=float16) casts every floating tensor it sets, fp32 scales too
    set_module_tensor_to_device(layer, "scales", "cpu", value=layer.scales.clone(),
                                dtype=torch.float16)
    with pytest.raises(ValueError, match=r"scales: expected a torch.float32 tensor of shape "
                                         r"\(8,\), got torch.float16"):
        layer(torch.randn(1, 64))


def test_quantize_model_keeps_a_layers_own_accelerate_hook_and_refuses_offloaded_weights():
    hooks = pytest.importorskip("accelerate.hooks")
    model = _tiny_llama()
    hook = hooks.AlignDevicesHook(execution_device="cpu", io_same_device=True)
    hooks.add_hook_to_module(model.lm_head, hook)  # what device_map={..., "lm_head": 1} does
    softfp8.quantize_model(model, "e5m2", backend="torch", progress=False)
    assert isinstance(model.lm_head, softfp8.Linear) and model.lm_head._hf_hook is hook
    assert model(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 256)

    offloaded = _tiny_llama()
    hooks_mod = pytest.importorskip("accelerate")
    hooks_mod.cpu_offload(offloaded, execution_device=torch.device("cpu"))
    with pytest.raises(ValueError, match=r"model.layers.0.self_attn.q_proj: its weight is on the "
                                         r"meta device .* offload_buffers=True"):
        softfp8.quantize_model(offloaded, "e5m2", progress=False)


class _OnCuda1(torch.Tensor):
    """A CPU tensor that says it lies on cuda:1 (no GPU here): what a layer of a model spread
    over two GPUs receives while cuda:0 is current."""

    @property
    def is_cuda(self):
        return True

    @property
    def device(self):
        return torch.device("cuda", 1)

    def get_device(self):
        return 1


def test_a_layer_on_another_gpu_runs_with_its_device_current_and_its_hook_once(monkeypatch):
    hooks = pytest.importorskip("accelerate.hooks")
    from softfp8 import modules

    current, seen, pre_forwards = [0], [], []

    class Device:  # torch.cuda.device, as far as the layer uses it
        def __init__(self, device):
            self.index = torch.device(device).index

        def __enter__(self):
            self.prev, current[0] = current[0], self.index

        def __exit__(self, *exc):
            current[0] = self.prev

    class Counting(hooks.ModelHook):
        def pre_forward(self, module, *args, **kwargs):
            pre_forwards.append(1)
            return args, kwargs

    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: current[0], raising=False)
    monkeypatch.setattr(torch.cuda, "device", Device)
    monkeypatch.setattr(modules, "run_linear",
                        lambda x, *args, **kwargs: seen.append(current[0]) or "y")
    layer = softfp8.Linear.from_linear(make_linear(n=8, k=64), "e5m2", backend="torch")
    hooks.add_hook_to_module(layer, Counting())  # forward wrapped on the instance
    assert layer(torch.randn(1, 64).as_subclass(_OnCuda1)) == "y"
    assert seen == [1] and current == [0] and pre_forwards == [1]


@pytest.mark.parametrize("fmt", [Format.E4M3, Format.MXFP4], ids=str)
def test_a_layer_built_under_inference_mode_runs_in_and_out_of_it(fmt):
    """Inference tensors keep no version counter; the facts and recorded calls kept per weight
    must not ask them for one (`_facts.version_of`)."""
    torch.manual_seed(0)
    with torch.inference_mode():
        layer = softfp8.Linear.from_linear(nn.Linear(64, 32), fmt)
    x = torch.randn(3, 64)
    want = softfp8.linear(x, layer.packed, layer.bias, backend="torch")
    torch.testing.assert_close(layer(x[:1]), want[:1], rtol=1e-5, atol=1e-5)
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), want, rtol=1e-5, atol=1e-5)
