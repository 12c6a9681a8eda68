"""The x-rows kernels for small M on AVX2 (softfp8/backends/numba/_pshufb_xrows.py, FP4, and
_fp8_xrows.py): every code at every position (and every FP4 scale code the loop decodes)
bit-exact, for each row of x in passes of 1..4 rows; non-finite FP8 codes propagating; parity with the
reference over odd M, N and K (tails past the whole steps included); the dispatch taking them for
1 < M <= XROWS_MAX_M on AVX2 only, and leaving FP4 weights whose scale codes the loop can't
decode."""
import pytest
import torch
from conftest import rel_err, same_bits

import softfp8
from softfp8.backends import reference
from softfp8.decode import E2M1_TO_FLOAT32, decode_e4m3_to_f32, decode_e8m0
from softfp8.formats import Format

np = pytest.importorskip("numpy")
pytest.importorskip("numba")
from softfp8.backends import numba as cpu_backend  # noqa: E402
from softfp8.backends.numba import _pshufb as P  # noqa: E402
from softfp8.backends.numba import _fp8_rows as R  # noqa: E402
from softfp8.backends.numba import _fp8_xrows as X8  # noqa: E402
from softfp8.backends.numba import _lut  # noqa: E402
from softfp8.backends.numba import _pshufb_xrows as X  # noqa: E402
from test_numba_lut import BLOCK, ONE, words_of  # noqa: E402

pytestmark = pytest.mark.skipif(not P.available(), reason="numba does not target AVX2 here")
FORMATS = [Format.NVFP4, Format.MXFP4]


def xrows(words, scales, x, fmt, g=1.0):
    """The x-rows kernel (chunks of 8 rows) on x [M, Kp]: float32 y [M, N]."""
    mx = fmt is Format.MXFP4
    xs, xp = X.x_steps(np.ascontiguousarray(x.numpy()), BLOCK[str(fmt)])
    y = np.full((x.shape[0], words.shape[0]), np.nan, np.float32)
    post = np.float32(1.0) if mx else np.float32(256.0) * np.float32(g)
    X.matmul_fp4(words.numpy(), scales.numpy(), mx, post, xs, xp, y, 8)
    return torch.from_numpy(y)


