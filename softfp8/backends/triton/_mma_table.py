"""Kernel.MMA_GEMV's launch settings: its domain, when `launch_config` picks it, its run and
tile mappings and their tiles, K-split and zero fill, each rule with why, and which kernel of
the family (`_mma`) runs a launch (`MMA_KERNELS`). `mma_config` is a table, MMA_RULES (rule in
words, when, layout: the first row that holds), then the K split (`mma_config_split`). The
measurements that decided them (H200 sweeps and `softfp8-bench token`) are in
docs/decisions.md (MMA GEMV launch rules), the current numbers in docs/performance.md. Over
400 lines because each rule keeps the measurement that decided it beside it. Pure Python:
nothing here imports Triton."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ...formats import Format
from ..._settings import LaunchSettings
from ._device import DeviceInfo, Kernel, LaunchConfig, fp8_decode_wanted


MMA_MAX_M = 8  # one mma's 8 columns
MMA_GROUPS_MAX_M = 16
"""Kernel.MMA_GEMV takes M up to this as groups of block_m = 8 x rows, one group a program
(its GROUPS): the groups of a block of weight rows run side by side and all but the first
read the weights from L2."""


MMA_FORMATS = frozenset(Format)
"""What Kernel.MMA_GEMV can run (tests and sweeps reach every format with `run`). E4M3_B128 runs
E4M3's steps with each step's sums scaled by its tile scale in fp32 (`_mma_tile._tiles`), and
takes E4M3's rules throughout (`MMA_FP8_FORMATS`)."""

MMA_FP8_FORMATS = frozenset({Format.E5M2, Format.E4M3, Format.E4M3_B128})
"""The 8-bit formats: their rules and constexprs are E5M2's or E4M3's (E4M3_B128: E4M3's; its
tile scales add one fp32 load a step and 4 FFMA a tile, `_mma_tile._tiles`)."""


def mma_gemv_runs(k: int, m: int, fmt: Format, info: DeviceInfo, x_dtype: torch.dtype) -> bool:
    """Kernel.MMA_GEMV's domain: fp16 x, M <= 16 (MMA_GROUPS_MAX_M), K a multiple of 8 (16-byte
    x rows), NVIDIA sm_80+ (mma.m16n8k16 and cvt.f16x2.f32), not the interpreter (inline PTX)."""
    return (fmt in MMA_FORMATS and x_dtype == torch.float16 and m <= MMA_GROUPS_MAX_M
            and k % 8 == 0
            and info.capability is not None and info.capability >= (8, 0)
            and not info.interpreter)


MMA_FP8_M8_MAX_CODES = 6144 * 4096
"""8-bit weights of at most this many codes run M = 5..8 on Kernel.MMA_GEMV (runs laid out for 8
x rows, two steps in registers), larger ones the dot kernel: at M = 8 on the H200 MMA_GEMV
was faster up to 6144 x 4096 (E5M2 11.1 against 11.6 us), slower at 4096 x 14336 (23.0
against 21.7; docs/decisions.md)."""

MMA_FP8_MAX_N = 65536
"""8-bit rows (a vocabulary head) from which M = 2..4 runs the dot kernel, not MMA_GEMV (where
the ring doesn't take them: `_fp8_ring`): on the H200 a sweep and `softfp8-bench small-m`
disagreed on which is faster there (MMA_GEMV 119-122 against 138-139 us in the sweep, 135-148
against 124-131 in the bench, much of that gap from a bench warm-up too short, since lengthened:
`bench.timing.WARM_GPU_S`; docs/decisions.md). Not measured again: the dot kernel stays."""


