"""The fused small-M kernel (softfp8/backends/numba/_smallm_fused, `_dp_rows.matmul_fused`):
every code decoded exactly through the kernel itself, parity with the reference backend over
odd M, N and K (K off a step, several K blocks, passes of 16, 8 and fewer rows), the inputs it
hands back (values vdpbf16ps would flush, codes it does not take), NaN codes propagating, and
the backend routing small M here."""
import pytest
import torch
from conftest import rel_err
from numba_support import (HAND_BACK_CASES, assert_backend_matches_reference, hand_back_case,
                           quantized, with_codes)

import softfp8
from softfp8.formats import PackedWeight

numba = pytest.importorskip("numba")
np = pytest.importorskip("numpy")
F = pytest.importorskip("softfp8.backends.numba._smallm_fused")
from softfp8.backends import numba as cpu_backend  # noqa: E402
from softfp8.backends.numba import _dp_rows  # noqa: E402
from test_numba_smallm import every_code_weight  # noqa: E402

needs_fused = pytest.mark.skipif(not F.available(),
                                 reason="numba does not target AVX-512 BF16 and VBMI here")
FORMATS = ["e5m2", "e5m2_rowscale", "e4m3", "nvfp4", "mxfp4"]


def _finite_every_code(fmt: str) -> PackedWeight:
    """every_code_weight with what the kernel takes: FP8 inf / NaN codes set to 0 (each would
    turn its whole row's sums to NaN: 0 x inf), FP4 scale codes the kernel takes with x = 1
    (NVFP4 below 0x7F; MXFP4 28..224, 2^-99 .. 2^97, where the exponent range check lets
    products through)."""
    packed = every_code_weight(fmt)
    words, scales = packed.words.clone(), packed.scales
    if fmt in ("e5m2", "e4m3"):
        b = words.view(torch.uint8)
        bad = (b & 0x7C) == 0x7C if fmt == "e5m2" else (b & 0x7F) == 0x7F
        b[bad] = 0
    else:
        scales = scales % 0x7F if fmt == "nvfp4" else scales.clamp(28, 224)
    return PackedWeight(fmt, packed.shape, words, scales, packed.global_scale)


@needs_fused
@pytest.mark.parametrize("fmt", ["e5m2", "e4m3", "nvfp4", "mxfp4"])
def test_every_code_through_the_kernel_is_exact(fmt):
    """x one-hot rows (8 a call, one pass): y[j, r] is weight row r's value at column k_j,
    which must be the reference's dequantized value exactly (every code at every position,
    subnormals and every FP4 scale the kernel takes included)."""
    packed = _finite_every_code(fmt)
    n, k = packed.shape
    ref = softfp8.dequantize(packed)
    for k0 in range(0, k, 8):
        x = torch.zeros(8, k)
        x[torch.arange(8), torch.arange(k0, k0 + 8)] = 1.0
        y = _dp_rows.matmul_fused(x.bfloat16(), packed, 2)
        assert y is not None
        assert torch.equal(y, ref[:, k0:k0 + 8].T), (k0, (y != ref[:, k0:k0 + 8].T).nonzero()[:4])


@pytest.mark.parametrize("fmt", ["e5m2", "e4m3"])
def test_fp8_tables_hold_every_code(fmt):
    """The kernel's table (each code's bf16, the sign or-ed in by the kernel) holds the
    reference's values for all 256 codes, inf and NaN included."""
    bits = F.fp8_bf16_bits(F.E5M2 if fmt == "e5m2" else F.E4M3)
    bits += [b | 0x8000 for b in bits]  # codes 128..255: the sign bit or-ed in
    got = torch.tensor(bits, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    decode = softfp8.decode.decode_e5m2_to_f32 if fmt == "e5m2" else \
        softfp8.decode.decode_e4m3_to_f32
    ref = decode(torch.arange(256, dtype=torch.int32).to(torch.uint8))
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(got), nan)
    assert torch.equal(got[~nan].view(torch.int32), ref[~nan].view(torch.int32))


@pytest.mark.parametrize("kp", [64, 1024, 1008, 352, 4096 + 32])
def test_x_orders_are_permutations(kp):
    for order in (F.fp8_x_order(kp), F.fp4_x_order(kp)):
        assert sorted(order.tolist()) == list(range(kp))


