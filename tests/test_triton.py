"""The Triton backend against the reference backend.

On CPU these run in Triton's interpreter (conftest.py sets TRITON_INTERPRET=1 before softfp8 is
imported); tests marked `gpu` run the compiled kernels on a CUDA/ROCm GPU (`pytest -m gpu`).

Sampling (CI has 2 cores; the interpreter pays per program and per op): every kernel (GEMV,
small-M, tiled) x every decode (e5m2, e4m3, nvfp4 and mxfp4 each with select and inject) x
every activation dtype runs once, on a shape drawn from N, K in {1, 3, 17, 4097} and M from the
kernel's range of {1, 2, 5, 16, 33} by a seeded generator that never puts 4097 on both N and K;
bias alternates. Split-K and every code of every format are covered by their own tests.
"""
import dataclasses
import functools
import itertools
import random

import pytest
import torch
from conftest import rel_err, triton_backend_or_skip

import softfp8
from softfp8.backends import reference
from softfp8.dispatch import E2M1Decode
from softfp8.formats import SPECS, Format, PackedWeight

triton_backend = triton_backend_or_skip()
from softfp8.backends.triton import Kernel, LaunchConfig, device_info, launch_config, run  # noqa: E402

HAS_GPU = torch.cuda.is_available()
DEVICE = "cuda" if HAS_GPU else "cpu"

DECODES = [(Format.E5M2, E2M1Decode.SELECT), (Format.E4M3, E2M1Decode.SELECT),
           (Format.NVFP4, E2M1Decode.SELECT), (Format.NVFP4, E2M1Decode.INJECT),
           (Format.MXFP4, E2M1Decode.SELECT), (Format.MXFP4, E2M1Decode.INJECT)]
CODE_DECODES = DECODES + [(Format.E4M3_B128, E2M1Decode.SELECT)]
"""DECODES and E4M3_B128 (its parity cases: test_triton_tile_scales.py)."""
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SIZES = (1, 3, 17, 4097)
M_RANGE = {Kernel.GEMV: (1,), Kernel.SMALL_M: (2, 5, 16), Kernel.TILED: (33,)}


def tolerance(dtype):
    """1e-5 for fp32 (issue 4); otherwise one unit of the activation dtype's precision."""
    return 1e-5 if dtype == torch.float32 else torch.finfo(dtype).eps


def _cases():
    rng = random.Random(4)
    cases = []
    for i, (kernel, (fmt, e2m1), dtype) in enumerate(
            itertools.product(M_RANGE, DECODES, DTYPES)):
        n, k = rng.choice(SIZES), rng.choice(SIZES)
        if n == k == 4097:
            k = rng.choice(SIZES[:3])
        m = rng.choice(M_RANGE[kernel])
        if kernel is Kernel.SMALL_M and dtype == torch.float32 and m < 5:
            m = 5  # fp32 with M <= 4 runs on the GEMV by design
        cases.append(pytest.param(kernel, fmt, e2m1, dtype, n, k, m, i % 2 == 0,
                                  id=f"{kernel.value}-{fmt}-{e2m1}-{str(dtype)[6:]}-{n}x{k}-m{m}"))
    return cases


@pytest.mark.parametrize("kernel, fmt, e2m1, dtype, n, k, m, with_bias", _cases())
def test_matches_reference(kernel, fmt, e2m1, dtype, n, k, m, with_bias):
    g = torch.Generator().manual_seed(n * 31 + k * 7 + m)
    packed = softfp8.quantize(torch.randn(n, k, generator=g), fmt).to(DEVICE)
    x = torch.randn(m, k, generator=g).to(dtype).to(DEVICE)
    bias = torch.randn(n, generator=g).to(DEVICE) if with_bias else None
    info = device_info(torch.device(DEVICE))
    cfg = launch_config(n, k, m, fmt, info, dtype)
    if triton_backend.uses_mma_gemv(n, k, m, fmt, info, dtype):
        kernel = Kernel.MMA_GEMV  # FP4 with fp16 x at M <= 16 on sm_80+ (its own tests below)
    assert cfg.kernel is kernel, "the launch table routes this M elsewhere: update the sampling"
    y = triton_backend.matmul(x, packed, bias, e2m1=e2m1)
    assert y.dtype == dtype and y.shape == (m, n)
    assert rel_err(y, reference.matmul(x, packed, bias)) <= tolerance(dtype)


@pytest.mark.parametrize("fmt", list(Format))
@pytest.mark.parametrize("cfg", [LaunchConfig(Kernel.GEMV, 2, 16, 64, split_k=3),
                                 LaunchConfig(Kernel.SMALL_M, 16, 32, 32, split_k=4)], ids=str)
def test_split_k_matches_reference(fmt, cfg):
    g = torch.Generator().manual_seed(5)
    packed = softfp8.quantize(torch.randn(37, 300, generator=g), fmt).to(DEVICE)
    x = torch.randn(2, 300, generator=g).to(DEVICE)
    bias = torch.randn(37, generator=g).to(DEVICE)
    y = run(x, packed, bias, cfg)
    assert rel_err(y, reference.matmul(x, packed, bias)) <= 1e-5


