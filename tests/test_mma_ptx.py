"""Kernel.MMA_GEMV's PTX text, run on CPU through tests/ptx_emulator.py: one warp, one loop step,
every format, against the reference decoders in float64. CI has no GPU, so this is where the
asm blocks' decode, the pairing of codes with x, the scale handling (NVFP4 folded into the fp16
pairs, MXFP4's shared exponent across the four lanes of an mma) and the fragment plan of both
mappings are checked; the GPU tests (test_mma_gemv.py, `-m gpu`) run the same text on hardware.
"""
import numpy as np
import pytest
import torch
from ptx_emulator import Warp, prmt

from softfp8.backends.triton import _mma_ptx as P
from softfp8.decode import (decode_e2m1_to_f32, decode_e4m3_to_f32, decode_e5m2_to_f32,
                            decode_e8m0)

FP4 = ("nvfp4", "mxfp4")
RNG = np.random.default_rng(7)


def _x_words(xs: np.ndarray) -> list[int]:
    """fp16 values -> 32-bit words of consecutive pairs (element 2q in the low half)."""
    return [int(v) for v in xs.astype(np.float16).view(np.uint32)]


def _run_tile(fmt, wg, wh, sg, sh, xw, nan=True, xw1=None, inject=False, row_e=False):
    """One tile step. wg/wh[lane]: 4 words of rows g / g+8; sg/sh[lane]: scale bits; xw[lane]:
    the lane's 16 x words (xw1: x row g + 8's, the wide tile). Returns D as 16 x 8 float64 from
    the lanes' c0..c3 (16 x 16 with xw1: columns 8..15 from the second accumulator)."""
    wide = xw1 is not None
    xs = [xw] + ([xw1] if wide else [])
    if fmt in FP4:  # x's own pairs meet the codes' (FP4_PAIRS)
        xp = [sum((x[lane][:16] for x in xs), []) for lane in range(32)]
        tile = P._tile_asm(fmt, wide, inject, nan, row_e)
    else:
        xp = [sum((x[lane][:8] + [0] * 8 for x in xs), []) for lane in range(32)]
        tile = P._fp8_tile_asm(fmt, nan, wide)
    n_out = 8 if wide else 4
    ops = [[0] * n_out + wg[lane] + wh[lane] + [sg[lane], sh[lane]] + xp[lane] + [0] * n_out
           for lane in range(32)]
    out = Warp(tile).run(ops)
    D = np.zeros((16, 16 if wide else 8))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for a in range(len(xs)):
            c = np.array(out[lane][4 * a:4 * a + 4], np.uint32).view(np.float32)
            col = 8 * a + 2 * t
            D[g, col], D[g, col + 1], D[g + 8, col], D[g + 8, col + 1] = c
    return D


def _codes_fp4(rows):
    """rows x 64 bytes; each row holds every E2M1 code in both nibbles, in random places."""
    out = np.empty((rows, 64), np.uint8)
    for r in range(rows):
        lo = RNG.permutation(np.tile(np.arange(16), 4))
        hi = RNG.permutation(np.tile(np.arange(16), 4))
        out[r] = (lo | (hi << 4)).astype(np.uint8)
    return out


def _random_x(rows):
    """rows x 128 fp16 x values: distinct, exact steps, both signs."""
    x = (1 + RNG.integers(0, 16, (rows, 128)) / 16).astype(np.float16)
    return x * np.where(RNG.random((rows, 128)) < 0.5, -1, 1).astype(np.float16)


def _e2m1_values(codes):
    """codes [16, 64] bytes -> their 16 x 128 E2M1 values in float64 (low nibble first)."""
    return decode_e2m1_to_f32(torch.from_numpy(np.stack([codes & 0xF, codes >> 4], -1)
                                               .reshape(16, 128).astype(np.int64))).double().numpy()


def _lane_scales(fmt, sc):
    """A step's scale codes [16 rows, blocks] -> each lane t's scale operand [16, 4]: NVFP4 the
    two E4M3 codes of its 16 bytes as one u16, MXFP4 its block's E8M0 code (or what stands in
    for it: any int, kept to 32 bits)."""
    sc = np.asarray(sc, np.int64)
    if fmt == "nvfp4":
        return sc[:, 0::2] | (sc[:, 1::2] << 8)
    return sc & 0xFFFFFFFF


