"""PTX text for Kernel.MMA_GEMV (`_mma`): one thread's share of a loop step, as strings.

Operand numbering follows Triton's inline asm: outputs first ($0..), then the inputs in order.
The fragment plan, the pairing of codes and x, and why each decode is exact are in `_mma`'s
docstring (the E4M3 pair decode also builds `_decode.e4m3_to_f16_div256_ptx`); the tests that
check them bit for bit are in tests/test_mma_ptx.py (the PTX emulator, CI) and
tests/test_triton.py and tests/test_mma_gemv.py on a GPU (`test_gpu_every_*_code_*`,
`test_gpu_mma_gemv_*`).
"""


FP4_PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7))
"""The codes of a word (c..c+7) that `_decode_word`'s fp16 pairs p0..p3 hold: x's own pairs
(x's word q holds values 2q, 2q+1), so x goes to the mma as it lies, as for the 8-bit formats."""

FP4_INJECT_PAIRS = ((0, 2), (1, 3), (4, 6), (5, 7))
"""The codes of a word that `_decode_word_inject`'s pairs p0..p3 hold: one `prmt` takes two
even codes (or two odd codes) of one register, so x is re-paired to match (`_x_pairs`)."""

F16_2P14 = "0x74007400"
"""2^14 in both fp16 halves: `_decode_word_inject`'s pairs are the codes * 2^-14."""


def _decode_word(w: str, p: str, scale: str) -> str:
    """PTX: word `w` (8 codes c..c+7) -> fp16 pairs p0..p3 = codes c + FP4_PAIRS[i] * scale.
    One `prmt` looks up four |codes| in the table t0:t1 (fp16 high bytes); a second `prmt`
    replicates the four codes' sign bits over their bytes (selector bit 3), one `lop3` ors them
    in; each pair is then a `prmt` of two signed bytes beside zero bytes: 17 instructions a word
    (19 when each pair took its own sign shift and `lop3`, and x was re-paired to match).
    Exact and free of denormals: the select decoder's counterpart."""
    out = [f"and.b32 sl, {w}, 0x77777777;", "shr.b32 sh, sl, 16;",
           "prmt.b32 ml, t0, t1, sl;", "prmt.b32 mh, t0, t1, sh;",
           # the sign of code k is bit 4k + 3: a byte's top bit in w (odd k) or in w << 4 (even)
           f"shl.b32 u, {w}, 4;",
           f"prmt.b32 h, {w}, u, 0x9D8C;", "lop3.b32 ml, ml, h, 0x80808080, 0xF8;",  # a | (b & c)
           f"prmt.b32 h, {w}, u, 0xBFAE;", "lop3.b32 mh, mh, h, 0x80808080, 0xF8;"]
    for i, (lo, hi) in enumerate(FP4_PAIRS):
        src = "ml" if hi < 4 else "mh"
        # bytes: 0 <- 0x00, 1 <- code lo, 2 <- 0x00, 3 <- code hi (4: byte 0 of the zero operand)
        out.append(f"prmt.b32 {p}{i}, {src}, 0, 0x{hi % 4:x}4{lo % 4:x}4;")
        out.append(f"mul.rn.f16x2 {p}{i}, {p}{i}, {scale};")
    return "\n".join(out)


def _decode_word_inject(w: str, p: str, scale: str) -> str:
    """PTX: word `w` (8 codes c..c+7) -> fp16 pairs p0..p3 = codes c + FP4_INJECT_PAIRS[i] *
    2^-14 * scale, by exponent injection: an E2M1 code s e1 e0 m laid in an fp16 high byte as
    s 0 0 0 e1 e0 m 0 is the code * 2^-14 (0.5 becomes the subnormal 2^-15; `mul.rn.f16x2`
    without .ftz keeps subnormals, by the PTX ISA). The even codes' bytes come from w << 1, the
    odd codes' from w >> 3 (a `mul.hi` by 2^29: ptxas keeps it an IMAD.HI on the FMA pipe, where
    a shift would be an SHF on the integer ALU), masked to magnitude at bits 1..3 and sign at
    bit 4; the sign moves to bit 7 by adding 7 * itself (a `mad`, also off the integer ALU); one
    `prmt` then places two bytes of a register beside zero bytes. 8 integer-ALU instructions a
    word where `_decode_word` has 12 (x's re-pairing adds one a word, `_x_pairs`)."""
    out = [f"shl.b32 ce, {w}, 1;", "and.b32 ce, ce, 0x1E1E1E1E;",
           f"mul.hi.u32 co, {w}, 0x20000000;", "and.b32 co, co, 0x1E1E1E1E;",
           "and.b32 cs, ce, 0x10101010;", "mad.lo.u32 ce, cs, 7, ce;",
           "and.b32 cs, co, 0x10101010;", "mad.lo.u32 co, cs, 7, co;"]
    for i, (lo, hi) in enumerate(FP4_INJECT_PAIRS):
        src = "ce" if lo % 2 == 0 else "co"
        out.append(f"prmt.b32 {p}{i}, {src}, 0, 0x{hi // 2:x}4{lo // 2:x}4;")
        out.append(f"mul.rn.f16x2 {p}{i}, {p}{i}, {scale};")
    return "\n".join(out)


