"""The native FP8 backend (W8A8 through torch._scaled_mm).

On CPU: refusal messages, routing with mocked capabilities, the activation quantizer against
softfp8's own bit-exact E4M3 encoder, and the whole matmul (padding, orientation, zero-copy
weights, the tensor-wise fallback) with torch._scaled_mm replaced by a pure-torch emulation that
enforces the CUDA constraints. On a GPU with FP8 units (-m gpu): the real thing.
"""
import warnings

import pytest
import torch
from conftest import rel_err

import softfp8
from softfp8 import Backend, BackendUnavailable, Format
from softfp8.backends import native
from softfp8.dispatch import BACKEND_ENV, select
from softfp8.quantize import encode_e4m3

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
# bf16 output rounding (2^-9 relative per element) is all that separates the native result from
# an exact computation on the same quantized operands.
PLUMBING_TOL = 2.0 ** -8


def weight_only(x, packed, bias=None):
    """The weight-only path native is compared with: fp64 dequantize-matmul."""
    y = x.double() @ softfp8.dequantize(packed).double().T
    return y if bias is None else y + bias.double()


# -- refusals and routing --------------------------------------------------------------------

def test_forced_native_on_cpu_names_the_missing_capability(monkeypatch):
    monkeypatch.delenv(BACKEND_ENV, raising=False)
    packed = softfp8.quantize(torch.randn(16, 32), "e4m3")
    with pytest.raises(BackendUnavailable, match=r"native.*cuda.*compute capability 8\.9"):
        softfp8.linear(torch.randn(2, 32), packed, backend="native")
    monkeypatch.setenv(BACKEND_ENV, "native")
    softfp8._settings.reload_environment()  # read once: a change after the first call needs this
    with pytest.raises(BackendUnavailable, match=r"cuda.*8\.9.*not cpu"):
        softfp8.linear(torch.randn(2, 32), packed)


@pytest.mark.parametrize("cap, ok", [((6, 1), False), ((7, 5), False), ((8, 0), False),
                                     ((8, 6), False), ((8, 9), True), ((9, 0), True),
                                     ((10, 0), True)])
def test_why_not_by_compute_capability(cap, ok):
    reason = native.NEEDS.why_not(Format.E4M3, torch.device("cuda"), cap)
    if ok:
        assert reason is None
    else:
        assert "8.9" in reason and ".".join(map(str, cap)) in reason


@pytest.mark.parametrize("fmt", [Format.NVFP4, Format.MXFP4])
def test_why_not_fp4_formats(fmt):
    assert "does not implement" in native.NEEDS.why_not(fmt, torch.device("cuda"), (9, 0))


@pytest.mark.parametrize("cap, ok", [((7, 5), False), ((8, 9), True), ((9, 0), True)])
def test_select_with_mocked_cuda(monkeypatch, cap, ok):
    from fake_backends import mock_gpus

    from softfp8 import capability
    from softfp8.capability import Check

    monkeypatch.delenv(BACKEND_ENV, raising=False)
    mock_gpus(monkeypatch, [cap])
    report = capability.collect(facts={
        ("cuda:0", "float8"): Check.yes("mocked"), ("cuda:0", "ftz_torch"): Check.no("mocked"),
        ("cuda:0", "scaled_mm"): Check.yes("mocked") if ok else Check.no("mocked: no FP8 units")})
    if ok:
        assert select("e5m2", 64, "cuda", backend="native", report=report).backend is Backend.NATIVE
    else:
        with pytest.raises(BackendUnavailable, match=r"8\.9 or newer, this GPU has 7\.5"):
            select("e5m2", 64, "cuda", backend="native", report=report)


def test_auto_accepts_follows_the_crossover():
    cuda = torch.device("cuda")
    below = native.auto_accepts(Format.E4M3, native.NATIVE_MIN_M - 1, cuda, None)
    assert below is not None and str(native.NATIVE_MIN_M) in below and "measured" in below
    assert native.auto_accepts(Format.E4M3, native.NATIVE_MIN_M, cuda, None) is None
    assert native.auto_accepts("e5m2", 4 * native.NATIVE_MIN_M, cuda, None) is None
    assert "nvfp4" in native.auto_accepts(Format.NVFP4, 4096, cuda, None)


