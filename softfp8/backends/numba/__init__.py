"""The Numba CPU backend: parallel kernels that read the packed words and decode in registers.

Strategy by M (rows of activations):
- M = 1 (GEMV): one fused kernel per format, decode + multiply-add in the same vector loop, rows
  split over threads (FP8: `_fp8_rows`; FP4: the table kernels `_lut` / AVX-512,
  `_pshufb` / AVX2, else `_kernels`). This is the batch-1 decoding case; what a
  call needs of the weight is prepared once per weight (`_gemv`).
- On CPUs with AVX-512 BF16 and VBMI, bf16 x from M = 2 up to `_dp_rows.FUSED_MAX_ROWS`: the
  fused small-M kernel (`_smallm_fused`): each weight vector decoded in registers and
  used for every row of x before the next, so the weight is read and decoded once.
- On AVX2 CPUs, 1 < M <= `XROWS_MAX_M[fmt]`: each decoded vector used for up to four rows of x
  at a time (`_pshufb_xrows`, `_fp8_xrows`).
- 1 < M <= `GEMV_ROWS_MAX_M[fmt]`: the GEMV once per row of x (measured faster there than the
  kernels below; E4M3_B128's bf16 x from `_dp_rows.DP_FIRST_MIN_M_BF16` passes them over for the
  next kernel).
- On CPUs with AVX-512 BF16, below `_dp_rows.DP_TILE_MIN_M` (bf16 x: `DP_TILE_MIN_M_BF16`):
  each weight row decoded once into bf16 and multiplied with several rows of x at a time by
  vdpbf16ps (`_smallm_bf16`; x as bf16 terms that sum to it exactly; E4M3_B128's tile scales
  on each 128 columns' partial sums), where the weight's codes and x's range allow (else the
  next path).
- Up to `TILE_MIN_M[fmt]` (bf16 x: `TILE_MIN_M_BF16`): each thread decodes a few weight rows
  into a cache-resident float32 buffer and takes their dot products with every row of x
  (`_smallm.smallm_matmul`), so the decode costs once per weight, whatever M.
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

import torch

from ..._checks import check_matrix_args
from ..._choices import E2M1Decode
from ..._needs import Needs
from ...formats import Format, PackedWeight
from . import _dp_rows
from ._batch import matmul_rows
from ._gemv import gemv
from ._runtime import loaded, threads_for

NEEDS = Needs(formats=frozenset(Format), device_types=frozenset({"cpu"}), packages=("numba",))

GEMV_ROWS_MAX_M = {Format.E5M2: 4, Format.E4M3: 4, Format.NVFP4: 8, Format.MXFP4: 8,
                   Format.E4M3_B128: 4}
"""Up to this many activation rows (per format), one M = 1 GEMV per row of x: the fused GEMVs
(prefetching IR kernels) read the weight M times and still beat the small-M kernel's one read
there. `OMP_WAIT_POLICY=passive python benchmarks/cpu_small_m.py --m 1,2,4,8,16 --paths --reps
5` (4096 x 4096, 2-vCPU Zen 4, load 6, ms, GEMV rows / small-M kernel): M = 2
E5M2 2.69 / 3.46, E4M3 2.48 / 5.16, NVFP4 2.22 / 6.46, MXFP4 2.58 / 6.59; M = 4 3.72 / 4.17,
4.08 / 5.95, 3.38 / 7.17, 3.21 / 7.24; M = 8 7.00 / 6.21, 7.95 / 8.08, 6.64 / 9.15, 5.76 / 9.67;
M = 16 13.87 / 10.05, 16.21 / 11.59, 12.54 / 13.02, 11.56 / 13.24 (FP4 even, left to the
kernel). docs/decisions.md, CPU: prompts and small batches."""

XROWS_MAX_M = {Format.NVFP4: 16, Format.MXFP4: 16, Format.E5M2: 4, Format.E4M3: 8,
               Format.E4M3_B128: 8}
"""On AVX2 CPUs (no AVX-512F; FP4: where its GEMV is the AVX2 table kernel, _pshufb), 1 < M up
to this many activation rows take the x-rows kernels (`_pshufb_xrows`, `_fp8_xrows`: each
decoded vector used for up to four rows of x before the next). `python benchmarks/cpu_small_m.py
--shapes 4096x4096 --m 2,4,8,16,32 --act bf16 --reps 7 --paths rows,small,xrows` (2-vCPU Zen 3,
x torch's fastest, two runs): ahead of a GEMV per row and of the float32 small-M kernel from
M = 2 to these, the small-M kernel ahead past them (E5M2 from M = 8: 1.08-1.27x against
0.96-1.13x; docs/performance.md, AVX2 on a real Zen 3). FP4 weights whose scale codes its loop
can't decode take the paths below."""


def matmul(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None = None, *,
           e2m1: E2M1Decode = E2M1Decode.SELECT, checked: bool = False) -> torch.Tensor:
    """y = x @ W.T + bias for x [M, K] on the CPU, accumulated in float32, returned in x's dtype.
    `checked`: backends/__init__ (dispatch runs this backend on CPU tensors only)."""
    # Every line here runs right after the previous layer's kernel, where each torch attribute
    # or call costs 5-50 us (see `_gemv`): a checked call checks nothing again.
    if not checked:
        check_matrix_args(x, packed, bias)
        if not (x.is_cpu and packed.words.is_cpu):
            raise ValueError(f"x and packed must be on the cpu for the numba backend, got "
                             f"{x.device} and {packed.device}")
    inject = e2m1 is E2M1Decode.INJECT or (
        e2m1 is not E2M1Decode.SELECT and E2M1Decode(e2m1) is E2M1Decode.INJECT)
    numba, _, _, numba_threads, _ = loaded()
    previous = numba_threads()
    threads = threads_for(previous)
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


def _matmul_f32(x: torch.Tensor, packed: PackedWeight, inject: bool, threads: int) -> torch.Tensor:
    if x.shape[0] == 1:
        return gemv(x, packed, inject, threads)
    m, fmt = x.shape[0], packed.fmt
    if _dp_rows.fused_fits(m, fmt, x.dtype):
        y = _dp_rows.matmul_fused(x, packed, threads)
        if y is not None:
            return y
    if m <= XROWS_MAX_M.get(fmt, 0) and _xrows_runs(fmt):
        y = _xrows_matmul(x, packed, threads)
        if y is not None:
            return y
    if m <= GEMV_ROWS_MAX_M[fmt] and not _dp_rows.before_gemv_rows(m, fmt, x.dtype):
        return torch.cat([gemv(x[i:i + 1], packed, inject, threads) for i in range(m)])
    if _dp_rows.below_crossover(m, fmt, x.dtype) and _dp_rows.available():
        y = _dp_rows.matmul(x, packed, threads)
        if y is not None:
            return y
    return matmul_rows(x, packed, threads)


def _xrows_runs(fmt: Format) -> bool:
    """Whether the x-rows kernels serve this format here: FP4 where its GEMV is the AVX2 table
    kernel (_pshufb, as `_gemv` chooses it), FP8 where numba targets AVX2 but not AVX-512F (the
    CPUs they were measured on)."""
    from . import _gemv, _lut, _pshufb

    if fmt in (Format.NVFP4, Format.MXFP4):
        return _gemv._fp4_table_kernels() is _pshufb
    return _pshufb.available() and not _lut.available()


def _xrows_matmul(x, packed, threads):
    from . import _fp8_xrows, _pshufb_xrows

    if packed.fmt in (Format.NVFP4, Format.MXFP4):
        return _pshufb_xrows.matmul(x, packed, threads)
    return _fp8_xrows.matmul(x, packed, threads)
