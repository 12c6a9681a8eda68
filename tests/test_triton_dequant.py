"""Kernel.DEQUANT (`triton/_dequant.py`): slabs decoded for torch's GEMM, every code exact, the
exact pass for rows a slab's dtype can't hold and its cached row ranges. CPU: Triton's
interpreter (conftest.py)."""

import pytest
import torch
from conftest import rel_err, triton_backend_or_skip

import softfp8
from softfp8.backends import reference
from softfp8.dispatch import E2M1Decode
from softfp8.formats import Format

triton_backend = triton_backend_or_skip()
from softfp8.backends.triton import Kernel, LaunchConfig, run  # noqa: E402
from triton_support import CODE_DECODES, DEVICE, DTYPES, every_code, tolerance  # noqa: E402


@pytest.mark.parametrize("fmt, e2m1", CODE_DECODES, ids=str)
def test_dequant_slab_every_code_is_exact(fmt, e2m1):
    """DEQUANT's slab decode, written to a float32 slab: every code (and every block scale) to
    the exact value, by the portable decoders and, on NVIDIA, the PTX ones."""
    from softfp8.backends.triton import _kernels

    packed, expect = every_code(fmt, DEVICE)
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