def _every_code(fmt: Format, device) -> tuple[PackedWeight, torch.Tensor]:
    """A weight whose row r holds one code (or one scale code) at k = 0, and its exact values."""
    from softfp8.decode import decode_e4m3_to_f32, decode_e5m2_to_f32, decode_e8m0
    from softfp8.quantize import pack_codes

    spec = Format(fmt)
    k = 32
    if fmt is Format.E4M3_B128:  # rows 0..127 under tile scale 1, rows 128..255 under 0.75
        codes = torch.zeros(256, k, dtype=torch.uint8)
        codes[:, 0] = torch.arange(256)
        scales = torch.tensor([[1.0], [0.75]])  # e4m3 * 0.75: exact in float32
        return (PackedWeight(fmt, (256, k), pack_codes(codes, fmt), scales).to(device),
                decode_e4m3_to_f32(torch.arange(256)) * scales.repeat_interleave(128, 0)[:, 0])
    if fmt in (Format.E5M2, Format.E4M3):
        codes = torch.zeros(256, k, dtype=torch.uint8)
        codes[:, 0] = torch.arange(256)
        dec = decode_e5m2_to_f32 if fmt is Format.E5M2 else decode_e4m3_to_f32
        scales = None if fmt is Format.E5M2 else torch.ones(256)
        return (PackedWeight(spec, (256, k), pack_codes(codes, fmt), scales).to(device),
                dec(torch.arange(256)))
    # FP4: rows 0..15 every E2M1 code under scale 1; rows 16.. every scale code under E2M1 1.0
    e2m1 = torch.cat([torch.arange(16), torch.full((256,), 2)])
    codes = torch.zeros(272, k, dtype=torch.uint8)
    codes[:, 0] = e2m1
    if fmt is Format.NVFP4:
        one, dec = 0x38, decode_e4m3_to_f32  # E4M3 0x38 = 1.0
    else:
        one, dec = 127, decode_e8m0
    sc = torch.full((272, k // softfp8.formats.SPECS[fmt].block), one, dtype=torch.uint8)
    sc[16:, 0] = torch.arange(256)
    expect = softfp8.decode.E2M1_TO_FLOAT32[e2m1] * dec(sc[:, 0])
    g = torch.tensor(1.0) if fmt is Format.NVFP4 else None
    return PackedWeight(fmt, (272, k), pack_codes(codes, fmt), sc, g).to(device), expect


@pytest.mark.parametrize("kernel", [Kernel.GEMV, Kernel.SMALL_M])
@pytest.mark.parametrize("fmt, e2m1", CODE_DECODES, ids=str)
def test_every_code_decodes_exactly(fmt, e2m1, kernel):
    packed, expect = _every_code(fmt, DEVICE)
    m = 1 if kernel is Kernel.GEMV else 16
    x = torch.zeros(m, packed.shape[1], device=DEVICE)
    x[:, 0] = 1.0
    cfg = LaunchConfig(kernel, m, 16 if kernel is Kernel.GEMV else 32, 32)
    y = run(x, packed, None, cfg, e2m1=e2m1)[0].cpu()
    ok = (y == expect) | (torch.isnan(y) & torch.isnan(expect))
    assert ok.all(), f"codes {torch.nonzero(~ok).flatten().tolist()}: {y[~ok]} != {expect[~ok]}"


@pytest.mark.parametrize("fmt, e2m1", CODE_DECODES, ids=str)
def test_dequant_slab_every_code_is_exact(fmt, e2m1):
    """DEQUANT's slab decode, written to a float32 slab: every code (and every block scale) to
    the exact value, by the portable decoders and, on NVIDIA, the PTX ones."""
    from softfp8.backends.triton import _kernels

    packed, expect = _every_code(fmt, DEVICE)
    w = packed.words.view(torch.uint8)
    n, k = packed.shape
    two_d = packed.scales is not None and packed.scales.dim() == 2
    s = packed.scales if packed.scales is not None else w
    g = packed.global_scale if packed.global_scale is not None else w
    on_gpu = DEVICE != "cpu" and torch.version.cuda is not None
    for asm in (False, True) if on_gpu else (False,):
        slab = torch.full((n, k), 7.0, device=DEVICE)
        _kernels.dequant_kernel[(-(-n // 16), 1)](
            w, s, g, slab, w, n, k, w.shape[1], packed.scales.shape[1] if two_d else 0, 0,
            FMT=Format(fmt).value, HAS_SCALE=packed.scales is not None and not two_d,
            INJECT=E2M1Decode(e2m1) is E2M1Decode.INJECT, BLOCK_R=16, BLOCK_KB=64, CHECK=False,
            ASM=asm, num_warps=4)
        got = slab[:, 0].cpu()
        ok = (got == expect) | (torch.isnan(got) & torch.isnan(expect))
        assert ok.all(), (asm, torch.nonzero(~ok).flatten().tolist()[:8])
        # every other element too (code 0 in a block with a NaN scale is NaN): all written
        want = softfp8.dequantize(packed).cpu()
        same = (slab.cpu() == want) | (torch.isnan(slab.cpu()) & torch.isnan(want))
        assert same.all(), asm


@pytest.mark.parametrize("fmt, e2m1", CODE_DECODES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dequant_slabs_match_reference(fmt, e2m1, dtype):
    """Kernel.DEQUANT: rows decoded a slab at a time (here 16 of 37, so three slabs, the last
    short) and multiplied by torch; the slab is rounded to x's dtype once, within that dtype's
    unit of the reference."""
    g = torch.Generator().manual_seed(11)
    packed = softfp8.quantize(torch.randn(37, 301, generator=g), fmt).to(DEVICE)
    x = torch.randn(40, 301, generator=g).to(dtype).to(DEVICE)
    bias = torch.randn(37, generator=g).to(DEVICE)
    y = run(x, packed, bias, LaunchConfig(Kernel.DEQUANT, 1, 16, 64), e2m1=e2m1)
    assert y.dtype == dtype and y.shape == (40, 37) and y.is_contiguous()
    assert rel_err(y, reference.matmul(x, packed, bias)) <= tolerance(dtype)


@pytest.mark.parametrize("fmt", [Format.E4M3, Format.NVFP4, Format.MXFP4])
@pytest.mark.parametrize("dtype, row_scale, x_scale", [
    (torch.float16, 1e-5, 10.0),     # a row whose every value is below 2^-14: subnormal in fp16
    (torch.float16, 1e5, 1e-3),      # a row above 65504: inf in fp16
    (torch.bfloat16, 1e-38, 1e30)],  # below 2^-118 in bf16
    ids=["f16-tiny", "f16-huge", "bf16-tiny"])
def test_dequant_redoes_rows_the_slab_dtype_cannot_hold(fmt, dtype, row_scale, x_scale):
    """One row out of the slab dtype's exact range beside ordinary rows: DEQUANT's exact pass
    must return it (and its tile) within the dtype's unit of the reference, and leave the blocks
    with no such row (rows 64.. in the interpreter's 64-row tiles) to the slab path."""
    if fmt is Format.NVFP4 and row_scale < 1e-30:
        pytest.skip("NVFP4's E4M3 block scales under one tensor scale span 2^-9..448: the "
                    "quantizer flushes a 1e-38 row beside rows of 1 to zero")
    g = torch.Generator().manual_seed(12)
    w = torch.randn(100, 96, generator=g)
    w[7] *= row_scale
    packed = softfp8.quantize(w, fmt).to(DEVICE)
    x = (torch.randn(20, 96, generator=g) * x_scale).to(dtype).to(DEVICE)
    y = run(x, packed, None, LaunchConfig(Kernel.DEQUANT, 1, 32, 64))
    ref = reference.matmul(x, packed, None)
    assert torch.isfinite(ref).all() and torch.isfinite(y).all()
    for r in (7, 50, 80):
        assert rel_err(y[:, r], ref[:, r]) <= tolerance(dtype), r


@pytest.mark.parametrize("fmt", [Format.E4M3, Format.NVFP4, Format.MXFP4])
def test_dequant_row_ranges_cached_until_the_weight_changes(fmt):
    """The first fp16 call finds every row in range and caches that (later calls skip the check
    and the exact pass); writing a row's scale in place (its version moves) must bring both back,
    and the row out of fp16's range must come out exact again."""
    from softfp8.backends.triton import _dequant

    g = torch.Generator().manual_seed(13)
    packed = softfp8.quantize(torch.randn(100, 96, generator=g), fmt).to(DEVICE)
    x = (torch.randn(20, 96, generator=g) * 1e-3).half().to(DEVICE)
    cfg = LaunchConfig(Kernel.DEQUANT, 1, 32, 64)
    first = run(x, packed, None, cfg)
    entry = _dequant._row_ranges(packed, torch.float16)
    assert entry is not None and entry[0] is None  # checked once: nothing to redo
    assert torch.equal(run(x, packed, None, cfg), first)  # served from the cache
    packed.scales[7] *= 1e5 if fmt is Format.E4M3 else 1  # row scale: row 7 above 65504
    if fmt is not Format.E4M3:  # block scales: E4M3 code 0x7E (448) / E8M0 2^16 on row 7
        packed.scales[7] = 0x7E if fmt is Format.NVFP4 else 127 + 16
        if fmt is Format.NVFP4:
            packed.global_scale.fill_(1e3)  # the tensor scale lifts row 7 past 65504
    assert _dequant._row_ranges(packed, torch.float16) is None  # stale: versions moved
    y = run(x, packed, None, cfg)
    ref = reference.matmul(x, packed, None)
    assert torch.isfinite(ref).all() and torch.isfinite(y).all()
    assert rel_err(y[:, 7], ref[:, 7]) <= tolerance(torch.float16)
    assert _dequant._row_ranges(packed, torch.float16)[0] is not None  # row 7 flagged, cached


def test_needs_and_bad_input():
    packed = softfp8.quantize(torch.randn(5, 7), "e4m3").to(DEVICE)
    with pytest.raises(ValueError, match="x: expected a 2-D"):
        triton_backend.matmul(torch.randn(1, 1, 7, device=DEVICE), packed)
    with pytest.raises(ValueError, match="x.*last dimension of 7"):
        triton_backend.matmul(torch.randn(1, 8, device=DEVICE), packed)
    with pytest.raises(ValueError, match="e2m1"):
        triton_backend.matmul(torch.randn(1, 7, device=DEVICE), packed, e2m1="fast")
    with pytest.raises(ValueError, match="hw_fp8"):
        run(torch.randn(1, 7, device=DEVICE), softfp8.quantize(torch.randn(5, 7), "nvfp4").to(DEVICE),
            None, LaunchConfig(Kernel.GEMV, 1, 16, 64), hw_fp8=True)
    assert triton_backend.NEEDS.why_not(Format.E5M2, torch.device("mps")) is not None
    # auto never picks the interpreter, even with TRITON_INTERPRET set
    assert softfp8.dispatch.select("e5m2", 1, "cpu").backend is not softfp8.Backend.TRITON


def test_launch_makes_the_gpu_of_x_current(monkeypatch):
    """Triton launches on the current device: x on another GPU needs its device made current
    (the launcher checks with not_current_device)."""
    class OnSecondGpu:
        is_cuda = True
        device = torch.device("cuda", 1)

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert triton_backend.not_current_device(OnSecondGpu())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert not triton_backend.not_current_device(OnSecondGpu())
    assert not triton_backend.not_current_device(torch.zeros(1))


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
@pytest.mark.parametrize("fmt", list(Format))
def test_gpu_second_device_while_the_first_is_current(fmt):
    g = torch.Generator().manual_seed(9)
    packed = softfp8.quantize(torch.randn(4096, 4096, generator=g), fmt).to("cuda:1")
    x = torch.randn(1, 4096, generator=g).half().to("cuda:1")
    with torch.cuda.device(0):
        y = triton_backend.matmul(x, packed)  # split along K on most GPUs: counters too
    assert y.device == x.device
    assert rel_err(y, reference.matmul(x, packed)) <= tolerance(torch.float16)


def test_launch_table_is_deterministic_and_splits_small_n():
    h200 = triton_backend.DeviceInfo(sm_count=132, capability=(9, 0), interpreter=False)
    bf16 = torch.bfloat16  # (fp16 at M = 1 goes to Kernel.MMA_GEMV: test_mma_gemv_domain)
    a = launch_config(4096, 4096, 1, Format.E5M2, h200, bf16)
    assert a == launch_config(4096, 4096, 1, Format.E5M2, h200, bf16)
    assert a.kernel is Kernel.GEMV and a.split_k == 1  # 512 row blocks fill a wave: no split
    t4 = triton_backend.DeviceInfo(sm_count=40, capability=(7, 5), interpreter=False)
    assert launch_config(64, 4096, 1, Format.E5M2, t4).split_k > 1  # 8 row blocks < 40 SMs
    big = launch_config(128256, 4096, 1, Format.E5M2, h200, bf16)
    assert big.kernel is Kernel.SMALL_M and big.split_k == 1  # measured: the dot kernel wins
    assert launch_config(128256, 4096, 1, Format.E5M2, h200, torch.float32).kernel is Kernel.GEMV
    # M = 5..8: the MMA GEMV up to MMA_FP8_M8_MAX_CODES 8-bit codes, the dot kernel above
    assert launch_config(4096, 4096, 8, Format.E5M2, h200).kernel is Kernel.MMA_GEMV
    assert launch_config(4096, 14336, 8, Format.E5M2, h200).kernel is Kernel.SMALL_M
    assert launch_config(4096, 4096, 16, Format.E4M3, h200).kernel is Kernel.SMALL_M
    # M = 5..16 on the dot kernel: no K split from SMALL_M_UNSPLIT_PER_SM row blocks an SM
    assert launch_config(28672, 4096, 16, Format.E5M2, h200).split_k == 1
    assert launch_config(28672, 4096, 5, Format.E5M2, h200).split_k == 1
    assert launch_config(28672, 4096, 4, Format.E5M2, h200, bf16).split_k == 2  # M <= 4 as was
    assert launch_config(4096, 4096, 12, Format.E4M3, h200).split_k == 9
    assert launch_config(4096, 4096, 256, Format.E5M2, h200).kernel is Kernel.TILED
    deq = launch_config(4096, 4096, 2048, Format.E5M2, h200)  # measured: dequant + cuBLAS wins
    assert deq.kernel is Kernel.DEQUANT
    assert deq.block_n * 4096 * 2 <= triton_backend.DEQUANT_SLAB_BYTES
    for fmt in Format:  # measured: DEQUANT wins from M = 512 (8-bit) and 256 (FP4)
        first = 512 if SPECS[fmt].bits == 8 else triton_backend.DEQUANT_MIN_M_FP4
        assert launch_config(4096, 4096, first, fmt, h200).kernel is Kernel.DEQUANT
        assert launch_config(4096, 4096, first - 1, fmt, h200).kernel is not Kernel.DEQUANT
    # a bounded slab, never the whole of a large weight: the larger of the byte bound and the
    # fewest rows whose GEMM fills the GPU
    tall = launch_config(128256, 14336, 1024, Format.NVFP4, h200).block_n
    assert tall == triton_backend.DEQUANT_MIN_SLAB_ROWS
    assert tall * 14336 * 2 > triton_backend.DEQUANT_SLAB_BYTES
    assert launch_config(128256, 4096, 2048, Format.E4M3, h200).block_n * 4096 * 2 == (
        triton_backend.DEQUANT_SLAB_BYTES)
    assert triton_backend.uses_hardware_fp8(Format.E5M2, h200)
    assert not triton_backend.uses_hardware_fp8(Format.E4M3, h200)  # measured slower there
    assert not triton_backend.uses_hardware_fp8(
        Format.E5M2, triton_backend.DeviceInfo(80, (8, 0), False))


def test_mma_gemv_domain():
    """FP4, fp16 x, M <= 16, K % 8 == 0, NVIDIA sm_80+; everything else keeps its kernel."""
    h200 = triton_backend.DeviceInfo(sm_count=132, capability=(9, 0), interpreter=False)
    a100 = triton_backend.DeviceInfo(sm_count=108, capability=(8, 0), interpreter=False)
    t4 = triton_backend.DeviceInfo(sm_count=40, capability=(7, 5), interpreter=False)
    mi250 = triton_backend.DeviceInfo(sm_count=104, capability=None, interpreter=False)
    for fmt in (Format.NVFP4, Format.MXFP4):
        cfg = launch_config(4096, 4096, 1, fmt, h200)  # M = 1: 8 rows, 2 warps, K split
        assert (cfg.kernel, cfg.block_m, cfg.block_n, cfg.num_warps, cfg.split_k) == (
            Kernel.MMA_GEMV, 1, 8, 2, 2)
        assert launch_config(22016, 4096, 1, fmt, h200).split_k == 1
        # M = 1 from 6144 rows: one warp, 4 rows, unsplit (6144 rows fill 11.6 warps an SM)
        for n in (6144, 11008, 22016, 128256):
            cfg = launch_config(n, 4096, 1, fmt, h200)
            assert (cfg.block_n, cfg.num_warps, cfg.split_k) == (4, 1, 1), (n, cfg)
        assert launch_config(6143, 4096, 1, fmt, h200).num_warps == 2
        # ... in 4 tiles (8 rows) where those programs are 11..12 an SM, one wave unsplit:
        # 11616..12672 rows on 132 SMs (12288: llama2-7b's qkv), rows of at most 4 KB
        for n, k, rows in [(12288, 4096, 8), (11616, 5120, 8), (12672, 4096, 8),
                           (11615, 4096, 4), (12673, 4096, 4), (12288, 11008, 4)]:
            cfg = launch_config(n, k, 1, fmt, h200)
            assert (cfg.block_n, cfg.num_warps, cfg.split_k) == (rows, 1, 1 + (k > 8192)), (
                n, k, cfg)
            assert triton_backend.mma_layout(cfg) == (1, rows // 2)
        assert launch_config(10240, 4096, 1, fmt, a100).block_n == 8  # 108 SMs: 9504..10368
        assert launch_config(12288, 4096, 1, fmt, a100).block_n == 4
        # FP4's rule only (8-bit M = 1 from sm_90: one warp on the ring, MMA_FP8_RING_M1)
        assert launch_config(11008, 4096, 1, Format.E5M2, a100).num_warps == 2
        assert launch_config(11008, 4096, 2, fmt, h200).num_warps == 4  # M = 1 only
        # M = 2, and M = 3..4 from 8192 rows: the runs, 4 warps
        for n, m in [(4096, 2), (6144, 2), (8192, 3), (28672, 4), (128256, 4)]:
            cfg = launch_config(n, 4096, m, fmt, h200)
            assert (cfg.kernel, cfg.block_m, cfg.num_warps) == (
                Kernel.MMA_GEMV, 1 << (m - 1).bit_length(), 4)
            assert triton_backend.mma_layout(cfg) == (cfg.block_m, 2)
        for n, m in [(4096, 8), (28672, 8), (8191, 4), (6144, 3)]:  # the 32-row tiles
            cfg = launch_config(n, 4096, m, fmt, h200)
            assert cfg.kernel is Kernel.MMA_GEMV and cfg.block_n == 32 and cfg.block_m == 8
        # FP4 splits K to about 11 warps an SM: 192 eight-warp 6144-row tiles stay unsplit
        assert launch_config(6144, 4096, 8, fmt, h200).split_k == 1
        assert launch_config(4096, 4096, 8, fmt, h200).split_k == 2
        # (the 8-bit formats keep 12 at M > 1: their depth-2 runs at M = 8 on 6144 rows, 192
        # warps, split 8, not the 5 that 6 an SM would give)
        assert launch_config(6144, 4096, 8, Format.E5M2, h200).split_k == 8
        # ... to a split whose programs take whole loop steps where one exists (M = 2 at 4096
        # rows: 3 would cut the 32 steps, 4 does not); where none does (K = 11008: 86 steps),
        # the next power of two
        for k, want in ((4096, 4), (14336, 4), (11008, 4)):
            cfg = launch_config(4096, k, 2, fmt, h200)
            per_split, _ = triton_backend.split_bytes(k // 2, cfg, 4)
            zero = triton_backend.mma_zero_fill(k // 2, per_split, 2, cfg, k, k)
            assert (cfg.split_k, zero) == (want, k == 11008), (k, cfg)
        for m in (9, 16):  # one program for all 16 x rows (WIDE), laid out as the runs for 8
            cfg = launch_config(4096, 4096, m, fmt, h200)
            assert cfg.kernel is Kernel.MMA_GEMV and cfg.block_m == triton_backend.MMA_WIDE_M
            assert triton_backend.mma_layout(cfg) == (8, 2) and cfg.depth == 1
        assert launch_config(4096, 4096, 17, fmt, h200).kernel is Kernel.TILED
        assert launch_config(4096, 4096, 1, fmt, h200, torch.bfloat16).kernel is Kernel.GEMV
        assert launch_config(4096, 4096, 1, fmt, h200, torch.float32).kernel is Kernel.GEMV
        assert launch_config(4096, 4100, 1, fmt, h200).kernel is Kernel.GEMV  # K % 8 != 0
        assert launch_config(4096, 4096, 1, fmt, t4).kernel is Kernel.GEMV
        assert launch_config(4096, 4096, 1, fmt, mi250).kernel is Kernel.GEMV
    # 8-bit: M <= 4, and M = 5..8 up to MMA_FP8_M8_MAX_CODES codes (measured), not when the
    # hardware FP8 decode is asked for
    assert launch_config(4096, 4096, 1, Format.E5M2, h200).kernel is Kernel.MMA_GEMV
    assert launch_config(4096, 4096, 1, Format.E4M3, h200).block_m == 1
    assert launch_config(4096, 4096, 2, Format.E5M2, h200).block_m == 2
    assert launch_config(4096, 4096, 3, Format.E4M3, h200).block_m == 4
    assert launch_config(4096, 4096, 4, Format.E5M2, h200).kernel is Kernel.MMA_GEMV
    assert launch_config(4096, 4096, 5, Format.E5M2, h200).block_m == 8
    assert launch_config(6144, 4096, 8, Format.E4M3, h200).kernel is Kernel.MMA_GEMV
    assert launch_config(6144, 4097 + 7, 8, Format.E4M3, h200).kernel is Kernel.SMALL_M
    assert launch_config(28672, 4096, 5, Format.E5M2, h200).kernel is Kernel.SMALL_M
    for m in (5, 8, 16):  # the dot kernel: 128 x 256 tiles unsplit from SMALL_M_FP8_TALL_ROWS
        for n, k, tile in ((28672, 4096, 128), (128256, 4096, 128), (4096, 14336, 64)):
            cfg = launch_config(n, k, m, Format.E4M3, h200)
            assert (cfg.kernel, cfg.block_n, cfg.split_k == 1) == (Kernel.SMALL_M, tile,
                                                                    tile == 128), (n, k, m, cfg)
    for m in (9, 16):  # M > 8: E5M2 small weights wide (two buffers), E4M3 the dot kernel
        cfg = launch_config(4096, 4096, m, Format.E5M2, h200)
        assert (cfg.kernel, cfg.block_m, cfg.depth) == (
            Kernel.MMA_GEMV, triton_backend.MMA_WIDE_M, 2)
        assert launch_config(4096, 4096, m, Format.E4M3, h200).kernel is Kernel.SMALL_M
        assert launch_config(4096, 14336, m, Format.E5M2, h200).kernel is Kernel.SMALL_M
    # FP4 vocabulary heads: up to M = 16
    for fmt in (Format.NVFP4, Format.MXFP4):
        assert launch_config(128256, 4096, 16, fmt, h200).kernel is Kernel.MMA_GEMV
    # M = 1: 2 warps, K split until ~12 warps an SM or <= 3.5 KB of a row a program; 8-bit
    # M <= 4 on the shared-memory ring from sm_90 (M = 1 in one warp of 4 stages, launched
    # early; M = 2..4 3 stages, 2 warps; M = 1 ~6 warps an SM, no split by row length; M = 2 ~3
    # and rows in 7 KB pieces; M = 3..4 ~12), below it M = 2..4 in two register buffers
    for n in (4096, 12288, 128256):
        ring = launch_config(n, 11008, 1, Format.E4M3, h200)
        assert (ring.depth, ring.ring, ring.split_k, ring.num_warps) == (1, 4, 1, 1)
        assert triton_backend.mma_ring_fits(ring.ring, ring.num_warps)
        assert triton_backend.pdl_settings(h200, Format.E4M3, ring) == (1, 0)  # early
    assert launch_config(1024, 4096, 1, Format.E5M2, h200).split_k > 1  # fills the GPU
    a100_cfg = launch_config(4096, 11008, 1, Format.E4M3, a100)  # measured on the H200 only
    assert (a100_cfg.kernel, a100_cfg.depth, a100_cfg.ring) == (Kernel.MMA_GEMV, 2, 0)
    a100_head = launch_config(128256, 4096, 1, Format.E5M2, a100)
    assert (a100_head.num_warps, a100_head.depth, a100_head.ring) == (4, 2, 0)
    for m in (2, 3, 4):
        below = launch_config(4096, 11008, m, Format.E4M3, a100)
        assert (below.depth, below.ring) == (2, 0)
        ring = launch_config(4096, 4096, m, Format.E5M2, h200)
        assert (ring.depth, ring.ring, ring.num_warps) == (1, 3, 2)
        assert ring.split_k == (1 if m == 2 else 7)
        assert triton_backend.pdl_settings(h200, Format.E5M2, ring) == (2, 0)  # late
    assert launch_config(4096, 14336, 2, Format.E5M2, h200).split_k == 2  # 7 KB of a row
    assert launch_config(4096, 4096, 1, Format.NVFP4, h200).ring == 0
    assert launch_config(4096, 4096, 1, Format.E5M2, h200).split_k == 1
    assert launch_config(6144, 4096, 8, Format.E5M2, h200).depth == 2
    assert launch_config(4096, 4096, 1, Format.NVFP4, h200).depth == 1  # FP4: no gain measured
    assert launch_config(22016, 4096, 1, Format.NVFP4, h200).split_k == 1
    assert launch_config(28672, 4096, 1, Format.E5M2, h200).split_k == 1  # 4 KB rows
    # a vocabulary head's 8-bit rows: the runs on the ring as every 8-bit M = 1 shape
    head = launch_config(128256, 4096, 1, Format.E5M2, h200)
    assert (head.kernel, head.num_warps, head.ring) == (Kernel.MMA_GEMV, 1, 4)
    for m in (2, 4):  # M = 2..4 heads: the ring from sm_90 (M = 2 in 4 warps, 2 stages), else
        # the dot kernel from MMA_FP8_MAX_N rows (the bench decided)
        ring = launch_config(128256, 4096, m, Format.E4M3, h200)
        assert (ring.kernel, ring.ring, ring.num_warps) == (
            (Kernel.MMA_GEMV, 2, 4) if m == 2 else (Kernel.MMA_GEMV, 3, 2))
        assert launch_config(128256, 4096, m, Format.E4M3, a100).kernel is Kernel.SMALL_M
        assert launch_config(65535, 4096, m, Format.E4M3, a100).kernel is Kernel.MMA_GEMV
    assert launch_config(128256, 4096, 8, Format.E4M3, h200).kernel is Kernel.SMALL_M
    assert launch_config(128256, 4096, 1, Format.NVFP4, h200).kernel is Kernel.MMA_GEMV
    assert launch_config(4096, 4096, 1, Format.E5M2, h200, torch.bfloat16).kernel is Kernel.GEMV


def test_mma_gemv_not_under_forced_hardware_fp8(monkeypatch):
    h200 = triton_backend.DeviceInfo(sm_count=132, capability=(9, 0), interpreter=False)
    monkeypatch.setenv(triton_backend.FP8_DECODE_ENV, "hardware")
    assert launch_config(4096, 4096, 1, Format.E5M2, h200).kernel is Kernel.GEMV
    assert launch_config(4096, 4096, 1, Format.NVFP4, h200).kernel is Kernel.MMA_GEMV


def test_mma_gemv_refuses_what_it_cannot_run():
    cfg = LaunchConfig(Kernel.MMA_GEMV, 8, 32, 128, 1, 4, 1)
    fp4 = softfp8.quantize(torch.randn(32, 64), Format.NVFP4).to(DEVICE)
    with pytest.raises(ValueError, match="MMA_GEMV takes fp16 x"):
        run(torch.randn(1, 64).to(DEVICE), fp4, None, cfg)
    if not HAS_GPU:  # the interpreter can't run inline PTX: a clear error, not a crash inside
        with pytest.raises(ValueError, match="not the interpreter"):
            run(torch.randn(1, 64).half(), fp4, None, cfg)
    with pytest.raises(ValueError, match="M <= 16"):
        run(torch.randn(17, 64).half().to(DEVICE), fp4, None, cfg)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA/ROCm GPU")
@pytest.mark.parametrize("fmt", list(Format))
@pytest.mark.parametrize("m", [1, 2, 8, 16, 64])
def test_gpu_parity_3840_outputs(fmt, m):
    """>= 3840 outputs per format vs dequantize-then-matmul, fp32, <= 1e-5."""
    g = torch.Generator().manual_seed(m)
    packed = softfp8.quantize(torch.randn(3840 // m + 1000, 4103, generator=g), fmt).to("cuda")
    x = torch.randn(m, 4103, generator=g).cuda()
    y = triton_backend.matmul(x, packed)
    ref = x.double() @ softfp8.dequantize(packed).double().T
    assert y.numel() >= 3840 and rel_err(y, ref) <= 1e-5


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA/ROCm GPU")
@pytest.mark.parametrize("fmt", [Format.E5M2, Format.E4M3])
def test_gpu_hardware_fp8_same_bits(fmt):
    cap = device_info(torch.device("cuda")).capability  # auto uses the cvt for E5M2 only, but
    if cap is None or cap < (8, 9):                    # both must give the integer decode's bits
        pytest.skip("hardware FP8 conversion needs NVIDIA sm_89+")
    packed, expect = _every_code(fmt, "cuda")
    x = torch.zeros(1, packed.shape[1], device="cuda")
    x[:, 0] = 1.0
    for hw in (False, True):
        y = run(x, packed, None, LaunchConfig(Kernel.GEMV, 1, 16, 32), hw_fp8=hw)[0].cpu()
        assert ((y == expect) | (torch.isnan(y) & torch.isnan(expect))).all(), f"hw_fp8={hw}"


def test_fp8_decode_env_forces_integer_or_refuses(monkeypatch):
    h200 = triton_backend.DeviceInfo(sm_count=132, capability=(9, 0), interpreter=False)
    t4 = triton_backend.DeviceInfo(sm_count=40, capability=(7, 5), interpreter=False)
    monkeypatch.setenv(triton_backend.FP8_DECODE_ENV, "integer")
    assert not triton_backend.uses_hardware_fp8(Format.E5M2, h200)
    monkeypatch.setenv(triton_backend.FP8_DECODE_ENV, "hardware")
    assert triton_backend.uses_hardware_fp8(Format.E5M2, h200)
    with pytest.raises(ValueError, match="SOFTFP8_FP8_DECODE=hardware.*8.9"):
        triton_backend.uses_hardware_fp8(Format.E5M2, t4)
    monkeypatch.setenv(triton_backend.FP8_DECODE_ENV, "fast")
    with pytest.raises(ValueError, match="'auto', 'integer', 'hardware'"):
        triton_backend.uses_hardware_fp8(Format.E5M2, h200)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU")
@pytest.mark.parametrize("fmt", [Format.E5M2, Format.E4M3])
@pytest.mark.parametrize("kernel", [triton_backend.Kernel.GEMV, triton_backend.Kernel.SMALL_M,
                                    triton_backend.Kernel.MMA_GEMV])
def test_gpu_every_fp8_code_through_the_kernel_decode(fmt, kernel):
    """Row n holds code n at k = 0 and x is one-hot there, so y[n] is code n decoded: every code,
    NaN and inf included, through the software decode the kernel really runs (PTX on NVIDIA)."""
    from softfp8.decode import decode_e4m3_to_f32, decode_e5m2_to_f32

    dev = torch.device("cuda")
    codes = torch.zeros(256, 16, dtype=torch.uint8, device=dev)
    codes[:, 0] = torch.arange(256, dtype=torch.uint8, device=dev)
    scales = torch.ones(256, device=dev) if fmt is Format.E4M3 else None
    packed = PackedWeight(fmt, (256, 16), codes.view(torch.int32), scales)
    x = torch.zeros(1, 16, dtype=torch.float16, device=dev)
    x[0, 0] = 1.0
    cfg = triton_backend.LaunchConfig(kernel, 1 if kernel is triton_backend.Kernel.GEMV else 16,
                                      8 if kernel is triton_backend.Kernel.GEMV else 32, 64)
    if kernel is triton_backend.Kernel.MMA_GEMV:
        if not triton_backend.mma_gemv_runs(16, 1, fmt, device_info(dev), torch.float16):
            pytest.skip("Kernel.MMA_GEMV needs NVIDIA sm_80+")
        cfg = triton_backend.LaunchConfig(kernel, 8, 32, 128, 1, 4, 0)
        y = triton_backend.run(x, packed, None, cfg).float().cpu()[0]
        decode = decode_e5m2_to_f32 if fmt is Format.E5M2 else decode_e4m3_to_f32
        want = decode(torch.arange(256)).to(torch.float16).float()
        same = (y == want) | (torch.isnan(y) & torch.isnan(want))
        assert same.all(), torch.arange(256)[~same].tolist()
        cfg = triton_backend.LaunchConfig(kernel, 1, 16, 128, 1, 4, 0)  # the M = 1 runs
    y = triton_backend.run(x.float() if kernel is triton_backend.Kernel.GEMV else x, packed,
                           None, cfg, hw_fp8=False).float().cpu()[0]
    decode = decode_e5m2_to_f32 if fmt is Format.E5M2 else decode_e4m3_to_f32
    want = decode(torch.arange(256)).to(torch.float16).float()  # y is in x's dtype
    if kernel is triton_backend.Kernel.GEMV:
        want = decode(torch.arange(256))
    same = (y == want) | (torch.isnan(y) & torch.isnan(want))
    assert same.all(), torch.arange(256)[~same].tolist()


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
    packed, expect = _every_code(fmt, dev)
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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU")
@pytest.mark.parametrize("fmt", [Format.NVFP4, Format.MXFP4])
@pytest.mark.parametrize("e2m1", [E2M1Decode.INJECT, E2M1Decode.SELECT])
@pytest.mark.parametrize("kernel", [triton_backend.Kernel.GEMV, triton_backend.Kernel.SMALL_M,
                                    triton_backend.Kernel.MMA_GEMV])
def test_gpu_every_e2m1_code_in_both_nibbles_through_the_kernel(fmt, e2m1, kernel):
    """Rows 0..15 hold code n in the low nibble of byte 0 (k = 0), rows 16..31 in the high one
    (k = 1); x = 1 at k = 0 and 1, 0 elsewhere; scales 1. So y[n] is that code decoded, through
    the decode the kernel really runs (PTX pairs on NVIDIA with inject)."""
    from softfp8.decode import E2M1_TO_FLOAT32

    dev = torch.device("cuda")
    codes = torch.zeros(32, 16, dtype=torch.uint8, device=dev)
    codes[:16, 0] = torch.arange(16, dtype=torch.uint8, device=dev)
    codes[16:, 0] = torch.arange(16, dtype=torch.uint8, device=dev) << 4
    if fmt is Format.NVFP4:
        scales = torch.full((32, 2), 0x38, dtype=torch.uint8, device=dev)  # E4M3 1.0
        packed = PackedWeight(fmt, (32, 32), codes.view(torch.int32), scales,
                              torch.ones((), device=dev))
    else:
        scales = torch.full((32, 1), 127, dtype=torch.uint8, device=dev)  # E8M0 1.0
        packed = PackedWeight(fmt, (32, 32), codes.view(torch.int32), scales)
    x = torch.zeros(1, 32, device=dev)
    x[0, :2] = 1.0
    gemv = kernel is triton_backend.Kernel.GEMV
    block_k = 32 if fmt is Format.MXFP4 and not gemv else 64
    cfg = triton_backend.LaunchConfig(kernel, 1 if gemv else 16, 8 if gemv else 32, block_k)
    if kernel is triton_backend.Kernel.MMA_GEMV:
        if not triton_backend.uses_mma_gemv(32, 32, 1, fmt, device_info(dev), torch.float16):
            pytest.skip("Kernel.MMA_GEMV needs NVIDIA sm_80+")
        cfg = triton_backend.LaunchConfig(kernel, 8, 32, 128, 1, 4, 1)
        y = triton_backend.run(x.half(), packed, None, cfg, e2m1=e2m1).float().cpu()
        want = torch.cat([E2M1_TO_FLOAT32, E2M1_TO_FLOAT32])
        assert torch.equal(y[0], want), (y[0] - want).nonzero().flatten().tolist()
        cfg = triton_backend.LaunchConfig(kernel, 1, 16, 128, 1, 4, 0)  # the M = 1 runs
    y = triton_backend.run(x if gemv else x.half(), packed, None, cfg, e2m1=e2m1).float().cpu()
    want = torch.cat([E2M1_TO_FLOAT32, E2M1_TO_FLOAT32])
    assert torch.equal(y[0], want), (y[0] - want).nonzero().flatten().tolist()


def test_pdl_settings(monkeypatch):
    h200 = triton_backend.DeviceInfo(sm_count=132, capability=(9, 0), interpreter=False)
    a100 = triton_backend.DeviceInfo(sm_count=108, capability=(8, 0), interpreter=False)
    assert triton_backend.pdl_settings(a100, Format.E5M2) == (0, 0)  # no PDL before sm_90
    assert triton_backend.pdl_settings(h200, Format.E5M2) == (2, 0)  # measured: late, no prefetch
    assert triton_backend.pdl_settings(h200, Format.NVFP4) == (1, 0)  # measured: early
    # 8-bit: early on the M = 1 ring only (its copies fly before the wait); late elsewhere
    m1 = launch_config(4096, 4096, 1, Format.E5M2, h200)
    dot = launch_config(4096, 4096, 8, Format.E5M2, h200)
    assert m1.ring and triton_backend.pdl_settings(h200, Format.E5M2, m1) == (1, 0)
    assert not dot.ring and triton_backend.pdl_settings(h200, Format.E5M2, dot) == (2, 0)
    assert triton_backend.pdl_settings(a100, Format.E5M2, m1) == (0, 0)
    monkeypatch.setenv(triton_backend.PDL_ENV, "off")
    assert triton_backend.pdl_settings(h200, Format.NVFP4) == (0, 0)
    monkeypatch.setenv(triton_backend.PDL_ENV, "sometimes")
    with pytest.raises(ValueError, match="SOFTFP8_PDL='sometimes'"):
        triton_backend.pdl_settings(h200, Format.E5M2)
    monkeypatch.setenv(triton_backend.PDL_ENV, "late")
    monkeypatch.setenv(triton_backend.PDL_PREFETCH_ENV, "100")
    with pytest.raises(ValueError, match="multiple of 16"):
        triton_backend.pdl_settings(h200, Format.E5M2)


def test_table_from_a_sweep_receipt_overrides_exact_shapes(tmp_path, monkeypatch):
    import json

    h200 = triton_backend.DeviceInfo(sm_count=132, capability=(9, 0), interpreter=False)
    row = dict(n=4096, k=4096, m=1, fmt="e5m2", kernel="small_m", block_m=16, block_n=64,
               block_k=256, split_k=2, num_warps=4, num_stages=3)
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"best": [row]}))
    builtin = launch_config(4096, 4096, 1, Format.E5M2, h200)
    monkeypatch.setenv(triton_backend.TABLE_ENV, str(path))
    assert launch_config(4096, 4096, 1, Format.E5M2, h200) == LaunchConfig(
        Kernel.SMALL_M, 16, 64, 256, 2, 4, 3)
    assert launch_config(4096, 4096, 1, Format.E5M2, h200, torch.float32) != LaunchConfig(
        Kernel.SMALL_M, 16, 64, 256, 2, 4, 3)  # the sweep timed fp16 activations only
    assert launch_config(4096, 4096, 2, Format.E5M2, h200) != LaunchConfig(
        Kernel.SMALL_M, 16, 64, 256, 2, 4, 3)
    assert builtin != launch_config(4096, 4096, 1, Format.E5M2, h200)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    monkeypatch.setenv(triton_backend.TABLE_ENV, str(bad))
    with pytest.raises(ValueError, match="SOFTFP8_TRITON_TABLE.*sweep receipt"):
        launch_config(4096, 4096, 1, Format.E5M2, h200)


@pytest.mark.parametrize("name, value, expected", [
    ("SOFTFP8_FP8_DECODE", "intger", "one of 'auto', 'integer', 'hardware'"),
    ("SOFTFP8_PDL", "erly", "one of 'auto', 'off', 'early', 'late'"),
    ("SOFTFP8_PDL_PREFETCH", "32k", "a multiple of 16"),
    ("SOFTFP8_TRITON_TABLE", "no-such-sweep.json", "the path of a sweep receipt")])
def test_a_launch_setting_typo_raises_where_triton_does_not_run(monkeypatch, name, value,
                                                                expected):
    """The launcher reads these (and checks them there: the tests above); a typo is an error on
    a layer call that another backend runs too (`_env.check_environment`), never ignored."""
    monkeypatch.setenv(name, value)
    softfp8.dispatch.clear_cache()
    packed = softfp8.quantize(torch.randn(8, 32), "e5m2")
    with pytest.raises(ValueError, match=f"{name}='{value}' is not valid; expected {expected}"):
        softfp8.linear(torch.randn(1, 32), packed, backend="torch")


@pytest.mark.parametrize("chunk", [None, 16])
def test_codes_nan_free_checks_once_and_again_after_an_in_place_write(chunk, monkeypatch):
    """chunk: the check reads one row at a time."""
    from softfp8.backends import _facts

    if chunk:
        monkeypatch.setattr(_facts, "CHECK_CHUNK_BYTES", chunk)
    g = torch.Generator().manual_seed(5)
    packed = softfp8.quantize(torch.randn(8, 64, generator=g), Format.E4M3)
    assert triton_backend.codes_nan_free(packed)
    packed.words.view(torch.uint8)[3, 7] = 0xFF  # E4M3 NaN, written in place: version moves
    assert not triton_backend.codes_nan_free(packed)
    packed.words.view(torch.uint8)[3, 7] = 0x7E  # 448: finite again
    assert triton_backend.codes_nan_free(packed)
    nan = PackedWeight(Format.E4M3, (1, 16),
                       torch.tensor([[0x7F000000, 0, 0, 0]], dtype=torch.int32), torch.ones(1))
    assert not triton_backend.codes_nan_free(nan)
    assert not triton_backend.codes_nan_free(softfp8.quantize(torch.ones(8, 64), Format.E5M2))


@pytest.mark.parametrize("fmt, nan_code", [(Format.NVFP4, 0x7F), (Format.NVFP4, 0xFF),
                                           (Format.MXFP4, 0xFF)])
def test_codes_nan_free_reads_fp4_block_scales(fmt, nan_code, monkeypatch):
    """FP4's NaN codes are its block scales' (E2M1 has none): checked, and again after an
    in-place write to the scales alone (the check a row at a time)."""
    from softfp8.backends import _facts

    monkeypatch.setattr(_facts, "CHECK_CHUNK_BYTES", 1)
    g = torch.Generator().manual_seed(6)
    packed = softfp8.quantize(torch.randn(8, 64, generator=g), fmt)
    assert triton_backend.codes_nan_free(packed)
    keep = packed.scales[2, 1].item()
    packed.scales[2, 1] = nan_code
    assert not triton_backend.codes_nan_free(packed)
    packed.scales[2, 1] = keep
    assert triton_backend.codes_nan_free(packed)
    packed.words.view(torch.uint8)[:] = 0xFF  # every E2M1 code -6: still no NaN
    assert triton_backend.codes_nan_free(packed)


@pytest.mark.parametrize("chunk", [None, 40])
def test_mx_row_exponents_are_each_rows_largest_nonzero_block_within_the_span(chunk,
                                                                               monkeypatch):
    """MXFP4 rows' E: the largest scale among blocks with a nonzero code; None once a nonzero
    block lies more than MX_ROW_E_SPAN below it, or a scale is NaN; checked again after an
    in-place write; None for the other formats. chunk: the check reads a row at a time."""
    from softfp8.backends import _facts
    from softfp8.backends._facts import MX_ROW_E_SPAN

    if chunk:
        monkeypatch.setattr(_facts, "CHECK_CHUNK_BYTES", chunk)

    g = torch.Generator().manual_seed(8)
    packed = softfp8.quantize(torch.randn(6, 256, generator=g), Format.MXFP4)
    scales = torch.randint(100, 110, (6, 8), generator=g, dtype=torch.int32)
    packed.scales.copy_(scales.to(torch.uint8))
    blocks = packed.words.view(torch.uint8).view(6, 8, 16)
    blocks[2, 5] = 0
    packed.scales[2, 5] = 200  # all zero codes: not the row's E
    want = packed.scales.to(torch.int32).clone()
    want[2, 5] = 0
    got = triton_backend.mx_row_exponents(packed)
    assert got.dtype == torch.int32 and torch.equal(got, want.amax(dim=1))
    packed.scales[4, 1] = got[4] - MX_ROW_E_SPAN  # the span's edge: still fine
    assert torch.equal(triton_backend.mx_row_exponents(packed), got)
    packed.scales[4, 1] = got[4] - MX_ROW_E_SPAN - 1
    assert triton_backend.mx_row_exponents(packed) is None
    packed.scales[4, 1] = got[4]
    assert torch.equal(triton_backend.mx_row_exponents(packed), got)
    packed.scales[0, 0] = 0xFF  # NaN
    assert triton_backend.mx_row_exponents(packed) is None
    nv = softfp8.quantize(torch.randn(6, 256, generator=g), Format.NVFP4)
    assert triton_backend.mx_row_exponents(nv) is None


def test_facts_are_dropped_with_their_weight_and_never_lent_to_a_reused_id():
    import gc
    import weakref

    from softfp8.backends import _facts

    packed = softfp8.quantize(torch.randn(8, 64), Format.E4M3)
    _facts.remember_fact(packed, "test fact", 1)
    key = id(packed.words)
    assert _facts.known_fact(packed, "test fact") == (1,) and key in _facts._FACTS
    del packed
    gc.collect()
    assert key not in _facts._FACTS  # the words tensor went, and its entry with it
    other = softfp8.quantize(torch.randn(8, 64), Format.E4M3)
    # an entry at this id whose tensor is gone (an id reused after a free): not other's fact
    _facts._FACTS[id(other.words)] = (weakref.ref(torch.zeros(1)), {"test fact": ((), 2)})
    assert _facts.known_fact(other, "test fact") is None
    _facts.remember_fact(other, "test fact", 3)  # replaces the stale entry
    assert _facts.known_fact(other, "test fact") == (3,)


def test_mma_layout_reads_the_mapping_from_the_launch_config():
    mma = functools.partial(LaunchConfig, Kernel.MMA_GEMV, block_k=128)
    assert triton_backend.mma_layout(mma(8, 32, num_warps=4)) == (0, 2)  # 32-row tiles
    assert triton_backend.mma_layout(mma(1, 16, num_warps=4)) == (1, 2)
    assert triton_backend.mma_layout(mma(1, 32, num_warps=4)) == (1, 4)
    assert triton_backend.mma_layout(mma(4, 64, num_warps=4)) == (4, 2)
    assert triton_backend.mma_layout(mma(8, 32, num_warps=1)) == (8, 2)  # one warp: runs
    for bad in (mma(1, 24, num_warps=4), mma(3, 48, num_warps=4), mma(16, 64, num_warps=1)):
        with pytest.raises(ValueError, match="cfg: Kernel.MMA_GEMV takes block_m"):
            triton_backend.mma_layout(bad)


def test_mma_ring_whole_only_where_every_row_and_step_is_inside():
    """WHOLE (the ring's copies without predicates, its last ring - 1 steps a loop of their own)
    needs whole row blocks, x rows filling the run mapping, whole steps (no zero fill) and every
    program at least ring - 1 steps long; 8-bit only."""
    whole = triton_backend.mma_ring_whole
    ring = LaunchConfig(Kernel.MMA_GEMV, 1, 4, 128, 1, 1, 0, ring=4)  # 512-byte steps
    assert whole(4096, 1, 4096, 4096, 1, ring, True, False)
    assert not whole(4096, 1, 4096, 4096, 1, ring, False, False)  # FP4
    assert not whole(4096, 1, 4096, 4096, 1, LaunchConfig(Kernel.MMA_GEMV, 1, 4, 128, 1, 1, 0),
                     True, False)  # no ring
    assert not whole(4103, 1, 4096, 4096, 1, ring, True, False)  # the last block past N
    assert not whole(4096, 1, 4080, 4080, 1, ring, True, True)  # a step past K (zero fill)
    assert whole(4096, 1, 1536, 1536, 1, ring, True, False)  # 3 steps = ring - 1
    assert not whole(4096, 1, 1024, 1024, 1, ring, True, False)  # 2 steps
    assert whole(4096, 1, 6144, 2048, 1, ring, True, False)  # 3 splits of 4 steps
    assert not whole(4096, 1, 4096, 1536, 1, ring, True, False)  # the last split: 2 steps
    runs4 = LaunchConfig(Kernel.MMA_GEMV, 4, 32, 128, 1, 2, 0, ring=3)  # 128-byte steps
    assert whole(4096, 4, 4096, 4096, 4, runs4, True, False)
    assert not whole(4096, 3, 4096, 4096, 4, runs4, True, False)  # x row 3 of 4 outside M
    assert whole(4096, 4, 256, 256, 4, runs4, True, False)  # 2 steps = ring - 1
    assert not whole(4096, 4, 128, 128, 4, runs4, True, False)  # 1 step


def test_mma_zero_fill_only_where_a_tile_reads_past_the_k_range():
    """ZERO = 0 (loads leave switched-off registers as they were) needs every program's K range
    to be whole passes of depth loop steps (512 / runs bytes a step in the run mapping, 64 a warp
    in the tiles) and x to cover the padded rows (K = padded K)."""
    mma = functools.partial(LaunchConfig, Kernel.MMA_GEMV, block_k=128)
    fill = triton_backend.mma_zero_fill
    m1 = mma(1, 8, num_warps=2)  # run mapping, 512-byte steps
    assert not fill(2048, 2048, 1, m1, 4096, 4096)  # FP4 rows of 4096 codes
    assert fill(5504, 5504, 1, m1, 11008, 11008)  # 11008 FP4 codes: 10.75 steps
    assert not fill(4096, 1536, 1, m1, 4096, 4096)  # 8-bit, splits of 3 steps
    assert fill(4096, 1792, 1, m1, 4096, 4096)  # splits of 3.5 steps
    assert fill(2048, 2048, 1, m1, 4080, 4096)  # whole steps, but x ends before the padding
    deep = mma(1, 8, num_warps=2, depth=2)  # two steps a pass
    assert not fill(4096, 2048, 1, deep, 4096, 4096)
    assert fill(4096, 512, 1, deep, 4096, 4096)  # one step: the pass reads two
    assert fill(1536, 1536, 1, deep, 1536, 1536)
    tiles = mma(8, 32, num_warps=4)  # tile mapping: 4 warps x 64 bytes a step
    assert not fill(2048, 2048, 0, tiles, 2048, 2048)
    assert fill(2080, 2080, 0, tiles, 2080, 2080)
    assert not fill(2048, 1024, 2, mma(2, 16, num_warps=2), 2048, 2048)  # 256-byte steps
    # WIDE (block_m 16): laid out as block_m 8, the tiles or the runs with two tiles a warp
    layout = triton_backend.mma_layout
    assert layout(mma(16, 32, num_warps=4)) == (0, 2)
    assert layout(mma(16, triton_backend.mma_rows(8, 4, 2), num_warps=4)) == (8, 2)
    with pytest.raises(ValueError, match="block_m=16 with block_n=32"):
        layout(mma(16, triton_backend.mma_rows(8, 4, 4), num_warps=4))  # 4 tiles: not wide


def test_const_globals_compare_by_identity_then_by_value():
    """`_const.Const`: what JITFunction.run compares on each launch (a global against its deep
    copy) is unchanged at once; other values still compare as constexprs do."""
    import copy

    import triton.language as tl

    from softfp8.backends.triton._const import Const
    from softfp8.backends.triton._mma_tile import _TILE_NV

    assert isinstance(_TILE_NV, Const)
    assert not (_TILE_NV != copy.deepcopy(_TILE_NV))
    assert Const("a") != tl.constexpr("b") and Const(3) != tl.constexpr(4)
    assert not (Const(3) != tl.constexpr(3)) and not (Const("ab") != tl.constexpr("a" + "b"))


def test_plan_follows_the_settings_environment(monkeypatch):
    """matmul caches its launch settings by shape, device, dtype and the values of the settings'
    environment variables: a changed variable gives the settings launch_config etc. give then."""
    h200 = triton_backend.DeviceInfo(sm_count=132, capability=(9, 0), interpreter=False)
    args = (4096, 4096, 1, Format.E5M2, h200, torch.float16)
    seen = []
    for wanted in ("auto", "integer", "auto"):
        monkeypatch.setenv(triton_backend.FP8_DECODE_ENV, wanted)
        env = tuple(read() for read in triton_backend._PLAN_ENV_READERS)  # as matmul keys it
        plan = triton_backend._plan(*args, env)
        assert plan == (launch_config(*args), triton_backend.uses_hardware_fp8(Format.E5M2, h200),
                        triton_backend.pdl_settings(h200, Format.E5M2, launch_config(*args)))
        seen.append(plan)
    assert seen[0][1] and not seen[1][1] and seen[2] == seen[0]  # hardware E5M2 decode, then not
    monkeypatch.setenv(triton_backend.PDL_ENV, "bogus")
    env = tuple(read() for read in triton_backend._PLAN_ENV_READERS)
    for _ in range(2):  # a bad setting raises on every call (errors are not cached)
        with pytest.raises(ValueError):
            triton_backend._plan(*args, env)


def test_depth_is_only_the_mma_gemv_setting():
    """depth (register buffers) belongs to Kernel.MMA_GEMV: any other kernel names it."""
    packed = softfp8.quantize(torch.randn(16, 64), Format.E5M2)
    cfg = LaunchConfig(Kernel.GEMV, 1, 16, 64, 1, 4, 1, depth=2)
    with pytest.raises(ValueError, match="depth is Kernel.MMA_GEMV's setting"):
        run(torch.randn(1, 64), packed, None, cfg)


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
@pytest.mark.parametrize("fmt", [Format.E5M2, Format.E4M3])
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
@pytest.mark.parametrize("fmt", [Format.E5M2, Format.E4M3, Format.NVFP4])
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
    if fmt in (Format.E5M2, Format.E4M3):
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
