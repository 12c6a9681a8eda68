"""Kernel.MMA_GEMV (`triton/_mma*.py`) on a GPU against the reference backend: every format and
decode, the run and tile mappings, groups, the ring, two register buffers, MXFP4's row
exponents, E4M3_B128's tile scales (`pytest -m gpu`; the PTX itself is checked on CPU by
test_mma_ptx.py)."""

import pytest
import torch
from conftest import rel_err, triton_backend_or_skip

import softfp8
from softfp8.backends import reference
from softfp8.dispatch import E2M1Decode
from softfp8.formats import Format, PackedWeight

triton_backend = triton_backend_or_skip()
from softfp8.backends.triton import (Kernel, LaunchConfig, device_info,  # noqa: E402
                                     launch_config, run)
from triton_support import HAS_GPU, every_code, tolerance  # noqa: E402


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("fmt", [Format.NVFP4, Format.MXFP4])
@pytest.mark.parametrize("e2m1", [E2M1Decode.INJECT, E2M1Decode.SELECT])
def test_gpu_mma_gemv_every_scale_code_with_and_without_nan_codes(fmt, e2m1):
    """Every block scale code through Kernel.MMA_GEMV's tile, exactly: with the NaN codes among
    them (the tile with its NaN checks), then with those rows' scales set to 1.0, so
    `codes_nan_free` holds and the launcher takes the tile without them."""
    dev = torch.device("cuda")
    if not triton_backend.uses_mma_gemv(272, 32, 1, fmt, device_info(dev), torch.float16):
        pytest.skip("Kernel.MMA_GEMV needs NVIDIA sm_80+")
    packed, expect = every_code(fmt, dev)
    expect = expect.half().float()  # y is in x's dtype (E8M0 2^-127 .. 2^127 round to 0 / inf)
    x = torch.zeros(1, packed.shape[1], dtype=torch.float16, device=dev)
    x[0, 0] = 1.0
    cfgs = [LaunchConfig(Kernel.MMA_GEMV, 8, 32, 128, 1, 4, 1),  # the tiles
            LaunchConfig(Kernel.MMA_GEMV, 1, 16, 128, 1, 4, 0)]  # the M = 1 runs
    for finite in (False, True):
        if finite:
            one = 0x38 if fmt is Format.NVFP4 else 127
            nan = torch.isnan(expect)
            packed.scales[nan.to(dev), 0] = one
            expect = torch.where(nan, softfp8.decode.E2M1_TO_FLOAT32[2], expect)
        assert triton_backend.codes_nan_free(packed) == finite
        for cfg in cfgs:
            y = run(x, packed, None, cfg, e2m1=e2m1).float().cpu()[0]
            ok = (y == expect) | (torch.isnan(y) & torch.isnan(expect))
            assert ok.all(), (finite, cfg, torch.nonzero(~ok).flatten().tolist()[:8])


MMA_CASES = [(37, 264, 1, 1), (4103, 4096, 1, 1), (1000, 11008, 3, 1), (300, 2048, 8, 3),
             (64, 4104, 2, 2), (96, 8192, 1, 2), (40, 4080, 1, 1), (300, 2048, 12, 3),
             (1000, 4096, 16, 1), (37, 264, 9, 2)]
# (N, K, M, split): odd N, K % 64 != 0, every M class, splits; whole steps (ZERO = 0) with and
# without rows past N and a split; FP4 rows padded past K in whole steps (zeros kept for x);
# M > 8 as two groups of 8 x rows, one partly filled, with and without a split


MMA_DECODES = [(f, E2M1Decode.SELECT) for f in Format] + [(Format.NVFP4, E2M1Decode.INJECT),
                                                          (Format.MXFP4, E2M1Decode.INJECT)]
"""(format, E2M1 decoder) pairs of the MMA GEMV's GPU tests: FP4 with both decodes."""


