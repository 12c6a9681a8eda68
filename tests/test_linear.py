"""linear() on every backend available in this run, against an fp64 dequantize-matmul."""
import pytest
import torch
from conftest import rel_err

import softfp8
from softfp8 import Backend, Format
from softfp8.dispatch import BackendUnavailable, select

SHAPES = [(1, 1), (3, 17), (17, 3), (1, 4097), (4097, 1), (33, 4097), (17, 17)]


def available_backends(device="cpu"):
    found = []
    for b in (Backend.NATIVE, Backend.TRITON, Backend.CUDA, Backend.NUMBA, Backend.TORCH):
        try:
            select(Format.E5M2, 1, device, backend=b)
        except BackendUnavailable:
            continue
        found.append(b)
    return found


BACKENDS = available_backends()


def fp64_reference(x, packed, bias=None):
    y = x.double() @ softfp8.dequantize(packed).double().T
    return y if bias is None else y + bias.double()


@pytest.fixture(params=BACKENDS, ids=str)
def backend(request):
    return request.param


@pytest.mark.parametrize("fmt", list(Format))
@pytest.mark.parametrize("n, k", SHAPES)
def test_gemv_matches_fp64(backend, fmt, n, k):
    g = torch.Generator().manual_seed(n * 7919 + k)
    w = torch.randn(n, k, generator=g)
    x = torch.randn(1, k, generator=g)
    bias = torch.randn(n, generator=g)
    packed = softfp8.quantize(w, fmt)
    y = softfp8.linear(x, packed, bias, backend=backend)
    assert y.shape == (1, n) and y.dtype == torch.float32
    assert rel_err(y, fp64_reference(x, packed, bias)) <= 1e-6


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("fmt", list(Format))
def test_half_activations(backend, fmt, dtype, tol):
    g = torch.Generator().manual_seed(11)
    packed = softfp8.quantize(torch.randn(40, 300, generator=g), fmt)
    x = torch.randn(3, 300, generator=g).to(dtype)
    y = softfp8.linear(x, packed, backend=backend)
    assert y.dtype == dtype
    assert rel_err(y, fp64_reference(x, packed)) <= tol


def test_leading_dimensions_and_empty_batch(backend):
    packed = softfp8.quantize(torch.randn(5, 7), "e4m3")
    x = torch.randn(2, 3, 7)
    y = softfp8.linear(x, packed, backend=backend)
    assert y.shape == (2, 3, 5)
    torch.testing.assert_close(y, softfp8.linear(x.reshape(6, 7), packed).reshape(2, 3, 5))
    assert softfp8.linear(torch.randn(0, 7), packed, backend=backend).shape == (0, 5)


def test_non_contiguous_activation_gives_correct_result(backend):
    packed = softfp8.quantize(torch.randn(9, 16), "e5m2")
    x = torch.randn(16, 4).T  # [4, 16], transposed view
    assert not x.is_contiguous()
    assert rel_err(softfp8.linear(x, packed, backend=backend), fp64_reference(x, packed)) <= 1e-6


def test_quantization_error_per_format_is_reported():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(512, 1024, generator=g) * 0.02
    x = torch.randn(1, 1024, generator=g)
    exact = x.double() @ w.double().T
    for fmt in Format:
        err = rel_err(softfp8.linear(x, softfp8.quantize(w, fmt)), exact)
        print(f"\n{fmt}: GEMV error against the fp32 layer {err:.2%}")
        assert 0 < err < 0.2


@pytest.mark.parametrize("call, exc, match", [
    (lambda p: softfp8.linear(torch.randn(1, 8), p), ValueError, "x.*last dimension of 7"),
    (lambda p: softfp8.linear(torch.ones(1, 7, dtype=torch.int64), p), TypeError, "x.*float"),
    (lambda p: softfp8.linear([1.0] * 7, p), TypeError, "x.*Tensor"),
    (lambda p: softfp8.linear(torch.randn(1, 7), "w"), TypeError, "packed.*PackedWeight"),
    (lambda p: softfp8.linear(torch.randn(1, 7), p, torch.randn(4)), ValueError, r"bias.*\(5,\)"),
    (lambda p: softfp8.linear(torch.randn(1, 7), p, backend="gpu"), ValueError,
     "backend='gpu'.*'auto', 'native', 'triton', 'cuda', 'numba', 'torch'"),
    (lambda p: softfp8.linear(torch.randn(1, 7), p, e2m1="fast"), ValueError, "e2m1"),
])
def test_bad_linear_input(call, exc, match):
    packed = softfp8.quantize(torch.randn(5, 7), "e5m2")
    with pytest.raises(exc, match=match):
        call(packed)


def test_env_backend_unknown_and_unavailable(monkeypatch):
    packed = softfp8.quantize(torch.randn(5, 7), "e5m2")
    monkeypatch.setenv("SOFTFP8_BACKEND", "tpu")
    with pytest.raises(ValueError, match="SOFTFP8_BACKEND='tpu'"):
        softfp8.linear(torch.randn(1, 7), packed)
    monkeypatch.setenv("SOFTFP8_BACKEND", "native")
    softfp8._settings.reload_environment()  # read once: a change after the first call needs this
    with pytest.raises(BackendUnavailable, match="native"):
        softfp8.linear(torch.randn(1, 7), packed)
    monkeypatch.setenv("SOFTFP8_BACKEND", "torch")
    softfp8._settings.reload_environment()
    assert softfp8.linear(torch.randn(1, 7), packed).shape == (1, 5)
