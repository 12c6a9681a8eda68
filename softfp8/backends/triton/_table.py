"""The Triton backend's launch settings: which kernel, which tiles, which FP8 decode, whether to
use programmatic dependent launch -- a small deterministic table keyed on (N, K, M, device),
every entry measured where a measurement exists (the docstrings say where and what) and
reasoned where not. `launch_config` is the table; a sweep receipt can override it for exact
shapes (SOFTFP8_TRITON_TABLE). Pure Python: nothing here imports Triton.
"""
from __future__ import annotations

import enum
import functools
import json
import os
from dataclasses import dataclass

import torch

from ...formats import Format


class Kernel(str, enum.Enum):
    """Which kernel a launch uses."""

    GEMV = "gemv"
    """CUDA-core GEMV for M = 1 (and a few fp32 rows): weights read once, K kept in registers."""
    SMALL_M = "small_m"
    """tl.dot with one 16-row block of x (M = 2..16): weights read once for all rows."""
    TILED = "tiled"
    """tl.dot over a 2-D grid of output tiles, for larger M."""
    MMA_GEMV = "mma_gemv"
    """M <= 8 with fp16 activations on NVIDIA sm_80+: warp-level mma.sync with the per-thread
    decode written in PTX (`_mma`), no layout conversions in the loop; auto for FP4."""
    DEQUANT = "dequant"
    """Large M: decode block_n rows at a time into x's dtype (a bounded slab, never the whole
    weight) and multiply each slab with torch's GEMM (cuBLAS); compute-bound there, so the
    decode is a small fixed cost."""


@dataclass(frozen=True)
class LaunchConfig:
    """Launch settings. block_k is in codes (weights along K); split_k programs share one row
    block's K range and a second kernel sums their partials in a fixed order. depth
    (Kernel.MMA_GEMV's run mapping only): loop steps of weights each thread holds in registers,
    1 or 2 (two buffers, each refilled after its own step)."""

    kernel: Kernel
    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 2
    depth: int = 1


@dataclass(frozen=True)
class DeviceInfo:
    """What the launch table is keyed on besides the shape."""

    sm_count: int
    capability: tuple[int, int] | None  # NVIDIA compute capability; None for ROCm/interpreter
    interpreter: bool


@functools.lru_cache(maxsize=None)
def device_info(device: torch.device) -> DeviceInfo:
    if device.type != "cuda":
        return DeviceInfo(sm_count=4, capability=None, interpreter=True)
    props = torch.cuda.get_device_properties(device)
    cap = None if torch.version.hip else (props.major, props.minor)
    return DeviceInfo(props.multi_processor_count, cap, interpreter=False)


FP8_DECODE_ENV = "SOFTFP8_FP8_DECODE"
"""auto | integer | hardware. `integer` forces the bit-operation FP8 decode even on sm_89+, so an
H200 measures what a T4 or RTX 3090 user gets; `hardware` on a GPU without it is an error."""


def fp8_decode_wanted() -> str:
    """SOFTFP8_FP8_DECODE, checked: 'auto', 'integer' or 'hardware'."""
    wanted = os.environ.get(FP8_DECODE_ENV, "auto").strip().lower()
    if wanted not in ("auto", "integer", "hardware"):
        raise ValueError(f"{FP8_DECODE_ENV}={wanted!r} is not valid; expected one of "
                         "'auto', 'integer', 'hardware'")
    return wanted


def uses_hardware_fp8(fmt: Format, info: DeviceInfo) -> bool:
    """The one place that picks hardware FP8 conversion: NVIDIA sm_89+ for E5M2 codes (same
    bits as the integer decode, checked per code by the GPU tests); integer decode elsewhere."""
    has_hw = info.capability is not None and info.capability >= (8, 9)
    wanted = fp8_decode_wanted()
    if wanted == "hardware" and not has_hw:
        raise ValueError(f"{FP8_DECODE_ENV}=hardware: this GPU has no FP8 conversion "
                         "instructions (they need NVIDIA compute capability 8.9 or newer)")
    if wanted == "hardware":
        return fmt in (Format.E5M2, Format.E4M3)
    # auto: measured on the H200 (2026-11-29, benchmarks/gpu_triton_check.py, 128256 x 4096): the
    # cvt is 10% faster than the PTX prmt decode for E5M2 but 38% slower for E4M3, whose
    # cvt.f16x2.e4m3 costs more than a shift and the NaN fix-up on fp16 pairs.
    return fmt is Format.E5M2 and has_hw and wanted != "integer"