def read_back(n, k, run):
    """got [n, k]: each column of a weight [n, k] read back by rows of x one-hot at it,
    run(x [M, k]) -> y [M, n], calls of 5, 6 and 7 rows in turn: passes of 4 rows, then one of
    1, 2 or 3, so columns go through every x-row slot of every pass size."""
    got = torch.empty(n, k)
    c, call = 0, 0
    while c < k:
        m = 5 + call % 3
        cols = [(c + i) % k for i in range(m)]
        x = torch.zeros(m, k)
        x[torch.arange(m), cols] = 1.0
        y = run(x)
        for i, col in enumerate(cols):
            got[:, col] = y[i]
        c, call = c + m, call + 1
    return got


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_code_at_every_position_and_x_row_is_exact(fmt):
    """Row r holds code (r + k) % 16 at position k, read back column by column (`read_back`:
    every x-row slot of every pass size), whole steps and the tail block past them alike."""
    blk = BLOCK[str(fmt)]
    n, k = 19, 128 + blk  # two whole steps of 64 codes and one tail block
    codes = (torch.arange(n)[:, None] + torch.arange(k)[None, :]) % 16
    words = words_of(codes)
    scales = torch.full((n, k // blk), ONE[str(fmt)], dtype=torch.uint8)
    got = read_back(n, k, lambda x: xrows(words, scales, x, fmt))
    want = E2M1_TO_FLOAT32[codes]
    keep = codes != 8  # -0 reads back +0, as in any dot product
    assert same_bits(got[keep], want[keep]).all()
    assert (got == want).all()


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_scale_code_the_loop_decodes_is_exact(fmt):
    """Every scale code the loop takes (NVFP4 E4M3 0..0x7E, subnormals included; MXFP4 E8M0
    1..254) at every block slot of a step: row r's blocks hold codes r, r + 1, ...; code 1 (1.0
    with its block scale, 0.5 for E2M1's 0.5) everywhere, x one-hot per block, so each y is
    the scale times the code exactly."""
    blk = BLOCK[str(fmt)]
    mx = fmt is Format.MXFP4
    lo, hi = (1, 255) if mx else (0, 0x7F)
    k = 128  # two whole steps
    nblk = k // blk
    n = hi - lo
    scale_codes = (lo + (torch.arange(n)[:, None] + torch.arange(nblk)[None, :]) % n).to(
        torch.uint8)
    assert X.usable(scale_codes, mx)
    codes = torch.full((n, k), 2)  # E2M1 1.0
    words = words_of(codes)
    x = torch.zeros(nblk, k)
    x[torch.arange(nblk), torch.arange(nblk) * blk] = 1.0  # x row b reads block b's first code
    got = xrows(words, scale_codes, x, fmt).T  # [n, nblk]
    want = (decode_e8m0 if mx else decode_e4m3_to_f32)(scale_codes).float()
    assert same_bits(got, want).all(), (got[got != want][:4], want[got != want][:4])


def fp8_xrows(codes, x, kind):
    """The FP8 x-rows kernel (chunks of 4 rows) on codes uint8 [N, K] and x [M, K]: y [M, N]
    (the kernel's own factor, E4M3's 256, applied; no row scales)."""
    y = np.full((x.shape[0], codes.shape[0]), np.nan, np.float32)
    X8.matmul_fp8(codes.view(torch.uint16).numpy(), x[:, 0::2].contiguous().numpy(),
                  x[:, 1::2].contiguous().numpy(), y, 4, kind)
    return torch.from_numpy(y)


FP8_KINDS = {"e5m2": (R.E5M2_KIND, torch.float8_e5m2), "e4m3": (R.E4M3_KIND, torch.float8_e4m3fn),
             "e4m3-finite": (R.E4M3_FINITE_KIND, torch.float8_e4m3fn)}


@pytest.mark.parametrize("kind", list(FP8_KINDS))
def test_fp8_every_finite_code_at_every_position_and_x_row_is_exact(kind):
    """Row r holds finite code (r + k) % F at position k (K = F: whole steps of 64 codes and
    pairs past them), read back column by column (`read_back`), so every code goes through the
    low and high byte of a pair in every x-row slot of every pass size."""
    code_kind, dtype = FP8_KINDS[kind]
    every = torch.arange(256, dtype=torch.uint8)
    finite = every[torch.isfinite(every.view(dtype).float())]
    n, k = 6, finite.numel()
    codes = finite[(torch.arange(n)[:, None] + torch.arange(k)[None, :]) % k].contiguous()
    got = read_back(n, k, lambda x: fp8_xrows(codes, x, code_kind))
    want = codes.view(dtype).float()
    ok = same_bits(got, want) | ((got == 0) & (want == 0))  # -0 reads back +0 in a dot product
    assert ok.all(), (codes[~ok][:8].tolist(), got[~ok][:8].tolist())


@pytest.mark.parametrize("fmt", ["e5m2", "e4m3"])
def test_fp8_non_finite_codes_propagate(fmt):
    """An inf or NaN code (E5M2 0x7C / 0xFC / 0x7D; E4M3 0x7F) in a whole step or past it gives
    inf / NaN in every row of x that meets it with 1.0, and leaves the other rows finite."""
    code_kind, dtype = FP8_KINDS[fmt]
    specials = [0x7C, 0xFC, 0x7D] if fmt == "e5m2" else [0x7F, 0xFF]
    k = 66  # one whole step and one pair past it
    for col in (5, 64):
        for code in specials:
            codes = torch.full((3, k), 0x38, dtype=torch.uint8)  # 0.5 / 1.0
            codes[1, col] = code
            x = torch.ones(5, k)
            x[4, col] = 0.0  # meets the code with 0: inf * 0 is NaN, NaN stays NaN
            y = fp8_xrows(codes, x, code_kind)
            want = codes[1].view(dtype).float()[col]
            assert same_bits(y[:4, 1], torch.full((4,), want)).all(), (fmt, col, code, y[:, 1])
            assert torch.isnan(y[4, 1]) and torch.isfinite(y[:, [0, 2]]).all()


@pytest.mark.parametrize("fmt", FORMATS + [Format.E5M2, Format.E4M3, Format.E4M3_B128])
@pytest.mark.parametrize("n, k, m", [(37, 264, 2), (300, 1000, 3), (64, 4104, 5), (33, 96, 7),
                                     (20, 32, 4), (128, 1024, 16)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_the_reference(fmt, n, k, m, dtype):
    """softfp8.linear on the numba backend, dispatched to the x-rows kernel (odd M, N, K; K below
    one step, past whole steps, and a padded K), against the reference backend."""
    g = torch.Generator().manual_seed(n + k + m)
    packed = softfp8.quantize(torch.randn(n, k, generator=g), fmt)
    x = torch.randn(m, k, generator=g).to(dtype)
    bias = torch.randn(n, generator=g)
    direct = (X if fmt in FORMATS else X8).matmul(x, packed, 2)
    assert direct is not None
    want = reference.matmul(x.float(), packed, bias)
    assert rel_err(direct + bias, want) <= 1e-5
    got = softfp8.linear(x, packed, bias, backend="numba")
    assert got.dtype == dtype and got.shape == (m, n)
    assert rel_err(got.float(), want) <= (1e-5 if dtype == torch.float32 else 1e-2)


def test_dispatch_takes_it_for_small_m_and_leaves_unusable_scales(monkeypatch):
    """1 < M <= XROWS_MAX_M runs the x-rows kernel where the GEMV is the AVX2 table kernel; a
    weight with a NaN scale code (which its loop does not decode) runs the other paths and
    keeps its NaN block."""
    calls = []
    real = X.matmul_fp4
    monkeypatch.setattr(X, "matmul_fp4", lambda *a: calls.append(a[6].shape) or real(*a))
    monkeypatch.setattr(_lut, "available", lambda: False)
    g = torch.Generator().manual_seed(3)
    packed = softfp8.quantize(torch.randn(40, 256, generator=g), Format.NVFP4)
    top = cpu_backend.XROWS_MAX_M[Format.NVFP4]
    for m in (1, 2, top, top + 1):
        softfp8.linear(torch.randn(m, 256, generator=g), packed, backend="numba")
    assert calls == [(2, 40), (top, 40)]
    packed.scales[0, 0] = 0x7F  # NaN: written in place, so the weight's facts are asked again
    calls.clear()
    y = softfp8.linear(torch.randn(2, 256, generator=g), packed, backend="numba")
    assert calls == [] and torch.isnan(y[:, 0]).all() and not torch.isnan(y[:, 1:]).any()


@pytest.mark.parametrize("avx512, avx2", [(True, True), (False, True), (False, False)],
                         ids=["avx512", "avx2", "neither"])
def test_dispatch_takes_fp8_xrows_on_avx2_only(avx512, avx2, monkeypatch):
    """E5M2, E4M3 and E4M3_B128 at 1 < M <= XROWS_MAX_M take the x-rows kernel where numba
    targets AVX2 but no AVX-512F; elsewhere the other paths; the answer is the same either
    way."""
    calls = []
    for name in ("matmul_fp8", "matmul_fp8_tiles"):
        real = getattr(X8, name)
        monkeypatch.setattr(X8, name, lambda *a, real=real: calls.append(a[3].shape) or real(*a))
    monkeypatch.setattr(_lut, "available", lambda: avx512)
    monkeypatch.setattr(P, "available", lambda: avx2)
    g = torch.Generator().manual_seed(5)
    for fmt in (Format.E5M2, Format.E4M3, Format.E4M3_B128):
        packed = softfp8.quantize(torch.randn(24, 200, generator=g), fmt)
        top = cpu_backend.XROWS_MAX_M[fmt]
        calls.clear()
        for m in (2, top, top + 1):
            x = torch.randn(m, 200, generator=g)
            y = softfp8.linear(x, packed, backend="numba")
            assert rel_err(y, reference.matmul(x, packed, None)) <= 1e-5
        takes = avx2 and not avx512
        assert calls == ([(2, 24), (top, 24)] if takes else []), (fmt, calls)