def _mma_case(fmt, n, k, m, split):
    """(packed weight, fp16 x, bias or None (split 2), generator) of one MMA_CASES row on the
    GPU; skips where Kernel.MMA_GEMV can't run."""
    info = device_info(torch.device("cuda"))
    if not triton_backend.mma_gemv_runs(k, m, fmt, info, torch.float16):
        pytest.skip("Kernel.MMA_GEMV needs NVIDIA sm_80+")
    g = torch.Generator().manual_seed(n + k + m)
    packed = softfp8.quantize(torch.randn(n, k, generator=g), fmt).to("cuda")
    x = torch.randn(m, k, generator=g).half().cuda()
    bias = torch.randn(n, generator=g).cuda() if split != 2 else None
    return packed, x, bias, g


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("fmt, e2m1", MMA_DECODES)
@pytest.mark.parametrize("n, k, m, split", MMA_CASES)
def test_gpu_mma_gemv_matches_reference(fmt, e2m1, n, k, m, split):
    """FP4 with both decodes: the table (select) and exponent injection (`_mma_ptx`)."""
    packed, x, bias, g = _mma_case(fmt, n, k, m, split)
    cfgs = [LaunchConfig(Kernel.MMA_GEMV, 8, 32, 128, split, warps, ahead)  # num_stages:
            for warps, ahead in ((4, 0), (8, 2), (16, 5))]                  # L2 prefetch steps
    # the run mapping (block_m: the x rows it is laid out for; 2 or 4 tiles a warp; FP4 M = 1
    # one warp of 4 tiles: `_mma_table.MMA_FP4_M1_FOUR_TILES_MAX_PER_SM`)
    mp = min(8, 1 << (m - 1).bit_length())
    cfgs += [LaunchConfig(Kernel.MMA_GEMV, r, triton_backend.mma_rows(r, w, t), 128, split, w, a)
             for r, w, t, a in ((mp, 4, 2, 2), (mp, 8, 2, 0), (mp, 2, 4, 0), (8, 4, 2, 0),
                                (8, 1, 4, 0), (mp, 1, 2, 0), (mp, 1, 4, 0))]
    # two register buffers (depth 2), with and without the L2 prefetch beyond them
    cfgs += [LaunchConfig(Kernel.MMA_GEMV, mp, triton_backend.mma_rows(mp, w, 2), 128, split, w, a,
                          depth=2) for w, a in ((2, 0), (4, 4))]
    # WIDE (block_m 16): one program decodes once for x rows 0..7 and 8..15 (the tiles, the
    # runs for 8 rows with one and two buffers)
    wide = triton_backend.MMA_WIDE_M
    cfgs += [LaunchConfig(Kernel.MMA_GEMV, wide, 32, 128, split, 4, 2),
             LaunchConfig(Kernel.MMA_GEMV, wide, triton_backend.mma_rows(8, 4, 2), 128, split, 4,
                          0),
             LaunchConfig(Kernel.MMA_GEMV, wide, triton_backend.mma_rows(8, 2, 2), 128, split, 2,
                          0, depth=2)]
    for cfg in cfgs:
        y = run(x, packed, bias, cfg, e2m1=e2m1)
        assert y.dtype == torch.float16 and y.shape == (m, n)
        assert rel_err(y, reference.matmul(x, packed, bias)) <= tolerance(torch.float16), cfg
    # the table's setting, and x that is not 16-byte aligned (the launcher copies it)
    xs = torch.randn(m * k + 1, generator=g).half().cuda()[1:].view(m, k)
    xs.copy_(x)
    y = run(xs, packed, bias, cfgs[0], e2m1=e2m1)
    assert rel_err(y, reference.matmul(x, packed, bias)) <= tolerance(torch.float16)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_gpu_mma_gemv_depth_two_needs_the_runs():
    info = device_info(torch.device("cuda"))
    if not triton_backend.mma_gemv_runs(64, 1, Format.E5M2, info, torch.float16):
        pytest.skip("Kernel.MMA_GEMV needs NVIDIA sm_80+")
    packed = softfp8.quantize(torch.randn(64, 64), Format.E5M2).to("cuda")
    x = torch.randn(1, 64).half().cuda()
    for bad in (LaunchConfig(Kernel.MMA_GEMV, 8, 32, 128, 1, 4, 0, depth=2),  # the tiles
                LaunchConfig(Kernel.MMA_GEMV, 1, 32, 128, 1, 4, 0, depth=2),  # 4 tiles a warp
                LaunchConfig(Kernel.MMA_GEMV, 1, 16, 128, 1, 4, 0, depth=3)):
        with pytest.raises(ValueError, match="takes depth 1, or 2 on the run mapping"):
            run(x, packed, None, bad)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("fmt, e2m1", MMA_DECODES)