PDL_ENV = "SOFTFP8_PDL"
"""auto | off | early | late: programmatic dependent launch on NVIDIA sm_90+ (a kernel starts,
and may pull its first weight bytes toward L2, while the previous one finishes). early: the
next kernel may launch as soon as this one starts; late: once this one's main loop is done.
GPUs before sm_90 have no PDL. auto = `pdl_auto`."""
PDL_PREFETCH_ENV = "SOFTFP8_PDL_PREFETCH"
"""Overrides the bytes of each program's weights prefetched to L2 before the PDL wait (a
multiple of 16; 0 = none)."""
_PDL_MODES = {"off": 0, "early": 1, "late": 2}


def pdl_auto(fmt: Format) -> tuple[str, int]:
    """Measured on the H200 (2026-11-29, `bench token --preset llama2-7b`; BENCHMARKS.md), ms per
    token. 8-bit (campaign steps pdl1, pdl2), off -> late -> early + 32 KiB prefetch: E5M2 2.121
    -> 2.079 -> 2.518, E4M3 3.384 -> 3.308 -> 4.521; the waiting programs of an early launch
    take SM slots from these bandwidth-bound kernels, and the prefetch alone (late + 32 KiB) cost
    E5M2 9%. FP4 on Kernel.MMA_GEMV (step pdl3), off -> late -> early -> early + 32 KiB: NVFP4
    1.926 -> 1.817 -> 1.802 -> 1.871, MXFP4 2.043 -> 1.909 -> 1.919 -> 1.889 (the prefetch
    that helped the FMA GEMV no longer does). Since 4e7562a the MMA GEMV under an early launch
    issues its first weight loads before the wait (`_mma`); `pdlw1` (2026-12-01), late / early:
    E5M2 1.794 / 1.790, E4M3 1.943 / 1.958, NVFP4 1.793 / 1.753, MXFP4 1.946 / 1.871."""
    return ("late", 0) if fmt in (Format.E5M2, Format.E4M3) else ("early", 0)


def pdl_settings(info: DeviceInfo, fmt: Format) -> tuple[int, int]:
    """(PDL mode: 0 off, 1 early, 2 late; prefetch bytes) for launches on this device."""
    wanted = os.environ.get(PDL_ENV, "auto").strip().lower()
    auto_mode, auto_bytes = pdl_auto(fmt)
    if wanted == "auto":
        wanted = auto_mode
    if wanted not in _PDL_MODES:
        raise ValueError(f"{PDL_ENV}={wanted!r} is not valid; expected one of 'auto', "
                         "'off', 'early', 'late'")
    raw = os.environ.get(PDL_PREFETCH_ENV, str(auto_bytes)).strip()
    if not raw.isdigit() or int(raw) % 16:
        raise ValueError(f"{PDL_PREFETCH_ENV}={raw!r}: expected a multiple of 16 (bytes)")
    if info.capability is None or info.capability < (9, 0) or info.interpreter:
        return 0, 0
    mode = _PDL_MODES[wanted]
    return mode, int(raw) if mode else 0