# (M, N, K): M in passes of 16 / 8 / fewer bf16 rows, N odd, K off a step and a block, and
# K over several K blocks (2049: 8 rows a pass take 1024 codes an L1 block; 4500: 16 rows of bf16
# x 4096 codes an L2 block, PAIR_X_BLOCK_BYTES)
CASES = [(2, 37, 1000), (3, 13, 333), (5, 67, 129), (8, 9, 4097), (13, 21, 75),
         (16, 33, 2049), (16, 130, 250), (16, 9, 4500)]


@needs_fused
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("m, n, k", CASES, ids=str)
def test_matches_the_reference_backend(fmt, dtype, m, n, k):
    packed, g = quantized(fmt, n, k, seed=m * 131 + n * 7 + k)
    x = torch.randn(m, k, generator=g).to(dtype)
    y = _dp_rows.matmul_fused(x, packed, 2)
    assert y is not None and y.shape == (m, n) and y.dtype == torch.float32
    ref = softfp8.linear(x.float(), packed, backend="torch")
    assert rel_err(y, ref) <= 1e-5


@needs_fused
@pytest.mark.parametrize("case", HAND_BACK_CASES + ["nvfp4 tiny x"])
def test_what_it_hands_back(case):
    """None where vdpbf16ps would flush a product or a code is out of the kernel's decode; the
    backend then takes another path and still matches the reference."""
    packed, x = hand_back_case(case, 3, 11, 200)
    assert _dp_rows.matmul_fused(x, packed, 2) is None
    assert_backend_matches_reference(x, packed)


@needs_fused
def test_e4m3_nan_code_propagates():
    packed, g = with_codes("e4m3", 9, 200, lambda w, s: w[1].__setitem__(150, 0x7F))
    x = torch.randn(4, 200, generator=g).bfloat16()
    y = _dp_rows.matmul_fused(x, packed, 2)
    ref = softfp8.linear(x.float(), packed, backend="torch")
    assert torch.equal(torch.isnan(y), torch.isnan(ref)) and torch.isnan(ref).any()
    fin = torch.isfinite(ref)
    assert rel_err(y[fin], ref[fin]) <= 1e-5


@needs_fused
@pytest.mark.parametrize("fmt", ["e5m2", "e4m3", "nvfp4", "mxfp4"])
def test_backend_routes_small_m_here(fmt, monkeypatch):
    """cpu_backend.matmul runs this kernel for bf16 x from M = 2 to FUSED_MAX_ROWS (y in bf16:
    within bf16's rounding of float32's answer), and not past it."""
    packed, g = quantized(fmt, 19, 300, seed=4)
    calls = []
    real = _dp_rows.matmul_fused
    monkeypatch.setattr(_dp_rows, "matmul_fused", lambda *a: calls.append(1) or real(*a))
    most = _dp_rows.FUSED_MAX_ROWS[packed.fmt]
    for m in (2, most):
        x = torch.randn(m, 300, generator=g).bfloat16()
        y = cpu_backend.matmul(x, packed)
        assert y.dtype == torch.bfloat16
        assert rel_err(y.float(), softfp8.linear(x.float(), packed, backend="torch")) <= 2.0 ** -8
    assert len(calls) == 2
    cpu_backend.matmul(torch.randn(most + 1, 300, generator=g).bfloat16(), packed)
    assert len(calls) == 2


@needs_fused
@pytest.mark.parametrize("code, x_exp", [(2, 60), (252, -60), (1, 60)])
@pytest.mark.parametrize("m", [2, 4, 9])
def test_mxfp4_scale_fold_edges(code, x_exp, m, monkeypatch):
    """MXFP4 from MXFP4_FOLD_MIN_ROWS rows: scale codes 2..252 folded into the decoded values
    (exponents stay normal), 1 (and fewer rows) through the unfolded loop; both match
    the reference."""
    packed, g = with_codes("mxfp4", 7, 300, lambda w, s: s.fill_(code))
    kinds = []
    real = F.fused_fp4
    monkeypatch.setattr(F, "fused_fp4", lambda kind, *a: kinds.append(kind) or real(kind, *a))
    x = torch.randn(m, 300, generator=g) * 2.0 ** x_exp
    y = _dp_rows.matmul_fused(x.bfloat16(), packed, 2)
    assert y is not None
    folded = 2 <= code <= 252 and m >= _dp_rows.MXFP4_FOLD_MIN_ROWS
    assert kinds == [F.MXFP4_FOLDED if folded else F.MXFP4]
    ref = softfp8.linear(x.bfloat16().float(), packed, backend="torch")
    assert torch.isfinite(ref).all() and rel_err(y, ref) <= 1e-5
