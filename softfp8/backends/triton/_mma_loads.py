"""Kernel.MMA_GEMV's loads (`_mma`): one thread's 16 bytes of a row (and their scale bytes) and
the x values they meet, one loop step at a time, as inline PTX (`_mma_ptx`'s load blocks), and
the L2 prefetch of a later step. ZERO (`_mma_table.mma_zero_fill`) picks the blocks that fill what a
predicate switches off with zeros, or leave it as it was.
"""
import triton
import triton.language as tl

from ._const import Const
from ._mma_ptx import MX_ROW_E_BIAS, _load_row_asm, _load_row_fp8_asm, _load_x_asm

_PREFETCH = Const("""{
    .reg .pred p;
    setp.ne.b32 p, $2, 0;
    @p prefetch.global.L2 [$1];
    mov.b32 $0, 0;
    }""")
_ROW_NV = Const(_load_row_asm("nvfp4"))
_ROW_MX = Const(_load_row_asm("mxfp4"))
_ROW_FP8 = Const(_load_row_fp8_asm())
_ROW_NV_KEEP = Const(_load_row_asm("nvfp4", zero=False))
_ROW_MX_KEEP = Const(_load_row_asm("mxfp4", zero=False))
_ROW_FP8_KEEP = Const(_load_row_fp8_asm(zero=False))
_LOAD_X = Const(_load_x_asm())
_LOAD_X_KEEP = Const(_load_x_asm(zero=False))
_ROW_CONS = Const("=r,=r,=r,=r,=r,l,l,r")
_ROW_E_BIAS_INJECT = Const(MX_ROW_E_BIAS[True])
_ROW_E_BIAS_TABLE = Const(MX_ROW_E_BIAS[False])
_LOAD_X_CONS = Const("=r," * 16 + "l,r")


@triton.jit
def _load_row(w_ptrs, s_ptrs, valid, FMT: tl.constexpr, ZERO: tl.constexpr):
    # no early returns (see `_mma._tile`). The 8-bit formats load no scale here, their fp32 scale
    # pointer can't share an asm call with the codes' uint8 one: the codes' pointer stands in
    if not ZERO and FMT == "nvfp4":
        out = tl.inline_asm_elementwise(_ROW_NV_KEEP, _ROW_CONS, [w_ptrs, s_ptrs, valid],
                                        (tl.int32,) * 5, is_pure=True, pack=1)
    elif not ZERO and FMT == "mxfp4":
        out = tl.inline_asm_elementwise(_ROW_MX_KEEP, _ROW_CONS, [w_ptrs, s_ptrs, valid],
                                        (tl.int32,) * 5, is_pure=True, pack=1)
    elif not ZERO:
        out = tl.inline_asm_elementwise(_ROW_FP8_KEEP, _ROW_CONS, [w_ptrs, w_ptrs, valid],
                                        (tl.int32,) * 5, is_pure=True, pack=1)
    elif FMT == "nvfp4":
        out = tl.inline_asm_elementwise(_ROW_NV, _ROW_CONS, [w_ptrs, s_ptrs, valid],
                                        (tl.int32,) * 5, is_pure=True, pack=1)
    elif FMT == "mxfp4":
        out = tl.inline_asm_elementwise(_ROW_MX, _ROW_CONS, [w_ptrs, s_ptrs, valid],
                                        (tl.int32,) * 5, is_pure=True, pack=1)
    else:
        out = tl.inline_asm_elementwise(_ROW_FP8, _ROW_CONS, [w_ptrs, w_ptrs, valid],
                                        (tl.int32,) * 5, is_pure=True, pack=1)
    return out


@triton.jit
def _load_x(x_ptrs, valid, ZERO: tl.constexpr):
    if ZERO:
        out = tl.inline_asm_elementwise(_LOAD_X, _LOAD_X_CONS, [x_ptrs, valid], (tl.int32,) * 16,
                                        is_pure=True, pack=1)
    else:
        out = tl.inline_asm_elementwise(_LOAD_X_KEEP, _LOAD_X_CONS, [x_ptrs, valid],
                                        (tl.int32,) * 16, is_pure=True, pack=1)
    return out


@triton.jit
def _row_step(w_ptr, s_ptr, row, N, RB, SB, off, ok, FMT: tl.constexpr, ZERO: tl.constexpr):
    """(4 words, scale) of one row at byte `off`; where the row or the step is outside, zeros
    (ZERO) or whatever the registers held."""
    HB_LOG2: tl.constexpr = 3 if FMT == "nvfp4" else 4  # bytes per scale block (FP4): 8, 16
    # off >= 0: a shift (floor division of a signed int is three instructions)
    return _load_row(w_ptr + row.to(tl.int64) * RB + off,
                     s_ptr + row.to(tl.int64) * SB + (off >> HB_LOG2),
                     (ok & (row < N)).to(tl.int32), FMT, ZERO)