DEQUANT_MIN_M = 512
"""From this many activation rows on, Kernel.DEQUANT (FP4: DEQUANT_MIN_M_FP4). Measured on the
H200 (BENCHMARKS.md): at M = 512 DEQUANT beat the tiled kernel on every llama3-8b shape for E5M2,
E4M3 and NVFP4 (0.57-0.69x fp16 against 0.21-0.55x; `pipe2` sweep, with its row ranges cached and
32 MiB slabs); at M = 256 the 8-bit tiled kernel still wins on the two largest shapes (28672 and
128256 rows: E5M2 153 / 632 us against 195 / 871), DEQUANT on the three smaller (`pipe3`)."""
DEQUANT_MIN_M_FP4 = 256
"""FP4's DEQUANT threshold: its tiled kernels are slow at every M (MXFP4 steps one 32-code block
at a time: 0.11-0.15x fp16), and at M = 256 DEQUANT beat them on every llama3-8b shape (NVFP4
0.41-0.53x against 0.27-0.28x, `pipe3`; below 256 not measured)."""
DEQUANT_SLAB_BYTES = 32 << 20
"""Bytes of one dequantised slab (two are in flight): a bounded workspace, whatever the layer,
except that a slab holds at least DEQUANT_MIN_SLAB_ROWS rows."""
DEQUANT_MIN_SLAB_ROWS = 2048
"""Fewest rows in a slab (unless the weight has fewer): each slab's GEMM must fill the GPU and
each costs a fixed host time (~130 us eagerly on the H200's host: a Triton launch, the GEMM,
stream and event calls). Measured on the H200, M = 2048, llama3-8b (receipts/
prefill-sweep-h200.json, graph / eager x fp16): 16 MiB slabs (2048 rows at K = 4096, 512 at
14336) gave E4M3 0.853 / 0.431 at the vocabulary head and 0.732 / 0.465 at down (4096 x 14336);
4096 rows at K = 4096 (32 MiB) 0.888 / 0.791, 2048 at K = 14336 0.923 / 0.949."""

TABLE_ENV = "SOFTFP8_TRITON_TABLE"
"""Path to a sweep receipt (`benchmarks/sweep_gemv.py --out FILE`, run on your GPU): its fastest
setting per (N, K, M, format) replaces the built-in table's for fp16/bf16 activations of exactly
those shapes. For tuning a GPU the table was not measured on, and for trying a sweep's winners
before they go into the table."""


@functools.lru_cache(maxsize=4)
def _table_from_sweep(path: str) -> dict:
    try:
        with open(path) as f:
            rows = json.load(f)["best"]
        return {(r["n"], r["k"], r["m"], r["fmt"]):
                LaunchConfig(Kernel(r["kernel"]), r["block_m"], r["block_n"], r["block_k"],
                             r["split_k"], r["num_warps"], r["num_stages"], r.get("depth", 1))
                for r in rows}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{TABLE_ENV}={path!r}: expected a sweep receipt written by "
                         f"benchmarks/sweep_gemv.py --out ({type(e).__name__}: {e})") from e


SMALL_M_UNSPLIT_PER_SM = 2
"""The dot kernel at M = 5..16 splits K only while its row blocks number fewer than this many
per SM (below that, up to four): `m16sweep` on the H200, 8-bit, M = 16, 64 x 256 tiles:
28672 x 4096 (3.4 blocks an SM) unsplit 33.9 / 34.7 us (E5M2 / E4M3) against 37.4 / 37.9
split 2, and in the bench with the sweep's winners (128 x 256, unsplit) gate_up 3251 -> 3622
GB/s; 6144 x 4096 and 4096 x 4096 (0.7 and 0.5 an SM) split 6 and 9 11.7-11.8 / 10.0 us
against 13.3-13.4 / 12.5 unsplit. `sweep9`, 28672 x 4096 at M = 5 and 8: unsplit 33.1-34.2 us
against 34.7-37.8 split 2 (an older sweep, `runs2`, had split 2 ahead by 2-8% at M = 2..8 on
the kernels of then). M = 2..4 not measured again."""