def test_auto_refuses_rocm_and_old_torch(monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.version, "hip", "6.2.0")
    assert "ROCm" in native.auto_accepts(Format.E4M3, 4096, cuda, None)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch, "__version__", torch.torch_version.TorchVersion("2.4.1"))
    assert "2.5" in native.auto_accepts(Format.E4M3, 4096, cuda, None)


# -- the activation quantizer ----------------------------------------------------------------

def _codes(t):
    return t.view(torch.uint8)


def test_quantizer_matches_softfp8_encoder_and_maps_absmax_to_448():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 333, generator=g) * torch.logspace(-6, 6, 64)[:, None]
    codes, scale = native.quantize_activations(x)
    assert codes.dtype == E4M3 and scale.shape == (64, 1) and scale.dtype == torch.float32
    absmax = x.abs().amax(dim=1, keepdim=True)
    assert torch.equal(scale, absmax / 448.0)
    # torch's cast of the quotient, bit for bit as softfp8's independent integer encoder.
    assert torch.equal(_codes(codes), encode_e4m3(x / scale))
    top = x.abs().argmax(dim=1)
    assert torch.equal(_codes(codes)[torch.arange(64), top] & 0x7F, torch.full((64,), 0x7E,
                                                                             dtype=torch.uint8))
    deq = codes.float() * scale
    normal = (x / scale).abs() >= 2.0 ** -6  # E4M3 normals: relative error <= half an ulp
    assert ((deq - x).abs() <= 2.0 ** -4 * x.abs())[normal].all()


def test_quantizer_ties_round_to_even():
    # With 448 in the row the scale is exactly 1; the others lie halfway between E4M3 neighbours
    # (spacing 1 in [8, 16), 1/16 in [0.5, 1)) and must go to the even mantissa.
    x = torch.tensor([[448.0, 8.5, 9.5, 10.5, -11.5, 0.53125, 0.59375]])
    codes, scale = native.quantize_activations(x)
    assert scale.item() == 1.0
    assert codes.float().tolist() == [[448.0, 8.0, 10.0, 10.0, -12.0, 0.5, 0.625]]


def test_quantizer_half_inputs_match_fp32_and_edge_rows():
    g = torch.Generator().manual_seed(2)
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(8, 100, generator=g).to(dtype)
        c16, s16 = native.quantize_activations(x)
        c32, s32 = native.quantize_activations(x.float())
        assert torch.equal(_codes(c16), _codes(c32)) and torch.equal(s16, s32)
    x = torch.tensor([[0.0, 0.0, 0.0], [1.0, float("nan"), 2.0], [1.0, float("inf"), 2.0]])
    codes, scale = native.quantize_activations(x)
    assert scale[0].item() == 1.0 and _codes(codes)[0].tolist() == [0, 0, 0]
    assert torch.isnan(codes[1:].float()).any(dim=1).all()


# -- the matmul, with torch._scaled_mm emulated ----------------------------------------------

class EmulatedScaledMM:
    """torch._scaled_mm as on CUDA (row-wise via CUTLASS): its checks, then decode and multiply."""

    def __init__(self, rowwise=True):
        self.rowwise = rowwise
        self.calls = []

    def __call__(self, a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                 use_fast_accum=False):
        self.calls.append((a, b, scale_a, scale_b, bias, out_dtype))
        if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")
        if a.dtype not in (E4M3, E5M2) or b.dtype not in (E4M3, E5M2):
            raise RuntimeError("Expected mat1 and mat2 to be Float8 matrices")
        if a.dtype == b.dtype == E5M2:
            raise RuntimeError("Multiplication of two Float8_e5m2 matrices is not supported")
        if a.shape[1] % 16 or b.shape[0] % 16 or b.shape[1] % 16:
            raise RuntimeError("mat1 K and mat2 shape must be divisible by 16")
        if a.stride(1) != 1 or b.stride(0) != 1:
            raise RuntimeError("Only multiplication of row-major and column-major matrices")
        if scale_a.dtype != torch.float32 or scale_b.dtype != torch.float32:
            raise RuntimeError("scales must be float32")
        m, n = a.shape[0], b.shape[1]
        tensorwise = scale_a.numel() == 1 and scale_b.numel() == 1
        rowwise = (tuple(scale_a.shape) == (m, 1) and tuple(scale_b.shape) == (1, n)
                   and scale_a.is_contiguous() and scale_b.is_contiguous())
        if not (tensorwise or rowwise):
            raise RuntimeError("Invalid scaling configuration")
        if rowwise and not tensorwise:
            if not self.rowwise:
                raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED (emulated)")
            if out_dtype != torch.bfloat16:
                raise RuntimeError("Only bf16 high precision output types are supported for "
                                   "row-wise scaling.")
            if b.dtype != E4M3:
                raise RuntimeError("rowwise: mat2 must be float8_e4m3fn")
        if bias is not None:
            if out_dtype == torch.float32 or bias.dtype not in (torch.bfloat16, torch.float16):
                raise RuntimeError("bad bias dtype")
            if bias.numel() != n:
                raise RuntimeError(f"Bias must be size {n}")
        y = (a.float() @ b.float()) * scale_a * scale_b
        if bias is not None:
            y = y + bias.float()
        return y.to(out_dtype or a.dtype)