def _tile_on_lanes(fmt, codes, ops, x, nan=True, inject=False, row_e=False):
    """The tile mapping: lane (g, t) holds bytes 16t..16t+15 of rows g and g+8, their scale
    operands ops[g][t], ops[g + 8][t], and x row g's matching 32 values (x of 16 rows: the
    wide tile, x row g + 8's too). Returns the emulated D (`_run_tile`)."""
    wide = x.shape[0] == 16
    wg, wh, sg, sh, xw, xw1 = [], [], [], [], [], []
    for lane in range(32):
        g, t = lane // 4, lane % 4
        chunk = slice(16 * t, 16 * t + 16)
        wg.append([int(v) for v in codes[g, chunk].view(np.uint32)])
        wh.append([int(v) for v in codes[g + 8, chunk].view(np.uint32)])
        sg.append(int(ops[g][t]))
        sh.append(int(ops[g + 8][t]))
        xw.append(_x_words(x[g, 32 * t:32 * t + 32]))
        if wide:
            xw1.append(_x_words(x[g + 8, 32 * t:32 * t + 32]))
    return _run_tile(fmt, wg, wh, sg, sh, xw, nan, xw1 if wide else None, inject, row_e)


def _fp4_case(fmt, scales_fn, codes=None, wide=False, inject=False, nan=True):
    """`_tile_on_lanes` on random x (wide: 16 x rows) and the scales scales_fn gives. Returns
    the emulated D and the float64 reference."""
    if codes is None:
        codes = _codes_fp4(16)  # 16 rows x 64 bytes = 128 codes each
    x = _random_x(16 if wide else 8)
    sc = scales_fn()  # NVFP4: 16 rows x 8 E4M3 codes (per 8 bytes); MXFP4: 16 x 4 E8M0
    if fmt == "nvfp4":
        s = decode_e4m3_to_f32(torch.from_numpy(sc.astype(np.int64))).double().numpy()
        w = _e2m1_values(codes) * np.repeat(s, 16, axis=1)
    else:
        s = decode_e8m0(torch.from_numpy(sc.astype(np.int64))).double().numpy()
        w = _e2m1_values(codes) * np.repeat(s, 32, axis=1)
    ref = w @ x.astype(np.float64).T
    D = _tile_on_lanes(fmt, codes, _lane_scales(fmt, sc), x, nan, inject)
    return D * (256.0 if fmt == "nvfp4" else 1.0), ref


def _rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def test_prmt_and_table_bytes():
    # the E2M1 table bytes are fp16 high bytes of 0, .5, 1, 1.5, 2, 3, 4, 6
    t0, t1 = 0x3E3C3800, 0x46444240
    for m, v in enumerate([0, .5, 1, 1.5, 2, 3, 4, 6]):
        byte = prmt(t0, t1, m) & 0xFF
        assert np.array([byte << 8], np.uint16).view(np.float16)[0] == v
    assert prmt(0x44332211, 0x88776655, 0x7531) == 0x88664422  # bytes 1, 3, 5, 7
    assert prmt(0x000000F0, 0, 0x0008) & 0xFF == 0xFF  # sign-replicate of byte 0 (msb set)