def launch_config(n: int, k: int, m: int, fmt: Format, info: DeviceInfo,
                  x_dtype: torch.dtype = torch.float16) -> LaunchConfig:
    """The launch table, keyed on (N, K, M, device). Measured on the H200 (2026-11-29,
    benchmarks/sweep_gemv.py, integer FP8 decode, fp16 activations; BENCHMARKS.md):
    - M = 1, 8-bit, N >= 8192, where tl.dot has tensor cores: the dot kernel with one 16-row x
      block (decode to fp16 tiles), 32 (N < 16384) or 64 x 256 tiles, 4 warps, 3 stages (E5M2
      4196 GB/s at 128256 x 4096 under PDL, 93.8% of read; 128 x 256 with 8 warps was faster
      without PDL and 10% slower with it).
    - M = 1, 8-bit below that, and FP4: the FMA GEMV with 16-byte loads; FP8 8 rows x 1024
      codes; FP4 8 x 2048 (8 warps) at N <= 4096, 4 x 2048 below 16384, 8 x 1024 above. FP4 is
      decode-bound (1.1-1.6 TB/s), so its tiles matter within 5-10%.
    - Split-K only when the row blocks don't fill one wave of SMs: at 4096 x 4096 a 2-way split
      cost 25% (the reduction is a second launch).
    - M >= DEQUANT_MIN_M: Kernel.DEQUANT, slabs of DEQUANT_SLAB_BYTES and at least
      DEQUANT_MIN_SLAB_ROWS rows (0.84-0.92x fp16 cuBLAS at M = 2048 on llama3-8b's shapes as
      CUDA graphs, against 0.33-0.63x for the tiled kernel).
    - Small M (2..16): one 16-row x block against a 64 x 256 weight tile, K split until there
      are four programs per SM (6-9 ways at N = 4096-6144); at M = 5..16 not at all from
      SMALL_M_UNSPLIT_PER_SM row blocks an SM.
    The M = 17..511 tiles and the dtypes other than fp16 are reasoned, not measured (and every
    GPU but the H200 is):
    - fp32 activations with
      M <= 4 stay on the GEMV (an fp32 "ieee" dot is FMAs on 16 padded rows, 4x the work), and
      FMA-dot tiles are smaller (fp32 at 128 x 128 spilled 42 KB on sm_90; fp16 at 64 x 256 on
      sm_75 spilled 9 KB: triton_compile_worker.py, 2026-11-29, triton 3.9.0).
    - Tiled: 64/128 x 128 output tiles, 8 warps, 3 stages, the usual Hopper/Ampere shapes.
    The interpreter gets large tiles and few programs, since it pays per program, not per byte
    (and no DEQUANT: the tests run it explicitly).
    """
    table = os.environ.get(TABLE_ENV)
    if table and x_dtype != torch.float32 and not info.interpreter:
        cfg = _table_from_sweep(table).get((n, k, m, fmt.value))
        if cfg is not None:
            return cfg
    f32 = x_dtype == torch.float32
    # Where tl.dot becomes FMAs with operands in registers -- fp32 "ieee", and every dtype before
    # sm_80 (Triton 3.x has no tensor-core path there) -- tiles must be small or they spill.
    fma_dot = f32 or (info.capability is not None and info.capability < (8, 0))
    mx = fmt is Format.MXFP4  # the tl.dot kernels step one MXFP4 block (32 codes) at a time
    fp8 = fmt in (Format.E5M2, Format.E4M3)
    if m >= (DEQUANT_MIN_M if fp8 else DEQUANT_MIN_M_FP4) and not info.interpreter:
        rows = max(DEQUANT_MIN_SLAB_ROWS, DEQUANT_SLAB_BYTES // (k * x_dtype.itemsize) // 128 * 128)
        return LaunchConfig(Kernel.DEQUANT, 1, min(rows, n), 512, num_warps=4, num_stages=1)
    if uses_mma_gemv(n, k, m, fmt, info, x_dtype):
        return mma_config(n, k, m, fmt, info)
    if m == 1 and fp8 and n >= 8192 and not fma_dot and not info.interpreter:
        cfg = LaunchConfig(Kernel.SMALL_M, 16, 64 if n >= 16384 else 32, 256, num_warps=4,
                           num_stages=3)
    elif m == 1 or (f32 and m <= 4):
        bm = 1 if m == 1 else (2 if m == 2 else 4)
        if info.interpreter:
            cfg = LaunchConfig(Kernel.GEMV, bm, 64, 1024)
        elif fp8 or bm > 1:
            cfg = LaunchConfig(Kernel.GEMV, bm, max(8 // bm, 2), 1024)
        elif n >= 16384:
            cfg = LaunchConfig(Kernel.GEMV, 1, 8, 1024)
        else:
            cfg = LaunchConfig(Kernel.GEMV, 1, 8 if n <= 4096 else 4, 2048,
                               num_warps=8 if n <= 4096 else 4)
    elif m <= 16:
        if fma_dot:
            cfg = LaunchConfig(Kernel.SMALL_M, 16, 32, 32, num_warps=4, num_stages=2)
        else:
            cfg = LaunchConfig(Kernel.SMALL_M, 16, 64, 32 if mx else 256, num_warps=4,
                               num_stages=3)
    else:
        cfg = tiled_config(m, fmt, info, fma_dot)
    programs = -(-n // cfg.block_n) * -(-m // cfg.block_m)
    steps = -(-k // cfg.block_k)
    # M = 1 wants one wave (a split GEMV/dot cost 10-25% there); M = 2..16 splits K up to four
    # programs per SM (measured: 64 x 256 tiles split 6-9 ways beat no split by 5-30%)
    wide = info.interpreter or (cfg.kernel is Kernel.SMALL_M and m > 1)
    want = 4 * info.sm_count if wide else info.sm_count
    if (cfg.kernel is Kernel.SMALL_M and m > 4 and not info.interpreter
            and programs >= SMALL_M_UNSPLIT_PER_SM * info.sm_count):
        want = programs  # enough row blocks: no split (m16sweep)
    split = 1 if programs >= want else min(16, steps, -(-want // programs))
    return LaunchConfig(cfg.kernel, cfg.block_m, cfg.block_n, cfg.block_k, max(split, 1),
                        cfg.num_warps, cfg.num_stages)


MMA_MAX_M = 8  # one mma's 8 columns
MMA_GROUPS_MAX_M = 16
"""Kernel.MMA_GEMV takes M up to this as groups of block_m = 8 x rows, one group a program
(its GROUPS): the groups of a block of weight rows run side by side and all but the first
read the weights from L2."""


MMA_FORMATS = frozenset(Format)
"""What Kernel.MMA_GEMV can run (tests and sweeps reach every format with `run`)."""


def mma_gemv_runs(k: int, m: int, fmt: Format, info: DeviceInfo, x_dtype: torch.dtype) -> bool:
    """Kernel.MMA_GEMV's domain: fp16 x, M <= 16 (MMA_GROUPS_MAX_M), K a multiple of 8 (16-byte
    x rows), NVIDIA sm_80+ (mma.m16n8k16 and cvt.f16x2.f32), not the interpreter (inline PTX)."""
    return (fmt in MMA_FORMATS and x_dtype == torch.float16 and m <= MMA_GROUPS_MAX_M
            and k % 8 == 0
            and info.capability is not None and info.capability >= (8, 0)
            and not info.interpreter)


MMA_FP8_M8_MAX_CODES = 6144 * 4096
"""8-bit weights of at most this many codes run M = 5..8 on Kernel.MMA_GEMV (runs laid out for 8
x rows, two steps in registers), larger ones the dot kernel: `pipe3` sweep on the H200, M = 8,
E5M2 / E4M3 us, MMA_GEMV against the dot kernel: 4096 x 4096 9.3 / 10.3 against 10.0 / 11.0,
6144 x 4096 11.1 / 12.6 against 11.6 / 13.1; 4096 x 14336 23.0 / 25.9 against 21.7 / 22.6."""

MMA_FP8_MAX_N = 65536
"""8-bit rows (a vocabulary head) from which M = 2..4 runs the dot kernel, not MMA_GEMV: there
`softfp8-bench small-m` (the issue's instrument) and `sweep_gemv.py` disagree. On the H200
(`pipe3`/`pipe4`, 128256 x 4096) the sweep has MMA_GEMV at 119-122 us and the dot kernel at
138-139 (M = 1 and 4), the bench MMA_GEMV at 135-148 us and the dot kernel at 124-131 (M = 2..8).
Much of that was the bench's 3-pass warm-up (BENCHMARKS.md, seventh session: with 50 ms the
head at M = 1 takes 118 us for E5M2, 122 for E4M3 on MMA_GEMV, 125 on the dot kernel);
M = 2..4 heads were not measured again since."""


def uses_mma_gemv(n: int, k: int, m: int, fmt: Format, info: DeviceInfo,
                  x_dtype: torch.dtype) -> bool:
    """Whether launch_config picks Kernel.MMA_GEMV: within its domain, FP4 at M <= 16 (M = 9..16
    in one program a row block, the weights decoded once for both halves of x's rows: WIDE)
    and the 8-bit formats at M <= 4 (M <= 8 for small weights; E5M2 small weights also at
    M = 9..16, wide), where it was measured faster than the FMA/dot kernels on the H200
    (BENCHMARKS.md, campaign steps `mma8`, `runs2`-`runs4`, `pipe2`-`pipe4`, `smallm8`,
    `wide10`). 8-bit M = 3..4 joined once each thread held two steps in
    registers (depth 2; `pipe3` sweep, M = 4: every llama3-8b shape but E4M3's 4096 x 14336
    (22.9 against 22.4 us) faster than the dot kernel; in the bench qkv, o, down and gate_up
    2-15% faster); vocabulary heads only at M = 1
    (MMA_FP8_MAX_N). At M = 5..8 the runs are 64 bytes long and lose to the dot kernel on the
    large shapes (E4M3 28672 x 4096 41.1 against 37.6 us), not on the small ones
    (MMA_FP8_M8_MAX_CODES). Not for 8-bit codes under SOFTFP8_FP8_DECODE=hardware: its decode
    is the integer one. M = 9..16 (`wide10` sweep, llama3-8b shapes, us at M = 12 / 16): FP4
    wide against the two groups (or NVFP4's head on the dot kernel at 16) 135 / 154 against
    202 / 483 on the head, 42.5 / 48.0 against 50.0 / 52.5 on gate_up (NVFP4), 12.3 / 12.5
    against 15.5 / 15.9 on qkv; E5M2 wide against the dot kernel 11.3 / 11.4 against 11.5 /
    12.1 on qkv, 9.6 / 9.6 against 10.2 / 10.2 on o, but 23.2 against 21.3 on down and
    143 against 141 on the head; E4M3 12.6 / 12.5 against 12.4 / 12.1 on qkv (the dot kernel
    stays)."""
    small = n * k <= MMA_FP8_M8_MAX_CODES
    if fmt in (Format.E5M2, Format.E4M3) and (
            (m > 4 and not small) or (m > MMA_MAX_M and fmt is not Format.E5M2)
            or (m > 1 and n >= MMA_FP8_MAX_N)
            or fp8_decode_wanted() == "hardware"):
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


def mma_rows(block_m: int, num_warps: int, tiles: int = 2) -> int:
    """Rows of one Kernel.MMA_GEMV program in the run mapping: each warp its own
    2 * block_m * tiles rows (block_n of its LaunchConfig)."""
    return 2 * block_m * tiles * num_warps


MMA_WIDE_M = 2 * MMA_MAX_M
"""block_m of a Kernel.MMA_GEMV launch that takes M up to 16 in one program (the kernel's
WIDE): each step's weights decoded once and fed to two mma, x rows 0..7 and 8..15; laid out
as block_m = 8 (the tile mapping, or the runs for 8 rows with two tiles a warp)."""


def mma_layout(cfg: LaunchConfig) -> tuple[int, int]:
    """(RUNS, TILES) of `_mma.mma_gemv_kernel` for a Kernel.MMA_GEMV LaunchConfig:
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


def _fp4_runs(n: int, m: int, fmt: Format) -> bool:
    """FP4 at M = 2..4 on the run mapping (laid out for 2 or 4 x rows), not the 32-row tiles:
    M = 2, NVFP4 at M = 3..4, MXFP4 at 3..4 on vocabulary heads (MMA_FP8_MAX_N rows). Measured
    on the H200 (`fp4m10` sweep and `fp4m10b` small-m bench, llama3-8b shapes, us, tiles ->
    runs, bench): M = 2 faster on all five shapes (NVFP4 gate_up 29.6 -> 24.8, head 113 ->
    98; MXFP4 2-9%); M = 4 NVFP4 qkv 12.6 -> 10.8, gate_up 31.1 -> 27.5, head 117 -> 100, o
    8.5 -> 9.4 (a layer's four: 70.3 -> 65.5); MXFP4 M = 4 head 120 -> 109 but o 8.3 -> 9.9,
    gate_up 28.6 -> 30.5, down 18.0 -> 19.5 (a layer's four 66.7 -> 71.3; the sweep agrees)."""
    if fmt not in (Format.NVFP4, Format.MXFP4) or not 2 <= m <= 4:
        return False
    return m == 2 or fmt is Format.NVFP4 or n >= MMA_FP8_MAX_N


def mma_config(n: int, k: int, m: int, fmt: Format, info: DeviceInfo) -> LaunchConfig:
    """Kernel.MMA_GEMV. block_k = 128 codes; num_stages = how many steps ahead each warp
    prefetches its weights to L2 (0: none); depth = steps of weights held in registers.
    - The run mapping (`_mma`) for M = 1 at every format, FP4 at M = 2..4 where `_fp4_runs`,
      and the 8-bit formats at M <= 8 (M = 5..8 up to MMA_FP8_M8_MAX_CODES):
      block_m = the next power of two >= M, 2 tiles a warp; M = 1 in 2 warps (8-bit from 16384
      rows: 4), else 4. The 8-bit formats hold two steps (depth 2): with one, ptxas issues the
      next step's loads after this step's mma (SASS, sm_90), so a warp had one step in flight;
      `pipe1` sweep, M = 1, best per shape against depth 1: 22016 x 4096 E5M2 24.0 against
      26.4 us, E4M3 27.8 against 29.6; token E5M2 1.897 -> 1.794 ms. An L2 prefetch beyond
      the registers (num_stages 2 / 4) was slower in 93 of 116 pairs and never a shape's best;
      FP4 (125 registers at depth 1) gained nothing from depth 2 (`pipe2`/`pipe3` sweeps).
    - FP4 at M = 2 (NVFP4 also 3..4, MXFP4 3..4 on vocabulary heads): the runs too, 4 warps
      (`_fp4_runs`).
    - FP4 otherwise at M = 2..8: the 32-row tiles (block_m = 8), warps along K, 2-step L2
      prefetch; 8 warps below 256 programs, 4 above (`fp4m10`, M = 8: the runs 12-16% slower on
      the head, mixed elsewhere).
    - M = 9..16 (FP4, E5M2 small weights): block_m = MMA_WIDE_M, the runs for 8 x rows with
      both halves of x in one program (WIDE), 4 warps, the format's depth, no L2 prefetch
      (`wide10` sweep, llama3-8b shapes at M = 12 and 16: 4 warps within 3% of 2 warps or
      faster on 29 of 30 shape/format/M, up to 11% faster, 4% slower once; the 32-row tiles
      wide up to 30% slower on gate_up and the head, within 0-4% on qkv, o and down).
    Programs split K until about 12 warps per SM are resident (M = 1 at depth 2: 6, twice the
    bytes a warp); at M = 1, rows over 4 KB also until each program takes at most 3.5 KB of a
    row (depth 2: 7 KB; 4096 x 11008 E5M2: 14.3 us split 2 against 15.1 split 4).
    Measured on the H200 (2026-11-29, sweep_gemv.py --kernels mma_gemv, integer FP8 decode;
    BENCHMARKS.md, campaign steps `runs1` on the llama2-7b shapes and `runs2` on llama3-8b's):
    - M = 1: 2 warps fastest or within 3% on 10 of 11 shapes in `runs1`/`runs2` (22016 x 4096
      E5M2: 26.3 us against 30.4 with 4 warps; the exception is 32000 x 4096 8-bit, 8% behind
      8 warps); `runs4` (another machine) found 4 warps 0-10% faster on 28672-128256 rows.
      Which is faster moves between machines; the token is the same within 1% either way;
      4 tiles a warp (twice the bytes in flight a thread) was slower everywhere but one shape;
      K-splits of 2-4 at 4096 rows (E4M3 4096 x 11008: 17.5 us split 4, 24.3 unsplit); rows of
      4 KB or less unsplit where the rows fill the GPU (12288 x 4096 E5M2: 14.7 us against
      16.4 split 2; `runs3` split them and its token lost 3%).
    - M = 2: the runs laid out for 2 rows beat the dot kernel on all five llama3-8b shapes
      (E4M3 28672 x 4096: 36.6 us against 42.4) and the 32-row tiles (45.8).
    - M = 4, E4M3 (`runs2`, before the dot kernel's NaN-free decode): the runs beat the dot
      kernel on 4 of 5 shapes; after it (`runs3`, `runs4`) the dot kernel was faster, until the
      runs held two steps (`pipe3`: `uses_mma_gemv` has 8-bit M = 3..4 on the runs again).
    The earlier M = 1 rule (4 warps, `mma8`/`long1`) and the FP4 tiles' settings are in
    BENCHMARKS.md's log."""
    fp8 = fmt in (Format.E5M2, Format.E4M3)
    depth = 2 if fp8 else 1
    if m > MMA_MAX_M:  # WIDE: the runs for 8 x rows, one program for all 16, 4 warps
        block_m, warps, ahead = MMA_WIDE_M, 4, 0
        rows = mma_rows(MMA_MAX_M, warps)
    elif m == 1 or fp8 or _fp4_runs(n, m, fmt):
        block_m = min(MMA_MAX_M, 1 << (m - 1).bit_length())
        warps, ahead = (2 if m == 1 and not (fp8 and n >= 16384) else 4), 0
        rows = mma_rows(block_m, warps)
    else:
        block_m, rows, ahead = MMA_MAX_M, MMA_TILE_ROWS, 2
        warps = 8 if -(-n // MMA_TILE_ROWS) < 256 else 4
    groups = -(-m // block_m)  # block_m = 8 at M = 9..16 (explicit configs): two groups
    # two buffers hold twice the bytes a warp: half the resident warps fill the GPU (M = 1)
    split = mma_split(-(-n // rows) * groups, warps, info, 12 // depth if m == 1 else 12)
    row_bytes = k * (8 if fp8 else 4) // 8
    if m == 1 and row_bytes > 4096:
        split = min(8, max(split, -(-row_bytes // (3584 * depth))))
    return LaunchConfig(Kernel.MMA_GEMV, block_m, rows, 128, split, warps, ahead, depth)


def tiled_config(m: int, fmt: Format, info: DeviceInfo, fma_dot: bool) -> LaunchConfig:
    """Kernel.TILED's settings (no split): launch_config's for M > 16, and DEQUANT's exact pass."""
    mx = fmt is Format.MXFP4
    if info.interpreter:
        return LaunchConfig(Kernel.TILED, 32, 64, 32 if mx else 64)
    if fma_dot:
        return LaunchConfig(Kernel.TILED, 32, 32, 32, num_warps=4, num_stages=2)
    return LaunchConfig(Kernel.TILED, 64 if m <= 64 else 128, 128, 32 if mx else 64,
                        num_warps=8, num_stages=3)


def uses_ptx_decode(info: DeviceInfo, hw_fp8: bool) -> bool:
    """The PTX word-at-a-time decoders: NVIDIA only (not ROCm, not the interpreter), and not
    where the hardware FP8 cvt decodes (FP4: the PTX decode injects, so e2m1=inject only)."""
    return info.capability is not None and not info.interpreter and not hw_fp8


def dot_upcast(x: torch.Tensor) -> bool:
    """The interpreter's bf16 tl.dot is wrong (triton 3.9): there, bf16 tiles go up to fp32."""
    return x.device.type == "cpu" and x.dtype == torch.bfloat16
