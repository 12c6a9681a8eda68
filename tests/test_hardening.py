"""Bad input to every public entry point: a clear TypeError/ValueError naming the argument, or the
right answer; never a crash from torch internals and never a silent wrong result.

Backend-dependent tests run over every backend `dispatch.select` accepts in this run."""
import dataclasses

import pytest
import torch
from conftest import rel_err
from hardening_support import backend_format_pairs, backends_for, fp64_reference

import softfp8
from softfp8 import Backend, Format, PackedWeight
from softfp8.dispatch import BackendUnavailable, select

NAN, INF = float("nan"), float("inf")


def packed_of(fmt, n=5, k=7, seed=0):
    return softfp8.quantize(torch.randn(n, k, generator=torch.Generator().manual_seed(seed)), fmt)


# -- quantize / dequantize -----------------------------------------------------------------

@pytest.mark.parametrize("weight, fmt, exc, match", [
    pytest.param(torch.ones(3, 3, dtype=torch.int32), "e5m2", TypeError, "weight.*floating", id="int"),
    pytest.param(torch.ones(3, 3, dtype=torch.bool), "e5m2", TypeError, "weight.*floating", id="bool"),
    pytest.param(torch.ones(3, 3, dtype=torch.complex64), "e4m3", TypeError, "weight.*floating",
                 id="complex"),
    pytest.param(torch.ones(3, 3).to(torch.float8_e5m2), "e5m2", TypeError, "weight.*floating",
                 id="already-fp8"),
    pytest.param([[1.0, 2.0]], "e5m2", TypeError, "weight.*torch.Tensor", id="list"),
    pytest.param(torch.randn(3), "e5m2", ValueError, "weight.*2-D", id="1-D"),
    pytest.param(torch.tensor(1.0), "nvfp4", ValueError, "weight.*2-D", id="0-D"),
    pytest.param(torch.randn(2, 3, 4), "mxfp4", ValueError, "weight.*2-D", id="3-D"),
    pytest.param(torch.randn(0, 3), "e5m2", ValueError, "weight.*non-empty", id="empty-N"),
    pytest.param(torch.randn(3, 0), "nvfp4", ValueError, "weight.*non-empty", id="empty-K"),
    pytest.param(torch.randn(3, 3, device="meta"), "e5m2", ValueError, "weight.*meta", id="meta"),
    pytest.param(torch.randn(3, 3), "fp8", ValueError, "fmt='fp8'.*'e5m2', 'e4m3'", id="fmt-name"),
    pytest.param(torch.randn(3, 3), None, ValueError, "fmt=None", id="fmt-None"),
    pytest.param(torch.randn(3, 3), 8, ValueError, "fmt=8", id="fmt-int"),
    pytest.param(torch.tensor([[1.0, INF]]), "e4m3", ValueError, "weight.*inf", id="inf-e4m3"),
    pytest.param(torch.tensor([[1.0, -INF]]), "nvfp4", ValueError, "weight.*inf", id="inf-nvfp4"),
    pytest.param(torch.tensor([[1.0, INF]]), "mxfp4", ValueError, "weight.*inf", id="inf-mxfp4"),
    pytest.param(torch.tensor([[1e5, 1.0]]), "e5m2", ValueError, "weight.*row_scale=True",
                 id="e5m2-finite-overflow"),
])
def test_quantize_bad_input(weight, fmt, exc, match):
    with pytest.raises(exc, match=match):
        softfp8.quantize(weight, fmt)


def test_quantize_bad_row_scale():
    with pytest.raises(TypeError, match="row_scale.*True, False or None"):
        softfp8.quantize(torch.randn(3, 3), "e5m2", row_scale="yes")
    with pytest.raises(ValueError, match="row_scale.*only applies to e5m2"):
        softfp8.quantize(torch.randn(3, 3), "e4m3", row_scale=True)


