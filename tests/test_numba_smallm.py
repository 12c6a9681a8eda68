"""The numba backend's M > 1 paths (softfp8/backends/numba/_smallm, _smallm_bf16): the row
decoder bit-exact over every code (what the kernel and the tiles read), and each path -- a GEMV
per row, the small-M kernels (float32 and bf16 products) and the dequantised tile with torch's
matmul -- against the reference backend and fp64 over odd M, N and K, with NaN and inf
propagating, the tile bounded, and bf16 tiles only where torch multiplies bf16 faster."""
import pytest
import torch
from conftest import rel_err, same_bits
from numba_support import quantized

import softfp8
from softfp8.formats import Format, PackedWeight

numba = pytest.importorskip("numba")
np = pytest.importorskip("numpy")
S = pytest.importorskip("softfp8.backends.numba._smallm")
from softfp8.backends import numba as cpu_backend  # noqa: E402
from softfp8.backends.numba import _batch, _dp_rows  # noqa: E402

FORMATS = ["e5m2", "e5m2_rowscale", "e4m3", "nvfp4", "mxfp4", "e4m3_b128"]
PATHS = ["rows", "small", "dp", "fused", "tile"]


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    """Every M > 1 call of the test through one path: a GEMV per row, the small-M kernel, the
    small-M kernel with bf16 products or the fused one (where the CPU has them and the weight
    and x allow it; else the small-M kernel), or the tile path with tiles small enough that odd
    N ends in a partial one (several tiles a call)."""
    least = 2 if request.param == "tile" else 1 << 30
    for fmt in Format:
        monkeypatch.setitem(_batch.TILE_MIN_M, fmt, least)
        monkeypatch.setitem(_batch.TILE_MIN_M_BF16, fmt, least)
        rows = 1 << 30 if request.param == "rows" else 1
        monkeypatch.setitem(cpu_backend.GEMV_ROWS_MAX_M, fmt, rows)
        for table in (_dp_rows.DP_TILE_MIN_M, _dp_rows.DP_TILE_MIN_M_BF16):
            if fmt in table:
                monkeypatch.setitem(table, fmt, 1 << 30 if request.param == "dp" else 0)
        if fmt in _dp_rows.FUSED_MAX_ROWS:
            monkeypatch.setitem(_dp_rows.FUSED_MAX_ROWS, fmt,
                                1 << 30 if request.param == "fused" else 0)
    monkeypatch.setattr(cpu_backend, "XROWS_MAX_M", {})  # no x-rows kernel (AVX2) before them
    monkeypatch.setattr(_batch, "TILE_ELEMENTS", 5000)
    return request.param


