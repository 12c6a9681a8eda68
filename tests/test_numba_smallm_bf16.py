"""The small-M kernel with bf16 products (softfp8/backends/numba/_smallm_bf16, _dp_rows): its
row decoder bit-exact over every code, x's bf16 terms, parity with the reference backend over odd
M, N and K (K not a multiple of the block or of a step), and the cases it hands back to the
float32 kernels (values vdpbf16ps would flush or codes it does not decode)."""
import pytest
import torch
from conftest import rel_err, same_bits
from numba_support import (HAND_BACK_CASES, assert_backend_matches_reference, hand_back_case,
                           quantized, with_codes)

import softfp8
from softfp8.formats import Format, PackedWeight

numba = pytest.importorskip("numba")
np = pytest.importorskip("numpy")
B = pytest.importorskip("softfp8.backends.numba._smallm_bf16")
from softfp8.backends import numba as cpu_backend  # noqa: E402
from softfp8.backends.numba import _dp_rows  # noqa: E402
from test_numba_smallm import every_code_weight  # noqa: E402

needs_bf16 = pytest.mark.skipif(not B.available(), reason="numba does not target AVX-512 BF16 here")
FORMATS = ["e5m2", "e5m2_rowscale", "e4m3", "nvfp4", "mxfp4", "e4m3_b128"]


