"""The Numba CPU backend: parallel kernels that read the packed words and decode in registers.

Strategy by M (rows of activations):
- M = 1 (GEMV): one fused kernel per format (`_numba_kernels.gemv_*`), decode + multiply-add in
  the same vector loop, rows split over threads. This is the batch-1 decoding case.
- 1 < M < `DEQUANT_MIN_M`: each weight row is decoded once into an L1-resident fp32 buffer and
  reused for all M activation rows (`decode_matmul`), so decode cost does not grow with M.
- M >= `DEQUANT_MIN_M`: slabs of rows are dequantised by the same kernel and multiplied with
  torch's sgemm, which is far better blocked for large M than a hand loop.

x is converted to float32 once per call (and zero-padded to the packed K, so the kernels never
need a tail); y comes back in x's dtype. Threads: min(numba's and torch's current setting),
set for the call where it differs and restored after. Numba, and the kernels, load on the
first call only.
"""
from __future__ import annotations

import functools
import os

import numpy as np
import torch

from ..dispatch import E2M1Decode, Needs
from ..formats import SPECS, Format, PackedWeight
from ._facts import codes_nan_free

NEEDS = Needs(formats=frozenset(Format), device_types=frozenset({"cpu"}), packages=("numba",))

DEQUANT_MIN_M = 16
"""From this many activation rows on, dequantise slabs and use torch's sgemm."""

_SLAB_ELEMENTS = 1 << 23  # 32 MiB of float32 weight per dequantised slab
_KIND = {Format.E5M2: 0, Format.E4M3: 1, Format.NVFP4: 2, Format.MXFP4: 3}


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
    """numba and the kernel module, imported on the first call (not at import time). A cached
    call costs ~0.1 us; the `import` statements it replaces cost ~1-3 us each on every matmul."""
    import numba

    from . import _numba_fp8_rows, _numba_kernels

    return numba, _numba_kernels, _numba_fp8_rows


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
    if x.device.type != "cpu" or packed.device.type != "cpu":
        raise ValueError(f"x and packed must be on the cpu for the numba backend, got {x.device} "
                         f"and {packed.device}")
    inject = E2M1Decode(e2m1) is E2M1Decode.INJECT
    numba = _numba()[0]
    previous = numba.get_num_threads()
    threads = _threads(previous)
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
    if k == kp and x.dtype == torch.float32 and x.is_contiguous():
        return x
    xp = torch.zeros((m, kp), dtype=torch.float32)
    xp[:, :k] = x
    return xp