@pytest.mark.parametrize("n, k, m, split", [c for c in MMA_CASES if c[2] <= 8])
def test_gpu_mma_gemv_ring_matches_reference(fmt, e2m1, n, k, m, split):
    """The shared-memory ring (`_mma_ring`) at every size class of its static smem (stages x
    warps), each M class of the run mapping, splits, odd N, K % 64 != 0."""
    packed, x, bias, g = _mma_case(fmt, n, k, m, split)
    mp = min(8, 1 << (m - 1).bit_length())
    want = reference.matmul(x, packed, bias)
    for w, r in ((1, 4), (2, 3), (4, 2), (1, 2), (2, 2), (2, 4), (1, 6), (1, 8)):
        cfg = LaunchConfig(Kernel.MMA_GEMV, mp, triton_backend.mma_rows(mp, w, 2), 128, split,
                           w, 0, ring=r)
        y = run(x, packed, bias, cfg, e2m1=e2m1)
        assert rel_err(y, want) <= tolerance(torch.float16), cfg
    # the table's own setting (from sm_90: 8-bit M <= 4 on the ring, its K split by the rule)
    cfg = launch_config(n, k, m, fmt, device_info(torch.device("cuda")), torch.float16)
    assert rel_err(run(x, packed, bias, cfg, e2m1=e2m1), want) <= tolerance(torch.float16), cfg


def _ring_cfgs(mp, k, split):
    """(LaunchConfig, bytes of a row a program) of the 8-bit ring in 1, 2, 4, 1 warps of 4, 3,
    2, 2 stages, run mapping for mp x rows, split K ways."""
    for w, r in ((1, 4), (2, 3), (4, 2), (1, 2)):
        cfg = LaunchConfig(Kernel.MMA_GEMV, mp, triton_backend.mma_rows(mp, w, 2), 128, split,
                           w, 0, ring=r)
        yield cfg, triton_backend.split_bytes(k, cfg, 8)[0]


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("fmt", [Format.E5M2, Format.E4M3, Format.E4M3_B128])
@pytest.mark.parametrize("n, k, m, split", [(4096, 4096, 1, 1), (1024, 1536, 1, 1),
                                            (512, 8192, 2, 2), (2048, 4096, 4, 1),
                                            (96, 6144, 1, 3)])
def test_gpu_mma_gemv_ring_whole_matches_reference(fmt, n, k, m, split):
    """The ring where every row and step is inside (`_mma`'s WHOLE, picked by the launcher):
    copies without predicates, the last ring - 1 steps in a loop of their own; one program of
    exactly ring - 1 steps (K = 1536 at M = 1), K splits, M = 2 and 4, row scales and a bias."""
    packed, x, bias, g = _mma_case(fmt, n, k, m, split)
    mp = min(8, 1 << (m - 1).bit_length())
    want = reference.matmul(x, packed, bias)
    for cfg, per_split in _ring_cfgs(mp, k, split):
        assert triton_backend.mma_ring_whole(n, m, k, per_split, mp, cfg, True, False), cfg
        y = run(x, packed, bias, cfg)
        assert rel_err(y, want) <= tolerance(torch.float16), cfg


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("fmt", [Format.E5M2, Format.E4M3, Format.E4M3_B128, Format.NVFP4])
@pytest.mark.parametrize("n, k, m, block_m, split", [(2048, 4096, 8, 4, 1), (512, 4104, 12, 4, 2),
                                                     (1024, 1536, 16, 4, 1), (256, 640, 3, 1, 1),
                                                     (96, 4096, 7, 2, 1)])
