"""The Numba CPU backend: parallel kernels that read the packed words and decode in registers.

Strategy by M (rows of activations):
- M = 1 (GEMV): one fused kernel per format, decode + multiply-add in the same vector loop, rows
  split over threads (FP8: `_numba_fp8_rows`; FP4: the table kernels `_numba_lut` / AVX-512,
  `_numba_pshufb` / AVX2, else `_numba_kernels`). This is the batch-1 decoding case; what a
  call needs of the weight is prepared once per weight (`_gemv`).
- 1 < M <= `GEMV_ROWS_MAX_M[fmt]`: the GEMV once per row of x (measured faster there).
- Up to `TILE_MIN_M[fmt]` (bf16 x: `TILE_MIN_M_BF16`): each thread decodes a few weight rows
  into a cache-resident float32 buffer and takes their dot products with every row of x
  (`_numba_smallm.smallm_matmul`), so the decode costs once per weight, whatever M.
- From there on: one bounded tile of rows at a time (`TILE_ELEMENTS`) is dequantised by the same
  decoder (bf16 x: into a bf16 tile, exact) and multiplied with torch's matmul (oneDNN / MKL),
  far better blocked for large M than a hand loop.

x is converted to float32 once per call (and zero-padded to the packed K, so the kernels never
need a tail; bf16 x stays bf16 for the bf16-product kernel and the bf16 tile); y comes back in
x's dtype.
Threads: min(numba's and torch's current setting), set for the call where it differs and
restored after. Numba, and the kernels, load on the first call only.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np
import torch

from ..dispatch import E2M1Decode, Needs
from ..formats import SPECS, Format, PackedWeight
from .._env import SETTINGS, raw_reader
from ._facts import version_of, codes_nan_free, facts_of

NEEDS = Needs(formats=frozenset(Format), device_types=frozenset({"cpu"}), packages=("numba",))

GEMV_ROWS_MAX_M = {Format.E5M2: 4, Format.E4M3: 4, Format.NVFP4: 8, Format.MXFP4: 8}
"""Up to this many activation rows (per format), one M = 1 GEMV per row of x: the fused GEMVs
(prefetching IR kernels) read the weight M times and still beat the small-M kernel's one read
there. `OMP_WAIT_POLICY=passive python benchmarks/cpu_small_m.py --m 1,2,4,8,16 --paths --reps
5` (4096 x 4096, 2-vCPU Zen 4, load 6, ms, GEMV rows / small-M kernel): M = 2
E5M2 2.69 / 3.46, E4M3 2.48 / 5.16, NVFP4 2.22 / 6.46, MXFP4 2.58 / 6.59; M = 4 3.72 / 4.17,
4.08 / 5.95, 3.38 / 7.17, 3.21 / 7.24; M = 8 7.00 / 6.21, 7.95 / 8.08, 6.64 / 9.15, 5.76 / 9.67;
M = 16 13.87 / 10.05, 16.21 / 11.59, 12.54 / 13.02, 11.56 / 13.24 (FP4 even, left to the
kernel). docs/decisions.md, CPU: prompts and small batches."""

TILE_MIN_M = {Format.E5M2: 256, Format.E4M3: 256, Format.NVFP4: 256, Format.MXFP4: 256}
"""From this many activation rows on (per format; float32 and float16 x), the large-M path:
dequantise a tile of rows and multiply with torch's matmul; below it, the small-M kernel
(_numba_smallm.smallm_matmul). Measured, not guessed: `python benchmarks/cpu_small_m.py --m
32,64,128,256 --paths --reps 3` (4096 x 4096, 2-vCPU Zen 4, both paths round-robin
in one process, ms, small / tile): M = 128 E5M2 265 / 358, E4M3 246 / 416, NVFP4 264 / 322,
MXFP4 252 / 344; M = 256 585 / 581, 650 / 676, 653 / 688, 652 / 682 (even); past it torch's
sgemm, blocked for large M, pulls ahead (docs/performance.md, CPU: prompts and small batches)."""

TILE_MIN_M_BF16 = {Format.E5M2: 128, Format.E4M3: 128, Format.NVFP4: 128, Format.MXFP4: 128}
"""The same for bfloat16 x, whose tile is bfloat16 and meets torch's bf16 matmul (AVX-512 BF16
dot products where the CPU has them): the same command with `--act bf16 --m 16,32,64,128,256`,
small / tile: M = 64 E5M2 208 / 332, E4M3 268 / 412, NVFP4 254 / 390, MXFP4 184 / 364; M = 128
355 / 309, 316 / 366, 412 / 432, 416 / 321 (mixed); M = 256 584 / 368, 656 / 294, 644 / 428,
606 / 412."""

TILE_ELEMENTS = 1 << 22
"""float32 weights a dequantised tile holds (16 MiB: 1024 rows at K = 4096); one tile a call,
freed when the call returns, so no full-precision copy of a weight outlives a call."""

_KIND = {Format.E5M2: 0, Format.E4M3: 1, Format.NVFP4: 2, Format.MXFP4: 3, Format.E4M3_B128: 4}
_NO_TILES = np.ones((1, 1), np.float32)  # decode_matmul's tile scales for the other formats
_B128_SLAB_ELEMENTS = 1 << 23  # E4M3_B128 from M = 16: 32 MiB of float32 weight a slab


_INJECT_X_SCALE = 2.0 ** 63
"""The FP4 inject GEMV decodes value / 2^126 and folds 2^126 as 2^63 on x and 2^63 on the row
sum (on the block scale it could overflow: DESIGN.md section 2)."""


def _inject_fold_safe(x: torch.Tensor) -> bool:
    """Whether x * 2^63 stays finite and the folded products stay clear of fp32's denormal range
    (values / 2^126 times x * 2^63 are value * x / 2^63): otherwise the select kernel runs."""
    finite = x[torch.isfinite(x)].abs()
    if finite.numel() == 0:
        return True
    top = float(finite.max())
    return top == 0.0 or 2.0 ** -40 <= top < 2.0 ** 60


@functools.lru_cache(maxsize=None)
def _numba():
    """numba, the kernel modules and a getter of numba's thread count, imported on the first call
    (not at import time). A cached call costs ~0.1 us; the `import` statements it replaces cost
    ~1-3 us each on every matmul."""
    import numba
    from numba.np.ufunc import parallel

    from . import _numba_fp8_rows, _numba_kernels, _numba_smallm

    numba.get_num_threads()  # starts numba's threading layer, which sets the getter below
    # numba.get_num_threads() takes two locks a call in Python: ~40 us right after a GEMV, where
    # the ctypes getter it wraps takes ~7 (2-core Zen 3; docs/decisions.md, CPU (Numba): M = 1)
    threads = getattr(parallel, "_get_num_threads", None) or numba.get_num_threads
    return numba, _numba_kernels, _numba_fp8_rows, threads, _numba_smallm


def _threads(numba_threads: int) -> int:
    """Threads for a call: the fewer of numba's (`numba_threads`, its current setting) and
    torch's."""
    return max(1, min(numba_threads, torch.get_num_threads()))