def _matmul_f32(x: torch.Tensor, packed: PackedWeight, inject: bool, threads: int) -> torch.Tensor:
    K = _numba()[1]
    n, k = packed.shape
    m = x.shape[0]
    fmt = packed.fmt
    kp = packed.padded_k
    fp4 = fmt in (Format.NVFP4, Format.MXFP4)
    yn = np.empty((m, n), np.float32)  # numpy first: torch.from_numpy is the cheaper pair
    y = torch.from_numpy(yn)
    table = _fp4_table_kernels() if fp4 and m == 1 else None
    steps = _bf16_steps(x, kp, SPECS[fmt].block, table) if table is not None else None
    xp = _padded_x(x, kp) if steps is None else None  # bf16 steps: no float32 copy of x
    if m == 1:
        chunk = _chunk(n, threads)
        yv = yn[0]
        # x as numpy from here: right after a GEMV each torch op costs 3-10 us (x[0].numpy()
        # 9.4 us measured, 2048 x 2048 NVFP4, Zen 3), numpy's indexing a fraction of that
        xn = xp.numpy()[0] if xp is not None else None
        if not fp4:  # FP8 rows as uint16 pairs, met by the even and odd elements of x
            R = _numba()[2]
            kind = (R.E5M2_KIND if fmt is Format.E5M2 else
                    R.E4M3_FINITE_KIND if codes_nan_free(packed) else R.E4M3_KIND)
            R.gemv_fp8(packed.words.view(torch.uint16).numpy(), np.ascontiguousarray(xn[0::2]),
                       np.ascontiguousarray(xn[1::2]), yv, chunk, kind,
                       R.ROWS if kp >= MULTIROW_MIN_K else 1)
        else:  # FP4 words, one lane per block, met by planes[j, b] = x[block * b + j]
            mx = fmt is Format.MXFP4
            block = SPECS[fmt].block
            words, scales = packed.words.numpy(), packed.scales.numpy()
            g = np.float32(1.0) if mx else np.float32(packed.global_scale.item())
            if table is not None:
                # The table lookup is the select decode and faster than injection too (measured
                # single core, 256x4096 in cache: NVFP4 18.4 against 13.4 Gelem/s, MXFP4 22.1
                # against 14.2); where injection is allowed it gives the same bits, so it serves
                # both decoders here. AVX-512: a 16-float permute; AVX2: two byte tables.
                L = table
                xs, xpn = steps if steps is not None else L.x_steps(xn, block)
                # rows a pass by K where the module runs several (AVX-512), else one (AVX2)
                group = ((L.ROWS if kp >= MULTIROW_MIN_K_FP4 else 1),) if L.ROWS > 1 else ()
                if mx:
                    L.gemv_mxfp4(words, scales, xs, xpn, yv, chunk, *group)
                else:
                    L.gemv_nvfp4(words, scales, g, xs, xpn, yv, chunk, *group)
                return _row_scaled(y, packed, fp4)
            x0 = xp[0]
            planes = x0.view(-1, block).T
            inject = inject and _inject_fold_safe(x0)
            if inject:
                planes = planes * _INJECT_X_SCALE  # exact: a power of two, range checked
            xpn = planes.contiguous().numpy()
            if mx:
                K.gemv_mxfp4(words, scales, xpn, yv, chunk, inject)
            else:
                K.gemv_nvfp4(words, scales, g, xpn, yv, chunk, inject)
    else:
        codes = packed.words.view(torch.uint8).numpy()  # [N, Kp] FP8 bytes, [N, Kp/2] FP4 bytes
        scales = packed.scales.numpy() if fp4 else np.zeros((1, 1), np.uint8)
        g = np.float32(packed.global_scale.item()) if fmt is Format.NVFP4 else np.float32(1.0)
        kind = _KIND[fmt]
        if m < DEQUANT_MIN_M:
            no_w = np.zeros((0, kp), np.float32)
            K.decode_matmul(kind, codes, scales, g, xp.numpy(), y.numpy(), no_w, 0, n,
                            _chunk(n, threads), inject)
        else:
            no_x = np.zeros((0, kp), np.float32)
            rows = max(1, _SLAB_ELEMENTS // kp)
            for start in range(0, n, rows):
                stop = min(n, start + rows)
                w = torch.empty((stop - start, kp), dtype=torch.float32)
                K.decode_matmul(kind, codes, scales, g, no_x, y.numpy(), w.numpy(), start, stop,
                                _chunk(stop - start, threads), inject)
                torch.matmul(xp, w.T, out=y[:, start:stop])
    return _row_scaled(y, packed, fp4)


def _row_scaled(y: torch.Tensor, packed: PackedWeight, fp4: bool) -> torch.Tensor:
    if not fp4 and packed.scales is not None:
        y *= packed.scales
    return y


MULTIROW_MIN_K = 4096
"""From this padded K on, the FP8 GEMVs run 4 rows per pass (one x load serves 4 rows); below it
one row per pass. `python benchmarks/cpu_rows_sweep.py` on a 2-vCPU Zen 4 (2026-12-02, 2
threads, prefetch 4 passes ahead, each variant its own copy of the weight: receipts/
cpu-rows-sweep-s18b.txt), us, one row against four a pass: E5M2 32768 x 1024 1139 against
1970, 16384 x 2048 1204 / 1745, E4M3 1139 / 1921, 1394 / 1764; 11008 x 4096 E5M2 2197 / 1703,
E4M3 1686 / 1633; 4096 x 11008 E5M2 2866 / 1955, E4M3 2900 / 2028."""

MULTIROW_MIN_K_FP4 = 5632
"""The same for the AVX-512 FP4 table kernel (_numba_lut; _numba_pshufb runs one row): x (4 K
bytes as float32) fits the L1 below. Same sweep and receipt, NVFP4 / MXFP4, one row against four:
11008 x 4096 1509 / 1113 against 1695 / 1204, 16384 x 2048 1021 / 1441 against 1034 / 1555;
4096 x 11008 1803 / 1768 against 1380 / 1257. (Without the prefetch, single core, 4096 rows:
K = 5120 mixed, NVFP4 1.41 against 1.75 ms, MXFP4 1.02 against 0.92; from 6144 four won.)"""


def _fp4_table_kernels():
    """The FP4 table-lookup GEMV module for this CPU: _numba_lut (AVX-512 vpermps), else
    _numba_pshufb (AVX2 vpshufb), else None (the bit-operation kernels run).
    `SOFTFP8_NUMBA_FP4_LUT=0` turns both off, `=avx2` skips the AVX-512 one, `=avx512` keeps it
    but without the bf16 products (`_bf16_steps`) (read per call: for comparisons, and in case a
    CPU misreports its features)."""
    return _fp4_table_for(_fp4_lut_setting())


def _fp4_lut_setting() -> str:
    """SOFTFP8_NUMBA_FP4_LUT as `_fp4_table_kernels` and `_bf16_steps` read it."""
    return os.environ.get("SOFTFP8_NUMBA_FP4_LUT", "1").strip().lower()


@functools.lru_cache(maxsize=8)
def _fp4_table_for(wanted: str):
    from . import _numba_lut, _numba_pshufb

    if wanted == "0":
        return None
    if wanted != "avx2" and _numba_lut.available():
        return _numba_lut
    return _numba_pshufb if _numba_pshufb.available() else None


def _bf16_steps(x: torch.Tensor, kp: int, block: int, table):
    """The AVX-512 table kernel's activation steps as bf16 (_numba_dpbf16: bf16 products by
    vdpbf16ps) where x is bf16, `table` is that kernel's module, the CPU has AVX-512 BF16 and
    SOFTFP8_NUMBA_FP4_LUT is not `avx512`; else None (float32 steps)."""
    if x.dtype != torch.bfloat16:
        return None
    from . import _numba_dpbf16, _numba_lut

    if table is not _numba_lut or not _numba_dpbf16.available() or _fp4_lut_setting() == "avx512":
        return None
    return _numba_dpbf16.x_steps(x[0], block, kp)