@pytest.mark.parametrize("nan", [True, False])
@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("fmt", FP4)
@pytest.mark.parametrize("inject", [False, True])
def test_fp4_tile_matches_reference(inject, fmt, wide, nan):
    """nan=False: the tile without its NaN checks, for block scales known to hold none."""
    if fmt == "nvfp4":
        scales = lambda: RNG.integers(0x20, 0x58, (16, 8))  # noqa: E731  E4M3 2^-4 .. 2^4
    else:
        scales = lambda: RNG.integers(110, 134, (16, 4))  # noqa: E731  within 2^23 of each other
    D, ref = _fp4_case(fmt, scales, wide=wide, inject=inject, nan=nan)
    assert D.shape == ref.shape == (16, 16 if wide else 8)
    assert _rel(D, ref) < 1e-6


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("inject", [False, True])
def test_nvfp4_nan_scale_and_subnormal_scales(inject, wide):
    def scales():
        sc = RNG.integers(0x01, 0x08, (16, 8))  # E4M3 subnormal scales: 2^-9 .. 7 * 2^-9
        sc[3, 5] = 0x7F  # NaN
        sc[11, 0] = 0xFF  # NaN, negative
        return sc
    D, ref = _fp4_case("nvfp4", scales, wide=wide, inject=inject)
    nan = np.isnan(ref)
    assert nan[3].all() and nan[11].all() and nan.sum() == 2 * ref.shape[1]
    assert (np.isnan(D) == nan).all()
    assert _rel(D[~nan], ref[~nan]) < 1e-6


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("inject", [False, True])
def test_mxfp4_zero_blocks_and_nan(inject, wide):
    def scales():
        sc = RNG.integers(100, 124, (16, 4))
        sc[:, 0] = 250  # far above the others: would flush them, but the codes there are 0
        sc[6, 2] = 255  # NaN scale: that row is NaN whatever its codes
        return sc
    codes = _codes_fp4(16)
    codes[:, :16] = 0  # lane t = 0's block: all zero codes under the large scale
    D, ref = _fp4_case("mxfp4", scales, codes, wide=wide, inject=inject)
    nan = np.isnan(ref)
    assert nan[6].all() and nan.sum() == ref.shape[1]
    assert (np.isnan(D) == nan).all()
    assert _rel(D[~nan], ref[~nan]) < 1e-6


def _fp4_scale_codes_case(fmt, rows_scales, inject, nan):
    """Every weight code 1.0 (E2M1 0x2 in both nibbles); rows_scales: 16 rows x the blocks of a
    step (NVFP4 8, MXFP4 4) of scale codes; x row c one-hot at the first code of block c. So
    D[r, c] is block c's scale of row r alone, which the tile must give exactly (the products
    and the fp32 sum are exact), or NaN across a row holding a NaN scale (NaN * 0 in every
    column's sum). Returns the emulated D's first blocks columns."""
    blocks = 8 if fmt == "nvfp4" else 4
    span = 128 // blocks  # codes a block
    codes = np.full((16, 64), 0x22, np.uint8)
    x = np.zeros((8, 128), np.float16)
    for c in range(blocks):
        x[c, c * span] = 1.0
    D = _tile_on_lanes(fmt, codes, _lane_scales(fmt, rows_scales), x, nan, inject)
    return D[:, :blocks] * (256.0 if fmt == "nvfp4" else 1.0)


@pytest.mark.parametrize("nan", [True, False])
@pytest.mark.parametrize("inject", [False, True])
def test_nvfp4_tile_every_scale_code(inject, nan):
    """Every E4M3 block scale code through the tile, exactly (x 2^8: the tile's pairs are the
    scales * 2^-8); nan=True: the NaN codes give NaN; nan=False: every finite code."""
    codes = [c for c in range(256) if nan or c & 0x7F != 0x7F]
    codes += [0x38] * (-len(codes) % 128)  # pad with 1.0 to whole tiles
    for i in range(0, len(codes), 128):
        sc = np.array(codes[i:i + 128]).reshape(16, 8)
        D = _fp4_scale_codes_case("nvfp4", sc, inject, nan)
        want = decode_e4m3_to_f32(torch.from_numpy(sc.astype(np.int64))).double().numpy()
        want[np.isnan(want).any(axis=1)] = np.nan
        assert ((D == want) | (np.isnan(D) & np.isnan(want))).all(), sc[D != want]


@pytest.mark.parametrize("nan", [True, False])
@pytest.mark.parametrize("inject", [False, True])
def test_mxfp4_tile_every_scale_code(inject, nan):
    """Every E8M0 block scale code (2^-127 .. 2^127; nan=True: 255 too, NaN) through the tile,
    exactly: each row's four blocks of a step hold codes s .. s + 3 (the shared exponent keeps
    blocks within 2^23 of the largest exact)."""
    top = 256 if nan else 255
    starts = list(range(0, top, 4))
    for i in range(0, len(starts), 16):
        rows = [[min(s + j, top - 1) for j in range(4)] for s in starts[i:i + 16]]
        rows += [[127] * 4] * (16 - len(rows))
        sc = np.array(rows)
        D = _fp4_scale_codes_case("mxfp4", sc, inject, nan)
        want = decode_e8m0(torch.from_numpy(sc.astype(np.int64))).double().numpy()
        want[np.isnan(want).any(axis=1)] = np.nan
        assert ((D == want) | (np.isnan(D) & np.isnan(want))).all(), sc[D != want]