def _chunk(rows: int, threads: int) -> int:
    # ~16 chunks per thread balance uneven progress (measured E5M2 11008x4096, 2 threads: 1.66 ms
    # against 2.55 ms with 4 per thread); multiples of 4 keep the four-row FP8 GEMV on its fast
    # path.
    c = max(4, -(-rows // (threads * 16)))
    return -(-c // 4) * 4


def matmul(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None = None, *,
           e2m1: E2M1Decode = E2M1Decode.SELECT) -> torch.Tensor:
    """y = x @ W.T + bias for x [M, K] on the CPU, accumulated in float32, returned in x's dtype."""
    # Every line here runs right after the previous layer's kernel, where each torch attribute
    # or call costs 5-50 us (see `_gemv`): the cheapest form of each check is used.
    if not (x.is_cpu and packed.words.is_cpu):
        raise ValueError(f"x and packed must be on the cpu for the numba backend, got {x.device} "
                         f"and {packed.device}")
    inject = e2m1 is E2M1Decode.INJECT or (
        e2m1 is not E2M1Decode.SELECT and E2M1Decode(e2m1) is E2M1Decode.INJECT)
    numba, _, _, numba_threads, _ = _numba()
    previous = numba_threads()
    threads = _threads(previous)
    if x.requires_grad:
        x = x.detach()  # the kernels read numpy views
    if threads == previous:  # the usual case: no setting to change and restore
        y = _matmul_f32(x, packed, inject, threads)
    else:
        numba.set_num_threads(threads)
        try:
            y = _matmul_f32(x, packed, inject, threads)
        finally:
            numba.set_num_threads(previous)
    if bias is not None:
        y += bias.to(torch.float32)
    return y if x.dtype == torch.float32 else y.to(x.dtype)  # .to of the same dtype: ~1.4 us


def _padded_x(x: torch.Tensor, kp: int) -> torch.Tensor:
    m, k = x.shape
    if k == kp and x.is_contiguous():  # one op where it can (each costs 10-50 us after a GEMV)
        return x if x.dtype == torch.float32 else x.to(torch.float32)
    xp = torch.zeros((m, kp), dtype=torch.float32)
    xp[:, :k] = x
    return xp


def _matmul_f32(x: torch.Tensor, packed: PackedWeight, inject: bool, threads: int) -> torch.Tensor:
    if x.shape[0] == 1:
        return _gemv(x, packed, inject, threads)
    if packed.fmt is Format.E4M3_B128:
        return _matmul_b128(x, packed, threads)
    if x.shape[0] <= GEMV_ROWS_MAX_M[packed.fmt]:
        return torch.cat([_gemv(x[i:i + 1], packed, inject, threads)
                          for i in range(x.shape[0])])
    S = _numba()[4]
    n, _ = packed.shape
    m = x.shape[0]
    fmt = packed.fmt
    kp = packed.padded_k
    fp4 = fmt in (Format.NVFP4, Format.MXFP4)
    yn = np.empty((m, n), np.float32)  # numpy first: torch.from_numpy is the cheaper pair
    y = torch.from_numpy(yn)
    codes = packed.words.view(torch.uint8).numpy()  # [N, Kp] FP8 bytes, [N, Kp/2] FP4 bytes
    scales = packed.scales.numpy() if fp4 else np.zeros((1, 1), np.uint8)
    g = np.float32(packed.global_scale.item()) if fmt is Format.NVFP4 else np.float32(1.0)
    kind = _KIND[fmt]
    bf16 = x.dtype == torch.bfloat16
    if m < (TILE_MIN_M_BF16 if bf16 else TILE_MIN_M)[fmt]:
        xd = _x_decode_order(x, kp, fp4)
        S.smallm_matmul(kind, codes, scales, g, xd.numpy(), yn, _chunk(n, threads))
        return _row_scaled(y, packed, fp4)
    rows = tile_rows(n, kp)
    if bf16:  # bf16 products, as torch's own bf16 matmul: the tile is exact in bf16 (g on y)
        xd = _x_decode_order(x, kp, fp4, torch.bfloat16)
        w = torch.empty((rows, kp), dtype=torch.bfloat16)  # the one tile, freed on return
        decode, gt = S.dequantize_rows_bf16, np.float32(1.0)
        wn = w.view(torch.uint16).numpy()
    else:
        xd = _x_decode_order(x, kp, fp4)
        w = torch.empty((rows, kp), dtype=torch.float32)
        decode, gt = S.dequantize_rows, g
        wn = w.numpy()
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        decode(kind, codes, scales, gt, start, wn[:stop - start])  # one thread: _numba_smallm
        if bf16:
            y[:, start:stop] = torch.matmul(xd, w[:stop - start].T)
        else:
            torch.matmul(xd, w[:stop - start].T, out=y[:, start:stop])
    if bf16 and fmt is Format.NVFP4:
        y *= float(g)
    return _row_scaled(y, packed, fp4)


def tile_rows(n: int, kp: int) -> int:
    """Weight rows a dequantised tile holds for the large-M path: TILE_ELEMENTS / Kp, at least
    a kernel group's, at most N."""
    return min(n, max(8, TILE_ELEMENTS // kp))


def _x_decode_order(x: torch.Tensor, kp: int, fp4: bool,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """x [M, K] as `dtype` [M, Kp], zero-padded, its columns in the order the M > 1 kernels
    decode a weight row (_numba_smallm: FP4 even k first, then odd k)."""
    if dtype == torch.float32:
        xp = _padded_x(x, kp)
    else:
        xp = torch.zeros((x.shape[0], kp), dtype=dtype)
        xp[:, :x.shape[1]] = x
    if not fp4:
        return xp.contiguous()
    m = xp.shape[0]
    return xp.view(m, kp // 2, 2).transpose(1, 2).reshape(m, kp)


def _matmul_b128(x: torch.Tensor, packed: PackedWeight, threads: int) -> torch.Tensor:
    """E4M3_B128 at M > 1: each weight row decoded once with its tile scales
    (_numba_kernels.decode_matmul) and used for every row of x; from M = 16, slabs of decoded
    rows for torch's sgemm. (The small-M kernels of the other formats don't take tile scales.)"""
    K = _numba()[1]
    n, _ = packed.shape
    m, kp = x.shape[0], packed.padded_k
    yn = np.empty((m, n), np.float32)
    y = torch.from_numpy(yn)
    codes = packed.words.view(torch.uint8).numpy()
    no_scales, g = np.zeros((1, 1), np.uint8), np.float32(1.0)
    tiles, kind = packed.scales.numpy(), _KIND[Format.E4M3_B128]
    xp = _padded_x(x, kp)
    if m < 16:
        no_w = np.zeros((0, kp), np.float32)
        K.decode_matmul(kind, codes, no_scales, g, tiles, xp.numpy(), yn, no_w, 0, n,
                        _chunk(n, threads), False)
        return y
    no_x = np.zeros((0, kp), np.float32)
    rows = max(1, _B128_SLAB_ELEMENTS // kp)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        w = torch.empty((stop - start, kp), dtype=torch.float32)
        K.decode_matmul(kind, codes, no_scales, g, tiles, no_x, yn, w.numpy(), start, stop,
                        _chunk(stop - start, threads), False)
        torch.matmul(xp, w.T, out=y[:, start:stop])
    return y


def _row_scaled(y: torch.Tensor, packed: PackedWeight, fp4: bool) -> torch.Tensor:
    if not fp4 and packed.fmt is not Format.E4M3_B128 and packed.scales is not None:
        y *= packed.scales
    return y


MULTIROW_MIN_K = 4096
"""From this padded K on, the FP8 GEMVs run 4 rows per pass (one x load serves 4 rows); below it
one row per pass (docs/decisions.md, CPU (Numba): M = 1). A rows sweep on a 2-vCPU Zen 4 (2
threads, prefetch 4 passes ahead, each variant its own copy of the weight; its script and receipt
are in the tag lab-archive-2026-12), us, one row against four a pass: E5M2 32768 x 1024 1139
against 1970, 16384 x 2048 1204 / 1745, E4M3 1139 / 1921, 1394 / 1764; 11008 x 4096 E5M2 2197 /
1703, E4M3 1686 / 1633; 4096 x 11008 E5M2 2866 / 1955, E4M3 2900 / 2028."""

MULTIROW_MIN_K_FP4 = 5632
"""The same for the AVX-512 FP4 table kernel (_numba_lut; _numba_pshufb runs one row): NVFP4,
and MXFP4 with bf16 x steps (MXFP4 with float32 ones: MULTIROW_MIN_K_MXFP4). x (4 K bytes as
float32) fits the L1 below. Same sweep and receipt, NVFP4 / MXFP4, one row against four: 11008 x
4096 1509 / 1113 against 1695 / 1204, 16384 x 2048 1021 / 1441 against 1034 / 1555; 4096 x 11008
1803 / 1768 against 1380 / 1257. (Without the prefetch, single core, 4096 rows: K = 5120 mixed,
NVFP4 1.41 against 1.75 ms, MXFP4 1.02 against 0.92; from 6144 four won.) With the prefetches
into the L2 (`_numba_ir.PREFETCH_LOCALITY`) NVFP4's kernel (scales decoded in the
loop) and the bf16 steps came out even between one row and four from K = 2048 to 4096, within
a few % either way (the same sweep, us: NVFP4 11008 x 4096 1087 / 1139 against 1119 /
1172 us, 16384 x 2048 904 / 840 against 963 / 791), so this rule stands for them."""

MULTIROW_MIN_K_MXFP4 = 1024
"""MXFP4 with float32 x steps runs four rows a pass from this K on: with the prefetches into
the L2, four won at every K swept (docs/decisions.md, CPU (Numba): M = 1; the rows sweep with
`--ahead 4`, 2-vCPU Zen 4, us, one row against four: 11008 x 4096 1075 / 1106
against 1041 / 963, 8192 x 3072 544 / 552 against 480 / 509, 16384 x 2048 859 / 856 against 797
/ 784, 32768 x 1024 1199 against 951). Below K = 1024 (not swept) one row."""


def _fp4_table_kernels():
    """The FP4 table-lookup GEMV module for this CPU: _numba_lut (AVX-512 vpermps), else
    _numba_pshufb (AVX2 vpshufb), else None (the bit-operation kernels run).
    `SOFTFP8_NUMBA_FP4_LUT=0` turns both off, `=avx2` skips the AVX-512 one, `=avx512` keeps it
    but without the bf16 products (`_bf16_products`) (read per call: for comparisons, and in case a
    CPU misreports its features)."""
    return _fp4_table_for(_fp4_lut_setting())


def _fp4_lut_setting() -> str:
    """SOFTFP8_NUMBA_FP4_LUT as `_fp4_table_kernels` and `_bf16_products` read it ("1" when
    unset or empty). Checked against `_env.SETTINGS` here, where it is read, so that a value set
    after dispatch made its choice still raises naming the valid ones instead of running as 1."""
    raw = os.environ.get("SOFTFP8_NUMBA_FP4_LUT", "")
    return SETTINGS["SOFTFP8_NUMBA_FP4_LUT"].check(raw) if raw.strip() else "1"


@functools.lru_cache(maxsize=8)
def _fp4_table_for(wanted: str):
    from . import _numba_lut, _numba_pshufb

    if wanted == "0":
        return None
    if wanted != "avx2" and _numba_lut.available():
        return _numba_lut
    return _numba_pshufb if _numba_pshufb.available() else None


def _bf16_products(table, setting: str) -> bool:
    """Whether bf16 activations take bf16 products (_numba_dpbf16: vdpbf16ps): `table` is the
    AVX-512 table kernel's module, the CPU has AVX-512 BF16 and the setting is not `avx512`."""
    from . import _numba_dpbf16, _numba_lut

    return table is _numba_lut and setting != "avx512" and _numba_dpbf16.available()


# -- M = 1: a plan per weight ------------------------------------------------------------------
# At batch 1 the Python around the kernel runs right after the previous layer's kernel has
# streamed tens of MB through the caches, where each small torch or numpy operation costs 5-50
# us instead of 1-2 (docs/decisions.md, CPU). So what depends on the weight alone -- numpy views of
# its tensors, the tensor scale, the kernel and its rows a pass, whether E4M3 codes hold a NaN --
# is worked out once and kept (`_PLAN`: rebuilt when a tensor of the weight is replaced or
# written in place, or SOFTFP8_NUMBA_FP4_LUT changes), and a call does only what depends on x.

_LUT_SETTING = raw_reader("SOFTFP8_NUMBA_FP4_LUT")
_PLAN = "numba gemv plan"
"""The key of a weight's GEMV plan among its facts (`_facts.facts_of`, kept while the words
tensor lives): (scales tensor, global scale tensor, stamp, plan), stamp = (SOFTFP8_NUMBA_FP4_LUT
as read, the three tensors' versions). Checked here in fewer steps than `known_fact` takes: this
runs on every GEMV call."""


def _gemv(x: torch.Tensor, packed: PackedWeight, inject: bool, threads: int) -> torch.Tensor:
    """y [1, N] float32 = x [1, K] @ W.T (row scales applied)."""
    w, s, gs = packed.words, packed.scales, packed.global_scale
    stamp = (_LUT_SETTING(), version_of(w), -1 if s is None else version_of(s),
             -1 if gs is None else version_of(gs))
    facts = facts_of(w, create=True)
    kept = facts.get(_PLAN)
    if kept is not None and kept[0] is s and kept[1] is gs and kept[2] == stamp:
        plan = kept[3]
    else:
        plan = _plan(packed)
        facts[_PLAN] = (s, gs, stamp, plan)
    yn = np.empty((1, plan.n), np.float32)  # numpy first: torch.from_numpy is the cheaper pair
    plan.run(x, yn[0], _chunk(plan.n, threads), inject)
    return torch.from_numpy(yn)


def _x_row(x: torch.Tensor, kp: int) -> np.ndarray:
    """x [1, K] as float32 numpy [Kp], zero-padded."""
    return _padded_x(x, kp).numpy()[0]


def _plan(packed: PackedWeight):
    n, kp = packed.shape[0], packed.padded_k
    fmt = packed.fmt
    if fmt in (Format.E5M2, Format.E4M3, Format.E4M3_B128):
        R = _numba()[2]
        kind = (R.E5M2_KIND if fmt is Format.E5M2 else
                R.E4M3_FINITE_KIND if codes_nan_free(packed) else R.E4M3_KIND)
        scales = None if packed.scales is None else packed.scales.numpy()
        gemv = _Fp8TileGemv if fmt is Format.E4M3_B128 else _Fp8Gemv
        return gemv(n, kp, packed.words.view(torch.uint16).numpy(), kind,
                    R.ROWS if kp >= MULTIROW_MIN_K else 1, scales)
    setting = _fp4_lut_setting()
    table = _fp4_table_for(setting)
    g = np.float32(1.0) if fmt is Format.MXFP4 else np.float32(packed.global_scale.item())
    args = (n, kp, SPECS[fmt].block, fmt is Format.MXFP4, packed.words.numpy(),
            packed.scales.numpy(), g)
    if table is None:
        return _Fp4BitsGemv(*args)
    mx = fmt is Format.MXFP4
    group, bf16_group = _fp4_group(table, kp, mx), _fp4_group(table, kp, mx, bf16=True)
    kernel = _fp4_kernel(table, mx, packed.scales)
    if _bf16_products(table, setting):
        from ._numba_dpbf16 import x_steps as bf16_steps
    else:
        bf16_steps = None
    row_steps = getattr(table, "row_steps", None)
    if row_steps is not None and kp % table.STEP_CODES:
        row_steps = None  # the planes past the whole steps come from the padded row
    no_planes = None if row_steps is None else table.select_planes(
        np.zeros(kp, np.float32), SPECS[fmt].block, kp)  # row_steps' planes: none
    return _Fp4TableGemv(*args, table, kernel, group, bf16_steps, bf16_group, row_steps,
                         no_planes)


def _fp4_kernel(table, mx: bool, scales: torch.Tensor):
    """The FP4 table module's GEMV for these scale codes: where its loop can decode them (NVFP4:
    positive, not NaN; MXFP4, in the AVX-512 kernel only: 1..254) the one that does, else the one
    with a pass over each row's scales before its loop. (benchmarks/cpu_rows_sweep.py too.)"""
    if mx:
        raw = getattr(table, "gemv_mxfp4_raw", None)
        return raw if raw is not None and table.loop_decodes_e8m0(scales) else table.gemv_mxfp4
    return table.gemv_nvfp4_raw if table.loop_decodes(scales) else table.gemv_nvfp4


def _fp4_group(table, kp: int, mx: bool, bf16: bool = False) -> tuple:
    """The FP4 table GEMV's trailing rows-a-pass argument for padded K `kp`: (ROWS,) from
    MULTIROW_MIN_K_FP4 on (MXFP4 with float32 x steps, `mx` and not `bf16`: MULTIROW_MIN_K_MXFP4),
    else (1,), where the module runs several rows a pass (AVX-512); none where it runs one
    (AVX2). (benchmarks/cpu_fp4_*_ab.py call the kernels with it too.)"""
    least = MULTIROW_MIN_K_MXFP4 if mx and not bf16 else MULTIROW_MIN_K_FP4
    return ((table.ROWS if kp >= least else 1),) if table.ROWS > 1 else ()


@dataclass(frozen=True)
class _Fp8Gemv:
    n: int
    kp: int
    pairs: np.ndarray  # the FP8 rows as uint16 pairs, met by the even and odd elements of x
    kind: int  # _numba_fp8_rows' decode kind
    rows: int  # rows a pass
    row_scales: np.ndarray | None

    def run(self, x, y, chunk, inject):
        xn = _x_row(x, self.kp)
        _numba()[2].gemv_fp8(self.pairs, np.ascontiguousarray(xn[0::2]),
                             np.ascontiguousarray(xn[1::2]), y, chunk, self.kind, self.rows)
        if self.row_scales is not None:
            y *= self.row_scales  # the float32 multiply torch's `y *= scales` does


@dataclass(frozen=True)
class _Fp8TileGemv(_Fp8Gemv):
    """E4M3_B128: `row_scales` holds the tile scales [N / 128, K / 128], which the kernel folds
    into x per group of 128 rows (_numba_fp8_rows.gemv_fp8_tiles)."""

    def run(self, x, y, chunk, inject):
        _numba()[2].gemv_fp8_tiles(self.pairs, _x_row(x, self.kp), self.row_scales, y, chunk,
                                   self.kind, self.rows)


@dataclass(frozen=True)
class _Fp4BitsGemv:
    """The bit-operation kernels (_numba_kernels): one lane per block, met by planes[j, b] =
    x[block * b + j]."""
    n: int
    kp: int
    block: int
    mx: bool
    words: np.ndarray
    scales: np.ndarray
    g: np.float32

    def run(self, x, y, chunk, inject):
        K = _numba()[1]
        x0 = _padded_x(x, self.kp)[0]
        planes = x0.view(-1, self.block).T
        inject = inject and _inject_fold_safe(x0)
        if inject:
            planes = planes * _INJECT_X_SCALE  # exact: a power of two, range checked
        xpn = planes.contiguous().numpy()
        if self.mx:
            K.gemv_mxfp4(self.words, self.scales, xpn, y, chunk, inject)
        else:
            K.gemv_nvfp4(self.words, self.scales, self.g, xpn, y, chunk, inject)


@dataclass(frozen=True)
class _Fp4TableGemv(_Fp4BitsGemv):
    """The table-lookup kernels (_numba_lut, _numba_pshufb). The lookup is the select decode and
    faster than injection too (measured single core, 256x4096 in cache: NVFP4 18.4 against 13.4
    Gelem/s, MXFP4 22.1 against 14.2); where injection is allowed it gives the same bits, so it
    serves both decoders here."""
    table: object = None  # the module
    kernel: object = None  # its GEMV for this weight
    group: tuple = ()  # its rows a pass, where it takes them (float32 x steps)
    bf16_steps: object = None  # _numba_dpbf16.x_steps where bf16 x takes bf16 products
    bf16_group: tuple = ()  # its rows a pass with bf16 x steps
    row_steps: object = None  # the module's row_steps, where it has one and the steps cover Kp
    no_planes: object = None  # the planes that go with them: none

    def run(self, x, y, chunk, inject):
        if self.row_steps is not None and x.dtype == torch.float32:
            # [1, K] as it lies (copied where it is not contiguous: no other specialisation)
            xs = self.row_steps(np.ascontiguousarray(x.numpy()), self.kp)
            xp, group = self.no_planes, self.group
        else:
            # None: no bf16 products here, x is not bf16, or a tiny x
            steps = None if self.bf16_steps is None else self.bf16_steps(x, self.block, self.kp)
            if steps is None:
                xs, xp = self.table.x_steps(_x_row(x, self.kp), self.block)
                group = self.group
            else:
                (xs, xp), group = steps, self.bf16_group
        if self.mx:
            self.kernel(self.words, self.scales, xs, xp, y, chunk, *group)
        else:
            self.kernel(self.words, self.scales, self.g, xs, xp, y, chunk, *group)