def test_gpu_mma_gemv_run_groups_match_reference(fmt, n, k, m, block_m, split):
    """M past the run mapping's block_m: x's rows in groups of block_m, one program each a row
    block (GROUPS), on the ring (8-bit, 2 or 3 stages) and from registers; M not a multiple of
    block_m (the last group's missing rows), K not whole steps, row scales and a bias."""
    packed, x, bias, g = _mma_case(fmt, n, k, m, split)
    want = reference.matmul(x, packed, bias)
    cfgs = [LaunchConfig(Kernel.MMA_GEMV, block_m, triton_backend.mma_rows(block_m, 2, 2), 128,
                         split, 2, 0)]
    if fmt in (Format.E5M2, Format.E4M3, Format.E4M3_B128):
        cfgs += [LaunchConfig(Kernel.MMA_GEMV, block_m, triton_backend.mma_rows(block_m, w, 2),
                              128, split, w, 0, ring=r) for w, r in ((2, 3), (1, 4))]
    for cfg in cfgs:
        y = run(x, packed, bias, cfg)
        assert rel_err(y, want) <= tolerance(torch.float16), cfg


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_gpu_mma_gemv_ring_needs_the_runs_at_depth_one():
    """The ring takes the run mapping, 2 tiles a warp, depth 1, at most 8 stage slots: anything
    else is refused by name, not launched."""
    packed = softfp8.quantize(torch.randn(64, 64), Format.NVFP4).to("cuda")
    x = torch.randn(1, 64).half().cuda()
    for bad in (LaunchConfig(Kernel.MMA_GEMV, 8, 32, 128, 1, 4, 0, ring=2),  # the tiles
                LaunchConfig(Kernel.MMA_GEMV, 1, 32, 128, 1, 4, 0, ring=2),  # 4 tiles a warp
                LaunchConfig(Kernel.MMA_GEMV, 1, 8, 128, 1, 2, 0, depth=2, ring=2),
                LaunchConfig(Kernel.MMA_GEMV, 1, 16, 128, 1, 4, 0, ring=3),  # 12 slots
                LaunchConfig(Kernel.MMA_GEMV, 1, 8, 128, 1, 2, 0, ring=5)):
        with pytest.raises(ValueError, match="ring takes the run mapping"):
            run(x, packed, None, bad)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("e2m1", [E2M1Decode.SELECT, E2M1Decode.INJECT])
def test_gpu_mma_gemv_mxfp4_row_exponents_and_without(e2m1):
    """MXFP4 against each row's exponent (`mx_row_exponents`, the kernel's ROW_E) and, once a
    row's blocks span more than that allows, against the four blocks' shared exponent: both
    agree with the reference, through the tiles, the M = 1 runs, a K split and WIDE."""
    info = device_info(torch.device("cuda"))
    if not triton_backend.uses_mma_gemv(64, 4096, 1, Format.MXFP4, info, torch.float16):
        pytest.skip("Kernel.MMA_GEMV needs NVIDIA sm_80+")
    g = torch.Generator().manual_seed(29)
    packed = softfp8.quantize(torch.randn(96, 2048, generator=g), Format.MXFP4)
    scales = packed.scales.clone()
    scales[7, :] = torch.randint(90, 130, (64,), generator=g).to(torch.uint8)  # 2^40 wide
    scales[7, 8:12] = 60  # a whole step's four blocks (1024 codes in) far below the rest
    spread = PackedWeight(Format.MXFP4, (96, 2048), packed.words, scales)
    cfgs = [LaunchConfig(Kernel.MMA_GEMV, 8, 32, 128, 1, 4, 1),  # the tiles
            LaunchConfig(Kernel.MMA_GEMV, 1, 16, 128, 1, 4, 0),  # the M = 1 runs
            LaunchConfig(Kernel.MMA_GEMV, 1, 8, 128, 2, 2, 0),  # ... split in two
            LaunchConfig(Kernel.MMA_GEMV, 16, 32, 128, 1, 4, 2)]  # WIDE
    for weight, row_e in ((packed, True), (spread, False)):
        weight = weight.to("cuda")
        assert (triton_backend.mx_row_exponents(weight) is not None) == row_e
        bias = torch.randn(96, generator=g).half().cuda()
        for cfg in cfgs:
            m = 12 if cfg.block_m == 16 else 1
            x = torch.randn(m, 2048, generator=g).half().cuda()
            y = run(x, weight, bias, cfg, e2m1=e2m1)
            want = reference.matmul(x, weight, bias)
            assert rel_err(y, want) <= tolerance(torch.float16), (row_e, cfg)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("e2m1", [E2M1Decode.SELECT, E2M1Decode.INJECT])