def _mx_row_e_case(sc, codes, inject, wide):
    """The MXFP4 tile with row exponents (`_tile_asm` row_e) on scales sc [16 rows, 4 blocks]
    and codes [16, 64]: each lane's operand is its block's exponent less its row's E (the
    largest among blocks with a nonzero code) plus MX_ROW_E_BIAS. Returns D * 2^(E - 127) per
    row (the kernel's epilogue) and the float64 reference."""
    x = _random_x(16 if wide else 8)
    nonzero = codes.reshape(16, 4, 16).any(axis=2)
    e = np.where(nonzero, sc, 0).max(axis=1)
    biased = sc - e[:, None] + P.MX_ROW_E_BIAS[inject]
    w = _e2m1_values(codes) * np.repeat(
        decode_e8m0(torch.from_numpy(sc.astype(np.int64))).double().numpy(), 32, axis=1)
    ref = w @ x.astype(np.float64).T
    D = _tile_on_lanes("mxfp4", codes, _lane_scales("mxfp4", biased), x, False, inject, True)
    return D * np.exp2(e.astype(np.float64) - 127)[:, None], ref


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("inject", [False, True])
def test_mxfp4_row_e_tile_matches_reference(inject, wide):
    """Blocks 0..23 powers of two below their row's E stay exact; all-zero blocks may lie far
    above E (that E ignores) or far below (the factor's clamps keep them finite: zeros)."""
    sc = RNG.integers(100, 124, (16, 4))
    codes = _codes_fp4(16)
    sc[3, 1] = sc[3, 0] + 23  # E of row 3; block 0 the full span below it
    codes[5, 16:32] = 0
    sc[5, 1] = 250  # an all-zero block far above the row's E
    codes[6, 32:48] = 0
    sc[6, 2] = 0  # ... and far below
    for r, above in ((7, 2), (9, 16)):  # unclamped, 2^(e - E) would be inf (inject / table)
        codes[r, 48:] = 0
        sc[r, 3] = sc[r, :3].max() + above
    D, ref = _mx_row_e_case(sc, codes, inject, wide)
    assert _rel(D, ref) < 1e-6
    assert np.isfinite(D).all()


