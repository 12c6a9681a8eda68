"""The fused small-M kernel: each weight vector decoded in registers and multiplied with the
rows of x (bf16 terms) by vdpbf16ps before the next is decoded.

Why: `_smallm_bf16` decodes a weight row into a bf16 buffer and reads it back once per tile of
x rows; at small M that store and reload cost more than the GEMV's whole row (docs/decisions.md,
CPU: prompts and small batches). Here each decoded vector feeds one float32 accumulator per row
of x, all in registers (`inspect_asm` of the loops: no spills, vdpbf16ps on zmm, x as memory
operands). The weight is read from memory once; it is decoded once per pass of rows of x.

Decode, exact for every code: FP8 by two byte permutes (vpermi2b) that look each code's bf16
high and low byte up in 128-entry tables, the sign or-ed in, two byte interleaves (7 vector
operations per 64 codes, where the GEMV's fp16 widening and vcvtne2ps2bf16 took about twice as
many cycles); two weight rows a pass, so each x load serves both. FP4 as `_dpbf16`: a vpermw on a
bf16 table, each step's partial sums times its block scales (NVFP4's E4M3 / 256, y x 256 x the
tensor scale after; MXFP4's E8M0 exact), decoded in the loop, or (MXFP4, `MXFP4_FOLDED`) each
scale added to the decoded values' exponents; two weight rows a pass, as FP8. The cost is the
rate of vdpbf16ps, not memory: docs/decisions.md, CPU: prompts and small batches.

x: `fill_x` gathers x in the kernel's order (`fp8_x_order`, `fp4_x_order`) and splits it into
`terms` bf16 rows per row of x that sum to it exactly (1 for bf16 x, 2 float16, 3 float32: every
product exact, y float32's sum of them in another order), laid out [K / 32, M * terms, 32] so a
pass's rows sit at constant offsets from one pointer. The caller (`_dp_rows.matmul_fused`) checks
x's and the weight's exponent range so that vdpbf16ps flushes nothing, as for `_smallm_bf16`.
K is taken in blocks (`block_steps`) so that x stays in the L1, or the L2 where each x load
feeds two weight rows; the codes past the whole steps are decoded by scalar numba code
(`_fp8_tail`, `_fp4_tail`) with the same values.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ._decode import (_I32, _JIT, _f2i, _half_bits_to_f32, _i2f, e2m1_select, e4m3_fast_div256,
                      e5m2_fast)
from ._fused_ir import (E4M3, E5M2, FP4_FOLD_PAIR_ROWS, FP4_PAIR_ROWS, LANES,  # noqa: F401
                        SMALL_ROWS, STEP4, STEP8, XROWS, _e4m3, _e4m3_2, _e5m2, _e5m2_2, _mxfp4,
                        _mxfp4_2, _mxfp4_fold_2, _nvfp4, _nvfp4_2, available, fp8_bf16_bits)

NVFP4, MXFP4, MXFP4_FOLDED = 0, 1, 2
"""`fused_fp4`'s format ids: MXFP4_FOLDED, MXFP4 whose scale codes are all in 2..252, takes the
scales into the decoded values (`_fused_ir._emit_fp4`'s fold)."""
from ._smallm_bf16 import _bf16_rne

X_BLOCK_BYTES = 16384
"""K is taken in blocks whose bf16 x rows (all M * terms of them) fit this many bytes, so that x
stays in the L1 (32 KiB on Zen 4) while a chunk's weight rows stream past it (without it x came
from the L2 from M = 8 on: docs/decisions.md, CPU: prompts and small batches)."""
PAIR_X_BLOCK_BYTES = 131072
"""The same for passes of two weight rows (FP4's; FP8's past SMALL_ROWS rows of x): each x load
there feeds two vdpbf16ps, so x may come from the L2 (1 MiB a core on Zen 4), and a block of 16
rows spans 4096 codes where X_BLOCK_BYTES gave it 512: a quarter of the passes, each paying its
lane sums and its tuple into y, and a weight read in longer runs of a row (FP8 M = 12-16, FP4
M = 4-8 faster; FP8 at 8 rows and fewer slower, so kept at X_BLOCK_BYTES there: docs/decisions.md,
CPU: prompts and small batches)."""


@nb.njit(**_JIT)
def fill_x(x, bits16, order, terms, x3):
    """x3[v, m * terms + t, i] = term t of x[m, order[32 v + i]] (0 where order points past
    x's columns: the padding), the bf16 terms as `_smallm_bf16.split_x` makes them; x float32,
    or (bits16) bf16 bits as uint16, one term, as they lie: one pass gathers and splits.
    Returns split_x's (ok, low, high)."""
    m_all, k = x.shape
    low, high, ok = 1000, -1000, True
    for v in range(x3.shape[0]):
        for i in range(32):
            p = 32 * v + i
            col = order[p] if p < order.shape[0] else k
            for m in range(m_all):
                if col >= k:
                    for t in range(terms):
                        x3[v, m * terms + t, i] = 0
                    continue
                if bits16:
                    bits = _I32(_I32(x[m, col]) << _I32(16))
                    f = _i2f(bits)
                else:
                    f = np.float32(x[m, col])
                    bits = _I32(_f2i(f))
                e = _I32(_I32(bits >> _I32(23)) & _I32(0xFF))
                if e == _I32(0xFF):
                    ok = False
                    continue
                if _I32(bits & _I32(0x7FFFFFFF)) != _I32(0):
                    low = min(low, e - 127)
                    high = max(high, e - 127)
                if bits16:
                    x3[v, m, i] = np.uint16(x[m, col])
                    continue
                hi = _bf16_rne(f)
                x3[v, m * terms, i] = np.uint16(hi & _I32(0xFFFF))
                rest = f
                for t in range(1, terms):
                    rest = rest - _i2f(_I32(hi << _I32(16)))
                    hi = _bf16_rne(rest)
                    x3[v, m * terms + t, i] = np.uint16(hi & _I32(0xFFFF))
    if low > high:
        low = high = 0
    return ok, low, high


@nb.njit(**_JIT)
def _bf16(x3, m, k):
    """x's term m at position k as float32 (x3 [V, Mt, 32])."""
    return _i2f(_I32(_I32(x3[k // 32, m, k % 32]) << _I32(16)))


@nb.njit(**_JIT)
def _fp8_tail(kind, row, x16, m, k0):
    """The codes of `row` from k0 on times x16 row m (in K order there)."""
    a = np.float32(0.0)
    for k in range(k0, row.shape[0]):
        v = e5m2_fast(row[k]) if kind == E5M2 else e4m3_fast_div256(row[k]) * np.float32(256.0)
        a += v * _bf16(x16, m, k)
    return a


@nb.njit(**_JIT)
def _fp4_tail(mx, wrow, srow, x16, m, w0):
    """The words of `wrow` from w0 on times x16 row m (in K order there), each code times its
    block's scale (NVFP4: E4M3 / 256)."""
    a = np.float32(0.0)
    wpb = 4 if mx else 2
    for w in range(w0, wrow.shape[0]):
        c = _I32(srow[w // wpb])
        if mx:
            s = _i2f(_I32(c << _I32(23)))
        else:
            s = _half_bits_to_f32(np.uint16(c << _I32(7)))
        for j in range(8):
            a += (e2m1_select(_I32(wrow[w] >> _I32(4 * j))) * s) * _bf16(x16, m, 8 * w + j)
    return a


def block_steps(mt: int, step: int, pairs: bool = False) -> int:
    """Steps a K block spans (the drivers' `per`): its x rows (mt of them, bf16) fit
    X_BLOCK_BYTES, or PAIR_X_BLOCK_BYTES for passes of two weight rows: FP4's (step STEP4) at
    any mt, FP8's past SMALL_ROWS."""
    wide = pairs and (step == STEP4 or mt > SMALL_ROWS)
    return max(1, (PAIR_X_BLOCK_BYTES if wide else X_BLOCK_BYTES) // (2 * step * mt))


@nb.njit(**_JIT)
def _fp8_one(kind, codes, r, x16, m, s0, s1, left, terms, y, tail_from):
    """One pass of weight row r over x16 rows m.. (XROWS of them, else up to SMALL_ROWS) added
    into y (with the codes from tail_from on where it is >= 0); returns the rows it took."""
    rows = XROWS if left >= XROWS else min(SMALL_ROWS, left)
    if kind == E5M2:
        t = _e5m2(codes, r, x16, m, s0, s1, rows)
    else:
        t = _e4m3(codes, r, x16, m, s0, s1, rows)
    for j in range(rows):
        a = t[j]
        if tail_from >= 0:
            a += _fp8_tail(kind, codes[r], x16, m + j, tail_from)
        y[(m + j) // terms, r] += a
    return rows


@nb.njit(**_JIT)
def _fp8_two(kind, codes, r, x16, m, s0, s1, left, terms, y, tail_from):
    """_fp8_one for weight rows r and r + 1 together (up to SMALL_ROWS rows of x)."""
    rows = min(SMALL_ROWS, left)
    if kind == E5M2:
        t = _e5m2_2(codes, r, x16, m, s0, s1, rows)
    else:
        t = _e4m3_2(codes, r, x16, m, s0, s1, rows)
    for i in range(2):
        for j in range(rows):
            a = t[i * XROWS + j]
            if tail_from >= 0:
                a += _fp8_tail(kind, codes[r + i], x16, m + j, tail_from)
            y[(m + j) // terms, r + i] += a
    return rows


@nb.njit(parallel=True, **_JIT)
def fused_fp8(kind, codes, x16, terms, y, chunk, per, pairs):
    """y [M, N] (zeroed by the caller) += x @ W.T (FP8 unscaled) from x16 [K64 / 32, M * terms,
    32], the bf16 terms of x in `fp8_x_order`; codes the FP8 bytes [N, Kp] (kind E5M2 or E4M3);
    `chunk` rows a parallel step, `per` steps a K block; `pairs`: two weight rows a pass."""
    n, kp = codes.shape
    mt = x16.shape[1]
    steps = kp // STEP8
    for c in nb.prange((n + chunk - 1) // chunk):
        r0, r1 = c * chunk, min(n, (c + 1) * chunk)
        for s0 in range(0, max(steps, 1), per):
            s1 = min(steps, s0 + per)
            tail_from = steps * STEP8 if s1 == steps else -1
            r = r0
            while r < r1:
                two = pairs and r + 1 < r1
                m = 0
                while m < mt:
                    if two:
                        m += _fp8_two(kind, codes, r, x16, m, s0, s1, mt - m, terms, y, tail_from)
                    else:
                        m += _fp8_one(kind, codes, r, x16, m, s0, s1, mt - m, terms, y, tail_from)
                r += 2 if two else 1


@nb.njit(**_JIT)
def _fp4_pass(kind, words, scales, r, wrows, x16, m, s0, s1, left, terms, y, tail_from):
    """One pass of weight rows r..r+wrows (1 or 2) over x16 rows m.. (up to SMALL_ROWS; for two
    FP4_PAIR_ROWS, folded FP4_FOLD_PAIR_ROWS) added into y (with the words from tail_from on
    where it is >= 0); returns the rows it took."""
    mx = kind != NVFP4
    if wrows == 2 and kind == MXFP4_FOLDED:
        rows = min(FP4_FOLD_PAIR_ROWS, left)
        t = _mxfp4_fold_2(words, scales, r, x16, m, s0, s1, rows)
    elif wrows == 2:
        rows = min(FP4_PAIR_ROWS, left)
        if mx:
            t = _mxfp4_2(words, scales, r, x16, m, s0, s1, rows)
        else:
            t = _nvfp4_2(words, scales, r, x16, m, s0, s1, rows)
    else:
        rows = min(SMALL_ROWS, left)
        if mx:
            t1 = _mxfp4(words, scales, r, x16, m, s0, s1, rows)
        else:
            t1 = _nvfp4(words, scales, r, x16, m, s0, s1, rows)
        t = t1 + t1
    for i in range(wrows):
        for j in range(rows):
            a = t[i * XROWS + j]
            if tail_from >= 0:
                a += _fp4_tail(mx, words[r + i], scales[r + i], x16, m + j, tail_from)
            y[(m + j) // terms, r + i] += a
    return rows


@nb.njit(parallel=True, **_JIT)
def fused_fp4(kind, words, scales, x16, terms, y, chunk, per, pairs):
    """fused_fp8 for FP4 int32 words [N, Kp / 8] and their scale codes (kind NVFP4: E4M3 below
    0x7F, y / 256 without the tensor scale; MXFP4: E8M0 in 1..254; MXFP4_FOLDED: in 2..252); x16
    in `fp4_x_order`; `pairs`: two weight rows a pass."""
    n, nw = words.shape
    mt = x16.shape[1]
    steps = nw // LANES
    for c in nb.prange((n + chunk - 1) // chunk):
        r0, r1 = c * chunk, min(n, (c + 1) * chunk)
        for s0 in range(0, max(steps, 1), per):
            s1 = min(steps, s0 + per)
            tail_from = steps * LANES if s1 == steps else -1
            r = r0
            while r < r1:
                wrows = 2 if pairs and r + 1 < r1 else 1
                m = 0
                while m < mt:
                    m += _fp4_pass(kind, words, scales, r, wrows, x16, m, s0, s1, mt - m, terms,
                                   y, tail_from)
                r += wrows


def fp8_x_order(kp: int) -> np.ndarray:
    """The column of x that each position of the kernel's FP8 x meets: for each whole step of
    64 codes, the codes of the first interleave (bytes 0..7 of each 16) then the second (8..15),
    `_emit_fp8`'s order; then the codes past them in K order."""
    whole = kp // STEP8 * STEP8
    pos = np.arange(whole)
    s, rest = pos // STEP8, pos % STEP8
    h, within = rest // 32, rest % 32
    return np.concatenate([STEP8 * s + 16 * (within // 8) + 8 * h + within % 8,
                           np.arange(whole, kp)])


def fp4_x_order(kp: int) -> np.ndarray:
    """The column of x that each position of the kernel's FP4 x meets: for each whole step of
    128 codes, xs[j, l] = x[8 (16 s + l // 2) + 4 (l % 2) + j] (`_dpbf16`'s order), then the
    codes past them in K order."""
    whole = kp // STEP4 * STEP4
    pos = np.arange(whole)
    s, rest = pos // STEP4, pos % STEP4
    j, lane = rest // 32, rest % 32
    return np.concatenate([8 * (16 * s + lane // 2) + 4 * (lane % 2) + j, np.arange(whole, kp)])