def uses_mma_gemv(n: int, k: int, m: int, fmt: Format, info: DeviceInfo,
                  x_dtype: torch.dtype, settings: LaunchSettings | None = None) -> bool:
    """Whether launch_config picks Kernel.MMA_GEMV: within its domain, FP4 at M <= 16 (M = 9..16 in
    one program a row block, the weights decoded once for both halves of x's rows: WIDE) and the
    8-bit formats at M <= 4 (M <= 8 for small weights, MMA_FP8_M8_MAX_CODES; E5M2 small weights
    also at M = 9..16, wide), where it was measured faster than the FMA/dot kernels on the H200
    (docs/decisions.md). 8-bit M = 3..4 take it because each thread holds two steps in registers
    (depth 2); vocabulary heads only at M = 1 (MMA_FP8_MAX_N) unless on the shared-memory ring
    (`_fp8_ring`: M <= 4 from sm_90). At M = 5..8 the runs are 64 bytes long and lose to the dot
    kernel on large shapes, not on small ones. Not for 8-bit codes under
    fp8_decode="hardware" (`softfp8.launch_settings`): its decode is the integer one. At
    M = 9..16 FP4 wide beat two groups by 9-68% on llama3-8b's shapes (head, gate_up, qkv);
    E5M2 wide beat the dot kernel on qkv and o by 2-6% and lost on down and the head, E4M3 lost
    on qkv (the dot kernel stays)."""
    small = n * k <= MMA_FP8_M8_MAX_CODES
    if fmt in MMA_FP8_FORMATS and (
            (m > 4 and not small) or (m > MMA_MAX_M and fmt is not Format.E5M2)
            or (m > 1 and n >= MMA_FP8_MAX_N and not _fp8_ring(m, info))
            or fp8_decode_wanted(settings) == "hardware"):
        return False
    return mma_gemv_runs(k, m, fmt, info, x_dtype)


MMA_STEP_BYTES = 64
"""Bytes of each row one warp of Kernel.MMA_GEMV consumes a loop step (16 per thread t of a
quad); the run mapping's step is MMA_MAX_M // RUNS such chunks of a row."""

MMA_TILE_ROWS = 32
"""Rows of one Kernel.MMA_GEMV program in the tile mapping: two 16-row mma tiles, warps split K."""
MMA_RUNS = (1, 2, 4, 8)
"""block_m of Kernel.MMA_GEMV's run mapping: the x rows it is laid out for (`_mma`)."""
MMA_RUN_TILES = (2, 4)
"""16-row mma tiles a warp of the run mapping holds."""


MMA_RING_STAGES = (2, 3, 4, 6, 8)
"""Stages of Kernel.MMA_GEMV's shared-memory ring (LaunchConfig.ring; `_mma_ring`); 6 and 8 in
one warp only (MMA_RING_PROGRAM_SLOTS)."""
MMA_RING_SLOT_BYTES = 144
"""A thread's bytes of one ring stage (`_mma_ring`), every format: 8-bit stages of the 96 bytes
they use (two thirds of the shared memory, more programs an SM) were measured slower on the
H200 (llama2-7b token E5M2 1.610 -> 1.622 ms; docs/decisions.md)."""
MMA_RING_PROGRAM_SLOTS = (2, 3, 4, 6, 8)
"""stages * warps a ring may take: its static shared memory (<= 8 * 32 * 144 bytes) stays
under the 48 KB a kernel may declare."""


def mma_ring_fits(stages: int, warps: int) -> bool:
    return stages in MMA_RING_STAGES and stages * warps in MMA_RING_PROGRAM_SLOTS


def mma_rows(block_m: int, num_warps: int, tiles: int = 2) -> int:
    """Rows of one Kernel.MMA_GEMV program in the run mapping: each warp its own
    2 * block_m * tiles rows (block_n of its LaunchConfig)."""
    return 2 * block_m * tiles * num_warps


MMA_WIDE_M = 2 * MMA_MAX_M
"""block_m of a Kernel.MMA_GEMV launch that takes M up to 16 in one program (the kernel's
WIDE): each step's weights decoded once and fed to two mma, x rows 0..7 and 8..15; laid out
as block_m = 8 (the tile mapping, or the runs for 8 rows with two tiles a warp)."""


def mma_layout(cfg: LaunchConfig) -> tuple[int, int]:
    """(RUNS, TILES) of `_mma`'s kernels for a Kernel.MMA_GEMV LaunchConfig:
    block_m = 8 (or MMA_WIDE_M), block_n = MMA_TILE_ROWS and more than one warp is the tile
    mapping (RUNS = 0, the warps split K); otherwise the run mapping laid out for block_m x
    rows (MMA_WIDE_M: 8, two tiles), with block_n = mma_rows(block_m, num_warps, tiles)."""
    wide = cfg.block_m == MMA_WIDE_M
    block_m = MMA_MAX_M if wide else cfg.block_m
    if block_m == MMA_MAX_M and cfg.block_n == MMA_TILE_ROWS and cfg.num_warps > 1:
        return 0, 2
    for tiles in (2,) if wide else MMA_RUN_TILES:
        if block_m in MMA_RUNS and cfg.block_n == mma_rows(block_m, cfg.num_warps, tiles):
            return block_m, tiles
    raise ValueError(f"cfg: Kernel.MMA_GEMV takes block_m in {MMA_RUNS} with block_n = 2 * "
                     f"block_m * num_warps * (2 or 4), or block_m={MMA_MAX_M} with block_n="
                     f"{MMA_TILE_ROWS}, or block_m={MMA_WIDE_M} with block_n={MMA_TILE_ROWS} "
                     f"or 32 * num_warps; got {cfg}")