@pytest.mark.parametrize("inject", [False, True])
def test_mxfp4_row_e_tile_every_scale_code(inject):
    """Every finite E8M0 code as a row's exponent and below it, one-hot x picking each block
    alone, so D[r, c] * 2^(E - 127) must be block c's scale exactly (2^-127 .. 2^127)."""
    for i in range(0, 255, 64):
        rows = [[min(s + j, 254) for j in range(4)] for s in range(i, min(i + 64, 255), 4)]
        rows += [[127] * 4] * (16 - len(rows))
        sc = np.array(rows)
        codes = np.full((16, 64), 0x22, np.uint8)
        x = np.zeros((8, 128), np.float16)
        for c in range(4):
            x[c, 32 * c] = 1.0
        e = sc.max(axis=1)
        biased = sc - e[:, None] + P.MX_ROW_E_BIAS[inject]
        D = _tile_on_lanes("mxfp4", codes, _lane_scales("mxfp4", biased), x, False, inject,
                           True)[:, :4]
        got = D * np.exp2(e.astype(np.float64) - 127)[:, None]
        want = decode_e8m0(torch.from_numpy(sc.astype(np.int64))).double().numpy()
        assert (got == want).all(), sc[got != want]


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("fmt, nan", [("e5m2", True), ("e4m3", True), ("e4m3", False)])
def test_fp8_tile_every_code(fmt, nan, wide):
    """16 rows x 64 codes: all 256 codes appear (NaN/inf codes go to rows checked apart).
    nan=False: the E4M3 tile without its NaN fix, for codes known to hold none: every finite
    code the same. wide: 16 x rows, the second 8 through the second accumulator."""
    decode = decode_e5m2_to_f32 if fmt == "e5m2" else decode_e4m3_to_f32
    allv = decode(torch.arange(256)).double().numpy()
    finite = np.flatnonzero(np.isfinite(allv))
    codes = np.empty((16, 64), np.uint8)
    pool = RNG.permutation(np.concatenate([finite, RNG.choice(finite, 16 * 64 - len(finite))]))
    codes[:] = pool.reshape(16, 64)
    x = (1 + RNG.integers(0, 16, (16 if wide else 8, 64)) / 16).astype(np.float16)
    w = allv[codes]
    ref = w @ x.astype(np.float64).T
    wg, wh, xw, xw1 = [], [], [], []
    for lane in range(32):
        g, t = lane // 4, lane % 4
        chunk = slice(16 * t, 16 * t + 16)
        wg.append([int(v) for v in codes[g, chunk].view(np.uint32)])
        wh.append([int(v) for v in codes[g + 8, chunk].view(np.uint32)])
        xw.append(_x_words(x[g, chunk]) + [0] * 8)
        if wide:
            xw1.append(_x_words(x[g + 8, chunk]) + [0] * 8)
    xw1 = xw1 if wide else None
    D = _run_tile(fmt, wg, wh, [0] * 32, [0] * 32, xw, nan, xw1)
    assert D.shape == ref.shape
    D *= 256.0 if fmt == "e4m3" else 1.0  # E4M3 decodes as value * 2^-8
    assert _rel(D, ref) < 1e-6
    if not nan:
        return
    # every non-finite code gives a non-finite row, alone in a row of zeros
    special = np.flatnonzero(~np.isfinite(allv))
    for code in special:
        c = np.zeros((16, 64), np.uint8)
        c[5, 17] = code
        wg = [[int(v) for v in c[lane // 4, 16 * (lane % 4):16 * (lane % 4) + 16].view(np.uint32)]
              for lane in range(32)]
        wh = [[int(v) for v in c[lane // 4 + 8, 16 * (lane % 4):16 * (lane % 4) + 16]
               .view(np.uint32)] for lane in range(32)]
        D = _run_tile(fmt, wg, wh, [0] * 32, [0] * 32, xw, xw1=xw1)
        got, want = D[5], allv[code] * x[:, 17].astype(np.float64)
        assert (np.isnan(got) == np.isnan(want)).all() and (
            np.isinf(got) == np.isinf(want)).all(), (fmt, code)


@pytest.mark.parametrize("inject", [False, True])
def test_long_mapping_diagonal_holds_each_rows_dot(inject):
    """The M = 1 mapping: mma row g is row r's 64-byte chunk g (g+8: row r+1's), B's column g is
    x's chunk g; D[g][g] sits in lane (g, g // 2), register c0 (g even) or c1
    (`_mma._store_runs` at C = 8), and those 8 values add up to the row's dot over 512 bytes."""
    codes = np.concatenate([_codes_fp4(2) for _ in range(8)], axis=1)  # 2 rows x 512 bytes
    x = (1 + RNG.integers(0, 16, 1024) / 16).astype(np.float16)
    sc = RNG.integers(0x30, 0x40, (2, 64))  # NVFP4: one E4M3 per 8 bytes
    w = decode_e2m1_to_f32(torch.from_numpy(np.stack([codes & 0xF, codes >> 4], -1)
                                            .reshape(2, 1024).astype(np.int64))).double().numpy()
    w *= np.repeat(decode_e4m3_to_f32(torch.from_numpy(sc)).double().numpy(), 16, axis=1)
    ref = w @ x.astype(np.float64)
    wg, wh, sg, sh, xw = [], [], [], [], []
    for lane in range(32):
        g, t = lane // 4, lane % 4
        off = 64 * g + 16 * t
        wg.append([int(v) for v in codes[0, off:off + 16].view(np.uint32)])
        wh.append([int(v) for v in codes[1, off:off + 16].view(np.uint32)])
        sg.append(int(sc[0, off // 8]) | (int(sc[0, off // 8 + 1]) << 8))
        sh.append(int(sc[1, off // 8]) | (int(sc[1, off // 8 + 1]) << 8))
        xw.append(_x_words(x[2 * off:2 * off + 32]))
    D = _run_tile("nvfp4", wg, wh, sg, sh, xw, inject=inject) * 256.0
    diag = [D[g, g] for g in range(8)], [D[g + 8, g] for g in range(8)]
    got = np.array([sum(diag[0]), sum(diag[1])])
    assert _rel(got, ref) < 1e-6


@pytest.mark.parametrize("inject", [False, True])
def test_fp4_word_decode_every_code_in_every_nibble(inject):
    """`_decode_word` (the table) and `_decode_word_inject`, alone, scale 1: each of the 16 E2M1
    codes in each of a word's 8 nibbles (the other nibbles random) comes out in the pair and half
    FP4_PAIRS / FP4_INJECT_PAIRS name, as the fp16 of its value (inject: * 2^-14), bit for bit
    (-0 included)."""
    decode, pairs, unit = ((P._decode_word_inject, P.FP4_INJECT_PAIRS, 2.0 ** -14) if inject
                           else (P._decode_word, P.FP4_PAIRS, 1.0))
    regs = ".reg .b32 t0, t1, sl, sh, ml, mh, u, h, p<4>, ce, co, cs;"
    asm = "{\n" + "\n".join([regs, "mov.b32 t0, 0x3E3C3800;", "mov.b32 t1, 0x46444240;",
                              decode("$4", "p", "0x3C003C00")]
                             + [f"mov.b32 ${i}, p{i};" for i in range(4)]) + "\n}"
    value = decode_e2m1_to_f32(torch.arange(16)).double().numpy()
    want = (value * unit).astype(np.float16).view(np.uint16)
    assert want[8] == 0x8000 and (want[1] < 0x400) == inject  # -0; inject: 0.5 a subnormal
    where = {c: (i, h) for i, pair in enumerate(pairs) for h, c in enumerate(pair)}
    for nib in range(8):
        words = RNG.integers(0, 2 ** 32, 32, dtype=np.uint64)
        codes = np.arange(32) % 16
        words = (words & ~np.uint64(0xF << (4 * nib))) | (codes.astype(np.uint64) << (4 * nib))
        out = Warp(asm).run([[0, 0, 0, 0, int(w)] for w in words])
        i, h = where[nib]
        got = np.array([(o[i] >> (16 * h)) & 0xFFFF for o in out], np.uint16)
        assert (got == want[codes]).all(), (nib, got, want[codes])


@pytest.mark.parametrize("nan", [True, False])
def test_decode_e4m3_word_asm_every_code(nan):
    """`_decode.e4m3_to_f16_div256_ptx`'s asm (the dot and GEMV kernels' E4M3 decode): all 256
    codes as fp16 * 2^-8, bit for bit (NaN codes NaN); nan=False, every finite code."""
    want = (decode_e4m3_to_f32(torch.arange(256)).double() / 256).numpy().astype(np.float16)
    words = np.arange(256, dtype=np.uint8).view(np.uint32)  # word w: codes 4w .. 4w + 3
    got = []
    for half in range(2):  # 64 words, 32 lanes a run
        out = Warp(P.e4m3_word_div256_asm(nan)).run(
            [[0, 0, int(words[32 * half + lane])] for lane in range(32)])
        got += [np.array([o[0], o[1]], np.uint32).view(np.float16) for o in out]
    got = np.concatenate(got)
    finite = ~np.isnan(want)
    assert (got[finite].view(np.uint16) == want[finite].view(np.uint16)).all()
    if nan:
        assert np.isnan(got[~finite]).all()


def _b128_step_sums(codes, x, scales, runs):
    """E4M3_B128 through one warp of the MMA GEMV, as `_mma_loops` runs it: every step the E4M3
    tile (`_fp8_tile_asm`, the text the kernel takes for this format) from zero sums, then each
    lane's sums added to its accumulator times its own tile scale (`_mma_tile._tile_step`; the
    tile of the lane's byte `off`, `_mma_loads._tile_scale`), in float32 FMAs; then the sums the
    store keeps (`_mma_store._store_runs`). runs = RUNS of the run mapping (the lane's row
    g // C and 64-byte chunk g % C, C = 8 // runs, B's column j is x row j // C's chunk j % C),
    0 for the tile mapping (rows g, g + 8; a step is 64 bytes; x row j in column j).
    codes [rows, K] bytes (2 * runs rows; the tiles: 16), x [M, K] fp16, scales [K // 128] the
    rows' tile scales (one 128-row block: a warp's rows never leave one). Returns y [M, rows] in
    float64."""
    C = 8 // runs if runs else 1
    m, k = x.shape
    rows = 2 * runs if runs else 16
    stride = 64 * C
    acc = np.zeros((32, 4), np.float32)
    for kb in range(0, k, stride):
        wg, wh, xw, sc = [], [], [], []
        for lane in range(32):
            g, t = lane // 4, lane % 4
            off = kb + 64 * (g % C) + 16 * t
            top, low = (g // C, runs + g // C) if runs else (g, g + 8)
            wg.append([int(v) for v in codes[top, off:off + 16].view(np.uint32)])
            wh.append([int(v) for v in codes[low, off:off + 16].view(np.uint32)])
            xl = g // C if runs else min(g, m - 1)
            xw.append(_x_words(x[min(xl, m - 1), off:off + 16]) + [0] * 8)
            sc.append(scales[min(off >> 7, len(scales) - 1)])
        D = _run_tile("e4m3", wg, wh, [0] * 32, [0] * 32, xw)
        for lane in range(32):
            g, t = lane // 4, lane % 4
            u = (D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1])
            for r in range(4):  # fma.rn.f32: the float64 product is exact, one rounding left
                acc[lane, r] = np.float32(np.float64(u[r]) * np.float64(sc[lane])
                                          + np.float64(acc[lane, r]))
    y = np.zeros((m, rows))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        top, low = (g // C, runs + g // C) if runs else (g, g + 8)
        for s in range(2):
            j = 2 * t + s
            if j % C != g % C:  # chunks that don't meet: not a sum of the output
                continue
            xr = j // C
            if xr < m:
                y[xr, top] += acc[lane, s]
                y[xr, low] += acc[lane, 2 + s]
    return y * 256.0  # E4M3 decodes as value * 2^-8


@pytest.mark.parametrize("runs", [1, 2, 4, 8, 0])
def test_e4m3_b128_each_lane_sum_takes_its_own_tile_scale(runs):
    """The claim E4M3_B128's MMA GEMV rests on (`_mma_tile`): every sum a lane keeps covers one
    64-byte chunk of one row, inside one 128-code tile, so one scale a lane a step is exact
    enough; through 1024 codes (8 tiles whose scales span 2^-12..2^12, so a wrong tile shows)
    at each M class of the run mapping and the tiles, every finite code among them."""
    k = 1024
    m = max(runs, 1) if runs else 8
    rows = 2 * runs if runs else 16
    finite = np.array([c for c in range(256) if c & 0x7F != 0x7F])
    codes = RNG.choice(finite, (rows, k)).astype(np.uint8)
    codes[:, :len(finite)] = RNG.permuted(np.tile(finite, (rows, 1)), axis=1)
    x = (1 + RNG.integers(0, 16, (m, k)) / 16).astype(np.float16)
    scales = (np.exp2(RNG.integers(-12, 13, k // 128)) * (1 + RNG.random(k // 128))).astype(
        np.float32)
    w = decode_e4m3_to_f32(torch.from_numpy(codes.astype(np.int64))).double().numpy()
    w *= np.repeat(scales.astype(np.float64), 128)[None, :]
    ref = x.astype(np.float64) @ w.T
    got = _b128_step_sums(codes, x, scales, runs)
    assert _rel(got, ref) < 1e-6
    # each sum against its neighbour tile's scale instead: far off (the check can fail)
    wrong = _b128_step_sums(codes, x, np.roll(scales, 1), runs)
    assert _rel(wrong, ref) > 1e-2
