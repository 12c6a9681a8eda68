"""The Triton launch plan (`triton/_plan.py`) for every device the rules tell apart, and the
launch settings that feed it (`softfp8/_settings.py`). Pure Python: nothing is launched."""
import itertools
import threading

import pytest
import torch

import softfp8
from softfp8 import _settings
from softfp8.backends.triton import (DeviceInfo, Kernel, LaunchConfig, WeightFacts, launch_config,
                                     plan, plan_for_config)
from softfp8.backends.triton._mma_table import MMA_KERNELS
from softfp8.dispatch import E2M1Decode
from softfp8.formats import Format, padded_k

DEVICES = {
    "sm_75": DeviceInfo(40, (7, 5), False),     # T4: no tensor-core tl.dot, no MMA GEMV
    "sm_80": DeviceInfo(108, (8, 0), False),    # A100: the MMA GEMV
    "sm_86": DeviceInfo(82, (8, 6), False),     # RTX 3090
    "sm_89": DeviceInfo(128, (8, 9), False),    # RTX 4090: the FP8 cvt
    "sm_90": DeviceInfo(132, (9, 0), False),    # H100 / H200: PDL, the ring
    "rocm": DeviceInfo(304, None, False),       # MI300X: no PTX
    "interpreter": DeviceInfo(4, None, True),
}
SHAPES = [(4096, 4096), (12288, 4096), (4096, 11008), (128256, 4096), (1000, 1032), (37, 264)]
MS = [1, 2, 3, 4, 5, 8, 9, 16, 17, 64, 256, 512]
DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def _plans(device):
    info = DEVICES[device]
    settings = softfp8.LaunchSettings()
    for fmt, (n, k), m, dtype in itertools.product(Format, SHAPES, MS, DTYPES):
        e2m1 = E2M1Decode.INJECT if fmt in (Format.NVFP4, Format.MXFP4) and m % 2 else (
            E2M1Decode.SELECT)
        facts = WeightFacts(has_scale=fmt in (Format.E5M2, Format.E4M3), nan_free=bool(n % 3),
                            row_e=fmt is Format.MXFP4 and bool(n % 3))
        p = plan(n, k, padded_k(k, fmt), m, fmt, info, dtype, bool(m % 2), e2m1, facts, settings)
        yield fmt, n, k, m, dtype, facts, p