@triton.jit
def _rows_step(w_ptr, s_ptr, row, N, RB, SB, off, kb_hi, FMT: tl.constexpr, RS: tl.constexpr,
               ZERO: tl.constexpr):
    """(4 words, scale) for rows row + RS * q, q = 0..3, at byte `off` (zeros outside, or left
    unloaded: ZERO = 0)."""
    ok = off < kb_hi
    return (_row_step(w_ptr, s_ptr, row, N, RB, SB, off, ok, FMT, ZERO),
            _row_step(w_ptr, s_ptr, row + RS, N, RB, SB, off, ok, FMT, ZERO),
            _row_step(w_ptr, s_ptr, row + 2 * RS, N, RB, SB, off, ok, FMT, ZERO),
            _row_step(w_ptr, s_ptr, row + 3 * RS, N, RB, SB, off, ok, FMT, ZERO))


@triton.jit
def _row_e_biases(e_ptr, row, N, RS: tl.constexpr, INJECT: tl.constexpr, ROW_E: tl.constexpr):
    """ROW_E (MXFP4): what rows row + RS * q, q = 0..3, add to each scale byte, the bias less
    the row's exponent E (`_mma_ptx.MX_ROW_E_BIAS`), loaded once a program; else zeros."""
    bias = _ROW_E_BIAS_INJECT if INJECT else _ROW_E_BIAS_TABLE
    out = (tl.zeros_like(row), tl.zeros_like(row), tl.zeros_like(row), tl.zeros_like(row))
    if ROW_E:
        out = (bias - tl.load(e_ptr + row, mask=row < N, other=0),
               bias - tl.load(e_ptr + row + RS, mask=row + RS < N, other=0),
               bias - tl.load(e_ptr + row + 2 * RS, mask=row + 2 * RS < N, other=0),
               bias - tl.load(e_ptr + row + 3 * RS, mask=row + 3 * RS < N, other=0))
    return out


@triton.jit
def _tile_scale_row(s_ptr, row, N, SB):
    """E4M3_B128: this thread's row of tile scales (SB a row). Every row a thread holds lies in
    its own 128-row block: a warp's rows are an aligned group of at most 64 (the run mapping's
    2 * RUNS * TILES, the tiles' 32); rows past N take the last block's (never stored)."""
    return s_ptr + (tl.minimum(row, N - 1) >> 7).to(tl.int64) * SB


@triton.jit
def _tile_scale(s_row, off, SB, FMT: tl.constexpr):
    """E4M3_B128: the fp32 scale of the 128-code tile holding this thread's 16 bytes at `off`
    (and every code of the 64-byte chunk its mma row sums); past the row, its last tile's (the
    codes there are zeros, or a step never computed): a clamp, not a predicate, keeps the load
    in bounds (no compare, no zero fill a step). The other formats: 0, unused."""
    if FMT == "e4m3_b128":
        out = tl.load(s_row + tl.minimum(off >> 7, SB - 1))
    else:
        out = tl.zeros(off.shape, tl.float32)
    return out


@triton.jit
def _prefetch_row(w_ptr, row, N, RB, off, ok):
    return tl.inline_asm_elementwise(_PREFETCH, "=r,l,r", [w_ptr + row.to(tl.int64) * RB + off,
                                                           (ok & (row < N)).to(tl.int32)],
                                     tl.int32, is_pure=False, pack=1)


@triton.jit
def _prefetch_rows(w_ptr, row, N, RB, off, kb_hi, RS: tl.constexpr):
    """Pull the 16 bytes at `off` of rows row + RS * q toward L2 (no registers held)."""
    ok = off < kb_hi
    return (_prefetch_row(w_ptr, row, N, RB, off, ok)
            + _prefetch_row(w_ptr, row + RS, N, RB, off, ok)
            + _prefetch_row(w_ptr, row + 2 * RS, N, RB, off, ok)
            + _prefetch_row(w_ptr, row + 3 * RS, N, RB, off, ok))


@triton.jit
def _x_pieces(off, kb_hi, K, in_m, FP8: tl.constexpr, WHOLE_K: tl.constexpr = False):
    """(k0, bits): the first code of the 16 bytes at `off` and, bit v, whether x's 16 bytes v
    of its codes (FP4: 4 of them, 64 bytes; FP8: 2) lie inside K and the split. WHOLE_K (ZERO =
    0, `mma_zero_fill`: K is the padded K and every program's range whole steps): a step inside
    the range has all of its x inside K, so one test a step, not one a piece."""
    ok = in_m & (off < kb_hi)
    k0 = off if FP8 else 2 * off  # first code
    if WHOLE_K:
        bits = tl.where(ok, 3 if FP8 else 15, 0)
    else:
        bits = (ok & (k0 + 8 <= K)).to(tl.int32) | ((ok & (k0 + 16 <= K)).to(tl.int32) << 1)
        if not FP8:
            bits = bits | ((ok & (k0 + 24 <= K)).to(tl.int32) << 2) | (
                (ok & (k0 + 32 <= K)).to(tl.int32) << 3)
    return k0, bits


@triton.jit
def _x_step(x_row, off, kb_hi, K, in_m, FP8: tl.constexpr, ZERO: tl.constexpr):
    """x for the codes of the 16 bytes at `off` (FP4: 32 codes, 64 bytes of x; FP8: 16 codes,
    32 bytes), 16 bytes at a time inside K and the split (`_x_pieces`)."""
    k0, bits = _x_pieces(off, kb_hi, K, in_m, FP8, not ZERO)
    return _load_x(x_row + k0, bits, ZERO)
