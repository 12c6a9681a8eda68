"""quantize(scales="absmax" | "mse"): the error-minimising search never does worse than absmax,
its codes are the format's ordinary codes, and it reaches quantize through every entry point."""
import pytest
import torch
from hardening_support import backends_for
from torch import nn

import softfp8
from softfp8 import Format, ScaleMethod
from softfp8 import _scale_search
from softfp8.decode import decode_e2m1_to_f32, decode_e4m3_to_f32, decode_e5m2_to_f32, decode_e8m0
from softfp8.formats import SPECS
from softfp8.quantize import encode_e2m1, encode_minifloat, unpack_codes

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


SEARCHED_FORMATS = [f for f in Format if f is not Format.E4M3_B128]
"""The formats with a scale search (e4m3_b128's tile scales are absmax only: its own test)."""

PROPS = settings(deadline=None, max_examples=60, derandomize=True)
FP4 = [Format.NVFP4, Format.MXFP4]
# E5M2's scale search needs its row scales.
KWARGS = {Format.E5M2: {"row_scale": True}}


def _unit(fmt: Format) -> int:
    """Weights per scale along K: a block for FP4, the padded row for 8-bit row scales."""
    return SPECS[fmt].block or 0


def errors(w: torch.Tensor, packed: softfp8.PackedWeight) -> torch.Tensor:
    """Squared error per block (FP4) or row (8-bit), float64, the same sums in the same order as
    the search forms. Non-finite weights and NaN blocks are left out (NaN is checked apart)."""
    dq = softfp8.dequantize(packed).double()
    d = torch.where(torch.isfinite(w) & ~torch.isnan(dq), dq - w.double(), 0.0)
    block = _unit(packed.fmt)
    if not block:
        return d.square().sum(dim=1)
    n, k = w.shape
    padded = torch.zeros(n, packed.padded_k, dtype=torch.float64)
    padded[:, :k] = d
    return padded.view(n, -1, block).square().sum(dim=-1)


def stored_codes(packed: softfp8.PackedWeight) -> torch.Tensor:
    return unpack_codes(packed.words, packed.fmt, packed.shape[1])


# -- the fast E2M1 rounder the search uses ----------------------------------------------------

def test_e2m1_magnitude_equals_decoding_the_encoder():
    g = torch.Generator().manual_seed(11)
    x = torch.cat([torch.rand(1 << 18, generator=g) * 8, torch.arange(0, 33) * 0.25,  # all ties
                   torch.tensor([0.0, 1e-45, 2.0**-126, 5.999, 6.0, 6.5, 7.0, 1e30, float("inf")])])
    want = decode_e2m1_to_f32(encode_e2m1(x)).abs()
    assert torch.equal(_scale_search.e2m1_magnitude(x), want)


# -- never worse than absmax ------------------------------------------------------------------

@st.composite
def weights(draw):
    """Random weights at any scale, or an adversarial pattern."""
    n, k = draw(st.integers(1, 4)), draw(st.integers(1, 80))
    kind = draw(st.sampled_from(["random", "zeros", "outlier", "nan", "subnormal", "negative",
                                 "constant"]))
    exp = draw(st.integers(-40, 40))
    vals = torch.tensor(draw(st.lists(st.floats(-4, 4, width=32), min_size=n * k,
                                      max_size=n * k)), dtype=torch.float32).reshape(n, k)
    if kind == "zeros":
        return torch.zeros(n, k)
    if kind == "subnormal":
        return vals * 2.0**-140  # fp32 denormals only
    w = vals * 2.0**exp
    if kind == "outlier":
        w[draw(st.integers(0, n - 1)), draw(st.integers(0, k - 1))] = 1e4 * 2.0**exp
    elif kind == "nan":
        w[draw(st.integers(0, n - 1)), draw(st.integers(0, k - 1))] = float("nan")
    elif kind == "negative":
        w = -w.abs()
    elif kind == "constant":
        w = torch.full((n, k), 2.0**exp * 1.37)
    return w


@PROPS
@given(fmt=st.sampled_from(SEARCHED_FORMATS), w=weights())
@example(fmt=Format.NVFP4, w=torch.tensor([[4.0], [1e-5]]))
@example(fmt=Format.NVFP4, w=torch.tensor([[1.0], [2.7425e-23]]))
@example(fmt=Format.MXFP4, w=torch.tensor([[7.7473e-40]]))
@example(fmt=Format.MXFP4, w=torch.tensor([[2.0**-129], [2.0**-129 * 1.5]]))
@example(fmt=Format.E5M2, w=torch.tensor([[3.6734e-40]]))
@example(fmt=Format.MXFP4, w=torch.tensor([[7.9, 1.0, 0.5]]))  # OCP rule clips 7.9 to 6
def test_mse_never_has_a_larger_error_than_absmax(fmt, w):
    kw = KWARGS.get(fmt, {})
    absmax = softfp8.quantize(w, fmt, scales="absmax", **kw)
    mse = softfp8.quantize(w, fmt, scales="mse", **kw)
    a, m = errors(w, absmax), errors(w, mse)
    assert (m <= a).all(), (a[m > a], m[m > a])
    # NaN stays NaN, in the same places (the whole NVFP4/MXFP4 block, the one E4M3/E5M2 value).
    nan = torch.isnan(softfp8.dequantize(mse))
    assert torch.equal(nan, torch.isnan(softfp8.dequantize(absmax)))


