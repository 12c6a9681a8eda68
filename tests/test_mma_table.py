"""Kernel.MMA_GEMV's launch rules (`triton/_mma_table.py`, `_mma_flags.py`): its domain, its
mappings, ring, zero fill, and the launches it refuses. Pure Python."""
import functools
import itertools

import pytest
import torch
from conftest import triton_backend_or_skip

import softfp8
from softfp8.dispatch import E2M1Decode
from softfp8.formats import Format, padded_k

triton_backend = triton_backend_or_skip()
from softfp8.backends.triton import Kernel, LaunchConfig, launch_config, run  # noqa: E402
from triton_support import DEVICE, HAS_GPU  # noqa: E402


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


def test_mma_gemv_not_under_forced_hardware_fp8():
    h200 = triton_backend.DeviceInfo(sm_count=132, capability=(9, 0), interpreter=False)
    with softfp8.launch_settings(fp8_decode="hardware"):
        assert launch_config(4096, 4096, 1, Format.E5M2, h200).kernel is Kernel.GEMV
        assert launch_config(4096, 4096, 1, Format.NVFP4, h200).kernel is Kernel.MMA_GEMV
    assert launch_config(4096, 4096, 1, Format.E5M2, h200).kernel is Kernel.MMA_GEMV


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


MMA_DEVICES = {
    "sm_80": triton_backend.DeviceInfo(108, (8, 0), False),   # A100: registers only
    "sm_86": triton_backend.DeviceInfo(82, (8, 6), False),    # RTX 3090
    "sm_89": triton_backend.DeviceInfo(128, (8, 9), False),   # RTX 4090
    "sm_90": triton_backend.DeviceInfo(132, (9, 0), False),   # H100 / H200: the ring
    "sm_100": triton_backend.DeviceInfo(148, (10, 0), False),  # B200
}
MMA_SHAPES = [(4096, 4096), (6144, 4096), (11008, 4096), (12288, 4096), (22016, 4096),
              (28672, 4096), (4096, 11008), (4096, 14336), (128256, 4096), (1000, 1032)]


def _mma_launches(info):
    """(fmt, n, k, m, rule, LaunchConfig) of every launch the table gives Kernel.MMA_GEMV here."""
    from softfp8.backends.triton._mma_table import mma_rule

    for fmt in sorted(triton_backend.MMA_FORMATS, key=lambda f: f.value):
        for (n, k), m in itertools.product(MMA_SHAPES, range(1, 17)):
            cfg = launch_config(n, k, m, fmt, info)
            if cfg.kernel is Kernel.MMA_GEMV:
                yield fmt, n, k, m, mma_rule(n, k, m, fmt, info), cfg


def test_every_mma_rule_is_reached_and_every_launch_plans():
    """Each row of MMA_RULES is some launch's on some device (none shadowed by the rows above
    it), the ring rows only from sm_90 and the register rows for 8-bit M <= 4 only below it, and
    every LaunchConfig the rows make is one the plan takes (its mapping, ring and depth)."""
    from softfp8.backends.triton._mma_table import MMA_RULES

    reached: dict[str, set] = {}
    for device, info in MMA_DEVICES.items():
        for fmt, n, k, m, rule, cfg in _mma_launches(info):
            reached.setdefault(rule, set()).add(device)
            fp8 = fmt in (Format.E5M2, Format.E4M3, Format.E4M3_B128)  # MMA_FP8_FORMATS
            assert (cfg.ring > 0) == (fp8 and m <= 4 and info.capability >= (9, 0)), (
                device, fmt, n, k, m, cfg)
            assert cfg.depth == (2 if fp8 and not cfg.ring else 1)
            facts = triton_backend.WeightFacts(fmt in (Format.E5M2, Format.E4M3), True,
                                               fmt is Format.MXFP4)
            p = triton_backend.plan_for_config(
                cfg, n, k, padded_k(k, fmt), m, fmt, info, torch.float16, False,
                E2M1Decode.SELECT, facts, False, softfp8.LaunchSettings())
            assert p.kernel.startswith("mma_") and 1 <= p.split <= cfg.split_k, (device, cfg)
    rules = [rule for rule, _, _ in MMA_RULES]
    assert set(reached) == set(rules), set(rules) - set(reached)
    ring = {rule for rule in rules if "on the ring" in rule}
    assert len(ring) == 4
    for rule in ring:
        assert reached[rule] == {"sm_90", "sm_100"}, rule
    m1_registers = next(r for r in rules if r.startswith("8-bit M = 1 from registers"))
    assert reached[m1_registers] == {"sm_80", "sm_86", "sm_89"}


@pytest.mark.parametrize("n, k, m, fmt, device, words", [
    (4096, 4096, 1, Format.E5M2, "sm_90", "8-bit M = 1 on the ring"),
    (4096, 4096, 1, Format.E5M2, "sm_89", "8-bit M = 1 from registers"),
    (128256, 4096, 2, Format.E4M3, "sm_90", "8-bit M = 2 vocabulary heads on the ring"),
    (4096, 4096, 2, Format.E4M3, "sm_90", "8-bit M = 2 on the ring"),
    (4096, 4096, 4, Format.E4M3, "sm_100", "8-bit M = 3..4 on the ring"),
    (4096, 4096, 4, Format.E4M3, "sm_80", "8-bit M = 2..8 from registers"),
    (6144, 4096, 8, Format.E5M2, "sm_90", "8-bit M = 2..8 from registers"),
    (4096, 4096, 16, Format.E5M2, "sm_90", "M = 9..16"),
    (4096, 4096, 9, Format.MXFP4, "sm_80", "M = 9..16"),
    (12288, 4096, 1, Format.NVFP4, "sm_90", "FP4 M = 1, one wave of 8-row programs"),
    (10240, 4096, 1, Format.NVFP4, "sm_80", "FP4 M = 1, one wave of 8-row programs"),
    (12288, 4096, 1, Format.NVFP4, "sm_80", "FP4 M = 1 from 6144 rows"),
    (12288, 11008, 1, Format.MXFP4, "sm_90", "FP4 M = 1 from 6144 rows"),
    (4096, 4096, 1, Format.MXFP4, "sm_90", "FP4 M = 1: 2 warps"),
    (4096, 4096, 2, Format.NVFP4, "sm_86", "FP4 M = 2, and M = 3..4 from 8192 rows"),
    (8191, 4096, 4, Format.NVFP4, "sm_90", "FP4 M = 2..8 otherwise"),
])
def test_mma_rule_names_the_row_a_launch_takes(n, k, m, fmt, device, words):
    from softfp8.backends.triton._mma_table import mma_rule

    assert mma_rule(n, k, m, fmt, MMA_DEVICES[device]).startswith(words)
