"""The Triton backend's launch settings: which kernel, which tiles, which FP8 decode, whether to
use programmatic dependent launch -- a small deterministic table keyed on (N, K, M, device),
every entry measured where a measurement exists (the docstrings say where and what) and
reasoned where not. `launch_config` is the table: DEQUANT from DEQUANT_MIN_M, the MMA GEMV where
`_mma_table` says, otherwise the first row of TILE_RULES (rule in words, when, tiles) that
holds, then the K split (`_split`); a sweep receipt can override it for exact shapes
(`LaunchSettings.table`, default SOFTFP8_TRITON_TABLE). Kernel.MMA_GEMV's own settings are in
`_mma_table`, the types and device facts in `_device`. Pure Python: nothing here imports Triton.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import torch

from ..._settings import TABLE_ENV, LaunchSettings, current
from ...formats import Format
from ._device import DeviceInfo, Kernel, LaunchConfig
from ._mma_table import mma_config, uses_mma_gemv


_PDL_MODES = {"off": 0, "early": 1, "late": 2}


def pdl_auto(fmt: Format, cfg: LaunchConfig | None = None) -> tuple[str, int]:
    """(mode, prefetch bytes) of programmatic dependent launch by format and launch. Measured
    on the H200 with `softfp8-bench token --preset llama2-7b` (docs/decisions.md), ms a token:
    - 8-bit, off -> late -> early + 32 KiB prefetch: E5M2 2.121 -> 2.079 -> 2.518, E4M3 3.384
      -> 3.308 -> 4.521: the waiting programs of an early launch take SM slots from these
      bandwidth-bound kernels, and the prefetch alone (late + 32 KiB) cost E5M2 9%. With the
      MMA GEMV's first loads ahead of the wait, late / early: E5M2 1.794 / 1.790, E4M3 1.943 /
      1.958. So late, no prefetch.
    - FP4 on Kernel.MMA_GEMV, which issues its first weight loads before the wait (`_mma`),
      late / early: NVFP4 1.793 / 1.753, MXFP4 1.946 / 1.871. A 32 KiB L2 prefetch on top of an
      early launch (before the loads moved ahead of the wait): NVFP4 1.802 -> 1.871, MXFP4
      1.919 -> 1.889. So early, no prefetch.
    - 8-bit M = 1 on the ring in one warp of 4 stages (`cfg`; MMA_FP8_RING_M1), its first 3
      steps copied before the wait: early against late E5M2 1.607 against 1.742 ms, E4M3 1.782
      against 1.837. So early there, late elsewhere."""
    if fmt not in (Format.E5M2, Format.E4M3, Format.E4M3_B128):  # E4M3_B128: E4M3's, reasoned
        return ("early", 0)
    ring_m1 = (cfg is not None and cfg.kernel is Kernel.MMA_GEMV and cfg.ring > 0
               and cfg.block_m == 1)
    return ("early", 0) if ring_m1 else ("late", 0)


def pdl_settings(info: DeviceInfo, fmt: Format, cfg: LaunchConfig | None = None,
                 settings: LaunchSettings | None = None) -> tuple[int, int]:
    """(PDL mode: 0 off, 1 early, 2 late; prefetch bytes) for launches of `cfg` (auto: by
    format where not given) on this device, under `settings` (default: the current ones)."""
    settings = settings or current()
    auto_mode, auto_bytes = pdl_auto(fmt, cfg)
    wanted = auto_mode if settings.pdl == "auto" else settings.pdl
    prefetch = auto_bytes if settings.pdl_prefetch is None else settings.pdl_prefetch
    if info.capability is None or info.capability < (9, 0) or info.interpreter:
        return 0, 0
    mode = _PDL_MODES[wanted]
    return mode, prefetch if mode else 0


DEQUANT_MIN_M = 512
"""From this many activation rows on, Kernel.DEQUANT (FP4: DEQUANT_MIN_M_FP4). Measured on the
H200 (docs/decisions.md): at M = 512 DEQUANT beat the tiled kernel on every llama3-8b shape for
E5M2, E4M3 and NVFP4 (0.57-0.69x fp16 against 0.21-0.55x, with its row ranges cached and 32 MiB
slabs); at M = 256 the 8-bit tiled kernel still wins on the two largest shapes (28672 and
128256 rows: E5M2 153 / 632 us against 195 / 871), DEQUANT on the three smaller."""
DEQUANT_MIN_M_FP4 = 256
"""FP4's DEQUANT threshold: its tiled kernels are slow at every M (MXFP4 steps one 32-code block
at a time: 0.11-0.15x fp16), and at M = 256 DEQUANT beat them on every llama3-8b shape (NVFP4
0.41-0.53x against 0.27-0.28x; below 256 not measured)."""
DEQUANT_SLAB_BYTES = 32 << 20
"""Bytes of one dequantised slab (two are in flight): a bounded workspace, whatever the layer,
except that a slab holds at least DEQUANT_MIN_SLAB_ROWS rows."""
DEQUANT_MIN_SLAB_ROWS = 2048
"""Fewest rows in a slab (unless the weight has fewer): each slab's GEMM must fill the GPU and
each costs a fixed host time (~130 us eagerly on the H200's host: a Triton launch, the GEMM,
stream and event calls). Measured on the H200, M = 2048, llama3-8b (docs/decisions.md, GPU:
prefill; graph / eager x fp16): 16 MiB slabs (2048 rows at K = 4096, 512 at
14336) gave E4M3 0.853 / 0.431 at the vocabulary head and 0.732 / 0.465 at down (4096 x 14336);
4096 rows at K = 4096 (32 MiB) 0.888 / 0.791, 2048 at K = 14336 0.923 / 0.949."""

@functools.lru_cache(maxsize=4)
def _table_from_sweep(path: str) -> dict:
    try:
        with open(path) as f:
            rows = json.load(f)["best"]
        return {(r["n"], r["k"], r["m"], r["fmt"]):
                LaunchConfig(Kernel(r["kernel"]), r["block_m"], r["block_n"], r["block_k"],
                             r["split_k"], r["num_warps"], r["num_stages"], r.get("depth", 1),
                             r.get("ring", 0))
                for r in rows}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{TABLE_ENV}={path!r}: expected a sweep receipt written by "
                         f"benchmarks/sweep_gemv.py --out ({type(e).__name__}: {e})") from e


SMALL_M_FP8_TALL_ROWS = 28672
"""8-bit weights of at least this many rows run M = 5..16 on the dot kernel in 128 x 256 tiles,
unsplit (below: 64 x 256). Measured on the H200 (docs/decisions.md; sweep us, 128 x 256
against 64 x 256, 4 warps, 3 stages): 28672 x 4096 M = 8 E5M2 33.1 against 35.4, E4M3 33.2
against 37.1, M = 16 33.7 / 32.6 against 37.5 / 35.0 (split 3: 37.7-41.3); the 128256-row head
124.0-128.3 against 140.0-142.6. In `softfp8-bench small-m` (interleaved twice) the head at
M = 8 / 16 took 124 / 126-127 us against 125 / 128, gate_up 32 against 33. 4096 x 14336 keeps
64 x 256 (the sweep's best); rows between 4096 and 28672 were not measured."""

SMALL_M_UNSPLIT_PER_SM = 2
"""The dot kernel at M = 5..16 splits K only while its row blocks number fewer than this many
per SM (below that, up to four). Swept on the H200 (docs/decisions.md), 8-bit, M = 16, 64 x 256
tiles:
28672 x 4096 (3.4 blocks an SM) unsplit 33.9 / 34.7 us (E5M2 / E4M3) against 37.4 / 37.9
split 2, and in the bench with the sweep's winners (128 x 256, unsplit) gate_up 3251 -> 3622
GB/s; 6144 x 4096 and 4096 x 4096 (0.7 and 0.5 an SM) split 6 and 9 11.7-11.8 / 10.0 us
against 13.3-13.4 / 12.5 unsplit; 28672 x 4096 at M = 5 and 8: unsplit 33.1-34.2 us against
34.7-37.8 split 2. M = 2..4 keep the split."""


def launch_config(n: int, k: int, m: int, fmt: Format, info: DeviceInfo,
                  x_dtype: torch.dtype = torch.float16,
                  settings: LaunchSettings | None = None) -> LaunchConfig:
    """The launch table, keyed on (N, K, M, device). Measured on the H200
    (benchmarks/sweep_gemv.py, integer FP8 decode, fp16 activations; docs/decisions.md):
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
      SMALL_M_UNSPLIT_PER_SM row blocks an SM; 8-bit from SMALL_M_FP8_TALL_ROWS rows at
      M = 5..16 in 128 x 256 tiles, unsplit.
    The M = 17..511 tiles and the dtypes other than fp16 are reasoned, not measured (and every
    GPU but the H200 is):
    - fp32 activations with
      M <= 4 stay on the GEMV (an fp32 "ieee" dot is FMAs on 16 padded rows, 4x the work), and
      FMA-dot tiles are smaller (fp32 at 128 x 128 spilled 42 KB on sm_90; fp16 at 64 x 256 on
      sm_75 spilled 9 KB: tests/triton_compile_worker.py, triton 3.9.0).
    - Tiled: 64/128 x 128 output tiles, 8 warps, 3 stages, the usual Hopper/Ampere shapes.
    The interpreter gets large tiles and few programs, since it pays per program, not per byte
    (and no DEQUANT: the tests run it explicitly).
    """
    settings = settings or current()
    table = settings.table
    if table and x_dtype != torch.float32 and not info.interpreter:
        cfg = _table_from_sweep(table).get((n, k, m, fmt.value))
        if cfg is not None:
            return cfg
    c = _case(n, k, m, fmt, info, x_dtype)
    if m >= (DEQUANT_MIN_M if c.fp8 else DEQUANT_MIN_M_FP4) and not info.interpreter:
        rows = max(DEQUANT_MIN_SLAB_ROWS, DEQUANT_SLAB_BYTES // (k * x_dtype.itemsize) // 128 * 128)
        return LaunchConfig(Kernel.DEQUANT, 1, min(rows, n), 512, num_warps=4, num_stages=1)
    if uses_mma_gemv(n, k, m, fmt, info, x_dtype, settings):
        return mma_config(n, k, m, fmt, info)
    cfg = next(tiles(c) for _, when, tiles in TILE_RULES if when(c))
    block_k = cfg.block_k
    if fmt is Format.E4M3_B128 and cfg.kernel in (Kernel.SMALL_M, Kernel.TILED):
        block_k = min(block_k, 128)  # each dot step within one 128-code tile (reasoned)
    return LaunchConfig(cfg.kernel, cfg.block_m, cfg.block_n, block_k, _split(cfg, c),
                        cfg.num_warps, cfg.num_stages)


@dataclass(frozen=True)
class _Case:
    """What the rules read of one launch besides the device: its shape, the format's class and
    x's dtype, derived once."""

    n: int
    k: int
    m: int
    fmt: Format
    info: DeviceInfo
    fp8: bool  # 8-bit codes
    mx: bool  # MXFP4: the tl.dot kernels step one block (32 codes) at a time
    f32: bool  # fp32 activations
    fma_dot: bool  # tl.dot on FMAs (fp32 "ieee"; every dtype before sm_80): small tiles
    tall: bool  # 8-bit M = 5..16 from SMALL_M_FP8_TALL_ROWS rows: 128 x 256 tiles, unsplit

    @property
    def gemv(self) -> bool:
        """M = 1, or fp32 x with M <= 4 (an fp32 "ieee" dot is FMAs on 16 padded rows)."""
        return self.m == 1 or (self.f32 and self.m <= 4)


def _case(n: int, k: int, m: int, fmt: Format, info: DeviceInfo, x_dtype: torch.dtype) -> _Case:
    f32 = x_dtype == torch.float32
    # Where tl.dot becomes FMAs with operands in registers -- fp32 "ieee", and every dtype before
    # sm_80 (Triton 3.x has no tensor-core path there) -- tiles must be small or they spill.
    fma_dot = f32 or (info.capability is not None and info.capability < (8, 0))
    fp8 = fmt in (Format.E5M2, Format.E4M3, Format.E4M3_B128)
    tall = fp8 and 4 < m <= 16 and n >= SMALL_M_FP8_TALL_ROWS and not fma_dot
    return _Case(n, k, m, fmt, info, fp8, fmt is Format.MXFP4, f32, fma_dot, tall)


def _gemv_rows(c: _Case) -> int:
    return 1 if c.m == 1 else (2 if c.m == 2 else 4)


TILE_RULES = (
    ("8-bit M = 1 from 8192 rows: the dot kernel, one 16-row x block, 32 (N < 16384) or 64 x 256",
     lambda c: c.m == 1 and c.fp8 and c.n >= 8192 and not c.fma_dot and not c.info.interpreter,
     lambda c: LaunchConfig(Kernel.SMALL_M, 16, 64 if c.n >= 16384 else 32, 256, num_warps=4,
                            num_stages=3)),
    ("the GEMV in the interpreter: large tiles, few programs",
     lambda c: c.gemv and c.info.interpreter,
     lambda c: LaunchConfig(Kernel.GEMV, _gemv_rows(c), 64, 1024)),
    ("the GEMV, 8-bit or several x rows: 1024 codes, 8 rows (fewer x rows)",
     lambda c: c.gemv and (c.fp8 or c.m > 1),
     lambda c: LaunchConfig(Kernel.GEMV, _gemv_rows(c), max(8 // _gemv_rows(c), 2), 1024)),
    ("the FP4 GEMV from 16384 rows: 8 x 1024",
     lambda c: c.gemv and c.n >= 16384,
     lambda c: LaunchConfig(Kernel.GEMV, 1, 8, 1024)),
    ("the FP4 GEMV to 4096 rows: 8 x 2048, 8 warps",
     lambda c: c.gemv and c.n <= 4096,
     lambda c: LaunchConfig(Kernel.GEMV, 1, 8, 2048, num_warps=8)),
    ("the FP4 GEMV between: 4 x 2048",
     lambda c: c.gemv,
     lambda c: LaunchConfig(Kernel.GEMV, 1, 4, 2048, num_warps=4)),
    ("small M on FMA dots: 32 x 32 tiles",
     lambda c: c.m <= 16 and c.fma_dot,
     lambda c: LaunchConfig(Kernel.SMALL_M, 16, 32, 32, num_warps=4, num_stages=2)),
    ("small M: one 16-row x block against 64 (8-bit tall: 128) x 256 (MXFP4: 32) tiles",
     lambda c: c.m <= 16,
     lambda c: LaunchConfig(Kernel.SMALL_M, 16, 128 if c.tall else 64, 32 if c.mx else 256,
                            num_warps=4, num_stages=3)),
    ("M > 16: the tiled kernel (`tiled_config`)",
     lambda c: True,
     lambda c: tiled_config(c.m, c.fmt, c.info, c.fma_dot)),
)
"""`launch_config`'s tiles below DEQUANT and outside the MMA GEMV: (rule, when, tiles), the
first row whose `when` holds; its docstring says what was measured for each. K-split follows
(`_split`)."""


def launch_rule(n: int, k: int, m: int, fmt: Format, info: DeviceInfo,
                x_dtype: torch.dtype = torch.float16) -> str:
    """The TILE_RULES row a launch outside DEQUANT and the MMA GEMV takes, in words."""
    c = _case(n, k, m, fmt, info, x_dtype)
    return next(rule for rule, when, _ in TILE_RULES if when(c))


def _split(cfg: LaunchConfig, c: _Case) -> int:
    """K-split of `cfg`'s launch: M = 1 wants one wave (a split GEMV/dot cost 10-25% there);
    M = 2..16 splits K up to four programs per SM (measured: 64 x 256 tiles split 6-9 ways beat
    no split by 5-30%), unless the row blocks fill the GPU (SMALL_M_UNSPLIT_PER_SM) or tall."""
    info = c.info
    programs = -(-c.n // cfg.block_n) * -(-c.m // cfg.block_m)
    steps = -(-c.k // cfg.block_k)
    wide = info.interpreter or (cfg.kernel is Kernel.SMALL_M and c.m > 1)
    want = 4 * info.sm_count if wide else info.sm_count
    if (cfg.kernel is Kernel.SMALL_M and c.m > 4 and not info.interpreter
            and (programs >= SMALL_M_UNSPLIT_PER_SM * info.sm_count or c.tall)):
        want = programs  # enough row blocks: no split (SMALL_M_UNSPLIT_PER_SM)
    split = 1 if programs >= want else min(16, steps, -(-want // programs))
    return max(split, 1)


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
