"""FP4 block scales in the AVX-512 row loops (_lut, float32 steps, and _dpbf16,
bf16 steps): each step's scales spread over its 16 word lanes and multiplied into the row
sums, from float32 scales decoded before the loop or from the weight's own codes decoded in it
(E4M3 for NVFP4, two steps at a time; E8M0 for MXFP4), where every code allows it
(`loop_decodes`, `loop_decodes_e8m0`; _pshufb takes the first too).
"""
from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils

from ._ir import vload

LANES = 16


def for_steps(builder, s0, s1, intp, srows, wpb, codes_of, step):
    """IR: step(s, scales) for each step s in [s0, s1) (_lut's rows and _dpbf16's).
    scales is None (`add_scaled` decodes each row's scales for the step), or for NVFP4's E4M3
    codes decoded in the loop (wpb 2, codes_of "e4m3") each row's float32 scale vector for the
    step, decoded together with the other step of its pair: the pair's 16 codes widened and
    converted once (`e4m3_pair_scales`), each step's 8 spread over its 16 lanes by one permute
    (where a step alone spends the widening and conversion on its 8). An odd last step goes
    alone."""
    one = ir.Constant(intp, 1)
    if codes_of != "e4m3" or wpb != 2:
        with cgutils.for_range_slice(builder, s0, s1, one, intp=intp) as (s, _):
            step(s, None)
        return
    two = ir.Constant(intp, 2)
    end = builder.add(s0, builder.mul(builder.sdiv(builder.sub(s1, s0), two), two))
    with cgutils.for_range_slice(builder, s0, end, two, intp=intp) as (s, _):
        w0 = builder.mul(s, ir.Constant(intp, LANES))
        pairs = [e4m3_pair_scales(builder, srow, w0, intp) for srow in srows]
        step(s, [p[0] for p in pairs])
        step(builder.add(s, one), [p[1] for p in pairs])
    with builder.if_then(builder.icmp_signed("<", end, s1)):
        step(end, None)


def e4m3_pair_scales(builder, srow, w0, intp):
    """IR: the float32 scale vectors of NVFP4 steps w0 / 16 and the next (16 lanes each, lane i
    the scale of its word's block) from the 16 E4M3 codes of their blocks in the scale row
    `srow`, decoded as one vector (`e4m3_div256`), then spread a step each."""
    vb = ir.VectorType(ir.IntType(8), LANES)
    dec = e4m3_div256(builder, vload(builder, srow, builder.udiv(w0, ir.Constant(intp, 2)), vb,
                                     align=1))
    return tuple(builder.shuffle_vector(dec, ir.Constant(dec.type, None), ir.Constant(
        ir.VectorType(ir.IntType(32), LANES), [8 * h + lane // 2 for lane in range(LANES)]))
        for h in (0, 1))


def e4m3_div256(builder, codes):
    """IR: float32 E4M3 / 256 of a vector of E4M3 codes (i8 lanes), each below 0x7F: code << 7
    is that half (the code's 4 exponent bits in the half's 5, subnormals included), widened
    exactly by vcvtph2ps."""
    n = codes.type.count
    vh = ir.VectorType(ir.IntType(16), n)
    halves = builder.shl(builder.zext(codes, vh), ir.Constant(vh, [ir.Constant(vh.element, 7)] * n))
    return builder.fpext(builder.bitcast(halves, ir.VectorType(ir.HalfType(), n)),
                         ir.VectorType(ir.FloatType(), n))


def add_scaled(builder, srow, w0, wpb, parts, accs, intp, codes_of=None, scale=None):
    """IR: each accumulator (alloca) in accs += its part (a float32 vector, lane i summing word
    w0 + i's codes) times the step's 16 / wpb block scales: `scale`, where the caller decoded
    them (`for_steps`), else `step_scales` of the scale row `srow`."""
    vf = ir.VectorType(ir.FloatType(), LANES)
    fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vf, [vf, vf, vf]),
                                         "llvm.fma.v16f32")
    if scale is None:
        scale = step_scales(builder, srow, w0, wpb, intp, codes_of)
    for part, acc in zip(parts, accs):
        builder.store(builder.call(fma, [part, scale, builder.load(acc)]), acc)


def step_scales(builder, srow, w0, wpb, intp, codes_of=None):
    """IR: the float32 scales of the step at word w0 from the scale row `srow`, each of its
    16 / wpb blocks' spread over its words' lanes by one permute (spreading them in memory per
    row cost ~0.15 us a row: a scalar loop). codes_of None: srow holds float32 scales; "e4m3":
    E4M3 codes below 0x7F, decoded as E4M3 / 256 (`e4m3_div256`); "e8m0": codes in 1..254, and
    code << 23 is the float32 2^(code - 127)."""
    f32, i32 = ir.FloatType(), ir.IntType(32)
    nblk = LANES // wpb
    vf, few = ir.VectorType(f32, LANES), ir.VectorType(f32, nblk)
    spread = ir.Constant(ir.VectorType(i32, LANES), [lane // wpb for lane in range(LANES)])
    first = builder.udiv(w0, ir.Constant(intp, wpb))
    if codes_of is None:
        return builder.shuffle_vector(vload(builder, srow, first, few), ir.Constant(few, None),
                                      spread)
    vb = ir.VectorType(ir.IntType(8), nblk)
    codes = builder.shuffle_vector(vload(builder, srow, first, vb, align=1),
                                   ir.Constant(vb, None), spread)
    if codes_of == "e4m3":
        return e4m3_div256(builder, codes)
    assert codes_of == "e8m0", codes_of
    vi = ir.VectorType(i32, LANES)
    return builder.bitcast(builder.shl(builder.zext(codes, vi), ir.Constant(
        vi, [ir.Constant(i32, 23)] * LANES)), vf)


def loop_decodes_e8m0(scales) -> bool:
    """Whether gemv_mxfp4_raw takes these MXFP4 scale codes: all in 1..254 (code << 23 is then
    the float32 2^(code - 127); 0 is 2^-127, a denormal, and 255 NaN)."""
    return bool(((scales >= 1) & (scales <= 254)).all())


def loop_decodes(scales) -> bool:
    """Whether gemv_nvfp4_raw (here and in _pshufb) takes these NVFP4 scale codes (a torch
    uint8 tensor): all below 0x7F, i.e. positive and not NaN, as quantize() makes them. Its loop
    decodes the codes itself (`add_scaled`), where gemv_nvfp4 decodes each row's scales in a
    pass before it."""
    return bool((scales < 0x7F).all())