@pytest.mark.parametrize("fmt", list(Format))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_quantize_accepts_other_float_dtypes_as_their_float32_values(fmt, dtype):
    w = torch.randn(9, 37, generator=torch.Generator().manual_seed(3)).to(dtype)
    a, b = softfp8.quantize(w, fmt), softfp8.quantize(w.float(), fmt)
    assert all(torch.equal(s, t) for s, t in zip(a.tensors(), b.tensors()))


@pytest.mark.parametrize("fmt", list(Format))
def test_quantize_transposed_and_strided_weights_equal_contiguous(fmt):
    base = torch.randn(40, 66, generator=torch.Generator().manual_seed(4))
    for view in (base.T, base[::2, 1::3], base.T[:, :17]):
        assert not view.is_contiguous()
        a, b = softfp8.quantize(view, fmt), softfp8.quantize(view.contiguous(), fmt)
        assert a.shape == tuple(view.shape)
        assert all(torch.equal(s, t) for s, t in zip(a.tensors(), b.tensors()))


def test_quantize_weight_that_requires_grad_is_detached():
    w = torch.randn(4, 8, requires_grad=True)
    packed = softfp8.quantize(w, "e4m3")
    assert not any(t.requires_grad for t in packed.tensors())


@pytest.mark.parametrize("packed, dtype, exc, match", [
    pytest.param(None, torch.float32, TypeError, "packed.*PackedWeight", id="None"),
    pytest.param(torch.zeros(5, 2, dtype=torch.int32), torch.float32, TypeError,
                 "packed.*PackedWeight", id="raw-words"),
    pytest.param("ok", torch.int32, TypeError, "dtype.*floating", id="int-dtype"),
    pytest.param("ok", "float16", TypeError, "dtype.*floating", id="str-dtype"),
])
def test_dequantize_bad_input(packed, dtype, exc, match):
    packed = packed_of("e5m2") if isinstance(packed, str) else packed
    with pytest.raises(exc, match=match):
        softfp8.dequantize(packed, dtype)


# -- linear: bad input ---------------------------------------------------------------------

@pytest.mark.parametrize("make, exc, match", [
    pytest.param(lambda p: softfp8.linear(torch.randn(2, 8), p), ValueError,
                 r"x.*last dimension of 7.*\(2, 8\)", id="K-mismatch"),
    pytest.param(lambda p: softfp8.linear(torch.randn(7, 2), p), ValueError,
                 "x.*last dimension of 7", id="transposed-wrong-way"),
    pytest.param(lambda p: softfp8.linear(torch.tensor(1.0), p), ValueError,
                 "x.*last dimension", id="0-D"),
    pytest.param(lambda p: softfp8.linear(torch.randn(2, 7, dtype=torch.float64), p), TypeError,
                 "x.*float32, float16 or bfloat16", id="float64-x"),
    pytest.param(lambda p: softfp8.linear(torch.ones(2, 7, dtype=torch.int8), p), TypeError,
                 "x.*float32", id="int-x"),
    pytest.param(lambda p: softfp8.linear(torch.randn(2, 7).numpy(), p), TypeError,
                 "x.*torch.Tensor.*ndarray", id="numpy-x"),
    pytest.param(lambda p: softfp8.linear(torch.randn(2, 7), p.words), TypeError,
                 "packed.*PackedWeight", id="words-not-packed"),
    pytest.param(lambda p: softfp8.linear(torch.randn(2, 7, device="meta"), p), ValueError,
                 "x is on meta.*packed weight is on cpu", id="x-other-device"),
    pytest.param(lambda p: softfp8.linear(torch.randn(2, 7), p, torch.randn(5, device="meta")),
                 ValueError, "bias is on meta", id="bias-other-device"),
    pytest.param(lambda p: softfp8.linear(torch.randn(2, 7), p.to("meta")), ValueError,
                 "x is on cpu.*packed weight is on meta", id="packed-other-device"),
    pytest.param(lambda p: softfp8.linear(torch.randn(2, 7), p, torch.randn(1, 5)), ValueError,
                 r"bias.*\(5,\)", id="bias-2-D"),
    pytest.param(lambda p: softfp8.linear(torch.randn(2, 7), p, torch.ones(5, dtype=torch.int64)),
                 TypeError, "bias.*floating", id="bias-int"),
    pytest.param(lambda p: softfp8.linear(torch.randn(2, 7), p, [0.0] * 5), TypeError,
                 "bias.*Tensor", id="bias-list"),
    pytest.param(lambda p: softfp8.linear(torch.randn(2, 7), p, backend=None), ValueError,
                 "backend=None.*'torch'", id="backend-None"),
    pytest.param(lambda p: softfp8.linear(torch.randn(2, 7), p, backend="gpu"), ValueError,
                 "backend='gpu'.*'auto', 'native', 'triton', 'cuda', 'numba', 'torch'",
                 id="backend-unknown"),
    pytest.param(lambda p: softfp8.linear(torch.randn(2, 7), p, e2m1="fast"), ValueError,
                 "e2m1='fast'.*'inject', 'select'", id="e2m1-unknown"),
])
def test_linear_bad_input(make, exc, match):
    with pytest.raises(exc, match=match):
        make(packed_of("nvfp4"))


