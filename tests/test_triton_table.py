"""The Triton launch rules outside the MMA GEMV (`triton/_table.py`, `_device.py`): the table,
PDL, the FP8 decode setting, a sweep receipt's overrides, typos in the settings. Pure Python."""

import pytest
import torch
from conftest import triton_backend_or_skip

import softfp8
from softfp8.formats import SPECS, Format

triton_backend = triton_backend_or_skip()
from softfp8.backends.triton import Kernel, LaunchConfig, launch_config  # noqa: E402


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


def test_fp8_decode_setting_forces_integer_or_refuses(monkeypatch):
    h200 = triton_backend.DeviceInfo(sm_count=132, capability=(9, 0), interpreter=False)
    t4 = triton_backend.DeviceInfo(sm_count=40, capability=(7, 5), interpreter=False)
    assert triton_backend.uses_hardware_fp8(Format.E5M2, h200)  # auto: the cvt for E5M2
    with softfp8.launch_settings(fp8_decode="integer"):
        assert not triton_backend.uses_hardware_fp8(Format.E5M2, h200)
    with softfp8.launch_settings(fp8_decode="hardware"):
        assert triton_backend.uses_hardware_fp8(Format.E5M2, h200)
        with pytest.raises(ValueError, match="SOFTFP8_FP8_DECODE=hardware.*8.9"):
            triton_backend.uses_hardware_fp8(Format.E5M2, t4)
    with pytest.raises(ValueError, match="fp8_decode='fast'.*'auto', 'integer', 'hardware'"):
        softfp8.launch_settings(fp8_decode="fast").__enter__()
    monkeypatch.setenv(triton_backend.FP8_DECODE_ENV, "fast")  # the default's variable, read
    with pytest.raises(ValueError, match="SOFTFP8_FP8_DECODE='fast'.*'auto', 'integer'"):
        softfp8._settings.reload_environment()


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
    with softfp8.launch_settings(pdl="off"):
        assert triton_backend.pdl_settings(h200, Format.NVFP4) == (0, 0)
    with softfp8.launch_settings(pdl="early", pdl_prefetch=32768):
        assert triton_backend.pdl_settings(h200, Format.E5M2) == (1, 32768)
        assert triton_backend.pdl_settings(a100, Format.E5M2) == (0, 0)
    with pytest.raises(ValueError, match="pdl='sometimes'"):
        softfp8.launch_settings(pdl="sometimes").__enter__()
    with pytest.raises(ValueError, match="multiple of 16"):
        softfp8.launch_settings(pdl="late", pdl_prefetch=100).__enter__()
    monkeypatch.setenv(triton_backend.PDL_ENV, "sometimes")
    with pytest.raises(ValueError, match="SOFTFP8_PDL='sometimes'"):
        softfp8._settings.reload_environment()
    monkeypatch.setenv(triton_backend.PDL_ENV, "late")
    monkeypatch.setenv(triton_backend.PDL_PREFETCH_ENV, "100")
    with pytest.raises(ValueError, match="SOFTFP8_PDL_PREFETCH='100'.*multiple of 16"):
        softfp8._settings.reload_environment()


def test_table_from_a_sweep_receipt_overrides_exact_shapes(tmp_path, monkeypatch):
    import json

    h200 = triton_backend.DeviceInfo(sm_count=132, capability=(9, 0), interpreter=False)
    row = dict(n=4096, k=4096, m=1, fmt="e5m2", kernel="small_m", block_m=16, block_n=64,
               block_k=256, split_k=2, num_warps=4, num_stages=3)
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"best": [row]}))
    builtin = launch_config(4096, 4096, 1, Format.E5M2, h200)
    with softfp8.launch_settings(table=str(path)):
        assert launch_config(4096, 4096, 1, Format.E5M2, h200) == LaunchConfig(
            Kernel.SMALL_M, 16, 64, 256, 2, 4, 3)
        assert launch_config(4096, 4096, 1, Format.E5M2, h200, torch.float32) != LaunchConfig(
            Kernel.SMALL_M, 16, 64, 256, 2, 4, 3)  # the sweep timed fp16 activations only
        assert launch_config(4096, 4096, 2, Format.E5M2, h200) != LaunchConfig(
            Kernel.SMALL_M, 16, 64, 256, 2, 4, 3)
        assert builtin != launch_config(4096, 4096, 1, Format.E5M2, h200)
    monkeypatch.setenv(triton_backend.TABLE_ENV, str(path))  # the default, read once
    assert softfp8._settings.reload_environment().table == str(path)
    assert launch_config(4096, 4096, 1, Format.E5M2, h200) == LaunchConfig(
        Kernel.SMALL_M, 16, 64, 256, 2, 4, 3)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with softfp8.launch_settings(table=str(bad)):
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