def _x_pairs(xa: str, xb: str) -> list:
    """PTX: x words xa = (x0, x1), xb = (x2, x3) -> y0 = (x0, x2), y1 = (x1, x3): the pairs
    that meet `_decode_word_inject`'s (c, c + 2)."""
    return [f"prmt.b32 y0, {xa}, {xb}, 0x5410;", f"prmt.b32 y1, {xa}, {xb}, 0x7632;"]


def _mma(acc: str, a: tuple, b: tuple) -> str:
    d = "{" + ", ".join(f"{acc}{i}" for i in range(4)) + "}"
    return (f"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {d}, "
            f"{{{', '.join(a)}}}, {{{', '.join(b)}}}, {d};")


_E4M3_CONSTS = ["mov.b32 c, 0x78447844;", "mov.b32 z, 0;"]


_E4M3_PAIR_SEL = ("0x9180", "0xB3A2")
"""`prmt` selectors of `_e4m3_pair_div256`: bytes (0, 1) or (2, 3) of a word as
[code, sign byte, code, sign byte] (selector bit 3 replicates the selected byte's sign)."""


def _e4m3_pair_div256(src: str, half: int, dst: str, nan: bool = True) -> list:
    """PTX: E4M3 bytes 2 * half, 2 * half + 1 of `src` -> fp16 pair `dst` = value * 2^-8.
    value * 2^-8 in fp16 is the code's 7 low bits at bits 7..13 and its sign at bit 15: one
    `prmt` lays each code beside a byte of its sign, `<< 7` moves both into place, and one mask
    keeps bits 7..13 and 15 of each half (3 instructions; the code's own sign lands on bit 14,
    which the mask clears). Then the NaN fix of `_decode.e4m3_to_f16_div256_ptx` (1.875 *
    34944 is the only product that overflows, and inf * 0 + r is NaN). Uses h, r, q and the
    constants c, z (`_E4M3_CONSTS`). nan=False: no NaN fix, for codes known to hold no NaN."""
    out = [f"prmt.b32 h, {src}, 0, {_E4M3_PAIR_SEL[half]};", "shl.b32 h, h, 7;"]
    if not nan:
        return out + [f"and.b32 {dst}, h, 0xBF80BF80;"]
    return out + ["and.b32 r, h, 0xBF80BF80;", "mul.rn.f16x2 q, r, c;",
                  f"fma.rn.f16x2 {dst}, q, z, r;"]


def e4m3_word_div256_asm(nan: bool = True) -> str:
    """The asm block of `_decode.e4m3_to_f16_div256_ptx` (pack=4): four E4M3 codes in $2 ->
    fp16 pairs $0 (codes 0, 1) and $1 (codes 2, 3), value * 2^-8, by `_e4m3_pair_div256`."""
    body = [".reg .b32 h, r, q, c, z;"] + (_E4M3_CONSTS if nan else [])
    body += _e4m3_pair_div256("$2", 0, "$0", nan)
    body += _e4m3_pair_div256("$2", 1, "$1", nan)
    return "{\n" + "\n".join(body) + "\n}"


class _Operands:
    """The tile step's operand numbers: outputs first (one accumulator of 4 fp32, two when
    `wide`), then row g's 4 words, row g+8's, their scale bytes, x's 16 words (`wide`: then the
    16 words of x row g + 8, B's columns 8..15 in a second mma), the accumulator(s) in. `wide`:
    one decode of the weights serves 16 x rows, each decoded A fragment feeding two mma."""

    def __init__(self, wide: bool):
        self.n_acc = 2 if wide else 1
        n_out = 4 * self.n_acc
        i = n_out
        self.out = [[f"${4 * a + r}" for r in range(4)] for a in range(self.n_acc)]
        self.rg = [f"${i + j}" for j in range(4)]
        self.rh = [f"${i + 4 + j}" for j in range(4)]
        self.sg, self.sh = f"${i + 8}", f"${i + 9}"
        i += 10
        self.x = [[f"${i + 16 * a + j}" for j in range(16)] for a in range(self.n_acc)]
        i += 16 * self.n_acc
        self.acc_in = [[f"${i + 4 * a + r}" for r in range(4)] for a in range(self.n_acc)]
        self.constraints = ",".join(["=f"] * n_out + ["r"] * (10 + 16 * self.n_acc)
                                    + ["f"] * n_out)