def decoded_bf16(packed: PackedWeight, kind: int) -> torch.Tensor:
    """_decode_bf16 over every row, back in K order, as float32."""
    n, k = packed.shape
    kp = packed.padded_k
    fp4 = packed.fmt in (Format.NVFP4, Format.MXFP4)
    codes = np.zeros((0, 1), np.uint8) if fp4 else packed.words.view(torch.uint8).numpy()
    words = packed.words.numpy() if fp4 else np.zeros((0, 1), np.int32)
    scales = packed.scales.numpy() if fp4 else np.zeros((1, 1), np.uint8)
    out = np.zeros((n, kp), np.uint16)
    sw = np.empty(kp // 8 + 16, np.float32)
    for r in range(n):
        B._decode_bf16(kind, codes, words, scales, r, out[r], sw)
    got = torch.from_numpy(out.astype(np.int16)).view(torch.bfloat16).float()
    if fp4:
        order = torch.from_numpy(B.fp4_order(kp))
        back = torch.empty_like(got)
        back[:, order] = got
        got = back
    return got[:, :k]


@needs_bf16
@pytest.mark.parametrize("fmt, kind", [("e5m2", B.E5M2), ("e4m3", B.E4M3), ("nvfp4", B.NVFP4),
                                       ("mxfp4", B.MXFP4)])
def test_row_decoder_every_code_is_exact(fmt, kind):
    """Every code at every position, as bf16, is the reference's value (FP8 before its row
    scales, NVFP4 before its tensor scale; the FP4 scale codes the kernel takes: NVFP4 below
    0x7F, MXFP4 1..254). The FP4 rows hold whole steps and a tail (K = 512 + 64: 8 words)."""
    packed = every_code_weight(fmt)
    if fmt in ("nvfp4", "mxfp4"):
        n, k = packed.shape
        k2 = k + 64
        codes = packed.words.view(torch.uint8)
        codes = torch.cat([codes, codes[:, :32]], dim=1).contiguous()
        block = 16 if fmt == "nvfp4" else 32
        s = packed.scales
        s = torch.cat([s, s[:, :64 // block]], dim=1)
        s = s % 0x7F if fmt == "nvfp4" else s.clamp(1, 254)
        gs = torch.tensor(1.0) if fmt == "nvfp4" else None
        packed = PackedWeight(fmt, (n, k2), codes.view(torch.int32), s.contiguous(), gs)
    elif fmt == "e4m3":
        packed = PackedWeight(fmt, packed.shape, packed.words, torch.ones(packed.shape[0]))
    assert bool(same_bits(decoded_bf16(packed, kind), softfp8.dequantize(packed)).all())


@needs_bf16
def test_e4m3_without_nan_fix_decodes_every_other_code_alike():
    packed = every_code_weight("e4m3")
    packed = PackedWeight("e4m3", packed.shape, packed.words, torch.ones(packed.shape[0]))
    fixed, finite = decoded_bf16(packed, B.E4M3), decoded_bf16(packed, B.E4M3_FINITE)
    nan = torch.isnan(softfp8.dequantize(packed))
    assert nan.any() and torch.isnan(fixed[nan]).all()
    assert bool(same_bits(fixed[~nan], finite[~nan]).all())


@pytest.mark.parametrize("dtype, terms", [(torch.bfloat16, 1), (torch.float16, 2),
                                          (torch.float32, 3)])
def test_x_terms_sum_to_x_exactly(dtype, terms):
    """bf16 x is one term, float16 x two, float32 x three: each set sums to x exactly (so every
    product with a bf16 weight is exact), and the exponent range is x's."""
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(3, 77, generator=g) * 10).to(dtype).float()
    x[0, :4] = torch.tensor([1 + 2.0 ** -23, -(1 - 2.0 ** -24), 3.0, 0.0]).to(dtype).float()
    x16 = np.zeros((3 * terms, 96), np.uint16)
    ok, low, high = B.split_x(x.numpy(), terms, x16)
    t = torch.from_numpy(x16.astype(np.int16)).view(torch.bfloat16).double().view(3, terms, 96)
    assert _dp_rows._TERMS.get(dtype, 3) == terms
    assert ok and int(torch.frexp(x.abs().max())[1]) - 1 == high
    assert torch.equal(t.sum(dim=1)[:, :77], x.double()) and (t[:, :, 77:] == 0).all()
    x[1, 3] = float("inf")
    assert not B.split_x(x.numpy(), terms, x16)[0]


# (M, N, K): M over one tile of x rows and its tails, N past a group of rows, K off every step
# and block (FP4: words past the whole steps)
CASES = [(m, n, k) for m, n, k in [(1, 5, 40), (2, 37, 1000), (3, 13, 333), (5, 67, 129),
                                   (8, 9, 4097), (13, 21, 75), (16, 130, 250), (33, 7, 513)]]


@needs_bf16
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("m, n, k", CASES, ids=str)
def test_matches_the_reference_backend(fmt, dtype, m, n, k):
    packed, g = quantized(fmt, n, k, seed=m * 131 + n * 7 + k)
    x = torch.randn(m, k, generator=g).to(dtype)
    y = _dp_rows.matmul(x, packed, 2)
    assert y is not None and y.shape == (m, n) and y.dtype == torch.float32
    ref = softfp8.linear(x.float(), packed, backend="torch")
    assert rel_err(y, ref) <= 1e-5


@needs_bf16
@pytest.mark.parametrize("fmt", ["e5m2", "e4m3", "nvfp4", "mxfp4"])
def test_backend_routes_small_m_here(fmt, monkeypatch):
    """cpu_backend.matmul runs this kernel for bf16 x between the GEMV rows or the fused kernel
    and the tiles (y in bf16, as torch's bf16 matmul gives it: within bf16's rounding of
    float32's answer)."""
    packed, g = quantized(fmt, 19, 300, seed=4)
    m = max(cpu_backend.GEMV_ROWS_MAX_M[packed.fmt], _dp_rows.FUSED_MAX_ROWS[packed.fmt]) + 1
    x = torch.randn(m, 300, generator=g).bfloat16()
    assert _dp_rows.below_crossover(m, packed.fmt, x.dtype)
    calls = []
    real = _dp_rows.matmul
    monkeypatch.setattr(_dp_rows, "matmul", lambda *a: calls.append(1) or real(*a))
    y = cpu_backend.matmul(x, packed)
    assert calls and y.dtype == torch.bfloat16
    assert rel_err(y.float(), softfp8.linear(x.float(), packed, backend="torch")) <= 2.0 ** -8


@needs_bf16
def test_e4m3_b128_bf16_x_takes_it_before_the_gemv_rows(monkeypatch):
    """E4M3_B128 (no fused kernel) with bf16 x from DP_FIRST_MIN_M_BF16 rows runs this kernel,
    not a GEMV per row; float32 x at that M keeps the GEMV rows."""
    packed, g = quantized("e4m3_b128", 140, 300, seed=5)
    m = _dp_rows.DP_FIRST_MIN_M_BF16[packed.fmt]
    assert m <= cpu_backend.GEMV_ROWS_MAX_M[packed.fmt]
    calls = []
    real = _dp_rows.matmul
    monkeypatch.setattr(_dp_rows, "matmul", lambda *a: calls.append(a[0].dtype) or real(*a))
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(m, 300, generator=g).to(dtype)
        y = cpu_backend.matmul(x, packed)
        ref = softfp8.linear(x.float(), packed, backend="torch")
        assert rel_err(y.float(), ref) <= (2.0 ** -8 if dtype == torch.bfloat16 else 1e-5)
    assert calls == [torch.bfloat16]


@needs_bf16
def test_e4m3_b128_bf16_x_leaves_it_at_its_crossover(monkeypatch):
    """From DP_TILE_MIN_M_BF16 rows E4M3_B128's bf16 x takes the float32 tiles, not this kernel
    (passing over the GEMV rows does not pass over the crossover)."""
    packed, g = quantized("e4m3_b128", 9, 40, seed=7)
    monkeypatch.setitem(_dp_rows.DP_TILE_MIN_M_BF16, packed.fmt, 8)
    calls = []
    real = _dp_rows.matmul
    monkeypatch.setattr(_dp_rows, "matmul", lambda *a: calls.append(a[0].shape[0]) or real(*a))
    for m in (7, 8):
        x = torch.randn(m, 40, generator=g).bfloat16()
        y = cpu_backend.matmul(x, packed)
        assert rel_err(y.float(), softfp8.linear(x.float(), packed, backend="torch")) <= 2.0 ** -8
    assert calls == [7]


@needs_bf16
def test_e4m3_b128_scales_reach_their_blocks():
    """Each 128 x 128 tile's scale multiplies that tile's products only: scales far apart
    (powers of 2 and 3 x 2^e, and a zero tile scale) over rows and columns that end inside a
    tile."""
    packed, g = quantized("e4m3_b128", 260, 400, seed=6)
    rows, cols = packed.scales.shape
    e = torch.arange(rows * cols, dtype=torch.float32).view(rows, cols)
    scales = torch.where(e % 2 == 0, 2.0 ** (e - 6), 3 * 2.0 ** (-e)).contiguous()
    scales[1, 2] = 0.0
    packed = PackedWeight("e4m3_b128", packed.shape, packed.words, scales)
    x = torch.randn(7, 400, generator=g)
    y = _dp_rows.matmul(x, packed, 2)
    assert y is not None
    assert rel_err(y, softfp8.linear(x, packed, backend="torch")) <= 1e-5


@needs_bf16
@pytest.mark.parametrize("case", ["e4m3_b128 inf scale", "e4m3_b128 NaN scale",
                                  "e4m3_b128 tiny x", "e4m3_b128 huge x"])
def test_what_it_hands_back_of_e4m3_b128(case):
    """As below, for E4M3_B128's tile scales (one tile of four non-finite; the range check
    counts the largest scale)."""
    packed, x = hand_back_case(case, 6, 140, 300)
    assert _dp_rows.matmul(x, packed, 2) is None
    assert_backend_matches_reference(x, packed)


@needs_bf16
@pytest.mark.parametrize("case", HAND_BACK_CASES)
def test_what_it_hands_back(case):
    """None where vdpbf16ps would flush a product or a code is out of its decode; the backend
    then runs the float32 kernel and still matches the reference."""
    packed, x = hand_back_case(case, 6, 11, 96)
    assert _dp_rows.matmul(x, packed, 2) is None
    assert_backend_matches_reference(x, packed)


@needs_bf16
@pytest.mark.parametrize("fmt", ["e4m3", "e4m3_b128"])
def test_e4m3_nan_code_propagates(fmt):
    packed, g = with_codes(fmt, 9, 70, lambda w, s: w[1].__setitem__(5, 0x7F))
    assert _dp_rows.weight_plan(packed)[0] == B.E4M3  # the NaN fix stays
    x = torch.randn(6, 70, generator=g)
    y = _dp_rows.matmul(x, packed, 2)
    ref = softfp8.linear(x, packed, backend="torch")
    assert torch.equal(torch.isnan(y), torch.isnan(ref)) and torch.isnan(ref).any()
    fin = torch.isfinite(ref)
    assert rel_err(y[fin], ref[fin]) <= 1e-5
    clean, _ = quantized(fmt, 9, 70, seed=2)
    assert _dp_rows.weight_plan(clean)[0] == B.E4M3_FINITE