MMA_KERNELS = {"mma_ring_kernel": dict(TILES=2, DEPTH=1, WIDE=False, ROW_E=False,
                                       X_IN_STEP=False, AHEAD=None, ZERO=None),
               "mma_runs_kernel": dict(RING=0, WHOLE=False),
               "mma_tile_kernel": dict(RUNS=0, TILES=2, DEPTH=1, RING=0, WHOLE=False)}
"""Kernel.MMA_GEMV's kernels (`_mma`), one a family, and what each fixes of the constexprs of
the others (None: any value, unused there): the ring (RING > 0), the run mapping from
registers (RUNS > 0, one or two buffers), the tile mapping (RUNS = 0)."""


def mma_kernel_name(constexprs: dict) -> tuple[str, dict]:
    """(name of the `_mma` kernel, its constexprs) for constexprs named as across the family:
    RING > 0 the ring, RUNS = 0 the tiles, else the runs; the constexprs that kernel fixes are
    checked (ValueError names one it can't take) and dropped."""
    name = ("mma_ring_kernel" if constexprs.get("RING", 0) else
            "mma_tile_kernel" if not constexprs.get("RUNS", 0) else "mma_runs_kernel")
    out = dict(constexprs)
    for key, fixed in MMA_KERNELS[name].items():
        if key in out:
            value = out.pop(key)
            if fixed is not None and value != fixed:
                raise ValueError(f"{name} takes {key}={fixed!r}, got {value!r}")
    return name, out