def tile_constraints(wide: bool = False) -> str:
    """The inline-asm constraint string of `_tile_asm` / `_fp8_tile_asm` (`_Operands`)."""
    return _Operands(wide).constraints


def _acc_setup(o: _Operands, zero: bool) -> list:
    """Declare the accumulator(s) acc<a>_<r>, set from the inputs (or zero)."""
    regs = ", ".join(f"acc{a}_{r}" for a in range(o.n_acc) for r in range(4))
    return [f".reg .f32 {regs};"] + [
        f"mov.f32 acc{a}_{r}, {'0f00000000' if zero else o.acc_in[a][r]};"
        for a in range(o.n_acc) for r in range(4)]


def _fp8_tile_asm(fmt: str, nan: bool = True, wide: bool = False) -> str:
    """The 8-bit tile step, operands as `_tile_asm` (`_Operands`; the scale bytes unused, x's
    first 8 words as they lie): a word of codes c..c+3 is two fp16 pairs (c, c+1), (c+2, c+3) --
    one `prmt` each (E5M2 is fp16's high byte; E4M3 `_e4m3_pair_div256`: a `prmt`, a shift, a
    mask and the NaN fix, value * 2^-8) -- which meet x's own pairs, so x needs no re-pairing.
    nan=False: E4M3 without the NaN fix (codes known to hold no NaN)."""
    o = _Operands(wide)
    body = [".reg .b32 h, r, q, c, z;", ".reg .b32 g<2>, k<2>;"] + _E4M3_CONSTS
    body += _acc_setup(o, zero=False)

    def pair(word: str, dst: str, half: int) -> list:
        if fmt == "e5m2":  # codes 2 * half, 2 * half + 1 as the fp16 high bytes
            return [f"prmt.b32 {dst}, {word}, 0, {('0x1404', '0x3424')[half]};"]
        return _e4m3_pair_div256(word, half, dst, nan)
    for j in range(4):
        body += pair(o.rg[j], "g0", 0) + pair(o.rg[j], "g1", 1)
        body += pair(o.rh[j], "k0", 0) + pair(o.rh[j], "k1", 1)
        for a in range(o.n_acc):
            body.append(_mma(f"acc{a}_", ("g0", "k0", "g1", "k1"),
                             (o.x[a][2 * j], o.x[a][2 * j + 1])))
    body += [f"mov.f32 {o.out[a][r]}, acc{a}_{r};" for a in range(o.n_acc) for r in range(4)]
    return "{\n" + "\n".join(body) + "\n}"


MX_ROW_E_BIAS = {True: 15 + 14, False: 127}
"""MXFP4 with row exponents (`_tile_asm` row_e): the scale operand is e - E + this, by decode
(inject: True): the fp16 exponent field of 2^(e - E + 14) (the pairs are the codes * 2^-14), the
table decode's: the fp32 one of 2^(e - E)."""


def _mx_row_e_scales(o: "_Operands", inject: bool) -> list:
    """MXFP4 with row exponents: each row's factor 2^(e - E) (inject: * 2^14) as an fp16 pair
    from its biased operand (`MX_ROW_E_BIAS`), clamped to [0, the bias]: a nonzero block lies
    at most 2^23 below E (the launcher checks), an all-zero block may lie anywhere (any finite
    factor serves it; below the clamp 0). inject: the fp16 bits directly, 3 instructions a row;
    the table decode's factors go down to fp16 subnormals, so through fp32 and `cvt`."""
    bias = MX_ROW_E_BIAS[inject]
    body = [".reg .b32 bits;", ".reg .f32 f0;"]
    for src, lo, hi in ((o.sg, "sg01", "sg23"), (o.sh, "sh01", "sh23")):
        body += [f"max.s32 bits, {src}, 0;", f"min.s32 bits, bits, {bias};"]
        if inject:  # bits < 32: the field in both halves at once
            body += [f"mul.lo.u32 {lo}, bits, 0x04000400;"]
        else:
            body += ["shl.b32 bits, bits, 23;", "mov.b32 f0, bits;",
                     f"cvt.rn.f16x2.f32 {lo}, f0, f0;"]
        body += [f"mov.b32 {hi}, {lo};"]
    return body


