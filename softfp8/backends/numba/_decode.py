"""Numba decoders: scalar mirrors of softfp8/decode.py, the packed-word decoders the GEMV kernels
use, and array wrappers so the tests can run each over every code (split from _kernels)."""
from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ._cache import install

install()  # before any cache=True function is defined, here or in a module importing this one

_FM = {"reassoc", "contract"}
_JIT = dict(nogil=True, cache=True, fastmath=_FM)
_INLINE = dict(nogil=True, cache=True, fastmath=_FM, inline="always")

_I32 = np.int32
_F32_QNAN = 0x7FC00000
_F32_INF = 0x7F800000
_SIGN = np.int32(-0x80000000)
_BF80 = np.int16(-0x4080)  # 0xBF80: fp16 bits 7..13 and 15
_E2M1_BITS = np.int32(0x01C00000)  # e1 e0 m0 at float32 bits 22..24


# -- bit casts: numba has no scalar float32<->int32 view in parallel code, nor float16 on CPU --

@intrinsic
def _i2f(typingctx, bits):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@intrinsic
def _f2i(typingctx, value):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.int32(types.float32), codegen


@intrinsic
def _half_bits_to_f32(typingctx, bits):
    """IEEE half bit pattern (uint16) to float32: LLVM's fpext, which x86 (F16C/AVX-512) does with
    vcvtph2ps on 16 lanes at once; exact for every half, subnormals included."""
    def codegen(context, builder, sig, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
    return types.float32(types.uint16), codegen


# -- decoders (scalar, inlined into the kernels; mirrors of softfp8/decode.py) ----------------

@nb.njit(**_INLINE)
def _minifloat(c, exp_bits, man_bits, bias, has_inf, has_nan):
    """decode._decode_minifloat in scalar form: re-bias normals, subnormal = man * 2^(1-bias-m)."""
    c = np.int32(c)
    bits = 1 + exp_bits + man_bits
    sign = (c >> (bits - 1)) & 1
    e = (c >> man_bits) & ((1 << exp_bits) - 1)
    m = c & ((1 << man_bits) - 1)
    normal = ((e - bias + 127) << 23) | (m << (23 - man_bits))
    sub = _f2i(np.float32(m) * np.float32(2.0 ** (1 - bias - man_bits)))
    mag = sub if e == 0 else normal
    top = e == (1 << exp_bits) - 1
    if has_inf:
        mag = (_F32_INF if m == 0 else _F32_QNAN) if top else mag
    elif has_nan:  # "fn": only all-ones exponent and mantissa is NaN
        mag = _F32_QNAN if (top and m == (1 << man_bits) - 1) else mag
    return _i2f(np.int32(mag | (sign << 31)))


@nb.njit(**_INLINE)
def e5m2_bits(c):
    """E5M2 by integer bit operations (the reference's algorithm)."""
    return _minifloat(c, 5, 2, 15, True, True)


@nb.njit(**_INLINE)
def e4m3_bits(c):
    """E4M3fn by integer bit operations (the reference's algorithm)."""
    return _minifloat(c, 4, 3, 7, False, True)


@nb.njit(**_INLINE)
def e5m2_fast(c):
    """E5M2: ``code << 8`` is the fp16 bit pattern (DESIGN.md §2); the hardware half->float
    conversion then does sign, subnormals, inf and NaN in one vcvtph2ps per 16 codes. The bit
    decoder above costs ~12 vector ops per 16 codes and made the GEMV compute-bound (measured
    20 ms against 3.4 ms single-threaded at 11008x4096). Same bits: tests/test_numba.py."""
    return _half_bits_to_f32(np.uint16(np.uint16(c) << np.uint16(8)))


@nb.njit(**_INLINE)
def e4m3_fast_div256(c):
    """E4M3fn value / 256, via fp16: the 7 value bits shifted to fp16 bits 7..13 are the same
    number with exponent bias 15 instead of 7 (so x 2^-8), fp16 subnormals covering E4M3's; the
    kernels multiply the row sum by 256. Only 0x7F/0xFF need a select (NaN; E4M3fn has no inf)."""
    c = np.uint16(c)
    h = np.uint16(((c & np.uint16(0x7F)) << np.uint16(7)) | ((c & np.uint16(0x80)) << np.uint16(8)))
    v = _half_bits_to_f32(h)
    return np.float32(np.nan) if (c & np.uint16(0x7F)) == np.uint16(0x7F) else v


@nb.njit(**_INLINE)
def e4m3_i32_div256(c):
    """e4m3_fast_div256 with every step in int32 (the uint16 one widens to int64 lanes, 8 per
    register): the FP4 kernels decode a row's block scales with it, 16 per vector op."""
    c = _I32(c)
    h = _I32(_I32(_I32(c & _I32(0x7F)) << _I32(7)) | _I32(_I32(c & _I32(0x80)) << _I32(8)))
    v = _half_bits_to_f32(np.uint16(h))
    return np.float32(np.nan) if _I32(c & _I32(0x7F)) == _I32(0x7F) else v


@nb.njit(**_INLINE)
def e2m1_select(c):
    """E2M1 by selection (decode.decode_e2m1_to_f32): the normalised float32 is built directly,
    no denormal anywhere, exact with or without FTZ/DAZ. Every intermediate is wrapped in int32:
    numba widens integer arithmetic to int64, which halves the vector lanes (measured 2.3 against
    7.3 Gelem/s in the NVFP4 GEMV); the wraps let LLVM keep 16 int32 lanes per zmm."""
    c = _I32(_I32(c) & _I32(0xF))
    e = _I32(_I32(c >> _I32(1)) & _I32(3))
    m = _I32(c & _I32(1))
    normal = _I32(_I32(_I32(e + _I32(126)) << _I32(23)) | _I32(m << _I32(22)))
    sub = _f2i(np.float32(m) * np.float32(0.5))  # man * 2^(1 - bias - man_bits), exact
    mag = sub if e == _I32(0) else normal
    return _i2f(_I32(mag | _I32(_I32(c >> _I32(3)) << _I32(31))))


@nb.njit(**_INLINE)
def e2m1_inject(c):
    """E2M1 by exponent injection (decode.decode_e2m1_to_f32_inject): e1 e0 m0 at float32 bits
    22..24, sign at 31, times 2^126. Wrong for +-0.5 where denormals flush (see that docstring)."""
    c = _I32(_I32(c) & _I32(0xF))
    bits = _I32(_I32(_I32(c & _I32(7)) << _I32(22)) | _I32(_I32(c >> _I32(3)) << _I32(31)))
    return _i2f(bits) * np.float32(2.0 ** 126)


@nb.njit(**_INLINE)
def e8m0(c):
    """E8M0 to float32: 2^(c - 127); code 0 is the denormal 2^-127, 0xFF is NaN."""
    c = np.int32(c)
    bits = np.int32(1 << 22) if c == 0 else np.int32(c << 23)
    return _i2f(np.int32(_F32_QNAN) if c == 0xFF else bits)


@nb.njit(**_INLINE)
def e8m0_i32(c):
    """e8m0 with every step in int32, so it shares the kernel's 16 int32 lanes."""
    c = _I32(c)
    bits = _I32(c << _I32(23))
    bits = _I32(1 << 22) if c == _I32(0) else bits
    return _i2f(_I32(_F32_QNAN) if c == _I32(0xFF) else bits)


# -- array wrappers, so tests can run each kernel decoder over every code ------------------------

def _array_decoder(scalar):
    @nb.njit(**_JIT)
    def run(codes):
        out = np.empty(codes.shape[0], np.float32)
        for i in range(codes.shape[0]):
            out[i] = scalar(codes[i])
        return out
    return run


DECODERS = {
    "e5m2_bits": _array_decoder(e5m2_bits), "e5m2_fast": _array_decoder(e5m2_fast),
    "e4m3_bits": _array_decoder(e4m3_bits), "e4m3_fast_div256": _array_decoder(e4m3_fast_div256),
    "e4m3_i32_div256": _array_decoder(e4m3_i32_div256),
    "e2m1_select": _array_decoder(e2m1_select), "e2m1_inject": _array_decoder(e2m1_inject),
    "e8m0": _array_decoder(e8m0), "e8m0_i32": _array_decoder(e8m0_i32),
}
"""name -> njit function(int32 codes [n]) -> float32 [n], the exact decoder each kernel inlines."""


# -- decoders over packed words, as the GEMV kernels read them ----------------------------------
# FP8 rows are read as uint16 (two codes per lane: code 2i in the low byte) and FP4 rows as int32
# words (eight codes per lane); x comes de-interleaved to match (the backend builds the planes once
# per call), so the inner loops are plain vector multiply-adds with no gathers or shuffles.

@nb.njit(**_INLINE)
def e5m2_pair(u):
    """Codes 2i and 2i+1 from one uint16: the low byte shifted up, and the high byte masked in
    place, are each the fp16 bit pattern (no zero-extension per byte: measured 27 against 19
    Gelem/s single core in cache)."""
    u = np.uint16(u)
    return (_half_bits_to_f32(np.uint16(u << np.uint16(8))),
            _half_bits_to_f32(np.uint16(u & np.uint16(0xFF00))))


@nb.njit(**_INLINE)
def e4m3_pair_div256(u):
    """Codes 2i and 2i+1 from one uint16, each / 256 (as e4m3_fast_div256)."""
    u = np.uint16(u)
    lo, hi = e4m3_pair_div256_finite(u)
    lo = np.float32(np.nan) if np.uint16(u & np.uint16(0x7F)) == np.uint16(0x7F) else lo
    hi = np.float32(np.nan) if np.uint16(u & np.uint16(0x7F00)) == np.uint16(0x7F00) else hi
    return lo, hi


@nb.njit(**_INLINE)
def e4m3_pair_div256_finite(u):
    """e4m3_pair_div256 for codes known to hold no NaN (0x7F, 0xFF): the same bits without the
    NaN fix, which took 16 of the AVX2 loop's 36 instructions (compares, widening, blends).
    value / 256 in fp16 is the code's 7 low bits at bits 7..13 and its sign at bit 15: an
    arithmetic shift right by one copies the sign into bit 14, which the mask 0xBF80 clears
    (3 operations for the low code, 2 for the high one, as the GPU's pair decode)."""
    s = np.int16(np.uint16(u))
    lo = _half_bits_to_f32(np.uint16(np.int16(np.int16(np.int16(s << np.int16(8))
                                                       >> np.int16(1)) & _BF80)))
    hi = _half_bits_to_f32(np.uint16(np.int16(np.int16(s >> np.int16(1)) & _BF80)))
    return lo, hi


@nb.njit(**_INLINE)
def e2m1_word_select(w, j):
    """Code j (bits 4j..4j+3) of int32 word w, select decoder in 8 int32 ops: magnitude bits are
    (k << 22) + 0x3F000000 for k = code & 7 >= 2, and two selects fix 0.5 and 0; no denormal."""
    t = _I32(w >> _I32(4 * j))
    k = _I32(t & _I32(7))
    mag = _I32(_I32(k << _I32(22)) + _I32(0x3F000000))
    mag = _I32(0x3F000000) if k == _I32(1) else mag
    mag = _I32(0) if k == _I32(0) else mag
    return _i2f(_I32(mag | _I32(_I32(t << _I32(28)) & _I32(-0x80000000))))


@nb.njit(**_INLINE)
def e2m1_word_inject_div2p126(w, j):
    """Code j of word w by exponent injection, *without* the x 2^126: the value / 2^126 (0.5
    becomes the denormal 2^-127, so FTZ/DAZ breaks it exactly as e2m1_inject). The kernel folds
    2^126 as 2^63 into x and 2^63 into the row sum (neither overflows: the backend checks |x|)."""
    t = _I32(w << _I32(28 - 4 * j))
    return _i2f(_I32(_I32(t & _I32(-0x80000000)) | _I32(_I32(t >> _I32(6)) & _I32(0x01C00000))))


def _pair_decoder(pair):
    @nb.njit(**_JIT)
    def run(u16):
        out = np.empty(2 * u16.shape[0], np.float32)
        for i in range(u16.shape[0]):
            out[2 * i], out[2 * i + 1] = pair(u16[i])
        return out
    return run


def _word_decoder(code):
    @nb.njit(**_JIT)
    def run(words):
        out = np.empty(8 * words.shape[0], np.float32)
        for i in range(words.shape[0]):
            for j in range(8):
                out[8 * i + j] = code(words[i], j)
        return out
    return run


PACKED_DECODERS = {
    "e5m2_pair": _pair_decoder(e5m2_pair), "e4m3_pair_div256": _pair_decoder(e4m3_pair_div256),
    "e2m1_word_select": _word_decoder(e2m1_word_select),
    "e2m1_word_inject_div2p126": _word_decoder(e2m1_word_inject_div2p126),
}
"""name -> njit function over uint16 (pairs) or int32 (words) -> float32 codes in K order."""
