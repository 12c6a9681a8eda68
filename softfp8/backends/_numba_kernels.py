"""Numba kernels of the CPU backend: decoders, fused GEMV per format, and row dequantizers.

Imported only by `numba_cpu.matmul` (never at package import); every function compiles lazily on
first call and is cached on disk (cache=True), so a second process loads machine code instead of
compiling. fastmath is {'reassoc', 'contract'} only: it lets LLVM split the K-reduction over
vector lanes and fuse multiply-adds, and keeps NaN/inf semantics (no nnan/ninf), so NaN and inf
propagate as in torch's matmul.

Layout (softfp8/formats.py): FP8 rows are read as bytes [N, Kp], FP4 rows as bytes [N, Kp/2]
with the even code of a byte in its low nibble; the FP4 kernels take x split into its even and
odd elements (xe, xo) so both nibbles of a byte meet contiguous activations.
"""
from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_FM = {"reassoc", "contract"}
_JIT = dict(nogil=True, cache=True, fastmath=_FM)
_INLINE = dict(nogil=True, cache=True, fastmath=_FM, inline="always")

_I32 = np.int32
_F32_QNAN = 0x7FC00000
_F32_INF = 0x7F800000


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
    "e2m1_select": _array_decoder(e2m1_select), "e2m1_inject": _array_decoder(e2m1_inject),
    "e8m0": _array_decoder(e8m0),
}
"""name -> njit function(int32 codes [n]) -> float32 [n], the exact decoder each kernel inlines."""


# -- fused GEMV (M = 1): decode in registers, two rows per pass ---------------------------------
# Two rows at a time: x is loaded once for both, and each thread keeps two memory streams in
# flight. Row ranges [r0, r1) come from the parallel drivers below, one chunk per prange step.

@nb.njit(**_JIT)
def _gemv_e5m2_rows(codes, x, y, r0, r1):
    kp = codes.shape[1]
    r = r0
    while r + 1 < r1:
        a0 = np.float32(0.0)
        a1 = np.float32(0.0)
        for k in range(kp):
            a0 += e5m2_fast(codes[r, k]) * x[k]
            a1 += e5m2_fast(codes[r + 1, k]) * x[k]
        y[r] = a0
        y[r + 1] = a1
        r += 2
    if r < r1:
        a0 = np.float32(0.0)
        for k in range(kp):
            a0 += e5m2_fast(codes[r, k]) * x[k]
        y[r] = a0


@nb.njit(**_JIT)
def _gemv_e4m3_rows(codes, x, y, r0, r1):
    kp = codes.shape[1]
    r = r0
    while r + 1 < r1:
        a0 = np.float32(0.0)
        a1 = np.float32(0.0)
        for k in range(kp):
            a0 += e4m3_fast_div256(codes[r, k]) * x[k]
            a1 += e4m3_fast_div256(codes[r + 1, k]) * x[k]
        y[r] = a0 * np.float32(256.0)
        y[r + 1] = a1 * np.float32(256.0)
        r += 2
    if r < r1:
        a0 = np.float32(0.0)
        for k in range(kp):
            a0 += e4m3_fast_div256(codes[r, k]) * x[k]
        y[r] = a0 * np.float32(256.0)


# FP4: each byte holds codes 2i (low nibble) and 2i+1 (high nibble), met by xe[i] and xo[i]. The
# block scale is expanded per byte into `sb` (one row at a time, L1-resident), which keeps the
# main loop a plain multiply-add reduction that LLVM vectorises across 16 bytes.

@nb.njit(**_INLINE)
def _fp4_row_dot(codes, r, xe, xo, sb, inject):
    acc = np.float32(0.0)
    if inject:
        for i in range(codes.shape[1]):
            b = _I32(codes[r, i])
            acc += (e2m1_inject(b) * xe[i] + e2m1_inject(_I32(b >> _I32(4))) * xo[i]) * sb[i]
    else:
        for i in range(codes.shape[1]):
            b = _I32(codes[r, i])
            acc += (e2m1_select(b) * xe[i] + e2m1_select(_I32(b >> _I32(4))) * xo[i]) * sb[i]
    return acc


@nb.njit(**_INLINE)
def _nvfp4_expand_scales(scales, r, g, sb):
    for blk in range(scales.shape[1]):
        s = e4m3_bits(scales[r, blk]) * g  # as dequantize: E4M3 block scale x tensor scale
        for t in range(8):  # 16 codes = 8 bytes per block
            sb[blk * 8 + t] = s


