"""The CPU backend at M = 1 (GEMV): one fused kernel per format, decode and multiply-add in the
same vector loop, rows split over threads (FP8: `_fp8_rows`; FP4: the table kernels `_lut` /
AVX-512, `_pshufb` / AVX2, else `_kernels`), with what a call needs of the weight prepared once
per weight (its plan)."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from ...formats import SPECS, Format, PackedWeight
from ..._settings import current
from .._facts import codes_nan_free, facts_of, version_of
from ._runtime import chunk_rows, loaded, padded_x

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


MULTIROW_MIN_K = 4096
"""From this padded K on, the FP8 GEMVs run 4 rows per pass (one x load serves 4 rows); below it
one row per pass, where four rows a pass measure slower (docs/decisions.md, CPU (Numba): M = 1,
FP8 rows)."""

MULTIROW_MIN_K_FP4 = 5632
"""The same for the AVX-512 FP4 table kernel (_lut; _pshufb runs one row): NVFP4,
and MXFP4 with bf16 x steps (MXFP4 with float32 ones: MULTIROW_MIN_K_MXFP4). x (4 K bytes as
float32) fits the L1 below. Same sweep and receipt, NVFP4 / MXFP4, one row against four: 11008 x
4096 1509 / 1113 against 1695 / 1204, 16384 x 2048 1021 / 1441 against 1034 / 1555; 4096 x 11008
1803 / 1768 against 1380 / 1257. (Without the prefetch, single core, 4096 rows: K = 5120 mixed,
NVFP4 1.41 against 1.75 ms, MXFP4 1.02 against 0.92; from 6144 four won.) With the prefetches
into the L2 (`_ir.PREFETCH_LOCALITY`) NVFP4's kernel (scales decoded in the
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
    """The FP4 table-lookup GEMV module for this CPU: _lut (AVX-512 vpermps), else
    _pshufb (AVX2 vpshufb), else None (the bit-operation kernels run).
    The setting `numba_fp4_lut` (`softfp8.launch_settings`, default SOFTFP8_NUMBA_FP4_LUT) "0"
    turns both off, "avx2" skips the AVX-512 one, "avx512" keeps it but without the bf16
    products (`_bf16_products`): for comparisons, and in case a CPU misreports its features."""
    return _fp4_table_for(_fp4_lut_setting())


def _fp4_lut_setting() -> str:
    """The `numba_fp4_lut` setting in force (`_settings.current`), as `_fp4_table_kernels`
    and `_bf16_products` read it."""
    return current().numba_fp4_lut


@functools.lru_cache(maxsize=8)
def _fp4_table_for(wanted: str):
    from . import _lut, _pshufb

    if wanted == "0":
        return None
    if wanted != "avx2" and _lut.available():
        return _lut
    return _pshufb if _pshufb.available() else None


def _bf16_products(table, setting: str) -> bool:
    """Whether bf16 activations take bf16 products (_dpbf16: vdpbf16ps): `table` is the
    AVX-512 table kernel's module, the CPU has AVX-512 BF16 and the setting is not `avx512`."""
    from . import _dpbf16, _lut

    return table is _lut and setting != "avx512" and _dpbf16.available()


# -- M = 1: a plan per weight ------------------------------------------------------------------
# At batch 1 the Python around the kernel runs right after the previous layer's kernel has
# streamed tens of MB through the caches, where each small torch or numpy operation costs 5-50
# us instead of 1-2 (docs/decisions.md, CPU). So what depends on the weight alone -- numpy views of
# its tensors, the tensor scale, the kernel and its rows a pass, whether E4M3 codes hold a NaN --
# is worked out once and kept (`_PLAN`: rebuilt when a tensor of the weight is replaced or
# written in place, or the numba_fp4_lut setting changes), and a call does only what depends on x.

_PLAN = "numba gemv plan"
"""The key of a weight's GEMV plan among its facts (`_facts.facts_of`, kept while the words
tensor lives): (scales tensor, global scale tensor, stamp, plan), stamp = (numba_fp4_lut
in force, the three tensors' versions). Checked here in fewer steps than `known_fact` takes: this
runs on every GEMV call."""


def gemv(x: torch.Tensor, packed: PackedWeight, inject: bool, threads: int) -> torch.Tensor:
    """y [1, N] float32 = x [1, K] @ W.T (row scales applied)."""
    w, s, gs = packed.words, packed.scales, packed.global_scale
    stamp = (_fp4_lut_setting(), version_of(w), -1 if s is None else version_of(s),
             -1 if gs is None else version_of(gs))
    facts = facts_of(w, create=True)
    kept = facts.get(_PLAN)
    if kept is not None and kept[0] is s and kept[1] is gs and kept[2] == stamp:
        plan = kept[3]
    else:
        plan = _plan(packed)
        facts[_PLAN] = (s, gs, stamp, plan)
    yn = np.empty((1, plan.n), np.float32)  # numpy first: torch.from_numpy is the cheaper pair
    plan.run(x, yn[0], chunk_rows(plan.n, threads), inject)
    return torch.from_numpy(yn)


def _x_row(x: torch.Tensor, kp: int) -> np.ndarray:
    """x [1, K] as float32 numpy [Kp], zero-padded."""
    return padded_x(x, kp).numpy()[0]


def _plan(packed: PackedWeight):
    n, kp = packed.shape[0], packed.padded_k
    fmt = packed.fmt
    if fmt in (Format.E5M2, Format.E4M3, Format.E4M3_B128):
        R = loaded()[2]
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
        from ._dpbf16 import x_steps as bf16_steps
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
    kind: int  # _fp8_rows' decode kind
    rows: int  # rows a pass
    row_scales: np.ndarray | None

    def run(self, x, y, chunk, inject):
        xn = _x_row(x, self.kp)
        loaded()[2].gemv_fp8(self.pairs, np.ascontiguousarray(xn[0::2]),
                             np.ascontiguousarray(xn[1::2]), y, chunk, self.kind, self.rows)
        if self.row_scales is not None:
            y *= self.row_scales  # the float32 multiply torch's `y *= scales` does


@dataclass(frozen=True)
class _Fp8TileGemv(_Fp8Gemv):
    """E4M3_B128: `row_scales` holds the tile scales [N / 128, K / 128], which the kernel folds
    into x per group of 128 rows (_fp8_rows.gemv_fp8_tiles)."""

    def run(self, x, y, chunk, inject):
        loaded()[2].gemv_fp8_tiles(self.pairs, _x_row(x, self.kp), self.row_scales, y, chunk,
                                   self.kind, self.rows)


@dataclass(frozen=True)
class _Fp4BitsGemv:
    """The bit-operation kernels (_kernels): one lane per block, met by planes[j, b] =
    x[block * b + j]."""
    n: int
    kp: int
    block: int
    mx: bool
    words: np.ndarray
    scales: np.ndarray
    g: np.float32

    def run(self, x, y, chunk, inject):
        K = loaded()[1]
        x0 = padded_x(x, self.kp)[0]
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
    """The table-lookup kernels (_lut, _pshufb). The lookup is the select decode and
    faster than injection too (measured single core, 256x4096 in cache: NVFP4 18.4 against 13.4
    Gelem/s, MXFP4 22.1 against 14.2); where injection is allowed it gives the same bits, so it
    serves both decoders here."""
    table: object = None  # the module
    kernel: object = None  # its GEMV for this weight
    group: tuple = ()  # its rows a pass, where it takes them (float32 x steps)
    bf16_steps: object = None  # _dpbf16.x_steps where bf16 x takes bf16 products
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