def test_gpu_mma_gemv_mxfp4_block_scales_apart(e2m1):
    """The four blocks one mma spans get one shared exponent E (_mma docstring): blocks up to
    2^23 below E stay exact, zero blocks don't set E, and a NaN scale still makes NaN."""
    info = device_info(torch.device("cuda"))
    if not triton_backend.uses_mma_gemv(64, 4096, 1, Format.MXFP4, info, torch.float16):
        pytest.skip("Kernel.MMA_GEMV needs NVIDIA sm_80+")
    g = torch.Generator().manual_seed(23)
    packed = softfp8.quantize(torch.randn(64, 1024, generator=g), Format.MXFP4)
    scales = torch.randint(100, 124, packed.scales.shape, generator=g, dtype=torch.int32)
    scales[:, ::4] = 200  # a block 2^77..2^100 above its group, all zero codes
    words = packed.words.view(torch.uint8).view(64, -1, 16).clone()
    words[:, ::4] = 0
    packed = PackedWeight(Format.MXFP4, (64, 1024), words.view(64, -1).view(torch.int32),
                          scales.to(torch.uint8))
    x = torch.randn(1, 1024, generator=g).half()
    cfg = LaunchConfig(Kernel.MMA_GEMV, 8, 32, 128, 1, 4, 1)
    y = run(x.cuda(), packed.to("cuda"), None, cfg, e2m1=e2m1).float()
    ref = x.double() @ softfp8.dequantize(packed).double().T * 1.0
    assert rel_err(y.cpu(), ref.float()) <= tolerance(torch.float16)
    nan_scales = packed.scales.clone()
    nan_scales[5, 3] = 255
    y = run(x.cuda(), PackedWeight(Format.MXFP4, (64, 1024), packed.words, nan_scales).to("cuda"),
            None, cfg, e2m1=e2m1).float().cpu()
    assert torch.isnan(y[0, 5]) and not torch.isnan(y[0, :5]).any()


B128 = Format.E4M3_B128


def _b128_cfgs(m, split):
    """Kernel.MMA_GEMV's mappings for E4M3_B128 at M (as `test_gpu_mma_gemv_matches_reference`
    runs them): the tiles, the runs (2 and 4 tiles a warp, one and two register buffers), WIDE
    above 8 x rows, the ring at M <= 8, and block_k = 64 splits that start mid-tile."""
    mp = min(8, 1 << (m - 1).bit_length())
    rows = triton_backend.mma_rows
    if m > 8:
        wide = triton_backend.MMA_WIDE_M
        return [LaunchConfig(Kernel.MMA_GEMV, wide, 32, 128, split, 4, 2),
                LaunchConfig(Kernel.MMA_GEMV, wide, rows(8, 4, 2), 128, split, 4, 0),
                LaunchConfig(Kernel.MMA_GEMV, wide, rows(8, 2, 2), 128, split, 2, 0, depth=2),
                LaunchConfig(Kernel.MMA_GEMV, 8, 32, 64, split + 2, 4, 0)]  # two groups of 8
    cfgs = [LaunchConfig(Kernel.MMA_GEMV, 8, 32, 128, split, w, a) for w, a in ((4, 0), (8, 2))]
    cfgs += [LaunchConfig(Kernel.MMA_GEMV, mp, rows(mp, w, t), 128, split, w, 0)
             for w, t in ((4, 2), (2, 4), (1, 4))]
    cfgs += [LaunchConfig(Kernel.MMA_GEMV, mp, rows(mp, 2, 2), 128, split, 2, 0, depth=2),
             LaunchConfig(Kernel.MMA_GEMV, mp, rows(mp, 2, 2), 64, split + 2, 2, 0, depth=2),
             LaunchConfig(Kernel.MMA_GEMV, 8, 32, 64, split + 1, 4, 0)]
    cfgs += [LaunchConfig(Kernel.MMA_GEMV, mp, rows(mp, w, 2), bk, split + s, w, 0, ring=r)
             for w, r, bk, s in ((1, 4, 128, 0), (2, 3, 128, 0), (4, 2, 64, 2), (1, 8, 64, 1))]
    return cfgs


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("n, k, m, split", [(300, 1032, 1, 1), (1000, 4104, 3, 2),
                                            (384, 2048, 8, 3), (520, 1536, 12, 1),
                                            (130, 4096, 2, 5), (4096, 4096, 1, 1)])