@pytest.fixture
def emulated(monkeypatch):
    fake = EmulatedScaledMM()
    monkeypatch.setattr(torch, "_scaled_mm", fake)
    return fake


def _expected(x, packed, bias):
    """The W8A8 product computed independently in fp64 from the same quantized activations."""
    codes, scale = native.quantize_activations(x)
    return weight_only(codes.double() * scale.double(), packed, bias)


def _make(fmt, n, k, *, seed):
    """A packed weight (E5M2 with row scales, to exercise them) and the generator, seeded."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    return softfp8.quantize(w, fmt, **({"row_scale": True} if fmt == "e5m2" else {})), g


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("m", [1, 2, 17])
@pytest.mark.parametrize("n, k", [(16, 32), (48, 17), (17, 32), (3, 3), (1, 1), (33, 100)])
def test_matmul_plumbing_is_exact_on_odd_shapes(emulated, fmt, m, n, k):
    packed, g = _make(fmt, n, k, seed=m * 1000 + n * 10 + k)
    x = torch.randn(m, k, generator=g)
    bias = torch.randn(n, generator=g)
    y = native.matmul(x, packed, bias)
    assert y.shape == (m, n) and y.dtype == torch.float32 and y.is_contiguous()
    assert rel_err(y, _expected(x, packed, bias)) <= PLUMBING_TOL
    (a, b, *_), = emulated.calls
    weight_first = not (fmt == "e4m3" and n % 16 == 0)
    w_op = a if weight_first else b
    # Zero-copy: the FP8 operand is the packed words' own storage, reinterpreted.
    assert w_op.untyped_storage().data_ptr() == packed.words.untyped_storage().data_ptr()
    assert tuple(w_op.shape) == ((n, packed.padded_k) if weight_first else (packed.padded_k, n))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [32, 40])
def test_matmul_half_activations_and_bias(emulated, dtype, n):
    packed, g = _make("e4m3", n, 64, seed=n)
    x = torch.randn(5, 64, generator=g).to(dtype)
    bias = torch.randn(n, generator=g).to(dtype)
    y = native.matmul(x, packed, bias)
    assert y.dtype == dtype and y.shape == (5, n) and y.is_contiguous()
    half_ulp = 2.0 ** -8 if dtype is torch.bfloat16 else 2.0 ** -11
    assert rel_err(y, _expected(x, packed, bias)) <= PLUMBING_TOL + 2 * half_ulp
    bias_fused = emulated.calls[0][4] is not None
    assert bias_fused == (dtype is torch.bfloat16 and n % 16 == 0)


def test_unscaled_e5m2_uses_unit_scales(emulated):
    g = torch.Generator().manual_seed(5)
    packed = softfp8.quantize(torch.randn(20, 48, generator=g), "e5m2")
    assert packed.scales is None
    x = torch.randn(3, 48, generator=g)
    assert rel_err(native.matmul(x, packed), _expected(x, packed, None)) <= PLUMBING_TOL


def test_rowwise_refused_falls_back_to_tensorwise(monkeypatch):
    fake = EmulatedScaledMM(rowwise=False)
    monkeypatch.setattr(torch, "_scaled_mm", fake)
    monkeypatch.setattr(native, "_ROWWISE_REFUSED", set())
    packed, g = _make("e4m3", 32, 64, seed=9)
    x = torch.randn(4, 64, generator=g)
    bias = torch.randn(32, generator=g)
    with pytest.warns(RuntimeWarning, match="refused row-wise"):
        y = native.matmul(x, packed, bias)
    assert rel_err(y, _expected(x, packed, bias)) <= 1e-6  # fp32 output: no bf16 rounding
    fake.calls.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per shape, and not retried
        native.matmul(x, packed, bias)
    assert len(fake.calls) == 1 and fake.calls[0][2].numel() == 1


def test_w8a8_error_against_weight_only_is_within_the_documented_bound(emulated):
    g = torch.Generator().manual_seed(7)
    packed = softfp8.quantize(torch.randn(256, 1024, generator=g) * 0.02, "e4m3")
    x = torch.randn(64, 1024, generator=g)
    err = rel_err(native.matmul(x, packed), weight_only(x, packed))
    print(f"\nW8A8 (emulated _scaled_mm, CPU) vs weight-only, gaussian x: rel err {err:.4f}")
    # Sanity on both sides: the activations really are quantized, and within the bound.
    assert 1e-3 < err <= native.EXPECTED_REL_ERR_BOUND


def test_emulation_agrees_with_torch_cpu_scaled_mm():
    """Where this torch runs _scaled_mm on CPU, the emulation used above gives the same result."""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(32, 64, generator=g).to(E4M3)
    b = torch.randn(48, 64, generator=g).to(E4M3).t()
    sa, sb = torch.rand(32, 1, generator=g) + 0.5, torch.rand(1, 48, generator=g) + 0.5
    try:
        real = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as err:
        pytest.skip(f"torch._scaled_mm does not run on CPU here: {err}")
    fake = EmulatedScaledMM()(a, b, sa, sb, out_dtype=torch.bfloat16)
    assert rel_err(real, fake) <= PLUMBING_TOL


def test_matmul_on_this_torchs_own_cpu_scaled_mm():
    """Where torch runs _scaled_mm on CPU (2.13 does), the unpatched backend runs end to end:
    a second, real implementation of the argument order and scale semantics the emulation
    assumes. Both orientations and both weight formats."""
    for fmt, n in (("e4m3", 32), ("e4m3", 33), ("e5m2", 32)):
        packed, g = _make(fmt, n, 40, seed=n)
        x, bias = torch.randn(3, 40, generator=g), torch.randn(n, generator=g)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a row-wise refusal is a skip, not a pass
                y = native.matmul(x, packed, bias)
        except (RuntimeError, NotImplementedError, RuntimeWarning) as err:
            pytest.skip(f"torch._scaled_mm does not run row-wise on CPU here: {err}")
        assert rel_err(y, _expected(x, packed, bias)) <= PLUMBING_TOL


# -- the real thing, on a GPU with FP8 units ------------------------------------------------

def _fp8_gpu():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


@pytest.mark.gpu
@pytest.mark.skipif(not _fp8_gpu(), reason="needs a CUDA GPU of compute capability 8.9+")
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("m", [1, 2, 16, 17, 256])
@pytest.mark.parametrize("n, k", [(4096, 4096), (4097, 4095), (17, 33), (6144, 4096)])
def test_gpu_parity_with_weight_only(fmt, dtype, m, n, k):
    g = torch.Generator(device="cuda").manual_seed(m * 31 + n + k)
    packed = softfp8.quantize(torch.randn(n, k, device="cuda", generator=g) * 0.02, fmt,
                              **({"row_scale": True} if fmt == "e5m2" else {}))
    x = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    bias = torch.randn(n, device="cuda", generator=g).to(dtype)
    y = softfp8.linear(x, packed, bias, backend="native")
    assert y.dtype == dtype and y.shape == (m, n)
    # Same quantized operands in fp64: the GPU computes exactly the W8A8 product ...
    half_ulp = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8, torch.float32: 0.0}[dtype]
    assert rel_err(y, _expected(x, packed, bias)) <= PLUMBING_TOL + 2 * half_ulp
    # ... and that product stays within the documented bound of the weight-only path.
    err = rel_err(y, weight_only(x, packed, bias))
    print(f"\nnative {fmt} {dtype} m={m} n={n} k={k}: rel err vs weight-only {err:.4f}")
    assert err <= native.EXPECTED_REL_ERR_BOUND