def decoded(packed: PackedWeight) -> torch.Tensor:
    """dequantize_rows over the whole weight, back in K order, FP8 row scales applied (as the
    backend applies them to y)."""
    kind = _batch._KIND[packed.fmt]
    n, k = packed.shape
    kp = packed.padded_k
    fp4 = packed.fmt in (Format.NVFP4, Format.MXFP4)
    tiled = packed.fmt is Format.E4M3_B128  # its tile scales go into the decoded values
    w = np.empty((n, kp), np.float32)
    scales = packed.scales.numpy() if fp4 or tiled else np.zeros((1, 1), np.uint8)
    g = np.float32(packed.global_scale.item()) if packed.fmt is Format.NVFP4 else np.float32(1)
    S.dequantize_rows(kind, packed.words.view(torch.uint8).numpy(), scales, g, 0, w)
    out = torch.from_numpy(w)
    if fp4:  # decode order: even k, then odd k
        out = torch.stack((out[:, :kp // 2], out[:, kp // 2:]), dim=2).reshape(n, kp)
    elif packed.scales is not None and not tiled:
        out = out * packed.scales[:, None]
    return out[:, :k]


def every_code_weight(fmt: str) -> PackedWeight:
    """Every code at every position of a word: FP8 rows hold codes (r + k) % 256; FP4 rows hold
    the byte (r + i) % 256 at byte i, beside every scale code (NVFP4: E4M3 scales including the
    NaN one and subnormals; MXFP4: E8M0 0, 1, 127, 254 and the NaN 0xFF)."""
    n = 256
    if fmt in ("e5m2", "e4m3", "e4m3_b128"):
        k = 256 if fmt != "e4m3_b128" else 300  # a partial last tile column
        codes = ((torch.arange(n)[:, None] + torch.arange(k)[None, :]) % 256).to(torch.uint8)
        if fmt == "e4m3_b128":  # tile scales that round a code's product: 3 x 2^e, 0.1, ...
            scales = torch.tensor([[3.0, 0.1, 2.0 ** -20], [7.5e-3, 1.0, 1.7e4]])
            padded = torch.zeros(n, 304, dtype=torch.uint8)  # K padded to 16 bytes
            padded[:, :k] = codes
            return PackedWeight(fmt, (n, k), padded.view(torch.int32), scales)
        scales = None if fmt == "e5m2" else torch.linspace(0.5, 2.0, n)
        return PackedWeight(fmt, (n, k), codes.view(torch.int32), scales)
    block = 16 if fmt == "nvfp4" else 32
    k = 512
    codes = ((torch.arange(n)[:, None] + torch.arange(k // 2)[None, :]) % 256).to(torch.uint8)
    blocks = k // block
    s = (torch.arange(n)[:, None] * 7 + torch.arange(blocks)[None, :]) % 256
    if fmt == "mxfp4":
        s[:, :5] = torch.tensor([0, 1, 127, 254, 255])
    scales = s.to(torch.uint8)
    gs = torch.tensor(0.75) if fmt == "nvfp4" else None
    return PackedWeight(fmt, (n, k), codes.view(torch.int32), scales, gs)


@pytest.mark.parametrize("fmt", ["e5m2", "e4m3", "nvfp4", "mxfp4", "e4m3_b128"])
def test_row_decoder_every_code_is_exact(fmt):
    packed = every_code_weight(fmt)
    ref = softfp8.dequantize(packed)
    assert bool(same_bits(decoded(packed), ref).all())
    assert torch.isnan(ref).any()  # the NaN codes (and NaN scales) are among them


@pytest.mark.parametrize("fmt", ["e5m2", "e4m3", "nvfp4", "mxfp4"])
def test_bf16_tile_decoder_every_code_is_exact(fmt):
    """The bf16 tile holds the very values of the float32 one (every value these formats decode
    to is a bfloat16 number; NVFP4's tensor scale goes on y, so g = 1 here)."""
    packed = every_code_weight(fmt)
    if fmt == "nvfp4":
        packed = PackedWeight(fmt, packed.shape, packed.words, packed.scales, torch.tensor(1.0))
    if fmt == "e4m3":  # row scales go on y
        packed = PackedWeight(fmt, packed.shape, packed.words, torch.ones(packed.shape[0]))
    n, k = packed.shape
    kp = packed.padded_k
    fp4 = fmt in ("nvfp4", "mxfp4")
    w = np.empty((n, kp), np.uint16)
    scales = packed.scales.numpy() if fp4 else np.zeros((1, 1), np.uint8)
    S.dequantize_rows_bf16(_batch._KIND[packed.fmt], packed.words.view(torch.uint8).numpy(),
                           scales, np.float32(1), 0, w)
    got = torch.from_numpy(w).view(torch.bfloat16).float()
    if fp4:
        got = torch.stack((got[:, :kp // 2], got[:, kp // 2:]), dim=2).reshape(n, kp)
    assert bool(same_bits(got[:, :k], softfp8.dequantize(packed)).all())


# (N, K, M): odd N and K, K = 4097 straddling every block, N past one group of rows and one
# thread's chunk, M odd (the kernel's pair of x rows plus one) and even
CASES = [(3, 4097, 2), (17, 3, 3), (1, 1, 5), (67, 333, 7), (9, 129, 16), (130, 40, 33)]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n, k, m", CASES, ids=str)
def test_matches_the_reference_backend(path, fmt, n, k, m):
    packed, g = quantized(fmt, n, k, seed=n * 31 + k * 7 + m)
    x = torch.randn(m, k, generator=g)
    bias = torch.randn(n, generator=g)
    y = cpu_backend.matmul(x, packed, bias)
    assert y.shape == (m, n) and y.dtype == torch.float32
    assert rel_err(y, softfp8.linear(x, packed, bias, backend="torch")) <= 1e-5
    # fp32 sums either way (torch's sgemm on the tile path): the same bound against fp64
    ref64 = x.double() @ softfp8.dequantize(packed).double().T + bias.double()
    assert rel_err(y, ref64) <= 1e-5


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("fmt", FORMATS)
def test_half_activations(path, fmt, dtype, tol):
    packed, g = quantized(fmt, 21, 75, seed=3)
    x = torch.randn(5, 75, generator=g).to(dtype)
    y = cpu_backend.matmul(x, packed)
    assert y.dtype == dtype
    assert rel_err(y, x.double() @ softfp8.dequantize(packed).double().T) <= tol


@pytest.mark.parametrize("fmt", ["e5m2", "e4m3", "nvfp4", "mxfp4"])
def test_nan_and_inf_propagate_like_torch(path, fmt):
    g = torch.Generator().manual_seed(5)
    w = torch.randn(9, 70, generator=g)
    w[1, 5] = float("nan")
    if fmt == "e5m2":
        w[2, 9], w[3, 9] = float("inf"), float("-inf")
    packed = softfp8.quantize(w, fmt)
    x = torch.randn(5, 70, generator=g)
    x[0, 40] = float("inf")  # meets zero codes too: inf * 0 is NaN, as in torch
    x[-1, 61] = float("nan")
    ref = softfp8.linear(x, packed, backend="torch")
    y = cpu_backend.matmul(x, packed)
    assert torch.isnan(ref).any()
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    assert torch.equal(torch.isinf(y), torch.isinf(ref))
    fin = torch.isfinite(ref)
    assert rel_err(y[fin], ref[fin]) <= 1e-6


def test_tile_rows_are_bounded():
    for n, kp in [(4096, 4096), (128256, 4096), (4096, 14336), (7, 64), (100, 1 << 24)]:
        rows = _batch.tile_rows(n, kp)
        assert 1 <= rows <= n
        assert rows * kp <= _batch.TILE_ELEMENTS or rows == min(n, 8)


@pytest.mark.parametrize("crossover", [cpu_backend.GEMV_ROWS_MAX_M, _batch.TILE_MIN_M,
                                       _batch.TILE_MIN_M_BF16, _dp_rows.DP_TILE_MIN_M,
                                       _dp_rows.DP_TILE_MIN_M_BF16],
                         ids=["GEMV_ROWS_MAX_M", "TILE_MIN_M", "TILE_MIN_M_BF16", "DP_TILE_MIN_M",
                              "DP_TILE_MIN_M_BF16"])
def test_every_format_has_a_crossover(crossover):
    # E4M3_B128 has no bf16 tile (a code times its tile scale is not a bf16 number)
    no_b128 = crossover is _batch.TILE_MIN_M_BF16
    assert set(crossover) == set(Format) - ({Format.E4M3_B128} if no_b128 else set())
    assert all(isinstance(v, int) and v >= 1 for v in crossover.values())


@pytest.mark.parametrize("fast", [True, False], ids=["bf16 faster", "float32 faster"])
def test_bf16_x_takes_bf16_tiles_only_where_torch_multiplies_bf16_faster(fast, monkeypatch):
    """Where torch's bf16 matmul is the slower one (a CPU without bf16 dot products: torch widens
    bf16 inside it), bf16 x takes float32 x's crossover and float32 tiles (and float32's error);
    where it is the faster one, bf16 tiles from TILE_MIN_M_BF16."""
    monkeypatch.setattr(_batch, "bf16_matmul_is_fast", lambda: fast)
    decoded = []
    for name in ("dequantize_rows", "dequantize_rows_bf16"):
        real = getattr(S, name)
        monkeypatch.setattr(S, name, lambda *a, _n=name, _r=real: decoded.append(_n) or _r(*a))
    packed, g = quantized("e4m3", 37, 300, seed=8)
    fmt = packed.fmt
    for m in (_batch.TILE_MIN_M_BF16[fmt], _batch.TILE_MIN_M[fmt]):
        decoded.clear()
        x = torch.randn(m, 300, generator=g).bfloat16()
        y = _batch.matmul_rows(x, packed, 2)
        ref = softfp8.linear(x.float(), packed, backend="torch")
        if fast:
            assert set(decoded) == {"dequantize_rows_bf16"}
            assert rel_err(y, ref) <= 2.0 ** -8
        else:
            tile = m >= _batch.TILE_MIN_M[fmt]
            assert set(decoded) == ({"dequantize_rows"} if tile else set())
            assert rel_err(y, ref) <= 1e-5


def test_bf16_matmul_speed_is_measured_once():
    first = _batch.bf16_matmul_is_fast()
    assert isinstance(first, bool) and _batch.bf16_matmul_is_fast.cache_info().currsize == 1
    assert _batch.bf16_matmul_is_fast() is first