def test_gpu_mma_gemv_e4m3_b128_tile_scales_apart(n, k, m, split):
    """E4M3_B128 on every Kernel.MMA_GEMV mapping (`_mma_tile._tile_step`): tiles whose
    scales differ by up to 2^6 along N and K, partial tiles along both, splits that start
    mid-tile. Then x only inside one tile of K: that tile's scale doubled doubles exactly its
    128 rows' outputs and leaves every other output as it was, on every mapping (a sum scaled
    by a neighbour's tile, or another row block's, would show)."""
    info = device_info(torch.device("cuda"))
    if not triton_backend.mma_gemv_runs(k, m, B128, info, torch.float16):
        pytest.skip("Kernel.MMA_GEMV needs NVIDIA sm_80+")
    g = torch.Generator().manual_seed(n + k + m)
    kt = k // 256  # one tile of K, rows 128..255
    tiles = torch.exp2(torch.randint(-3, 4, (-(-n // 128), -(-k // 128)), generator=g).float())
    tiles[1, kt] = 8.0  # its sums far from fp16's subnormals, where doubling isn't exact
    w = torch.randn(n, k, generator=g) * tiles.repeat_interleave(128, 0)[:n].repeat_interleave(
        128, 1)[:, :k]
    packed = softfp8.quantize(w, B128).to("cuda")
    x = torch.randn(m, k, generator=g).half().cuda()
    bias = torch.randn(n, generator=g).cuda()
    want = reference.matmul(x, packed, bias)
    x_in = torch.zeros_like(x)
    x_in[:, 128 * kt:128 * kt + 128] = 8 * x[:, 128 * kt:128 * kt + 128]
    moved_scales = packed.scales.clone()
    moved_scales[1, kt] *= 2
    moved = PackedWeight(B128, (n, k), packed.words, moved_scales)
    cfgs = _b128_cfgs(m, split) + [launch_config(n, k, m, B128, info, torch.float16)]
    for cfg in cfgs:
        y = run(x, packed, bias, cfg)
        assert y.dtype == torch.float16 and y.shape == (m, n)
        assert rel_err(y, want) <= tolerance(torch.float16), cfg
        y1 = run(x_in, packed, None, cfg)
        y2 = run(x_in, moved, None, cfg)
        assert (y1[:, 128:256] != 0).all(), cfg
        assert torch.equal(y2[:, 128:256], 2 * y1[:, 128:256]), cfg
        assert torch.equal(y2[:, :128], y1[:, :128]) and torch.equal(y2[:, 256:], y1[:, 256:])


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_gpu_mma_gemv_e4m3_b128_every_code_exactly():
    """Every E4M3 code under two tiles' scales (1 and 0.75: products exact in fp16) through
    Kernel.MMA_GEMV, NaN codes included; then with the NaN codes replaced, so the launcher takes
    the tile without its NaN fix (`codes_nan_free`)."""
    dev = torch.device("cuda")
    if not triton_backend.mma_gemv_runs(32, 1, B128, device_info(dev), torch.float16):
        pytest.skip("Kernel.MMA_GEMV needs NVIDIA sm_80+")
    packed, expect = every_code(B128, dev)
    x = torch.zeros(1, packed.shape[1], dtype=torch.float16, device=dev)
    x[0, 0] = 1.0
    rows = triton_backend.mma_rows
    cfgs = [LaunchConfig(Kernel.MMA_GEMV, 8, 32, 128, 1, 4, 0),  # the tiles
            LaunchConfig(Kernel.MMA_GEMV, 1, rows(1, 2, 2), 128, 1, 2, 0, depth=2),
            LaunchConfig(Kernel.MMA_GEMV, 1, rows(1, 1, 2), 128, 1, 1, 0, ring=4)]
    for finite in (False, True):
        if finite:
            nan = torch.isnan(expect)
            codes = packed.words.view(torch.uint8).clone()
            codes[nan.to(dev), 0] = 0x38  # 1.0
            packed = PackedWeight(B128, packed.shape, codes.view(torch.int32), packed.scales)
            expect = torch.where(nan, packed.scales.repeat_interleave(128, 0)[:, 0].cpu(), expect)
        assert triton_backend.codes_nan_free(packed) == finite
        want = expect.half().float()
        for cfg in cfgs:
            y = run(x, packed, None, cfg).float().cpu()[0]
            ok = (y == want) | (torch.isnan(y) & torch.isnan(want))
            assert ok.all(), (finite, cfg, torch.nonzero(~ok).flatten().tolist()[:8])