def mma_zero_fill(row_bytes: int, per_split: int, runs: int, cfg: LaunchConfig, k: int,
                  padded_k: int) -> bool:
    """Whether Kernel.MMA_GEMV's switched-off loads must leave zeros (its ZERO): a program's K
    range (per_split bytes; the last one what is left of row_bytes) that ends inside a pass of
    `cfg.depth` loop steps makes a tile read them, and so does x past K when the rows are padded
    (k < padded_k: the padding's zero codes times whatever the registers held, NaN included). A
    loop step is MMA_STEP_BYTES a warp of each row in the tile mapping (runs = 0; warps split K),
    MMA_MAX_M / runs of them in the run mapping."""
    step = MMA_STEP_BYTES * (cfg.num_warps if runs == 0 else MMA_MAX_M // runs)
    whole = step * cfg.depth
    return k != padded_k or row_bytes % whole != 0 or per_split % whole != 0


def mma_split(programs: int, warps: int, info: DeviceInfo, per_sm: int = 12) -> int:
    """Kernel.MMA_GEMV's K-split: programs of `warps` warps split K until about `per_sm` warps
    per SM are resident (1 to 8 ways)."""
    return max(1, min(8, -(-per_sm * info.sm_count // (programs * warps))))


MMA_FP8_RING_STAGES = 3
"""8-bit weights run M = 2..4 on the shared-memory ring (`_mma_ring`) with this many stages, 2
warps, K split only to fill the GPU, not in two register buffers. Taken for every shape, not
only where it wins alone: on the H200 the ring was faster than two register buffers on some
shapes and within 0.6 us slower on others, but with the ring below 8192 rows only the llama2-7b
token was 2% slower, with every shape on it 2% faster (E5M2 1.766 -> 1.726 ms, E4M3 1.929 ->
1.824; docs/decisions.md). A kernel with shared memory after one without (the L1/shared split
changes between them) is the likely cost of mixing them: not measured apart. FP4 gains nothing
from the ring: its loop is bound by the decode once the loads fly."""


MMA_FP8_RING_M1 = (1, 4)
"""(warps, stages) of the 8-bit M = 1 ring, launched early under PDL (`_table.pdl_auto`): each
program holds 3 of its steps (of 8 in a 4096-byte row) before its PDL wait, so it reads while
the kernel before finishes. On the H200 (`softfp8-bench token --preset llama2-7b`; docs/
decisions.md), ms, E5M2 / E4M3: 3 stages in 2 warps, late 1.742 / 1.837; 4 stages in 2 warps,
early 1.650-1.668 / 1.805-1.817; 4 stages in 1 warp, early 1.607 / 1.782 (kept); 6 or 8 stages
in 1 warp slower (1.696 / 1.914, 1.952 / 2.200). The gain needs each program to hold its bytes
before the wait: an L2 prefetch in their place lost."""


MMA_RING_MIN_CC = (9, 0)
"""The ring rule (MMA_FP8_RING_STAGES) holds from this compute capability: measured on the H200
(228 KB of shared memory an SM: 8 programs of the ring's 27.6 KB). GPUs with 100 KB (sm_86,
sm_89) or 164 KB (sm_80) an SM would hold 3 or 5 such programs, against the 16+ warps two
register buffers leave resident; not measured there, so they keep two register buffers."""


MMA_FP8_RING_MAX_M = 4
"""8-bit M = 2..4 run on the ring too (from sm_90): 3 stages, 2 warps, vocabulary heads at M = 2
in 4 warps of 2 stages. On the H200 (llama3-8b shapes; docs/decisions.md) the ring beat two
register buffers on every shape at M = 2 (qkv 8.6 against 10.0 us, the head 121.7 against
144.0 on the dot kernel) and M = 4 (qkv 9.5 against 10.3), and lost everywhere at M = 8
(gate_up 35.0 us on two buffers, the head 206 against 139 on the dot kernel). K-split: M = 2
for about 3 warps an SM and rows over 4 KB in 7 KB pieces (down 17.9 us split 2, 19.6
unsplit); M = 3..4 for about 12 (qkv 9.5 split 5, 11.5 unsplit)."""


def _fp8_ring(m: int, info: DeviceInfo) -> bool:
    """Whether 8-bit weights at M run on the shared-memory ring (MMA_FP8_RING_STAGES,
    MMA_FP8_RING_MAX_M, MMA_RING_MIN_CC)."""
    return (m <= MMA_FP8_RING_MAX_M and info.capability is not None
            and info.capability >= MMA_RING_MIN_CC)


MMA_FP4_M1_ONE_WARP_MIN_ROWS = 6144
"""FP4 weights with at least this many rows run M = 1 in programs of one warp (4 rows), not two:
on the H200 (the `inject` E2M1 decode) one warp was 1-6% faster from 6144 rows up to the
128256-row head (22016 x 4096 NVFP4 18.6 against 19.7 us), not at 4096 rows (4096 x 4096 in
two warps split 2 as fast or faster; docs/decisions.md)."""

MMA_FP4_M1_FOUR_TILES_MAX_PER_SM = 12
"""FP4 at M = 1 in one warp takes 4 tiles a warp (8 rows a program, not 4) where those programs
number from MMA_FP4_WARPS_PER_SM to this many an SM and rows are at most 4 KB (K <= 8192, not
split by row length): about one resident wave, unsplit, rather than a wave and a tail of 4-row
programs. On the H200 (132 SMs: 11616..12672 rows) that is 12288 x 4096, llama2-7b's qkv (1536
programs, not 3072): NVFP4 / MXFP4 10.4 / 10.7 us against 11.1 / 11.1, the token NVFP4 1.488 ->
1.474 ms, MXFP4 1.484 -> 1.478 (docs/decisions.md). Outside that range 2 tiles were faster or
within 0.5 us; only 12288 rows were measured inside it. Registers at 4 tiles (sm_90, triton
3.9, `benchmarks/sass_mma_loop.py FMT --facts --warps 1 --set TILES=4`, MXFP4 with --set ROW_E=0
--set X_IN_STEP=1): NVFP4 180 (11 programs fit an SM), MXFP4 164 (12 fit)."""

MMA_FP4_WARPS_PER_SM = 11
"""FP4 programs at M <= 8 split K until about this many warps an SM are resident (8-bit and
M = 9..16: 12). One below the 8-bit formats' so that 6144-row weights (1536 one-warp programs
at M = 1, 192 eight-warp tiles at M = 2..8: 11.6 warps an SM on the H200's 132 SMs) stay
unsplit: on the H200 unsplit was 19-31% faster there (M = 1 NVFP4 7.3 against 9.0 us, M = 2
9.0 against 13.0; docs/decisions.md). 4096-row weights still split 2 (4096 x 4096 M = 1 in two
warps 6.2 against 6.8 us unsplit)."""


MMA_FP4_RUNS_M4_MIN_ROWS = 8192
"""FP4 at M = 3..4 runs on the run mapping from this many rows, below it on the 32-row tiles."""


def _fp4_runs(n: int, m: int, fmt: Format) -> bool:
    """FP4 at M = 2, and at M = 3..4 from MMA_FP4_RUNS_M4_MIN_ROWS rows, on the run mapping (laid
    out for 2 or 4 x rows), not the 32-row tiles. On the H200 (llama3-8b shapes, `inject`,
    M = 4; docs/decisions.md) the runs in 4 warps beat the tiles on gate_up (NVFP4 25.6 against
    29.4 us) and the head (99.6 against 108.9), lost on qkv (10.6 against 9.3) and were within
    about 1 us on o and down; at M = 2 they were faster or within 0.2 us on all five."""
    if fmt not in (Format.NVFP4, Format.MXFP4) or not 2 <= m <= 4:
        return False
    return m == 2 or n >= MMA_FP4_RUNS_M4_MIN_ROWS


@dataclass(frozen=True)
class MmaCase:
    """What MMA_RULES read of one Kernel.MMA_GEMV launch, derived once."""

    n: int
    k: int
    m: int
    fmt: Format
    info: DeviceInfo
    fp8: bool  # 8-bit codes (MMA_FP8_FORMATS): two steps in registers where not on the ring
    ring: bool  # 8-bit at M <= MMA_FP8_RING_MAX_M from MMA_RING_MIN_CC: the shared-memory ring

    @property
    def row_bytes(self) -> int:
        return self.k * (8 if self.fp8 else 4) // 8


def mma_case(n: int, k: int, m: int, fmt: Format, info: DeviceInfo) -> MmaCase:
    fp8 = fmt in MMA_FP8_FORMATS
    return MmaCase(n, k, m, fmt, info, fp8, fp8 and _fp8_ring(m, info))


@dataclass(frozen=True)
class MmaLayout:
    """An MMA_RULES row's launch before its K split: block_m x rows (`LaunchConfig.block_m`,
    `.block_n`), warps, L2 prefetch steps (`ahead`: LaunchConfig.num_stages), steps in
    registers (`depth`), ring stages (0: none); then how K is split (`mma_config_split`):
    until about `per_sm` warps an SM are resident, and where rows are over 4 KB, into
    pieces of at most `piece` bytes of a row (0: not by row length)."""

    block_m: int
    rows: int
    warps: int
    ahead: int = 0
    depth: int = 1
    ring: int = 0
    per_sm: int = 12
    piece: int = 0


def _runs(c: MmaCase, warps: int, tiles: int = 2, **kw) -> MmaLayout:
    """The run mapping laid out for the next power of two >= M x rows (at most 8)."""
    block_m = min(MMA_MAX_M, 1 << (c.m - 1).bit_length())
    return MmaLayout(block_m, mma_rows(block_m, warps, tiles), warps, **kw)


def _fp4_four_tiles(c: MmaCase) -> bool:
    """FP4 M = 1 in one warp of 4 tiles: its 8-row programs number MMA_FP4_WARPS_PER_SM to
    MMA_FP4_M1_FOUR_TILES_MAX_PER_SM an SM, rows of at most 4 KB."""
    per_sm = c.n / (mma_rows(1, 1, 4) * c.info.sm_count)
    return (MMA_FP4_WARPS_PER_SM <= per_sm <= MMA_FP4_M1_FOUR_TILES_MAX_PER_SM
            and c.k <= 8192)


_FP4 = dict(per_sm=MMA_FP4_WARPS_PER_SM)
_FP8_RING_PIECE = 7168  # 8-bit M = 2 on the ring: rows over 4 KB in 7 KB pieces
_M1_PIECE = 3584  # M = 1 from registers: 3.5 KB of a row a program, a step in registers

MMA_RULES = (
    ("8-bit M = 1 on the ring (sm_90+): one warp of 4 stages, ~6 warps an SM, no split by "
     "row length (MMA_FP8_RING_M1)",
     lambda c: c.ring and c.m == 1,
     lambda c: _runs(c, MMA_FP8_RING_M1[0], ring=MMA_FP8_RING_M1[1], per_sm=6)),
    ("8-bit M = 2 vocabulary heads on the ring: 4 warps of 2 stages, ~3 warps an SM, rows over "
     "4 KB in 7 KB pieces (MMA_FP8_RING_MAX_M)",
     lambda c: c.ring and c.m == 2 and c.n >= MMA_FP8_MAX_N,
     lambda c: _runs(c, 4, ring=2, per_sm=3, piece=_FP8_RING_PIECE)),
    ("8-bit M = 2 on the ring: 2 warps of 3 stages, ~3 warps an SM, rows over 4 KB in 7 KB "
     "pieces (MMA_FP8_RING_STAGES)",
     lambda c: c.ring and c.m == 2,
     lambda c: _runs(c, 2, ring=MMA_FP8_RING_STAGES, per_sm=3, piece=_FP8_RING_PIECE)),
    ("8-bit M = 3..4 on the ring: 2 warps of 3 stages, ~12 warps an SM",
     lambda c: c.ring,
     lambda c: _runs(c, 2, ring=MMA_FP8_RING_STAGES)),
    ("M = 9..16 (FP4, E5M2 small weights): WIDE, the runs for 8 x rows, both halves of x in "
     "one program, 4 warps, the format's depth, ~12 warps an SM",
     lambda c: c.m > MMA_MAX_M,
     lambda c: MmaLayout(MMA_WIDE_M, mma_rows(MMA_MAX_M, 4), 4, depth=2 if c.fp8 else 1)),
    ("8-bit M = 1 from registers (below sm_90): two steps in registers, 2 warps (4 from 16384 "
     "rows), ~6 warps an SM, rows over 4 KB in 7 KB pieces",
     lambda c: c.fp8 and c.m == 1,
     lambda c: _runs(c, 4 if c.n >= 16384 else 2, depth=2, per_sm=6, piece=2 * _M1_PIECE)),
    ("8-bit M = 2..8 from registers (M = 2..4 below sm_90): two steps in registers, 4 warps, "
     "~12 warps an SM",
     lambda c: c.fp8,
     lambda c: _runs(c, 4, depth=2)),
    ("FP4 M = 1, one wave of 8-row programs: 1 warp of 4 tiles, rows over 4 KB in 3.5 KB "
     "pieces (MMA_FP4_M1_FOUR_TILES_MAX_PER_SM)",
     lambda c: c.m == 1 and c.n >= MMA_FP4_M1_ONE_WARP_MIN_ROWS and _fp4_four_tiles(c),
     lambda c: _runs(c, 1, 4, piece=_M1_PIECE, **_FP4)),
    ("FP4 M = 1 from 6144 rows: 1 warp, rows over 4 KB in 3.5 KB pieces "
     "(MMA_FP4_M1_ONE_WARP_MIN_ROWS)",
     lambda c: c.m == 1 and c.n >= MMA_FP4_M1_ONE_WARP_MIN_ROWS,
     lambda c: _runs(c, 1, piece=_M1_PIECE, **_FP4)),
    ("FP4 M = 1: 2 warps, rows over 4 KB in 3.5 KB pieces",
     lambda c: c.m == 1,
     lambda c: _runs(c, 2, piece=_M1_PIECE, **_FP4)),
    ("FP4 M = 2, and M = 3..4 from 8192 rows: the runs, 4 warps (`_fp4_runs`)",
     lambda c: _fp4_runs(c.n, c.m, c.fmt),
     lambda c: _runs(c, 4, **_FP4)),
    ("FP4 M = 2..8 otherwise: the 32-row tiles, warps along K (8 below 256 programs, else 4), "
     "2-step L2 prefetch",
     lambda c: True,
     lambda c: MmaLayout(MMA_MAX_M, MMA_TILE_ROWS, 8 if -(-c.n // MMA_TILE_ROWS) < 256 else 4,
                         ahead=2, **_FP4)),
)
"""Kernel.MMA_GEMV's launches, as `launch_config` picks them (`uses_mma_gemv`): (rule, when,
layout), the first row whose `when` holds; its K split follows (`mma_config_split`). block_k
is 128 codes. Why each, measured on the H200 with benchmarks/sweep_gemv.py unless said
(docs/decisions.md; the constants named in a row say more):
- The run mapping (`_mma`) for M = 1 at every format, for FP4 where `_fp4_runs`, and for the
  8-bit formats at M <= 8: block_m the next power of two >= M, 2 tiles a warp.
- 8-bit from registers hold two steps (depth 2): with one, ptxas issues the next step's loads
  after this step's mma (SASS, sm_90), so a warp has one step in flight (22016 x 4096 E5M2 at
  M = 1: 24.0 against 26.4 us). An L2 prefetch beyond the registers (num_stages 2 / 4) was
  slower in 93 of 116 pairs and never a shape's best; FP4 (125 registers at depth 1) gains
  nothing from depth 2.
- FP4's 32-row tiles: at M = 8 the runs were 12-16% slower on the head, mixed elsewhere.
- WIDE: 4 warps within 3% of 2 or faster on 29 of 30 shape/format/M; the 32-row tiles wide
  up to 30% slower on gate_up and the head.
- Resident warps: about 12 an SM (M = 1 at depth 2: 6, twice the bytes a warp; FP4: 11,
  MMA_FP4_WARPS_PER_SM). At M = 1 rows over 4 KB also split into 3.5 KB pieces (depth 2: 7 KB;
  4096 x 11008 E5M2: 14.3 us split 2 against 15.1 split 4); rows of 4 KB or less stay unsplit
  where the rows fill the GPU (12288 x 4096 E5M2: 14.7 us against 16.4 split 2). M = 1 in 2
  warps is fastest or within 3% on 10 of 11 shapes; which warp count wins moves between
  machines, the token within 1% either way."""


def mma_rule(n: int, k: int, m: int, fmt: Format, info: DeviceInfo) -> str:
    """The MMA_RULES row a Kernel.MMA_GEMV launch takes, in words."""
    c = mma_case(n, k, m, fmt, info)
    return next(rule for rule, when, _ in MMA_RULES if when(c))


def mma_config(n: int, k: int, m: int, fmt: Format, info: DeviceInfo) -> LaunchConfig:
    """Kernel.MMA_GEMV's LaunchConfig: the first MMA_RULES row that holds, its K split."""
    c = mma_case(n, k, m, fmt, info)
    layout = next(make(c) for _, when, make in MMA_RULES if when(c))
    return mma_config_split(layout, c)


def mma_config_split(layout: MmaLayout, c: MmaCase) -> LaunchConfig:
    """`layout`'s LaunchConfig with its K split: `mma_split` to about layout.per_sm warps an SM,
    at least `layout.piece` bytes of a row a program where rows are over 4 KB; FP4 then to
    whole loop steps a program (`_whole_step_split`; the 8-bit splits were measured as they
    are)."""
    groups = -(-c.m // layout.block_m)  # 1 but for explicit M > 16
    split = mma_split(-(-c.n // layout.rows) * groups, layout.warps, c.info, layout.per_sm)
    row_bytes = c.row_bytes
    if layout.piece and row_bytes > 4096:
        split = min(8, max(split, -(-row_bytes // layout.piece)))
    cfg = LaunchConfig(Kernel.MMA_GEMV, layout.block_m, layout.rows, 128, split, layout.warps,
                       layout.ahead, layout.depth, layout.ring)
    return cfg if c.fp8 else _whole_step_split(cfg, row_bytes, c.k)


def _whole_step_split(cfg: LaunchConfig, row_bytes: int, k: int) -> LaunchConfig:
    """cfg with the smallest K split from its own up to 8 whose programs each take whole loop
    steps (`mma_zero_fill` False); where none does, the next power of two. A split that cuts a
    step makes every program's loads leave zeros (ZERO), and 3 ways was slow even where every
    split cuts one: on the H200, FP4 at M = 2, split 3 against 4 took 4096 x 14336 NVFP4 18.7
    against 14.8 us (docs/decisions.md). FP4 only: the 8-bit formats' splits were measured as
    they are."""
    runs, _ = mma_layout(cfg)
    steps = -(-row_bytes // MMA_STEP_BYTES)  # block_k = 128 FP4 codes: MMA_STEP_BYTES a row
    for split in range(cfg.split_k, 9):
        per_split = -(-steps // split) * MMA_STEP_BYTES
        if not mma_zero_fill(row_bytes, per_split, runs, cfg, k, k):
            return dataclasses.replace(cfg, split_k=split)
    return dataclasses.replace(cfg, split_k=min(8, 1 << (cfg.split_k - 1).bit_length()))
