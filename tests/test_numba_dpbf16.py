"""The AVX-512 FP4 table rows with bf16 products (softfp8/backends/_dpbf16.py): every E2M1
code at every position exact, fp64 parity of the float32 sums over odd shapes, non-finite
activations as the float32 kernel gives them, the fall-back to it for tiny activations, and
cpu_backend.matmul's choice (bf16 activations only). The kernel tests run where numba targets
AVX-512 BF16; the step layout's tests run anywhere."""
import math

import pytest
import torch
from conftest import rel_err, same_bits

import softfp8
from softfp8.decode import E2M1_TO_FLOAT32

numba = pytest.importorskip("numba")
np = pytest.importorskip("numpy")
L = pytest.importorskip("softfp8.backends.numba._lut")
from softfp8.backends.numba import _dpbf16 as D  # noqa: E402
from softfp8.backends import numba as cpu_backend  # noqa: E402
from test_numba_lut import BLOCK, ONE, words_of  # noqa: E402
from test_numba_lut import gemv as lut_gemv  # noqa: E402

needs_bf16 = pytest.mark.skipif(not D.available(), reason="numba does not target AVX-512 BF16")
GROUPS = [pytest.param(1, id="1row"), pytest.param(L.ROWS, id="4rows")]


def gemv(fmt, words, scales, x, group, g=1.0):
    """The kernel on bf16 x [Kp] (x_steps must take it); float32 y."""
    steps = D.x_steps(x, BLOCK[fmt])
    assert steps is not None
    assert steps[0].dtype == np.uint16 and steps[0].ndim == 3
    return lut_gemv(L, fmt, words, scales, x, group, g, steps)


