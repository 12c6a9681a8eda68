"""Numba kernels of the CPU backend: the FP4 GEMVs (M = 1) by bit operations.

Imported only by the backend's `matmul` (never at package import); every function compiles lazily on
first call and is cached on disk (cache=True), so a second process loads machine code instead of
compiling. fastmath is {'reassoc', 'contract'} only: it lets LLVM split the K-reduction over
vector lanes and fuse multiply-adds, and keeps NaN/inf semantics (no nnan/ninf), so NaN and inf
propagate as in torch's matmul.

Layout (softfp8/formats.py): the FP4 GEMVs read rows as int32 words [N, Kp/8] with one vector
lane per scale block (x split into planes xp[j, b] = x[block * b + j]); the FP8 GEMVs are in
_fp8_rows, the M > 1 kernels in _smallm."""
from __future__ import annotations

import numba as nb
import numpy as np

from ._decode import _E2M1_BITS, _I32, _INLINE, _JIT, _SIGN, _i2f, e4m3_fast_div256, e8m0_i32


# -- fused GEMV (M = 1): decode in registers, rows split into chunks, one prange step each ------
# (the FP8 GEMVs are _fp8_rows': their loop prefetches, which a numba loop cannot)

# FP4: one vector lane per block (NVFP4: 2 words = 16 codes, MXFP4: 4 words = 32 codes), met by
# the planes xp[j, b] = x[block_codes * b + j]. A lane sums its block's products, then applies the
# block scale, decoded in the lane by bit operations (E4M3 or E8M0). Lanes per word with the
# scales spread per word first ran at 7.9 against 11 Gelem/s: the spreading loop is scalar.
# Written out by hand: a `for j in range(8)` loop is not unrolled before vectorisation (4x
# slower), and calling the word decoders from here (numba's IR inlining deep-copies the callee
# per call site) took ~20 s to compile per variant.

@nb.njit(**_INLINE)
def _word_sum_select(w, xp, o, b):
    """Sum over the 8 codes j of word w of code x xp[o + j, b]: e2m1_word_select written out, its
    two selects as masks (conditional expressions compiled ~3x slower, same speed)."""
    t = w
    k = _I32(t & _I32(7))
    m = _I32(_I32(k << _I32(22)) + _I32(0x3F000000))
    m = _I32(_I32(m - _I32(_I32(k == _I32(1)) << _I32(22))) & _I32(-_I32(k != _I32(0))))
    a = _i2f(_I32(m | _I32(_I32(t << _I32(28)) & _SIGN))) * xp[o + 0, b]
    t = _I32(w >> _I32(4))
    k = _I32(t & _I32(7))
    m = _I32(_I32(k << _I32(22)) + _I32(0x3F000000))
    m = _I32(_I32(m - _I32(_I32(k == _I32(1)) << _I32(22))) & _I32(-_I32(k != _I32(0))))
    a += _i2f(_I32(m | _I32(_I32(t << _I32(28)) & _SIGN))) * xp[o + 1, b]
    t = _I32(w >> _I32(8))
    k = _I32(t & _I32(7))
    m = _I32(_I32(k << _I32(22)) + _I32(0x3F000000))
    m = _I32(_I32(m - _I32(_I32(k == _I32(1)) << _I32(22))) & _I32(-_I32(k != _I32(0))))
    a += _i2f(_I32(m | _I32(_I32(t << _I32(28)) & _SIGN))) * xp[o + 2, b]
    t = _I32(w >> _I32(12))
    k = _I32(t & _I32(7))
    m = _I32(_I32(k << _I32(22)) + _I32(0x3F000000))
    m = _I32(_I32(m - _I32(_I32(k == _I32(1)) << _I32(22))) & _I32(-_I32(k != _I32(0))))
    a += _i2f(_I32(m | _I32(_I32(t << _I32(28)) & _SIGN))) * xp[o + 3, b]
    t = _I32(w >> _I32(16))
    k = _I32(t & _I32(7))
    m = _I32(_I32(k << _I32(22)) + _I32(0x3F000000))
    m = _I32(_I32(m - _I32(_I32(k == _I32(1)) << _I32(22))) & _I32(-_I32(k != _I32(0))))
    a += _i2f(_I32(m | _I32(_I32(t << _I32(28)) & _SIGN))) * xp[o + 4, b]
    t = _I32(w >> _I32(20))
    k = _I32(t & _I32(7))
    m = _I32(_I32(k << _I32(22)) + _I32(0x3F000000))
    m = _I32(_I32(m - _I32(_I32(k == _I32(1)) << _I32(22))) & _I32(-_I32(k != _I32(0))))
    a += _i2f(_I32(m | _I32(_I32(t << _I32(28)) & _SIGN))) * xp[o + 5, b]
    t = _I32(w >> _I32(24))
    k = _I32(t & _I32(7))
    m = _I32(_I32(k << _I32(22)) + _I32(0x3F000000))
    m = _I32(_I32(m - _I32(_I32(k == _I32(1)) << _I32(22))) & _I32(-_I32(k != _I32(0))))
    a += _i2f(_I32(m | _I32(_I32(t << _I32(28)) & _SIGN))) * xp[o + 6, b]
    t = _I32(w >> _I32(28))
    k = _I32(t & _I32(7))
    m = _I32(_I32(k << _I32(22)) + _I32(0x3F000000))
    m = _I32(_I32(m - _I32(_I32(k == _I32(1)) << _I32(22))) & _I32(-_I32(k != _I32(0))))
    a += _i2f(_I32(m | _I32(_I32(t << _I32(28)) & _SIGN))) * xp[o + 7, b]
    return a