def _tile_asm(fmt: str, wide: bool = False, inject: bool = False, nan: bool = True,
              row_e: bool = False) -> str:
    """One 16-row FP4 tile, one loop step (operands: `_Operands`): rows g's and g+8's words and
    scale bytes, x's 16 words as they lie (`wide`: and x row g + 8's), the accumulator(s).
    inject: the words decoded by `_decode_word_inject` (x re-paired to match, the scales * 2^14),
    else by the table (`_decode_word`). nan=False: block scales known to hold no NaN code
    (`codes_nan_free`): NVFP4's scales without the E4M3 NaN fix, MXFP4 without its checks for
    E8M0 255 (sm_90 SASS of the M = 1 loop: 8 and 12 instructions a step fewer).
    row_e (MXFP4): the scale operands are each block's exponent against its row's largest E
    (`MX_ROW_E_BIAS`, `_mx_row_e_scales`) and the accumulator carries over the steps: the
    caller multiplies the sums by 2^(E - 127) once (no shared exponent a step, no shuffles)."""
    o = _Operands(wide)
    body = [".reg .b32 t0, t1, sl, sh, ml, mh, u, h, r, q, sg01, sg23, sh01, sh23;",
            ".reg .b32 g<4>, k<4>, ce, co, cs, y0, y1;"]
    if not inject:  # the table of `_decode_word`
        body += ["mov.b32 t0, 0x3E3C3800;", "mov.b32 t1, 0x46444240;"]
    if fmt == "nvfp4":
        body += [".reg .b32 c, z;"] + _E4M3_CONSTS
        for src, lo, hi in ((o.sg, "sg01", "sg23"), (o.sh, "sh01", "sh23")):
            # the two block scales of this lane's 16 bytes, then each spread over both halves
            body += _e4m3_pair_div256(src, 0, "r", nan)
            if inject:  # the pairs are the codes * 2^-14
                body += [f"mov.b32 q, {F16_2P14};", "mul.rn.f16x2 r, r, q;"]
            body += [f"prmt.b32 {lo}, r, 0, 0x1010;", f"prmt.b32 {hi}, r, 0, 0x3232;"]
        body += _acc_setup(o, zero=False)
    elif row_e:
        body += _mx_row_e_scales(o, inject) + _acc_setup(o, zero=False)
    else:
        bias = 127 + 14 if inject else 127
        body += [".reg .b32 e, o, bits;", ".reg .pred nz;", ".reg .f32 f<2>;"]
        for src, words, lo, hi, big in ((o.sg, o.rg, "sg01", "sg23", "bg"),
                                         (o.sh, o.rh, "sh01", "sh23", "bh")):
            body += [f".reg .b32 {big};",
                     f"or.b32 o, {words[0]}, {words[1]};",
                     f"or.b32 o, o, {words[2]};", f"or.b32 o, o, {words[3]};",
                     "setp.ne.b32 nz, o, 0;"]
            if nan:  # a NaN scale sets E whatever its codes: the rows' sums are NaN
                body += [f"setp.eq.or.b32 nz, {src}, 255, nz;"]
            body += [f"selp.b32 e, {src}, 0, nz;",  # blocks of zeros don't set E
                     "shfl.sync.bfly.b32 o, e, 1, 0x1f, 0xffffffff;", "max.u32 e, e, o;",
                     "shfl.sync.bfly.b32 o, e, 2, 0x1f, 0xffffffff;", f"max.u32 {big}, e, o;",
                     # 2^(e - E) as fp16 pair: float32 bits (127 + e - E) << 23, 0 below 2^-126
                     # (inject: 2^(e - E + 14), the pairs being the codes * 2^-14)
                     f"sub.s32 bits, {src}, {big};", f"add.s32 bits, bits, {bias};",
                     # (a zero block may lie above E: any finite factor serves it)
                     "max.s32 bits, bits, 0;", f"min.s32 bits, bits, {bias};",
                     "shl.b32 bits, bits, 23;",
                     "mov.b32 f0, bits;", f"cvt.rn.f16x2.f32 {lo}, f0, f0;",
                     f"mov.b32 {hi}, {lo};"]
        body += _acc_setup(o, zero=True)
    for j in range(4):
        sg, sh_ = ("sg01", "sh01") if j < 2 else ("sg23", "sh23")
        decode = _decode_word_inject if inject else _decode_word
        body.append(decode(o.rg[j], "g", sg))
        body.append(decode(o.rh[j], "k", sh_))
        for ii in range(2):
            frag = (f"g{2 * ii}", f"k{2 * ii}", f"g{2 * ii + 1}", f"k{2 * ii + 1}")
            for a in range(o.n_acc):
                xb = (o.x[a][4 * j + 2 * ii], o.x[a][4 * j + 2 * ii + 1])
                if inject:
                    body += _x_pairs(*xb)
                    xb = ("y0", "y1")
                body.append(_mma(f"acc{a}_", frag, xb))
    if fmt == "nvfp4" or row_e:
        body += [f"mov.f32 {o.out[a][r]}, acc{a}_{r};" for a in range(o.n_acc) for r in range(4)]
    else:
        # out = in + tile * 2^(E - 127) per row (E8M0: 0 is 2^-127, 255 NaN)
        for big, regs in (("bg", (0, 1)), ("bh", (2, 3))):
            body += [f"shl.b32 bits, {big}, 23;",
                     f"setp.eq.b32 nz, {big}, 0;", "selp.b32 bits, 0x00400000, bits, nz;"]
            if nan:
                body += [f"setp.eq.b32 nz, {big}, 255;", "selp.b32 bits, 0x7FC00000, bits, nz;"]
            body += ["mov.b32 f1, bits;"]
            body += [f"fma.rn.f32 {o.out[a][r]}, acc{a}_{r}, f1, {o.acc_in[a][r]};"
                     for a in range(o.n_acc) for r in regs]
    return "{\n" + "\n".join(body) + "\n}"