@needs_bf16
@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_every_code_at_every_position_is_exact(fmt, group):
    """As test_numba_lut's: row r holds code (r + k) % 16 at k, a one-hot x at k reads column k
    back, through each lane and nibble of the 16-bit lanes, each row slot, and the tail blocks.
    The one is 1 + 2^-7: every significant bit of a bf16 in use."""
    one = 1.0 + 2.0 ** -7
    dtype = torch.bfloat16
    blk = BLOCK[fmt]
    n, k = 18, 256 + blk
    codes = (torch.arange(n)[:, None] + torch.arange(k)[None, :]) % 16
    words = words_of(codes)
    scales = torch.full((n, k // blk), ONE[fmt], dtype=torch.uint8)
    got = torch.empty(n, k)
    for col in range(k):
        x = torch.zeros(k, dtype=dtype)
        x[col] = one
        got[:, col] = gemv(fmt, words, scales, x, group)
    want = E2M1_TO_FLOAT32[codes] * one  # exact: 2 x 8 significant bits
    nonzero = codes != 8  # -0 reads back +0, as in any dot product
    assert same_bits(got[nonzero], want[nonzero]).all()
    assert (got == want).all(), (codes[got != want][:8].tolist(), got[got != want][:8].tolist())


@needs_bf16
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("n, k", [(1, 1), (17, 4097), (5, 512), (3, 1000), (11, 6001)])
def test_gemv_matches_fp64(fmt, n, k):
    """Odd shapes, one and four rows a pass: the float32 sums within 1e-6 of fp64 over the same
    bf16 activations, with the NVFP4 tensor scale."""
    dtype = torch.bfloat16
    gen = torch.Generator().manual_seed(n + k)
    packed = softfp8.quantize(torch.randn(n, k, generator=gen), fmt)
    kp = packed.padded_k
    x = torch.zeros(kp, dtype=dtype)
    x[:k] = torch.randn(k, generator=gen).to(dtype)
    want = x[:k].double() @ softfp8.dequantize(packed).double().T
    g = packed.global_scale.item() if fmt == "nvfp4" else 1.0
    for group in (1, L.ROWS):
        assert rel_err(gemv(fmt, packed.words, packed.scales, x, group, g), want) <= 1e-6


@needs_bf16
@pytest.mark.parametrize("group", GROUPS)
def test_nvfp4_loop_decodes_every_scale_code(group):
    """As test_numba_lut's: gemv_nvfp4_raw on bf16 steps, every scale code below 0x7F at every
    block slot and row slot, bit for bit as gemv_nvfp4 on the same steps."""
    gen = torch.Generator().manual_seed(3)
    n, k = 127, 128 * 3 + 32
    words = words_of(torch.randint(0, 16, (n, k), generator=gen))
    scales = ((torch.arange(n)[:, None] + torch.arange(k // 16)[None, :]) % 0x7F).to(torch.uint8)
    x = torch.randn(k, generator=gen).to(torch.bfloat16)
    want = gemv("nvfp4", words, scales, x, group, g=0.75)
    xs, xp = D.x_steps(x, 16)
    y = np.zeros(n, np.float32)
    L.gemv_nvfp4_raw(words.numpy(), scales.numpy(), np.float32(0.75), xs, xp, y, 8, group)
    assert same_bits(torch.from_numpy(y), want).all()
    assert (want != 0).sum() > n - 2


@needs_bf16
@pytest.mark.parametrize("group", GROUPS)
def test_mxfp4_loop_decodes_every_scale_code(group):
    """test_numba_lut's on bf16 steps."""
    from test_numba_lut import test_mxfp4_loop_decodes_every_scale_code as on_steps

    on_steps(group, steps=lambda x: D.x_steps(x, 32))


@needs_bf16
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_matmul_takes_bf16_products_for_bf16_x_only(fmt, monkeypatch):
    """cpu_backend.matmul on bf16 x runs these rows (not with numba_fp4_lut="avx512", and
    not for fp16 or float32 x), and its answer is the float32 kernel's on the same x rounded to
    bf16 as the float32 kernel's is (both round the same exact products' float32 sums)."""
    gen = torch.Generator().manual_seed(3)
    packed = softfp8.quantize(torch.randn(37, 4100, generator=gen), fmt)
    x = torch.randn(1, 4100, generator=gen).to(torch.bfloat16)
    taken = []  # the steps x_steps made (it says None to x that is not bf16)
    real = D.x_steps
    monkeypatch.setattr(D, "x_steps", lambda *a: taken.append(real(*a)) or taken[-1])
    y = cpu_backend.matmul(x, packed)
    assert [s is not None for s in taken] == [True] and y.dtype == torch.bfloat16
    y32 = cpu_backend.matmul(x.float(), packed)
    cpu_backend.matmul(x.half(), packed)
    with softfp8.launch_settings(numba_fp4_lut="avx512"):
        cpu_backend.matmul(x, packed)
    assert sum(s is not None for s in taken) == 1  # none of these three
    want = x.double() @ softfp8.dequantize(packed).double().T
    assert rel_err(y32, want) <= 1e-6
    assert (y.float() - y32).abs().max() <= 2.0 ** -8 * y32.abs().max()  # bf16 rounding apart


@needs_bf16
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_nonfinite_activations_as_the_float32_kernel(fmt):
    """inf, -inf and NaN (a NaN with its payload in the low bits too) in x give what the float32
    kernel gives, row by row: inf times a zero code is NaN, opposite infs are NaN."""
    dtype = torch.bfloat16
    n, k = 16, 512
    gen = torch.Generator().manual_seed(5)
    packed = softfp8.quantize(torch.randn(n, k, generator=gen), fmt)
    g = packed.global_scale.item() if fmt == "nvfp4" else 1.0
    cases = {"inf": [(3, math.inf)], "-inf": [(200, -math.inf)],
             "both": [(3, math.inf), (300, -math.inf)], "nan": [(77, math.nan)]}
    for name, spots in cases.items():
        x = torch.randn(k, generator=gen).to(dtype)
        for i, v in spots:
            x[i] = v
        if name == "nan":
            x.view(torch.int16)[78] = 0x7F81  # a signalling NaN: its payload in the low bits
            assert torch.isnan(x[78])
        got = gemv(fmt, packed.words, packed.scales, x, 1, g)
        want = lut_gemv(L, fmt, packed.words, packed.scales, x.float(), 1, g)
        assert not want.isfinite().all(), name
        assert (got.isnan() == want.isnan()).all(), name
        assert (got[~want.isnan()] == want[~want.isnan()]).all(), name  # the infs, signed


def test_tiny_bf16_activations_take_the_float32_kernel():
    """A nonzero bf16 activation under TINY (where the instruction's flushing could change the
    sum) makes x_steps say no, and matmul's answer stays within 1e-6 of fp64."""
    x = torch.randn(1, 4096).to(torch.bfloat16)
    assert D.x_steps(x[0], 16) is not None
    x[0, 9] = 2.0 ** -120
    assert D.x_steps(x[0], 16) is None
    x[0, :] = 0.0
    x[0, 9] = 2.0 ** -120
    x[0, 500] = -(2.0 ** -126)
    assert D.x_steps(x[0], 16) is None
    packed = softfp8.quantize(torch.randn(8, 4096), "mxfp4")
    want = x.double() @ softfp8.dequantize(packed).double().T
    y = cpu_backend.matmul(x.float(), packed)
    assert want.abs().max() > 0 and rel_err(y, want) <= 1e-6
    assert D.x_steps(torch.zeros(4096, dtype=torch.bfloat16), 16) is not None  # zeros are fine
    assert D.x_steps(torch.randn(4096), 16) is None  # float32: not this kernel's


def test_x_steps_layout():
    """(any CPU) xs[s, j, l] is the bf16 bits of x[8 (16 s + l // 2) + 4 (l % 2) + j], padding
    zero, and the planes cover the tail as float32; only bf16 x is taken."""
    k = 128 * 3 + 16
    x = (torch.randn(k) * 100).to(torch.bfloat16)
    xs, xp = D.x_steps(x, 16)
    assert xs.shape == (3, 4, 32) and xs.dtype == np.uint16
    s, j, lane = np.meshgrid(np.arange(3), np.arange(4), np.arange(32), indexing="ij")
    index = 8 * (16 * s + lane // 2) + 4 * (lane % 2) + j
    assert (xs == x.view(torch.int16).numpy().view(np.uint16)[index]).all()
    assert xp.dtype == np.float32 and (xp == x.float().numpy().reshape(-1, 16).T).all()
    padded, _ = D.x_steps(x[:300], 16, k)  # zero-padded to k
    assert (padded.view(np.uint16)[index >= 300] == 0).all()
    assert (padded == np.where(index < 300, xs, 0)).all()
    assert D.x_steps(x.half(), 16) is None and D.x_steps(x.float(), 16) is None


@pytest.mark.parametrize("features, want", [("+avx2,+avx512f,+avx512bw,+avx512bf16", True),
                                            ("+avx2,+avx512f,+avx512bw", False)])
def test_available_follows_numba_target(features, want, monkeypatch):
    from numba.core import config

    D.available.cache_clear()
    try:
        monkeypatch.setattr(config, "CPU_FEATURES", features)
        assert D.available() is want
    finally:
        D.available.cache_clear()