def test_linear_on_meta_infers_the_shape_and_select_says_no_backend_runs():
    # meta tensors go to the custom op's fake implementation (shape inference, as F.linear does);
    # asking dispatch to *run* something there is refused with the device named.
    packed = packed_of("e5m2").to("meta")
    y = softfp8.linear(torch.randn(3, 7, device="meta"), packed)
    assert y.device.type == "meta" and y.shape == (3, packed.shape[0])
    with pytest.raises(BackendUnavailable, match="meta"):
        softfp8.dispatch.select("e5m2", 1, "meta")


@pytest.mark.parametrize("backend, fmt", backend_format_pairs())
def test_linear_strided_transposed_and_broadcast_x(backend, fmt):
    g = torch.Generator().manual_seed(8)
    packed = softfp8.quantize(torch.randn(11, 33, generator=g), fmt)
    bias = torch.randn(22, generator=g)[::2]  # non-contiguous bias
    for x in (torch.randn(33, 4, generator=g).T, torch.randn(3, 66, generator=g)[:, ::2],
              torch.randn(1, 33, generator=g).expand(5, 33), torch.randn(2, 33, 3, generator=g)
              .transpose(1, 2)):
        assert not x.is_contiguous()
        y = softfp8.linear(x, packed, bias, backend=backend)
        assert y.shape == (*x.shape[:-1], 11)
        assert rel_err(y, fp64_reference(x, packed, bias)) <= 1e-6


@pytest.mark.parametrize("backend, fmt", backend_format_pairs())
def test_linear_empty_and_1d_x(backend, fmt):
    packed = packed_of(fmt, 6, 35)
    for lead in ((0,), (2, 0), (0, 3)):
        y = softfp8.linear(torch.randn(*lead, 35), packed, backend=backend)
        assert y.shape == (*lead, 6)
    x = torch.randn(35)
    y = softfp8.linear(x, packed, backend=backend)
    assert y.shape == (6,) and rel_err(y, fp64_reference(x[None], packed)[0]) <= 1e-6


@pytest.mark.parametrize("backend, fmt", backend_format_pairs())
def test_linear_gradient_or_clear_error(backend, fmt):
    """x that requires grad: the right gradient (dy/dx = W), or a clear error — never a crash."""
    packed = packed_of(fmt, 6, 21)
    x = torch.randn(3, 21, requires_grad=True)
    y = softfp8.linear(x, packed, backend=backend)
    assert rel_err(y.detach(), fp64_reference(x.detach(), packed)) <= 1e-6
    if backend is Backend.TORCH or y.requires_grad:
        y.sum().backward()
        want = softfp8.dequantize(packed).double().sum(0).expand(3, 21)
        assert rel_err(x.grad, want) <= 1e-6