@nb.njit(**_INLINE)
def _word_sum_inject(w, xp, o, b):
    """Sum over the 8 codes j of word w of code / 2^126 x xp[o + j, b]: e2m1_word_inject_div2p126
    written out."""
    t = _I32(w << _I32(28))
    a = _i2f(_I32(_I32(t & _SIGN) | _I32(_I32(t >> _I32(6)) & _E2M1_BITS))) * xp[o + 0, b]
    t = _I32(w << _I32(24))
    a += _i2f(_I32(_I32(t & _SIGN) | _I32(_I32(t >> _I32(6)) & _E2M1_BITS))) * xp[o + 1, b]
    t = _I32(w << _I32(20))
    a += _i2f(_I32(_I32(t & _SIGN) | _I32(_I32(t >> _I32(6)) & _E2M1_BITS))) * xp[o + 2, b]
    t = _I32(w << _I32(16))
    a += _i2f(_I32(_I32(t & _SIGN) | _I32(_I32(t >> _I32(6)) & _E2M1_BITS))) * xp[o + 3, b]
    t = _I32(w << _I32(12))
    a += _i2f(_I32(_I32(t & _SIGN) | _I32(_I32(t >> _I32(6)) & _E2M1_BITS))) * xp[o + 4, b]
    t = _I32(w << _I32(8))
    a += _i2f(_I32(_I32(t & _SIGN) | _I32(_I32(t >> _I32(6)) & _E2M1_BITS))) * xp[o + 5, b]
    t = _I32(w << _I32(4))
    a += _i2f(_I32(_I32(t & _SIGN) | _I32(_I32(t >> _I32(6)) & _E2M1_BITS))) * xp[o + 6, b]
    t = w
    a += _i2f(_I32(_I32(t & _SIGN) | _I32(_I32(t >> _I32(6)) & _E2M1_BITS))) * xp[o + 7, b]
    return a


# One block sum per (format, decoder), chosen in Python: a single function with both branches
# got inlined whole, branches and all, and compiled ~4x slower.
@nb.njit(**_INLINE)
def _nv_select(words, r, b, xp):
    return (_word_sum_select(words[r, 2 * b], xp, 0, b)
            + _word_sum_select(words[r, 2 * b + 1], xp, 8, b))


@nb.njit(**_INLINE)
def _nv_inject(words, r, b, xp):
    return (_word_sum_inject(words[r, 2 * b], xp, 0, b)
            + _word_sum_inject(words[r, 2 * b + 1], xp, 8, b))


@nb.njit(**_INLINE)
def _mx_select(words, r, b, xp):
    return (_word_sum_select(words[r, 4 * b], xp, 0, b)
            + _word_sum_select(words[r, 4 * b + 1], xp, 8, b)
            + _word_sum_select(words[r, 4 * b + 2], xp, 16, b)
            + _word_sum_select(words[r, 4 * b + 3], xp, 24, b))


@nb.njit(**_INLINE)
def _mx_inject(words, r, b, xp):
    return (_word_sum_inject(words[r, 4 * b], xp, 0, b)
            + _word_sum_inject(words[r, 4 * b + 1], xp, 8, b)
            + _word_sum_inject(words[r, 4 * b + 2], xp, 16, b)
            + _word_sum_inject(words[r, 4 * b + 3], xp, 24, b))


# Top-level functions, not closures from a factory: numba's disk cache did not reuse those
# (every process recompiled), and the decoder is a runtime flag with both loops compiled.

@nb.njit(**_JIT)
def _nvfp4_rows(words, scales, g, xp, y, r0, r1, inject):
    post = np.float32(2.0 ** 63 * 256.0) if inject else np.float32(256.0)
    for r in range(r0, r1):
        acc = np.float32(0.0)
        if inject:  # E4M3 scale / 256 via fp16 (16-bit lanes); x 256 and g once per row
            for b in range(scales.shape[1]):
                acc += _nv_inject(words, r, b, xp) * e4m3_fast_div256(scales[r, b])
        else:
            for b in range(scales.shape[1]):
                acc += _nv_select(words, r, b, xp) * e4m3_fast_div256(scales[r, b])
        y[r] = acc * post * g


@nb.njit(**_JIT)
def _mxfp4_rows(words, scales, xp, y, r0, r1, inject):
    post = np.float32(2.0 ** 63) if inject else np.float32(1.0)
    for r in range(r0, r1):
        acc = np.float32(0.0)
        if inject:
            for b in range(scales.shape[1]):
                acc += _mx_inject(words, r, b, xp) * e8m0_i32(scales[r, b])
        else:
            for b in range(scales.shape[1]):
                acc += _mx_select(words, r, b, xp) * e8m0_i32(scales[r, b])
        y[r] = acc * post


@nb.njit(parallel=True, **_JIT)
def gemv_nvfp4(words, scales, g, xp, y, chunk, inject):
    """y[r] = row r . x for NVFP4 words [N, Kp/8]; xp [16, Kp/16] the planes (x 2^63 when
    inject), g the tensor scale."""
    n = words.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _nvfp4_rows(words, scales, g, xp, y, c * chunk, min(n, (c + 1) * chunk), inject)


@nb.njit(parallel=True, **_JIT)
def gemv_mxfp4(words, scales, xp, y, chunk, inject):
    """y[r] = row r . x for MXFP4 words [N, Kp/8]; xp [32, Kp/32] the planes (x 2^63 when
    inject)."""
    n = words.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _mxfp4_rows(words, scales, xp, y, c * chunk, min(n, (c + 1) * chunk), inject)