@nb.njit(**_INLINE)
def _mxfp4_expand_scales(scales, r, sb):
    for blk in range(scales.shape[1]):
        s = e8m0(scales[r, blk])
        for t in range(16):  # 32 codes = 16 bytes per block
            sb[blk * 16 + t] = s


@nb.njit(**_JIT)
def _gemv_nvfp4_rows(codes, scales, g, xe, xo, y, r0, r1, inject):
    sb = np.empty(codes.shape[1], np.float32)
    for r in range(r0, r1):
        _nvfp4_expand_scales(scales, r, g, sb)
        y[r] = _fp4_row_dot(codes, r, xe, xo, sb, inject)


@nb.njit(**_JIT)
def _gemv_mxfp4_rows(codes, scales, xe, xo, y, r0, r1, inject):
    sb = np.empty(codes.shape[1], np.float32)
    for r in range(r0, r1):
        _mxfp4_expand_scales(scales, r, sb)
        y[r] = _fp4_row_dot(codes, r, xe, xo, sb, inject)


# -- parallel drivers: rows split into chunks, one prange step each -----------------------------

@nb.njit(parallel=True, **_JIT)
def gemv_e5m2(codes, x, y, chunk):
    n = codes.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _gemv_e5m2_rows(codes, x, y, c * chunk, min(n, (c + 1) * chunk))


@nb.njit(parallel=True, **_JIT)
def gemv_e4m3(codes, x, y, chunk):
    n = codes.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _gemv_e4m3_rows(codes, x, y, c * chunk, min(n, (c + 1) * chunk))


@nb.njit(parallel=True, **_JIT)
def gemv_nvfp4(codes, scales, g, xe, xo, y, chunk, inject):
    n = codes.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _gemv_nvfp4_rows(codes, scales, g, xe, xo, y, c * chunk, min(n, (c + 1) * chunk), inject)


@nb.njit(parallel=True, **_JIT)
def gemv_mxfp4(codes, scales, xe, xo, y, chunk, inject):
    n = codes.shape[0]
    for c in nb.prange((n + chunk - 1) // chunk):
        _gemv_mxfp4_rows(codes, scales, xe, xo, y, c * chunk, min(n, (c + 1) * chunk), inject)


# -- M > 1: decode a row once into fp32, then reuse it for every activation row -----------------

E5M2, E4M3, NVFP4, MXFP4 = 0, 1, 2, 3  # kernel-side format ids (numba_cpu maps Format to these)


@nb.njit(**_INLINE)
def _decode_row(kind, codes, scales, g, r, inject, out):
    """Row r as float32 into out[:Kp]; FP8 rows unscaled (the caller applies row scales)."""
    if kind == E5M2:
        for k in range(codes.shape[1]):
            out[k] = e5m2_fast(codes[r, k])
    elif kind == E4M3:
        for k in range(codes.shape[1]):
            out[k] = e4m3_fast_div256(codes[r, k]) * np.float32(256.0)
    else:
        per = 8 if kind == NVFP4 else 16  # bytes per block scale
        for blk in range(scales.shape[1]):
            s = e4m3_bits(scales[r, blk]) * g if kind == NVFP4 else e8m0(scales[r, blk])
            for i in range(blk * per, (blk + 1) * per):
                b = _I32(codes[r, i])
                if inject:
                    out[2 * i] = e2m1_inject(b) * s
                    out[2 * i + 1] = e2m1_inject(_I32(b >> _I32(4))) * s
                else:
                    out[2 * i] = e2m1_select(b) * s
                    out[2 * i + 1] = e2m1_select(_I32(b >> _I32(4))) * s


@nb.njit(parallel=True, **_JIT)
def decode_matmul(kind, codes, scales, g, x, y, w, r0, r1, chunk, inject):
    """Rows r0..r1 of the weight. With x [M, Kp] and y [M, N]: y[:, r] = x @ row r (small M).
    With w [r1 - r0, Kp] (and x empty): write the decoded rows into w (dequantise for large M)."""
    kp = x.shape[1] if x.shape[0] > 0 else w.shape[1]
    for c in nb.prange((r1 - r0 + chunk - 1) // chunk):
        buf = np.empty(kp, np.float32)
        for r in range(r0 + c * chunk, min(r1, r0 + (c + 1) * chunk)):
            if x.shape[0] == 0:
                _decode_row(kind, codes, scales, g, r, inject, w[r - r0])
                continue
            _decode_row(kind, codes, scales, g, r, inject, buf)
            for m in range(x.shape[0]):
                acc = np.float32(0.0)
                for k in range(kp):
                    acc += buf[k] * x[m, k]
                y[m, r] = acc
