"""Decode helpers as @triton.jit functions, mirroring softfp8/decode.py bit for bit.

Each takes integer codes (any integer tensor, the code in its low bits) and returns float32, or
float16 where the name says so. The software variants use integer operations only, so they
compile for every GPU Triton targets and the PTX holds no FP8/FP4 `cvt` (tests/
test_triton_compile.py checks this). `HW` selects the hardware FP8 conversion (sm_89+ only):
a bitcast to Triton's float8 types and one `.to()`, the same bits as the software path.
"""
import triton
import triton.language as tl

_F32_QNAN = tl.constexpr(0x7FC00000)
_TWO_POW_126 = tl.constexpr(8.507059173023462e37) # 2^126: undoes the injection's shift
_TWO_POW_M9 = tl.constexpr(0.001953125) # 2^-9: E4M3 subnormal step (2^(1 - 7 - 3))


@triton.jit
def e5m2_to_f16(code):
    """E5M2 is fp16 without its low mantissa byte: ``code << 8`` is the fp16 bit pattern, with
    subnormals, inf and NaN included. Widening fp16 to fp32 is exact (a cvt with f16 operands)."""
    return ((code.to(tl.int32) & 0xFF) << 8).to(tl.int16).to(tl.float16, bitcast=True)


@triton.jit
def e5m2_to_f32(code, HW: tl.constexpr):
    if HW:
        return (code.to(tl.int32) & 0xFF).to(tl.uint8).to(tl.float8e5, bitcast=True).to(tl.float32)
    return e5m2_to_f16(code).to(tl.float32)


@triton.jit
def e4m3_to_f32(code, HW: tl.constexpr):
    """E4M3fn by integer re-bias: a normal code's exponent moves from bias 7 to 127 by adding
    120 << 23; subnormals are mantissa * 2^-9 (a normal float32, so no denormal appears);
    0x7F/0xFF are NaN; the sign is or-ed in last."""
    if HW:
        return (code.to(tl.int32) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
    c = code.to(tl.int32)
    em = c & 0x7F
    normal = (em << 20) + (120 << 23)
    sub = ((em & 7).to(tl.float32) * _TWO_POW_M9).to(tl.int32, bitcast=True)
    bits = tl.where(em < 8, sub, normal)
    bits = tl.where(em == 0x7F, _F32_QNAN, bits)
    bits = bits | ((c & 0x80) << 24)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def e2m1_to_f32(code, INJECT: tl.constexpr):
    """E2M1 (low nibble of `code`). INJECT: exponent injection, ``e1 e0 m0`` at float32 bits
    22..24 and one multiply by 2^126 -- fewer operations, but ±0.5 passes through a float32
    denormal and flushes to ±0 where FTZ is on (the probe decides). Otherwise select: the
    normalised float32 is built directly (exact everywhere)."""
    c = code.to(tl.int32)
    if INJECT:
        bits = ((c & 7) << 22) | (((c >> 3) & 1) << 31)
        return bits.to(tl.float32, bitcast=True) * _TWO_POW_126
    e = (c >> 1) & 3
    m = c & 1
    normal = ((e + 126) << 23) | (m << 22)
    bits = tl.where(e == 0, m * 0x3F000000, normal)  # e == 0: 0 or 0.5 (0x3F000000)
    bits = bits | (((c >> 3) & 1) << 31)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def e8m0_to_f32(code):
    """E8M0: 2^(code - 127); code 0 is 2^-127 (the float32 denormal 1 << 22), 0xFF is NaN."""
    c = code.to(tl.int32) & 0xFF
    bits = tl.where(c == 0, 0x400000, c << 23)
    bits = tl.where(c == 0xFF, _F32_QNAN, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def e4m3_to_f16_div256(code):
    """E4M3fn as fp16 bits with one shift: the fields land in fp16's, and since fp16's bias (15)
    exceeds E4M3's (7) by 8, the fp16 reads value * 2^-8 -- subnormals included, as fp16
    subnormals (exact; tensor cores and the fp16->fp32 conversion keep them). The caller
    multiplies the fp32 accumulator by 256 once. 0x7F/0xFF would read as 1.875 * 2^-8: made NaN.
    Two integer operations a code instead of the re-bias's eight: E4M3 was decode-bound."""
    c = code.to(tl.int32) & 0xFF
    bits = ((c & 0x7F) << 7) | ((c & 0x80) << 8)
    bits = tl.where((c & 0x7F) == 0x7F, bits | 0x7E00, bits)
    return bits.to(tl.int16).to(tl.float16, bitcast=True)


@triton.jit
def e2m1_to_f16(code, INJECT: tl.constexpr):
    """E2M1 (low nibble of `code`) as exact fp16, for tensor-core tiles. INJECT: ``e1 e0 m0`` at
    fp16 bits 9..11 is value * 2^-14 (±0.5 an fp16 subnormal), then one fp16 multiply by 2^14
    (chosen only where the probe found denormals honoured). Select: the normalised fp16 is
    built directly: exponent e + 14, mantissa m; e == 0 gives 0 or 0.5 (0x3800)."""
    c = code.to(tl.int32)
    if INJECT:
        bits = ((c & 7) << 9) | ((c & 8) << 12)
        return bits.to(tl.int16).to(tl.float16, bitcast=True) * 16384.0
    mag = tl.where((c & 6) != 0, ((c & 7) << 9) + 0x3800, (c & 1) * 0x3800)
    bits = mag | ((c & 8) << 12)
    return bits.to(tl.int16).to(tl.float16, bitcast=True)