# -- NaN and inf: propagate as torch's own fp32 matmul on the dequantized weight does ---------

def _masks(y):
    return torch.isnan(y), torch.isposinf(y), torch.isneginf(y)


@pytest.mark.parametrize("backend, fmt", backend_format_pairs())
@pytest.mark.parametrize("where", ["weight", "activation", "both"])
def test_nan_inf_propagate_like_torch(backend, fmt, where):
    g = torch.Generator().manual_seed(21)
    w = torch.randn(12, 45, generator=g)
    x = torch.randn(6, 45, generator=g)
    if where in ("weight", "both"):
        w[1, 3] = NAN
        w[4, 40] = NAN  # NVFP4/MXFP4 mark the whole block NaN: dequantize shows it, torch follows
        if fmt == "e5m2":
            w[2, 5], w[3, 0] = INF, -INF
            w[5, 5] = 0.0
    if where in ("activation", "both"):
        x[0, 7], x[1, 5], x[2, 0], x[3, 44] = NAN, INF, -INF, INF
        x[4, 5] = -INF  # meets +inf (row 2) and 0 (row 5) in the weight: NaN, as IEEE says
    packed = softfp8.quantize(w, fmt)
    y = softfp8.linear(x, packed, backend=backend)
    want = x @ softfp8.dequantize(packed).T
    nan, pinf, ninf = _masks(want)
    assert nan.any() or pinf.any() or ninf.any()  # the case really has non-finite outputs
    for got, exp, name in zip(_masks(y), (nan, pinf, ninf), ("NaN", "+inf", "-inf")):
        assert torch.equal(got, exp), f"{name} mask differs from torch's"
    finite = torch.isfinite(want)
    assert rel_err(y[finite], fp64_reference(x, packed)[finite]) <= 1e-6


@pytest.mark.parametrize("backend, fmt", backend_format_pairs())
def test_half_activation_overflow_becomes_inf_like_torch(backend, fmt):
    """fp32 accumulation, then the cast to fp16: a sum past 65504 is inf, as torch's cast gives."""
    packed = softfp8.quantize(torch.full((3, 64), 4.0), fmt)
    x = torch.full((2, 64), 300.0, dtype=torch.float16)  # 64 * 300 * 4 = 76800 > 65504
    y = softfp8.linear(x, packed, backend=backend)
    want = (x.float() @ softfp8.dequantize(packed).T).half()
    assert torch.equal(torch.isposinf(y), torch.isposinf(want)) and torch.isposinf(y).all()


# -- sizes that are multiples of no block size ---------------------------------------------

@pytest.mark.parametrize("backend, fmt", backend_format_pairs())
@pytest.mark.parametrize("n, k", [(1, 15), (7, 31), (13, 33), (5, 47), (3, 129), (2, 1), (31, 97)])
def test_sizes_off_every_block_and_alignment(backend, fmt, n, k):
    g = torch.Generator().manual_seed(n * 1000 + k)
    w = torch.randn(n, k, generator=g)
    packed = softfp8.quantize(w, fmt)
    dq = softfp8.dequantize(packed)
    assert dq.shape == (n, k)  # the padding never shows
    assert rel_err(dq, w) < 0.3  # the right values in the right places (not a shifted row)
    x = torch.randn(4, k, generator=g)
    assert rel_err(softfp8.linear(x, packed, backend=backend), fp64_reference(x, packed)) <= 1e-6


def test_nvfp4_tiny_block_is_not_flushed_to_zero():
    """A block far below the tensor's largest whose E4M3 scale would round to zero keeps the
    smallest scale instead: 3 * 2^-9 * g is exactly representable and must survive."""
    g = 4.0 / (6 * 448)
    w = torch.tensor([[4.0] * 16, [3 * 2.0**-9 * g] + [0.0] * 15])
    assert softfp8.dequantize(softfp8.quantize(w, "nvfp4"))[1, 0] == w[1, 0]


