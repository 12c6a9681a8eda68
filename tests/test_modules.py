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
    assert "backend=none (backend native (SOFTFP8_BACKEND=native) can't run" in repr(q)


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
    assert summary.bytes_after == softfp8.modules.model_bytes(model)
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