# Loads below: zero=True fills what a predicate leaves unloaded with zeros, for steps whose tiles
# use them (a K range that ends inside a step, rows past N). zero=False (the `_mma` kernels'
# ZERO = 0, whole steps only) leaves those registers as they were: the only loads switched off
# are then the prefetch past the K range, which no tile reads, and rows past N, whose sums
# are never stored. Saves the zeroing (20 of ~510 instructions a step for FP4 on sm_90).


def _load_row_fp8_asm(zero: bool = True) -> str:
    """$0..$3: 16 bytes of 8-bit codes at $5 ($4 = 0: row scales come at the end; $6 unused)."""
    fill = "mov.b32 $0, 0; mov.b32 $1, 0; mov.b32 $2, 0; mov.b32 $3, 0;" if zero else ""
    return f"""{{
    .reg .pred p;
    setp.ne.b32 p, $7, 0;
    {fill} mov.b32 $4, 0;
    @p ld.global.nc.v4.u32 {{$0, $1, $2, $3}}, [$5];
    }}"""


def _load_row_asm(fmt: str, zero: bool = True) -> str:
    """$0..$3: 16 bytes of codes at $5, $4: the scale byte(s) at $6 (NVFP4: the two E4M3 codes
    of those 16 bytes; MXFP4: one E8M0); all zero where $7 == 0 (zero=True)."""
    kind = "u16" if fmt == "nvfp4" else "u8"
    fill = "mov.b32 $0, 0; mov.b32 $1, 0; mov.b32 $2, 0; mov.b32 $3, 0; mov.b16 hs, 0;"
    return f"""{{
    .reg .pred p;
    .reg .b16 hs;
    setp.ne.b32 p, $7, 0;
    {fill if zero else ""}
    @p ld.global.nc.v4.u32 {{$0, $1, $2, $3}}, [$5];
    @p ld.global.nc.{kind} hs, [$6];
    cvt.u32.u16 $4, hs;
    }}"""


def _load_x_asm(zero: bool = True) -> str:
    """$0..$15: 64 bytes of fp16 x at $16, 16 bytes at a time where bit v of $17 is set."""
    lines = [".reg .pred p;", ".reg .b32 v;"] + [f"mov.b32 ${i}, 0;" for i in range(16) if zero]
    for v in range(4):
        regs = ", ".join(f"${4 * v + i}" for i in range(4))
        lines += [f"and.b32 v, $17, {1 << v};", "setp.ne.b32 p, v, 0;",
                  f"@p ld.global.nc.v4.u32 {{{regs}}}, [$16+{16 * v}];"]
    return "{\n" + "\n".join(lines) + "\n}"