@pytest.mark.parametrize("fmt", list(Format))
def test_denormal_weights_never_become_inf(fmt):
    """A row of fp32 denormals once got a denormal row scale, so coarse that w / scale passed
    E5M2's max and a finite weight came back as inf."""
    w = torch.tensor([[3.6734e-40, -1e-41, 2e-45], [1.0, 0.5, -0.25]])
    kw = {"row_scale": True} if fmt is Format.E5M2 else {}
    dq = softfp8.dequantize(softfp8.quantize(w, fmt, **kw))
    assert torch.isfinite(dq).all()
    assert (dq[0].abs() <= 2.0**-126).all()


# -- format names, env vars, select ---------------------------------------------------------

@pytest.mark.parametrize("name", ["E5M2", "e4m3", " NVFP4 ".strip(), "MxFp4"])
def test_format_names_case_insensitive(name):
    assert Format.parse(name).value == name.lower()


@pytest.mark.parametrize("call", [
    pytest.param(lambda: Format.parse("e4m3fnuz"), id="Format.parse"),
    pytest.param(lambda: select("int4", 1, "cpu"), id="select"),
    pytest.param(lambda: PackedWeight("fp8", (1, 4), torch.zeros(1, 4, dtype=torch.int32)),
                 id="PackedWeight"),
    pytest.param(lambda: softfp8.quantize(torch.randn(2, 2), "float8"), id="quantize"),
])
def test_unknown_format_name_lists_valid_ones(call):
    with pytest.raises(ValueError, match="'e5m2', 'e4m3', 'nvfp4', 'mxfp4'"):
        call()