@pytest.mark.parametrize("fmt", SEARCHED_FORMATS)
def test_mse_lowers_the_error_of_gaussian_weights(fmt):
    w = torch.randn(64, 512, generator=torch.Generator().manual_seed(2)) * 0.02
    kw = KWARGS.get(fmt, {})
    a = errors(w, softfp8.quantize(w, fmt, scales="absmax", **kw)).sum()
    m = errors(w, softfp8.quantize(w, fmt, scales="mse", **kw)).sum()
    print(f"\n{fmt}: mse / absmax squared error {m / a:.3f}")
    # Measured 0.757 (nvfp4), 0.950 (mxfp4: three powers of two only), 0.957 (e4m3), 0.949 (e5m2)
    bound = {Format.NVFP4: 0.8, Format.MXFP4: 0.96, Format.E4M3: 0.97, Format.E5M2: 0.96}[fmt]
    assert m < bound * a


@pytest.mark.parametrize("fmt", [Format.E4M3, Format.NVFP4, Format.MXFP4])
def test_inf_is_refused_by_both_methods(fmt):
    w = torch.randn(2, 40)
    w[1, 3] = float("inf")
    for method in ScaleMethod:
        with pytest.raises(ValueError, match="weight.*inf"):
            softfp8.quantize(w, fmt, scales=method)


def test_e5m2_inf_stays_inf_under_mse_row_scales():
    w = torch.randn(2, 40)
    w[0, 5] = -float("inf")
    dq = softfp8.dequantize(softfp8.quantize(w, "e5m2", row_scale=True, scales="mse"))
    assert dq[0, 5] == -float("inf") and torch.isfinite(dq[1]).all()


# -- the codes are ordinary codes -------------------------------------------------------------

def reencode(packed: softfp8.PackedWeight) -> torch.Tensor:
    """The codes of the dequantized weight divided by the packed weight's own scales."""
    dq, fmt = softfp8.dequantize(packed), packed.fmt
    if fmt in (Format.E5M2, Format.E4M3):
        x = dq if packed.scales is None else dq / packed.scales[:, None]
        return encode_minifloat(x, SPECS[fmt].element)
    n, k = packed.shape
    block = SPECS[fmt].block
    if fmt is Format.NVFP4:
        scale = decode_e4m3_to_f32(packed.scales) * packed.global_scale
    else:
        scale = decode_e8m0(packed.scales)
    padded = torch.zeros(n, packed.padded_k)
    padded[:, :k] = dq
    x = padded.view(n, -1, block) / torch.where(scale > 0, scale, 1.0)[..., None]
    return encode_e2m1(x).view(n, -1)[:, :k]