@pytest.mark.parametrize("device", DEVICES)
def test_every_plan_of_every_device_is_one_its_kernel_runs(device):
    """Every plan the rules make for this device: its LaunchConfig is the table's, its grid
    covers every output, its split every byte of a row, and its switches are combinations the
    kernels take (the ones a plan refuses for an explicit LaunchConfig)."""
    info = DEVICES[device]
    cap = info.capability
    kernels = set()
    for fmt, n, k, m, dtype, facts, p in _plans(device):
        o = dict(p.options)
        kernels.add(p.cfg.kernel)
        assert p.cfg == launch_config(n, k, m, fmt, info, dtype)
        mm, nn, kk, rb, sb, per_split = p.sizes
        assert (mm, nn, kk) == (m, n, k) and per_split * p.split >= rb > per_split * (p.split - 1)
        assert p.hw_fp8 == (cap is not None and cap >= (8, 9) and fmt is Format.E5M2)
        assert p.asm == (cap is not None and not info.interpreter and (
            not p.hw_fp8 or p.cfg.kernel is Kernel.DEQUANT))
        if p.cfg.kernel is Kernel.DEQUANT:
            assert not info.interpreter and m >= 256 and p.kernel == "" and p.grid == ()
            continue
        pdl = cap is not None and cap >= (9, 0)
        assert bool(o["PDL"]) == pdl and ("launch_pdl" in o) == pdl
        assert p.grid[-1] == p.split and 1 <= p.split <= 16
        assert o["PARTIAL"] == (p.split > 1) and o["HAS_BIAS"] == bool(m % 2)
        assert o["NAN"] or facts.nan_free
        if p.cfg.kernel is Kernel.MMA_GEMV:
            assert cap >= (8, 0) and dtype == torch.float16 and m <= 16
            # each kernel of the family takes its own constexprs: the others' fixed values
            fixed = MMA_KERNELS[p.kernel]
            assert not set(fixed) & set(o), (p.kernel, o)
            o = dict(dict(RING=0, RUNS=0, TILES=2, DEPTH=1, WHOLE=False, ROW_E=False,
                          X_IN_STEP=False, WIDE=False, ZERO=True), **o)
            assert p.kernel == ("mma_ring_kernel" if o["RING"] else "mma_runs_kernel"
                                if o["RUNS"] else "mma_tile_kernel")
            rows = p.cfg.block_n
            assert (p.grid[0] // o["GROUPS"]) * rows >= n and o["GROUPS"] * p.cfg.block_m >= m
            assert o["WARPS"] == o["num_warps"] == p.cfg.num_warps and p.aligned_x
            if o["RING"]:
                assert o["RUNS"] and o["TILES"] == 2 and o["DEPTH"] == 1 and not o["WIDE"]
                assert pdl  # the ring is sm_90's (MMA_RING_MIN_CC)
            if o["DEPTH"] == 2:
                assert o["RUNS"] and o["TILES"] == 2
            if o["WIDE"]:
                assert o["RUNS"] in (0, 8) and o["GROUPS"] == 1
            if o["ROW_E"] or p.row_e:
                assert o["ROW_E"] == p.row_e and fmt is Format.MXFP4 and facts.row_e
                assert not o["NAN"] and o["DEPTH"] == 1 and not o["RING"]
            assert not (o["WHOLE"] and not o["RING"])
            assert not (o["X_IN_STEP"] and (o["RING"] or o["DEPTH"] == 2))
        elif p.cfg.kernel is Kernel.GEMV:
            assert p.kernel == "gemv_kernel" and p.grid[0] * p.cfg.block_n >= n
            assert p.cfg.block_m >= m and p.tiles == p.grid[0]
        else:
            assert p.kernel == "dot_kernel" and p.grid[0] * p.cfg.block_n >= n
            assert p.grid[1] * p.cfg.block_m >= m and p.tiles == p.grid[0] * p.grid[1]
            assert o["UPCAST"] == (info.interpreter and dtype == torch.bfloat16)
            assert fmt is not Format.MXFP4 or p.cfg.block_k == 32
    if cap is not None and cap >= (8, 0) and not info.interpreter:
        assert Kernel.MMA_GEMV in kernels
    else:
        assert Kernel.MMA_GEMV not in kernels


@pytest.mark.parametrize("device", DEVICES)
def test_e4m3_b128_takes_the_mma_gemv_wherever_e4m3_does_with_its_settings(device):
    """E4M3_B128 on Kernel.MMA_GEMV: the same LaunchConfig, grid, split and constexprs as E4M3
    (MMA_FP8_FORMATS) wherever E4M3 takes it, the format and the row scale (B128 has none: its
    tile scales are applied in the loop) apart; where E4M3 doesn't, neither does B128."""
    info = DEVICES[device]
    settings = softfp8.LaunchSettings()
    taken = 0
    for (n, k), m, dtype, bias, nan_free in itertools.product(SHAPES, MS, DTYPES, (False, True),
                                                              (False, True)):
        args = (info, dtype, bias, E2M1Decode.SELECT)
        e4m3 = plan(n, k, padded_k(k, Format.E4M3), m, Format.E4M3, *args,
                    WeightFacts(True, nan_free, False), settings)
        b128 = plan(n, k, padded_k(k, Format.E4M3_B128), m, Format.E4M3_B128, *args,
                    WeightFacts(False, nan_free, False), settings)
        mma = e4m3.cfg.kernel is Kernel.MMA_GEMV
        assert (b128.cfg.kernel is Kernel.MMA_GEMV) == mma, (n, k, m, dtype, b128.cfg)
        if not mma:
            continue
        taken += 1
        assert (b128.cfg, b128.kernel, b128.grid, b128.split, b128.tiles, b128.nan) == (
            e4m3.cfg, e4m3.kernel, e4m3.grid, e4m3.split, e4m3.tiles, e4m3.nan)
        assert b128.sizes[:4] == e4m3.sizes[:4] and b128.sizes[5] == e4m3.sizes[5]
        assert b128.sizes[4] == -(-k // 128)  # SB: the tile scales a row
        ob, oe = dict(b128.options), dict(e4m3.options)
        assert (ob.pop("FMT"), oe.pop("FMT"), ob.pop("HAS_SCALE"), oe.pop("HAS_SCALE")) == (
            "e4m3_b128", "e4m3", False, True)
        assert ob == oe, (n, k, m)
    assert taken > 0 if info.capability and info.capability >= (8, 0) else taken == 0


def test_a_plan_is_cached_and_a_setting_makes_another():
    info = DEVICES["sm_90"]
    facts = WeightFacts(True, True, False)
    key = (4096, 4096, 4096, 1, Format.E4M3, info, torch.float16, False, E2M1Decode.SELECT, facts)
    a = plan(*key, softfp8.LaunchSettings())
    assert plan(*key, softfp8.LaunchSettings()) is a  # equal settings: the same plan
    off = plan(*key, softfp8.LaunchSettings(pdl="off"))
    assert dict(a.options)["PDL"] and not dict(off.options)["PDL"]
    kernel = plan(*key, softfp8.LaunchSettings(splitk_reduce="kernel"))
    assert a.last_reduces and not kernel.last_reduces


@pytest.mark.parametrize("cfg, match", [
    (LaunchConfig(Kernel.GEMV, 1, 8, 1024, depth=2), "depth is Kernel.MMA_GEMV's setting"),
    (LaunchConfig(Kernel.MMA_GEMV, 1, 8, 128, 1, 1, 0, depth=2), "depth 1, or 2 on the run"),
    (LaunchConfig(Kernel.MMA_GEMV, 8, 32, 128, 1, 4, 2, ring=3), "ring takes the run mapping"),
    (LaunchConfig(Kernel.MMA_GEMV, 1, 4, 128, 1, 1, 0, ring=5), "stages in"),
    (LaunchConfig(Kernel.MMA_GEMV, 3, 24, 128, 1, 2, 0), "block_m in"),
    (LaunchConfig(Kernel.GEMV, 1, 8, 1024), "can't cover M=2"),
])
def test_a_combination_the_kernel_cannot_run_is_refused_by_the_plan(cfg, match):
    m = 2 if cfg.kernel is Kernel.GEMV and cfg.depth == 1 else 1
    with pytest.raises(ValueError, match=match):
        plan_for_config(cfg, 4096, 4096, 4096, m, Format.E5M2, DEVICES["sm_90"], torch.float16,
                        False, E2M1Decode.SELECT, WeightFacts(True, False, False), False,
                        softfp8.LaunchSettings())


def test_launch_settings_nest_restore_and_stay_in_their_thread():
    base = _settings.current()
    with softfp8.launch_settings(pdl="off") as outer:
        assert _settings.current() is outer and outer.pdl == "off"
        with softfp8.launch_settings(fp8_decode="integer") as inner:
            assert (inner.pdl, inner.fp8_decode) == ("off", "integer")
            seen = []
            t = threading.Thread(target=lambda: seen.append(_settings.current()))
            t.start()
            t.join()
            assert seen == [base]  # another thread keeps the defaults
        assert _settings.current() is outer
    assert _settings.current() == base
    with pytest.raises(TypeError, match="unknown setting.*'pdll'"):
        softfp8.launch_settings(pdll="off").__enter__()
    with pytest.raises(ValueError, match="pdl_prefetch=-16"):
        softfp8.LaunchSettings(pdl_prefetch=-16)


def test_the_environment_gives_the_defaults_read_once(monkeypatch, tmp_path):
    monkeypatch.setenv("SOFTFP8_PDL", " Early ")
    monkeypatch.setenv("SOFTFP8_PDL_PREFETCH", "4096")
    monkeypatch.setenv("SOFTFP8_SPLITK_REDUCE", "")  # empty: unset
    first = _settings.current()
    assert (first.pdl, first.pdl_prefetch, first.splitk_reduce) == ("early", 4096, "last")
    monkeypatch.setenv("SOFTFP8_PDL", "off")
    assert _settings.current() is first  # not read again
    assert _settings.reload_environment().pdl == "off"
    monkeypatch.setenv("SOFTFP8_FP8_DECODE", "integr")
    with pytest.raises(ValueError, match="SOFTFP8_FP8_DECODE='integr' is not valid"):
        _settings.reload_environment()


def test_a_replay_checks_the_launch_settings():
    """A recorded eager call replays only under the settings it was recorded with
    (`_fastcall.LayerCall.launch` compares its readers' values)."""
    import softfp8.backends.triton as tb

    (read,) = tb._SETTINGS_READERS
    before = read()
    with softfp8.launch_settings(pdl="off"):
        assert read() != before
    assert read() == before


def test_every_row_of_the_tile_table_is_some_launch_s():
    """`_table.TILE_RULES` has no dead row: each is the first to hold for some device, format,
    shape, M and dtype (and `launch_rule` names it)."""
    from softfp8.backends.triton._table import TILE_RULES, launch_rule

    seen = {launch_rule(n, k, m, fmt, info, dtype)
            for info, fmt, (n, k), m, dtype in itertools.product(
                DEVICES.values(), Format, SHAPES + [(16384, 4096), (8192, 4096)], MS, DTYPES)}
    assert seen == {rule for rule, _, _ in TILE_RULES}
    t4 = DEVICES["sm_75"]
    assert launch_rule(4096, 4096, 1, Format.NVFP4, t4) == (
        "the FP4 GEMV to 4096 rows: 8 x 2048, 8 warps")
    assert launch_config(4096, 4096, 1, Format.NVFP4, t4) == LaunchConfig(
        Kernel.GEMV, 1, 8, 2048, 1, num_warps=8)  # 512 row blocks fill 40 SMs: no split
