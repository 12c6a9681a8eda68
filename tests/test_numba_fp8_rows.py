"""The FP8 GEMV kernel itself (softfp8/backends/_fp8_rows.gemv_fp8, four rows a pass or
one): every code at every byte position bit-exact through each (E4M3 also without the NaN fix,
for weights that hold no NaN code), in the vector loop and in the pairs past its last whole step,
every non-finite code propagating, and fp64 parity on odd shapes either side of MULTIROW_MIN_K,
with and without a NaN code in the weight."""
import pytest
import torch
from conftest import rel_err, same_bits

import softfp8

numba = pytest.importorskip("numba")
np = pytest.importorskip("numpy")
R = pytest.importorskip("softfp8.backends.numba._fp8_rows")
from softfp8.backends import numba as cpu_backend  # noqa: E402
from softfp8.backends.numba import _gemv  # noqa: E402

DTYPE = {"e5m2": torch.float8_e5m2, "e4m3": torch.float8_e4m3fn}
POST = {"e5m2": 1.0, "e4m3": 256.0}  # the kernel's per-row factor (E4M3 decodes value / 256)


def values(fmt, codes):
    return codes.view(DTYPE[fmt]).float()


KIND = {"e5m2": R.E5M2_KIND, "e4m3": R.E4M3_KIND, "e4m3-finite": R.E4M3_FINITE_KIND}


def gemv(fmt, codes, x, multirow):
    """codes uint8 [N, K] (K even), x float32 [K] -> y [N], chunks of 4 rows. fmt "e4m3-finite":
    E4M3 codes through the kernels without the NaN fix."""
    y = np.zeros(codes.shape[0], np.float32)
    R.gemv_fp8(codes.view(torch.uint16).numpy(), x[0::2].contiguous().numpy(),
               x[1::2].contiguous().numpy(), y, 4, KIND[fmt], R.ROWS if multirow else 1)
    return torch.from_numpy(y)


@pytest.mark.parametrize("multirow", [True, False], ids=["4rows", "1row"])
@pytest.mark.parametrize("kind", ["e5m2", "e4m3", "e4m3-finite"])
def test_every_finite_code_at_every_position_is_exact(kind, multirow):
    """Row r holds finite code (r + k) % F at position k; a one-hot x at k reads column k back,
    so each code is seen in the low and the high byte of a pair and in every row slot of a
    4-row pass; 6 rows make the last chunk of 4 a 2-row remainder (the one-row loop)."""
    fmt = kind.removesuffix("-finite")
    every = torch.arange(256, dtype=torch.uint8)
    finite = every[torch.isfinite(values(fmt, every))]
    n, k = 6, finite.numel()  # 248 or 254: even, as the kernel's uint16 pairs need
    codes = finite[(torch.arange(n)[:, None] + torch.arange(k)[None, :]) % k].contiguous()
    got = torch.empty(n, k)
    for col in range(k):
        x = torch.zeros(k)
        x[col] = 1.0
        got[:, col] = gemv(kind, codes, x, multirow) / POST[fmt]
    want = values(fmt, codes) / POST[fmt]
    ok = same_bits(got, want) | ((got == 0) & (want == 0))  # -0 reads back +0 in a dot product
    assert ok.all(), (codes[~ok][:8].tolist(), got[~ok][:8].tolist())


@pytest.mark.parametrize("multirow", [True, False], ids=["4rows", "1row"])
@pytest.mark.parametrize("fmt", ["e5m2", "e4m3"])
def test_every_nonfinite_code_propagates(fmt, multirow):
    """One non-finite code per row, at an even and an odd byte, among zero codes; x all ones.
    Rows of 160 codes: two whole steps of the vector loop (128 codes), then 32 codes of scalar
    tail, each position kind in both."""
    assert 128 == 2 * 2 * R.STEP  # bytes 6 and 9 in the vector loop, 134 and 137 past it
    every = torch.arange(256, dtype=torch.uint8)
    special = every[~torch.isfinite(values(fmt, every))]
    rows = []
    for c in special.tolist():
        for pos in (6, 9, 134, 137):
            row = torch.zeros(160, dtype=torch.uint8)
            row[pos] = c
            rows.append(row)
    codes = torch.stack(rows)
    got = gemv(fmt, codes, torch.ones(160), multirow)
    want = values(fmt, codes).sum(1)
    assert same_bits(got, want).all(), (got.tolist(), want.tolist())


@pytest.mark.parametrize("nan_code", [False, True], ids=["finite", "nan-code"])
@pytest.mark.parametrize("fmt", ["e5m2", "e4m3"])
@pytest.mark.parametrize("n, k", [(13, 2049), (9, 4097)])
def test_gemv_matches_fp64_both_sides_of_the_multirow_line(fmt, n, k, nan_code):
    """Quantized weights hold no NaN code (E4M3 then runs without the NaN fix); one NaN code
    written in place makes that row NaN and leaves the others right (the check is redone when a
    weight's tensor changes)."""
    assert 2049 + 63 < _gemv.MULTIROW_MIN_K <= 4097  # the two shapes take the two layouts
    g = torch.Generator().manual_seed(n * k)
    packed = softfp8.quantize(torch.randn(n, k, generator=g), fmt)
    x = torch.randn(1, k, generator=g)
    want = x.double() @ softfp8.dequantize(packed).double().T
    assert rel_err(cpu_backend.matmul(x, packed), want) <= 1e-6
    if nan_code:
        packed.words.view(torch.uint8)[2, 5] = 0x7F  # NaN in both formats
        got = cpu_backend.matmul(x, packed)
        assert torch.isnan(got[0, 2]) and not torch.isnan(got[0, [0, 1, 3]]).any()
        assert rel_err(got[:, [0, 1, 3]], want[:, [0, 1, 3]]) <= 1e-6


@pytest.mark.parametrize("multirow", [True, False], ids=["4rows", "1row"])
@pytest.mark.parametrize("kind", ["e4m3", "e4m3-finite"])
def test_tile_scales_every_code_in_every_tile_is_exact(kind, multirow):
    """gemv_fp8_tiles (E4M3_B128): each finite code at every position of rows on both sides of
    the 128-row tile edge and in a partial last tile along K, read back by a one-hot x, is its
    value times its tile's scale, bit for bit; chunks of 6 rows put a chunk across the edge
    (rows 126..131), whose rows must switch scales there."""
    every = torch.arange(256, dtype=torch.uint8)
    finite = every[torch.isfinite(values("e4m3", every))]
    n, k = 134, 300  # 2 x 3 tiles, the last ones partial
    codes = finite[(torch.arange(n)[:, None] * 7 + torch.arange(k)[None, :]) % finite.numel()]
    codes = codes.contiguous()
    g = torch.Generator().manual_seed(0)
    tiles = torch.exp2(torch.randint(-8, 8, (2, 3), generator=g).float()) * (
        1 + torch.rand(2, 3, generator=g))
    spread = tiles.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    got = torch.empty(n, k)
    for col in range(k):
        x = torch.zeros(k)
        x[col] = 1.0
        y = np.zeros(n, np.float32)
        R.gemv_fp8_tiles(codes.view(torch.uint16).numpy(), x.numpy(), tiles.numpy(), y, 6,
                         KIND[kind], R.ROWS if multirow else 1)
        got[:, col] = torch.from_numpy(y)
    want = values("e4m3", codes) * spread
    ok = same_bits(got, want) | ((got == 0) & (want == 0))
    assert ok.all(), (codes[~ok][:8].tolist(), got[~ok][:8].tolist(), want[~ok][:8].tolist())