@pytest.mark.parametrize("fmt", SEARCHED_FORMATS)
@pytest.mark.parametrize("k", [1, 15, 17, 33, 47, 100, 257])
def test_round_trip_with_the_same_scales_gives_the_same_codes(fmt, k):
    g = torch.Generator().manual_seed(k)
    w = torch.randn(7, k, generator=g) * torch.exp2(torch.randint(-6, 6, (7, 1), generator=g))
    w[3, k // 2] = 30.0  # an outlier row
    p = softfp8.quantize(w, fmt, scales="mse", **KWARGS.get(fmt, {}))
    assert p.shape == (7, k)
    assert torch.equal(reencode(p), stored_codes(p))


def test_row_scale_search_clips_only_finite_values_to_the_max():
    # A shrunk E5M2 row scale puts the row's largest value past 57344: it saturates, never inf.
    w = torch.zeros(1, 64)
    w[0, 0], w[0, 1:] = 1.0, torch.linspace(-0.5, 0.5, 63)
    cands = [torch.tensor([1 / 57344]), torch.tensor([0.9 / 57344])]
    for s in cands:
        err = _scale_search.row_scale_error(w, s, SPECS[Format.E5M2].element)
        assert torch.isfinite(err).all()
    codes = _scale_search.encode_saturating(w / cands[1], SPECS[Format.E5M2].element)
    assert decode_e5m2_to_f32(codes)[0, 0] == 57344.0


@pytest.mark.parametrize("fmt", SEARCHED_FORMATS)
def test_chunking_does_not_change_the_result(fmt, monkeypatch):
    w = torch.randn(37, 200, generator=torch.Generator().manual_seed(4))
    whole = softfp8.quantize(w, fmt, scales="mse", **KWARGS.get(fmt, {}))
    monkeypatch.setattr(_scale_search, "CHUNK_ELEMENTS", 450)  # two or three rows at a time
    chunked = softfp8.quantize(w, fmt, scales="mse", **KWARGS.get(fmt, {}))
    for a, b in zip(whole.tensors(), chunked.tensors()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("fmt", SEARCHED_FORMATS)
def test_every_cpu_backend_reads_mse_codes(fmt):
    w = torch.randn(24, 96, generator=torch.Generator().manual_seed(5))
    x = torch.randn(3, 96, generator=torch.Generator().manual_seed(6))
    p = softfp8.quantize(w, fmt, scales="mse", **KWARGS.get(fmt, {}))
    ref = x.double() @ softfp8.dequantize(p).double().T
    for backend in backends_for(fmt, "cpu", 3):
        y = softfp8.linear(x, p, backend=backend)
        assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-6, backend


# -- defaults, entry points, bad input --------------------------------------------------------

@pytest.mark.parametrize("fmt", SEARCHED_FORMATS)
def test_default_is_the_documented_method(fmt):
    w = torch.randn(16, 64, generator=torch.Generator().manual_seed(7))
    kw = KWARGS.get(fmt, {})
    default = softfp8.quantize(w, fmt, **kw)
    chosen = softfp8.quantize(w, fmt, scales=_scale_search.DEFAULT_METHOD[fmt], **kw)
    for a, b in zip(default.tensors(), chosen.tensors()):
        assert torch.equal(a, b)
    assert _scale_search.DEFAULT_METHOD[fmt] is (ScaleMethod.MSE if fmt in FP4 else
                                                ScaleMethod.ABSMAX)


def test_scales_reach_quantize_through_from_linear_and_quantize_model():
    lin = nn.Linear(64, 8)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(8, 64, generator=torch.Generator().manual_seed(8)))
    for method in ScaleMethod:
        want = softfp8.quantize(lin.weight, "mxfp4", scales=method)
        got = softfp8.Linear.from_linear(lin, "mxfp4", scales=method).packed
        assert torch.equal(got.scales, want.scales) and torch.equal(got.words, want.words)
        model = nn.Sequential(nn.Linear(64, 8))
        model[0].load_state_dict(lin.state_dict())
        softfp8.quantize_model(model, "mxfp4", scales=method, progress=False)
        assert torch.equal(model[0].packed.scales, want.scales)
    absmax = softfp8.quantize(lin.weight, "mxfp4", scales="absmax").scales
    assert not torch.equal(absmax, softfp8.quantize(lin.weight, "mxfp4", scales="mse").scales)


@pytest.mark.parametrize("bad", ["minmax", "", 3, None.__class__])
def test_unknown_scales_value_names_the_valid_ones(bad):
    with pytest.raises(ValueError, match=r"scales=.*expected one of 'absmax', 'mse'"):
        softfp8.quantize(torch.randn(2, 16), "nvfp4", scales=bad)
    with pytest.raises(ValueError, match=r"scales=.*'absmax', 'mse'"):
        softfp8.Linear.from_linear(nn.Linear(16, 2), "nvfp4", scales=bad)


def test_scales_accepts_the_enum_and_any_case():
    w = torch.randn(4, 32)
    a = softfp8.quantize(w, "nvfp4", scales="MSE")
    b = softfp8.quantize(w, "nvfp4", scales=ScaleMethod.MSE)
    assert torch.equal(a.scales, b.scales) and str(ScaleMethod.MSE) == "mse"


def test_nvfp4_tensor_scale_search_keeps_the_least_total_error(monkeypatch):
    w = torch.randn(32, 256, generator=torch.Generator().manual_seed(9)) * 0.02
    w[5, 17] = 0.5  # one outlier sets the absmax tensor scale
    plain = softfp8.quantize(w, "nvfp4", scales="mse")
    factors = (1.0, 2**0.25, 2**0.5, 2**0.75)
    monkeypatch.setattr(_scale_search, "NVFP4_TENSOR_FACTORS", factors)
    searched = softfp8.quantize(w, "nvfp4", scales="mse")
    assert any(torch.equal(searched.global_scale, plain.global_scale * f) for f in factors)
    assert errors(w, searched).sum() <= errors(w, plain).sum()


def test_tile_scaled_e4m3_takes_absmax_only():
    w = torch.randn(130, 260)
    assert torch.equal(softfp8.quantize(w, Format.E4M3_B128, scales="absmax").words,
                       softfp8.quantize(w, Format.E4M3_B128).words)
    with pytest.raises(ValueError, match="e4m3_b128's tile scales are found by absmax only"):
        softfp8.quantize(w, Format.E4M3_B128, scales="mse")