@pytest.mark.parametrize("m, device, exc, match", [
    (-1, "cpu", ValueError, "m: expected a non-negative"),
    ("1", "cpu", TypeError, "m: expected an int"),
    (1.0, "cpu", TypeError, "m: expected an int"),
    (1, "gpu", ValueError, "device='gpu'"),
])
def test_select_bad_arguments(m, device, exc, match):
    with pytest.raises(exc, match=match):
        select("e5m2", m, device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only build's answer")
def test_select_cuda_on_cpu_only_build_is_unavailable_not_assertion():
    with pytest.raises(BackendUnavailable, match="cuda"):
        select("e5m2", 1, "cuda")


MISSING = [b for b in (Backend.NATIVE, Backend.TRITON, Backend.CUDA, Backend.NUMBA, Backend.TORCH)
           if b not in backends_for("e5m2")]


@pytest.mark.parametrize("backend", MISSING or [pytest.param(None, marks=pytest.mark.skip(
    reason="every backend runs here"))], ids=str)
def test_env_names_a_backend_that_cannot_run_here(monkeypatch, backend):
    monkeypatch.setenv("SOFTFP8_BACKEND", backend.value)
    with pytest.raises(BackendUnavailable, match=f"backend {backend.value}"):
        softfp8.linear(torch.randn(1, 7), packed_of("e5m2"))
    with pytest.raises(BackendUnavailable, match=f"backend {backend.value}"):
        select("e5m2", 1, "cpu")


@pytest.mark.parametrize("var, value", [("SOFTFP8_BACKEND", "gpu"), ("SOFTFP8_BACKEND", "reference"),
                                        ("SOFTFP8_E2M1_DECODE", "lut")])
def test_env_unknown_value_names_the_variable(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=f"{var}='{value}'.*expected one of"):
        softfp8.linear(torch.randn(1, 7), packed_of("nvfp4"))


def test_env_is_case_and_space_tolerant_and_explicit_argument_wins(monkeypatch):
    monkeypatch.setenv("SOFTFP8_BACKEND", " TORCH ")
    assert select("e5m2", 1, "cpu").backend is Backend.TORCH
    monkeypatch.setenv("SOFTFP8_BACKEND", "numba")
    assert select("e5m2", 1, "cpu", backend="torch").backend is Backend.TORCH
    # an invalid value raises even there: test_dispatch.py


# -- a corrupted PackedWeight (what a bad state_dict would give) -----------------------------

def _corruptions():
    e4 = packed_of("e4m3", 5, 7)
    nv = packed_of("nvfp4", 5, 40)
    mx = packed_of("mxfp4", 5, 40)
    i32 = torch.int32
    return [
        ("words-dtype", e4, dict(words=e4.words.to(torch.int64)), ValueError, "words.*int32"),
        ("words-float", e4, dict(words=e4.words.float()), ValueError, "words.*int32"),
        ("words-rows", e4, dict(words=e4.words[:4]), ValueError, r"words.*\(5, 4\)"),
        ("words-cols", nv, dict(words=torch.zeros(5, 4, dtype=i32)), ValueError, r"words.*\(5, 8\)"),
        ("words-missing", e4, dict(words=None), ValueError, "words: missing"),
        ("words-not-tensor", e4, dict(words=[[0]]), TypeError, "words.*list"),
        ("words-non-contiguous", e4, dict(words=torch.zeros(4, 5, dtype=i32).T), ValueError,
         "words.*contiguous"),
        ("row-scales-missing", e4, dict(scales=None), ValueError, "scales.*e4m3 needs"),
        ("row-scales-dtype", e4, dict(scales=e4.scales.half()), ValueError, "scales.*float32"),
        ("row-scales-shape", e4, dict(scales=e4.scales[:3]), ValueError, r"scales.*\(5,\)"),
        ("row-scales-device", e4, dict(scales=e4.scales.to("meta")), ValueError, "scales is on meta"),
        ("block-scales-missing", nv, dict(scales=None), ValueError, "scales: missing"),
        ("block-scales-dtype", mx, dict(scales=mx.scales.float()), ValueError, "scales.*uint8"),
        ("block-scales-shape", mx, dict(scales=mx.scales[:, :1]), ValueError, r"scales.*\(5, 2\)"),
        ("global-scale-missing", nv, dict(global_scale=None), ValueError, "global_scale: missing"),
        ("global-scale-shape", nv, dict(global_scale=nv.global_scale.reshape(1)), ValueError,
         r"global_scale.*shape \(\)"),
        ("global-scale-dtype", nv, dict(global_scale=nv.global_scale.double()), ValueError,
         "global_scale.*float32"),
        ("global-scale-device", nv, dict(global_scale=nv.global_scale.to("meta")), ValueError,
         "global_scale is on meta"),
        ("global-scale-extra", mx, dict(global_scale=torch.tensor(1.0)), ValueError,
         "global_scale: only nvfp4"),
        ("shape-3", e4, dict(shape=(5, 7, 1)), TypeError, "shape.*pair of ints"),
        ("shape-float", e4, dict(shape=(5.0, 7)), TypeError, "shape.*pair of ints"),
        ("shape-str", e4, dict(shape="57"), TypeError, "shape.*pair of ints"),
        ("shape-zero", e4, dict(shape=(0, 7)), ValueError, "shape.*positive"),
        ("shape-vs-words", e4, dict(shape=(5, 40)), ValueError, r"words.*\(5, 12\)"),
        ("fmt-unknown", e4, dict(fmt="e3m4"), ValueError, "fmt='e3m4'"),
        ("fmt-swapped", e4, dict(fmt="nvfp4"), ValueError, "scales.*uint8"),
    ]


@pytest.mark.parametrize("name, packed, change, exc, match", _corruptions(), ids=lambda v: v
                         if isinstance(v, str) else "")
def test_corrupted_packed_weight_names_the_field(name, packed, change, exc, match):
    with pytest.raises(exc, match=match):
        dataclasses.replace(packed, **change)


def test_packed_weight_is_frozen():
    packed = packed_of("e5m2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        packed.words = torch.zeros(5, 2, dtype=torch.int32)
