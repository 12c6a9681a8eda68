"""The Triton backend's entry (`softfp8.backends.triton`: matmul, run, their checks) and its
FMA / dot kernels against the reference backend.

On CPU these run in Triton's interpreter (conftest.py sets TRITON_INTERPRET=1 before softfp8 is
imported); tests marked `gpu` run the compiled kernels on a CUDA/ROCm GPU (`pytest -m gpu`).

Sampling (CI has 2 cores; the interpreter pays per program and per op): every kernel (GEMV,
small-M, tiled) x every decode (e5m2, e4m3, nvfp4 and mxfp4 each with select and inject) x
every activation dtype runs once, on a shape drawn from N, K in {1, 3, 17, 4097} and M from the
kernel's range of {1, 2, 5, 16, 33} by a seeded generator that never puts 4097 on both N and K;
bias alternates. Split-K and every code of every format are covered by their own tests; the
launch rules in test_triton_table.py and test_mma_table.py, DEQUANT in test_triton_dequant.py,
the MMA GEMV on a GPU in test_mma_gemv.py, the weights' facts in test_facts.py.
"""
import dataclasses
import itertools
import random

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
from triton_support import (CODE_DECODES, DECODES, DEVICE, DTYPES, HAS_GPU,  # noqa: E402
                            every_code, tolerance)
SIZES = (1, 3, 17, 4097)
M_RANGE = {Kernel.GEMV: (1,), Kernel.SMALL_M: (2, 5, 16), Kernel.TILED: (33,)}


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


@pytest.mark.parametrize("kernel", [Kernel.GEMV, Kernel.SMALL_M])
@pytest.mark.parametrize("fmt, e2m1", CODE_DECODES, ids=str)
def test_every_code_decodes_exactly(fmt, e2m1, kernel):
    packed, expect = every_code(fmt, DEVICE)
    m = 1 if kernel is Kernel.GEMV else 16
    x = torch.zeros(m, packed.shape[1], device=DEVICE)
    x[:, 0] = 1.0
    cfg = LaunchConfig(kernel, m, 16 if kernel is Kernel.GEMV else 32, 32)
    y = run(x, packed, None, cfg, e2m1=e2m1)[0].cpu()
    ok = (y == expect) | (torch.isnan(y) & torch.isnan(expect))
    assert ok.all(), f"codes {torch.nonzero(~ok).flatten().tolist()}: {y[~ok]} != {expect[~ok]}"


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
    packed, expect = every_code(fmt, "cuda")
    x = torch.zeros(1, packed.shape[1], device="cuda")
    x[:, 0] = 1.0
    for hw in (False, True):
        y = run(x, packed, None, LaunchConfig(Kernel.GEMV, 1, 16, 32), hw_fp8=hw)[0].cpu()
        assert ((y == expect) | (torch.isnan(y) & torch.isnan(expect))).all(), f"hw_fp8={hw}"


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


def test_plan_follows_the_launch_settings(monkeypatch):
    """matmul's plan is cached by shape, device, dtype, weight facts and the launch settings in
    force: other settings give the plan launch_config etc. give under them; the environment
    gives the defaults, read once (`softfp8._settings`)."""
    h200 = triton_backend.DeviceInfo(sm_count=132, capability=(9, 0), interpreter=False)
    facts = triton_backend.WeightFacts(has_scale=True, nan_free=True, row_e=False)
    key = (4096, 4096, 4096, 1, Format.E5M2, h200, torch.float16, False, E2M1Decode.SELECT,
           facts)
    seen = []
    for wanted in ("auto", "integer", "auto"):
        with softfp8.launch_settings(fp8_decode=wanted) as settings:
            plan = triton_backend.plan(*key, settings)
            cfg = launch_config(4096, 4096, 1, Format.E5M2, h200, torch.float16)
            assert plan.cfg == cfg and plan.hw_fp8 == triton_backend.uses_hardware_fp8(
                Format.E5M2, h200)
            assert dict(plan.options)["PDL"] == triton_backend.pdl_settings(
                h200, Format.E5M2, cfg)[0]
            seen.append(plan)
    assert seen[0] is seen[2]  # cached
    assert seen[0].hw_fp8 and not seen[1].hw_fp8  # the E5M2 cvt, then the integer decode
    t4 = dataclasses.replace(h200, capability=(7, 5))
    for _ in range(2):  # a setting the device can't honour raises on every call (not cached)
        with softfp8.launch_settings(fp8_decode="hardware") as settings:
            with pytest.raises(ValueError, match="hardware"):
                triton_backend.plan(*key[:5], t4, *key[6:], settings)
    before = softfp8._settings.current()
    monkeypatch.setenv(triton_backend.PDL_ENV, "off")
    assert softfp8._settings.current() is before  # read once
    assert softfp8._settings.reload_environment().pdl == "off"


def test_depth_is_only_the_mma_gemv_setting():
    """depth (register buffers) belongs to Kernel.MMA_GEMV: any other kernel names it."""
    packed = softfp8.quantize(torch.randn(16, 64), Format.E5M2)
    cfg = LaunchConfig(Kernel.GEMV, 1, 16, 64, 1, 4, 1, depth=2)
    with pytest.raises(ValueError, match="depth is Kernel.MMA_GEMV's setting"):
        run(torch.randn(1, 64), packed, None, cfg)
