"""Decode helpers as @triton.jit functions, mirroring softfp8/decode.py bit for bit.

Each takes integer codes (any integer tensor, the code in its low bits) and returns float32, or
float16 where the name says so. The software variants use integer operations only, so they
compile for every GPU Triton targets and the PTX holds no FP8/FP4 `cvt` (tests/
test_triton_compile.py checks this). `HW` selects the hardware FP8 conversion (sm_89+ only):
a bitcast to Triton's float8 types and one `.to()`, the same bits as the software path.
"""
import triton
import triton.language as tl

from ._const import Const
from ._mma_ptx import e4m3_word_div256_asm

_F32_QNAN = Const(0x7FC00000)
_TWO_POW_126 = Const(8.507059173023462e37) # 2^126: undoes the injection's shift
_TWO_POW_M9 = Const(0.001953125) # 2^-9: E4M3 subnormal step (2^(1 - 7 - 3))


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


# -- NVIDIA PTX: four codes per 32-bit word ---------------------------------------------------
# Triton unpacks a uint8 tensor one byte per register and re-packs fp16 pairs for the tensor cores:
# several integer operations a code, which made the 8-bit GEMV decode-bound (measured on the H200,
# docs/decisions.md). `prmt` moves bytes of a whole word at once. With pack=4, Triton hands the asm
# one register holding codes 0..3 and takes back two registers of fp16 pairs ($0: codes 0, 1; $1:
# codes 2, 3; element 0 in the low half). NVIDIA only (the launcher's ASM flag); the functions above
# are the portable mirror, and the GPU tests check both give the same bits.

@triton.jit
def e5m2_to_f16_ptx(code):
    """E5M2 -> fp16: two `prmt` per four codes (each byte to the high byte of an fp16)."""
    return tl.inline_asm_elementwise(
        asm="""{
        prmt.b32 $0, $2, 0, 0x1404;
        prmt.b32 $1, $2, 0, 0x3424;
        }""",
        constraints="=r,=r,r", args=[code], dtype=tl.float16, is_pure=True, pack=4)


# one E4M3 pair decode for this module and the mma tiles: `_mma_ptx._e4m3_pair_div256`
_E4M3_DIV256_PTX = Const(e4m3_word_div256_asm(nan=True))
_E4M3_DIV256_FINITE_PTX = Const(e4m3_word_div256_asm(nan=False))


@triton.jit
def e4m3_to_f16_div256_ptx(code, NAN: tl.constexpr = True):
    """E4M3fn -> fp16 * 2^-8 (as `e4m3_to_f16_div256`) on fp16 pairs: per half, the code
    beside a byte of its sign (one `prmt`), << 7, & 0xBF80: the code's 7 low bits land on
    7..13, its sign on 15 (`_mma_ptx._e4m3_pair_div256`). The NaN codes are the only ones that
    read 1.875 (the largest finite is 448 * 2^-8 = 1.75), and 1.875 * 34944 = 65520 rounds to
    inf in fp16 while 1.75 * 34944 = 61152 does not; so fma(r * 34944, 0, r) is inf * 0 + r =
    NaN there and exactly r elsewhere (the product with 0 is a zero of r's sign, so signed zeros and
    subnormals are kept). Two fp16x2 operations per pair for the NaN codes (E4M3 was
    decode-bound on the H200). NAN=False leaves them out: for codes known to hold no NaN
    (the launcher checks the weight once, `codes_nan_free`), the same bits."""
    # no early return: triton 3.6 builds every branch after one
    if NAN:
        out = tl.inline_asm_elementwise(asm=_E4M3_DIV256_PTX, constraints="=r,=r,r", args=[code],
                                        dtype=tl.float16, is_pure=True, pack=4)
    else:
        out = tl.inline_asm_elementwise(asm=_E4M3_DIV256_FINITE_PTX, constraints="=r,=r,r",
                                        args=[code], dtype=tl.float16, is_pure=True, pack=4)
    return out


@triton.jit
def e2m1_pair_to_f16_ptx(code):
    """Both E2M1 codes of each byte -> (low nibble, high nibble) as exact fp16, by injection on
    fp16 pairs: `prmt` spreads two bytes over the halves of a word, a shift and mask put
    ``e1 e0 m0`` at fp16 bits 9..11 and the sign at 15 (value * 2^-14; ±0.5 an fp16 subnormal),
    and one `mul.f16x2` by 2^14 normalises two codes at once. Only where the probe found
    denormals honoured (INJECT); about 2 operations a code against ~10 unpacked."""
    return tl.inline_asm_elementwise(
        asm="""{
        .reg .b32 t0, t1, a, b, c;
        mov.b32 c, 0x74007400;
        prmt.b32 t0, $4, 0, 0x4140;
        prmt.b32 t1, $4, 0, 0x4342;
        shl.b32 a, t0, 9;
        and.b32 a, a, 0x0E000E00;
        shl.b32 b, t0, 12;
        and.b32 b, b, 0x80008000;
        or.b32 a, a, b;
        mul.rn.f16x2 $0, a, c;
        shl.b32 a, t1, 9;
        and.b32 a, a, 0x0E000E00;
        shl.b32 b, t1, 12;
        and.b32 b, b, 0x80008000;
        or.b32 a, a, b;
        mul.rn.f16x2 $1, a, c;
        shl.b32 a, t0, 5;
        and.b32 a, a, 0x0E000E00;
        shl.b32 b, t0, 8;
        and.b32 b, b, 0x80008000;
        or.b32 a, a, b;
        mul.rn.f16x2 $2, a, c;
        shl.b32 a, t1, 5;
        and.b32 a, a, 0x0E000E00;
        shl.b32 b, t1, 8;
        and.b32 b, b, 0x80008000;
        or.b32 a, a, b;
        mul.rn.f16x2 $3, a, c;
        }""",
        constraints="=r,=r,=r,=r,r", args=[code], dtype=(tl.float16, tl.float16),
        is_pure=True, pack=4)
