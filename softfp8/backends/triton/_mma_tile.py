"""Kernel.MMA_GEMV's loop step (`_mma`): one 16-row mma tile's share of a step, or two for 16 x
rows (WIDE), as Triton calls of `_mma_ptx`'s PTX text, one string per format and decode
(Triton can't index a global by a constexpr, so the choice is a chain of branches).

E4M3_B128 runs E4M3's text from zero sums, and adds each step's sums to the accumulator times
the step's tile scale in fp32 (`_tile_step`): a thread's 16 bytes, and the 64-byte chunk of a
row that one mma row sums, lie inside one 128-code tile (chunks start at multiples of 64 bytes:
the plan asks block_k % 64 == 0), and a warp's rows inside one 128-row block, so every sum a
thread holds takes one scale a step (`_mma_loads._tile_scale`). The step's fp32 sum of exact
products (e/256 times x) is scaled with one rounding, where the reference rounds each e * s:
errors of the order of the fp32 summation's own. Never in fp16: e * s has up to 24 significant
bits and any fp32 exponent (`_kernels`' docstring).
"""
import triton
import triton.language as tl

from ._const import Const
from ._mma_ptx import _fp8_tile_asm, _tile_asm, tile_constraints

_TILE_NV = Const(_tile_asm("nvfp4"))
_TILE_MX = Const(_tile_asm("mxfp4"))
_TILE_NV_INJECT = Const(_tile_asm("nvfp4", inject=True))
_TILE_MX_INJECT = Const(_tile_asm("mxfp4", inject=True))
_TILE_NV_FINITE = Const(_tile_asm("nvfp4", nan=False))
_TILE_MX_FINITE = Const(_tile_asm("mxfp4", nan=False))
_TILE_NV_INJECT_FINITE = Const(_tile_asm("nvfp4", inject=True, nan=False))
_TILE_MX_INJECT_FINITE = Const(_tile_asm("mxfp4", inject=True, nan=False))
_TILE_MX_ROW_E = Const(_tile_asm("mxfp4", nan=False, row_e=True))
_TILE_MX_INJECT_ROW_E = Const(_tile_asm("mxfp4", inject=True, nan=False, row_e=True))
_TILE_E5M2 = Const(_fp8_tile_asm("e5m2"))
_TILE_E4M3 = Const(_fp8_tile_asm("e4m3"))
_TILE_E4M3_FINITE = Const(_fp8_tile_asm("e4m3", nan=False))
_TILE_CONS = Const(tile_constraints())
_WIDE_NV = Const(_tile_asm("nvfp4", wide=True))
_WIDE_MX = Const(_tile_asm("mxfp4", wide=True))
_WIDE_NV_INJECT = Const(_tile_asm("nvfp4", wide=True, inject=True))
_WIDE_MX_INJECT = Const(_tile_asm("mxfp4", wide=True, inject=True))
_WIDE_NV_FINITE = Const(_tile_asm("nvfp4", wide=True, nan=False))
_WIDE_MX_FINITE = Const(_tile_asm("mxfp4", wide=True, nan=False))
_WIDE_NV_INJECT_FINITE = Const(_tile_asm("nvfp4", wide=True, inject=True, nan=False))
_WIDE_MX_INJECT_FINITE = Const(_tile_asm("mxfp4", wide=True, inject=True, nan=False))
_WIDE_MX_ROW_E = Const(_tile_asm("mxfp4", wide=True, nan=False, row_e=True))
_WIDE_MX_INJECT_ROW_E = Const(_tile_asm("mxfp4", wide=True, inject=True, nan=False, row_e=True))
_WIDE_E5M2 = Const(_fp8_tile_asm("e5m2", wide=True))
_WIDE_E4M3 = Const(_fp8_tile_asm("e4m3", wide=True))
_WIDE_E4M3_FINITE = Const(_fp8_tile_asm("e4m3", nan=False, wide=True))
_WIDE_CONS = Const(tile_constraints(wide=True))


@triton.jit
def _tile(rg, rh, xw, acc, FMT: tl.constexpr, NAN: tl.constexpr = True,
          INJECT: tl.constexpr = False, ROW_E: tl.constexpr = False):
    """acc (4 fp32) += one loop step of a 16-row tile; rg/rh: (4 words, scale) of rows g, g+8;
    xw: x's 16 words (FP4 uses all, 8-bit the first 8). INJECT: FP4 by exponent injection.
    NAN=False: no NaN code among E4M3's codes or FP4's block scales (`codes_nan_free`).
    ROW_E (MXFP4): rg[4], rh[4] hold each block's exponent against its row's E, biased
    (`_mma_ptx.MX_ROW_E_BIAS`); the sums carry over the steps, in units of 2^(E - 127)."""
    args = [rg[0], rg[1], rg[2], rg[3], rh[0], rh[1], rh[2], rh[3], rg[4], rh[4],
            xw[0], xw[1], xw[2], xw[3], xw[4], xw[5], xw[6], xw[7],
            xw[8], xw[9], xw[10], xw[11], xw[12], xw[13], xw[14], xw[15],
            acc[0], acc[1], acc[2], acc[3]]
    # no early returns: triton 3.6 builds every branch that follows a `return`
    if FMT == "nvfp4" and INJECT and not NAN:  # block scales known to hold no NaN code
        out = tl.inline_asm_elementwise(_TILE_NV_INJECT_FINITE, _TILE_CONS, args, (tl.float32,) * 4,
                                        is_pure=True, pack=1)
    elif FMT == "nvfp4" and INJECT:
        out = tl.inline_asm_elementwise(_TILE_NV_INJECT, _TILE_CONS, args, (tl.float32,) * 4,
                                        is_pure=True, pack=1)
    elif FMT == "nvfp4" and not NAN:  # block scales known to hold no NaN code
        out = tl.inline_asm_elementwise(_TILE_NV_FINITE, _TILE_CONS, args, (tl.float32,) * 4,
                                        is_pure=True, pack=1)
    elif FMT == "nvfp4":
        out = tl.inline_asm_elementwise(_TILE_NV, _TILE_CONS, args, (tl.float32,) * 4,
                                        is_pure=True, pack=1)
    elif FMT == "mxfp4" and INJECT and ROW_E:
        out = tl.inline_asm_elementwise(_TILE_MX_INJECT_ROW_E, _TILE_CONS, args, (tl.float32,) * 4,
                                        is_pure=True, pack=1)
    elif FMT == "mxfp4" and ROW_E:
        out = tl.inline_asm_elementwise(_TILE_MX_ROW_E, _TILE_CONS, args, (tl.float32,) * 4,
                                        is_pure=True, pack=1)
    elif FMT == "mxfp4" and INJECT and not NAN:  # block scales known to hold no NaN code
        out = tl.inline_asm_elementwise(_TILE_MX_INJECT_FINITE, _TILE_CONS, args, (tl.float32,) * 4,
                                        is_pure=True, pack=1)
    elif FMT == "mxfp4" and INJECT:
        out = tl.inline_asm_elementwise(_TILE_MX_INJECT, _TILE_CONS, args, (tl.float32,) * 4,
                                        is_pure=True, pack=1)
    elif FMT == "mxfp4" and not NAN:  # block scales known to hold no NaN code
        out = tl.inline_asm_elementwise(_TILE_MX_FINITE, _TILE_CONS, args, (tl.float32,) * 4,
                                        is_pure=True, pack=1)
    elif FMT == "mxfp4":
        out = tl.inline_asm_elementwise(_TILE_MX, _TILE_CONS, args, (tl.float32,) * 4,
                                        is_pure=True, pack=1)
    elif FMT == "e5m2":
        out = tl.inline_asm_elementwise(_TILE_E5M2, _TILE_CONS, args, (tl.float32,) * 4,
                                        is_pure=True, pack=1)
    elif not NAN:  # E4M3 (and E4M3_B128) codes known to hold no NaN: no NaN fix
        out = tl.inline_asm_elementwise(_TILE_E4M3_FINITE, _TILE_CONS, args, (tl.float32,) * 4,
                                        is_pure=True, pack=1)
    else:
        out = tl.inline_asm_elementwise(_TILE_E4M3, _TILE_CONS, args, (tl.float32,) * 4,
                                        is_pure=True, pack=1)
    return out


@triton.jit
def _tile_wide(rg, rh, xw, xv, acc, acv, FMT: tl.constexpr, NAN: tl.constexpr = True,
               INJECT: tl.constexpr = False, ROW_E: tl.constexpr = False):
    """`_tile` for 16 x rows (WIDE): the weights decoded once, each A fragment fed to two mma,
    x rows g (xw, into acc) and g + 8 (xv, into acv); returns the 8 sums (acc's 4, acv's 4)."""
    args = [rg[0], rg[1], rg[2], rg[3], rh[0], rh[1], rh[2], rh[3], rg[4], rh[4],
            xw[0], xw[1], xw[2], xw[3], xw[4], xw[5], xw[6], xw[7],
            xw[8], xw[9], xw[10], xw[11], xw[12], xw[13], xw[14], xw[15],
            xv[0], xv[1], xv[2], xv[3], xv[4], xv[5], xv[6], xv[7],
            xv[8], xv[9], xv[10], xv[11], xv[12], xv[13], xv[14], xv[15],
            acc[0], acc[1], acc[2], acc[3], acv[0], acv[1], acv[2], acv[3]]
    if FMT == "nvfp4" and INJECT and not NAN:  # block scales known to hold no NaN code
        out = tl.inline_asm_elementwise(_WIDE_NV_INJECT_FINITE, _WIDE_CONS, args, (tl.float32,) * 8,
                                        is_pure=True, pack=1)
    elif FMT == "nvfp4" and INJECT:
        out = tl.inline_asm_elementwise(_WIDE_NV_INJECT, _WIDE_CONS, args, (tl.float32,) * 8,
                                        is_pure=True, pack=1)
    elif FMT == "nvfp4" and not NAN:  # block scales known to hold no NaN code
        out = tl.inline_asm_elementwise(_WIDE_NV_FINITE, _WIDE_CONS, args, (tl.float32,) * 8,
                                        is_pure=True, pack=1)
    elif FMT == "nvfp4":
        out = tl.inline_asm_elementwise(_WIDE_NV, _WIDE_CONS, args, (tl.float32,) * 8,
                                        is_pure=True, pack=1)
    elif FMT == "mxfp4" and INJECT and ROW_E:
        out = tl.inline_asm_elementwise(_WIDE_MX_INJECT_ROW_E, _WIDE_CONS, args, (tl.float32,) * 8,
                                        is_pure=True, pack=1)
    elif FMT == "mxfp4" and ROW_E:
        out = tl.inline_asm_elementwise(_WIDE_MX_ROW_E, _WIDE_CONS, args, (tl.float32,) * 8,
                                        is_pure=True, pack=1)
    elif FMT == "mxfp4" and INJECT and not NAN:  # block scales known to hold no NaN code
        out = tl.inline_asm_elementwise(_WIDE_MX_INJECT_FINITE, _WIDE_CONS, args, (tl.float32,) * 8,
                                        is_pure=True, pack=1)
    elif FMT == "mxfp4" and INJECT:
        out = tl.inline_asm_elementwise(_WIDE_MX_INJECT, _WIDE_CONS, args, (tl.float32,) * 8,
                                        is_pure=True, pack=1)
    elif FMT == "mxfp4" and not NAN:  # block scales known to hold no NaN code
        out = tl.inline_asm_elementwise(_WIDE_MX_FINITE, _WIDE_CONS, args, (tl.float32,) * 8,
                                        is_pure=True, pack=1)
    elif FMT == "mxfp4":
        out = tl.inline_asm_elementwise(_WIDE_MX, _WIDE_CONS, args, (tl.float32,) * 8,
                                        is_pure=True, pack=1)
    elif FMT == "e5m2":
        out = tl.inline_asm_elementwise(_WIDE_E5M2, _WIDE_CONS, args, (tl.float32,) * 8,
                                        is_pure=True, pack=1)
    elif not NAN:
        out = tl.inline_asm_elementwise(_WIDE_E4M3_FINITE, _WIDE_CONS, args, (tl.float32,) * 8,
                                        is_pure=True, pack=1)
    else:
        out = tl.inline_asm_elementwise(_WIDE_E4M3, _WIDE_CONS, args, (tl.float32,) * 8,
                                        is_pure=True, pack=1)
    return out


@triton.jit
def _scaled_sums(u, sc, acc):
    """acc + u * sc, each of the 4 sums in fp32 (one FFMA each)."""
    return (tl.fma(u[0], sc, acc[0]), tl.fma(u[1], sc, acc[1]), tl.fma(u[2], sc, acc[2]),
            tl.fma(u[3], sc, acc[3]))


@triton.jit
def _tile_step(rg, rh, xw, acc, sc, FMT: tl.constexpr, NAN: tl.constexpr = True,
               INJECT: tl.constexpr = False, ROW_E: tl.constexpr = False):
    """`_tile`; E4M3_B128: E4M3's tile from zero sums, added to acc times `sc`, this thread's
    tile scale of the step (`_mma_loads._tile_scale`; unused for the other formats)."""
    if FMT == "e4m3_b128":
        z = tl.zeros_like(sc)
        out = _scaled_sums(_tile(rg, rh, xw, (z, z, z, z), FMT, NAN, INJECT), sc, acc)
    else:
        out = _tile(rg, rh, xw, acc, FMT, NAN, INJECT, ROW_E)
    return out


@triton.jit
def _tiles(ra, rb, rc, rd, xw, xv, a, b, av, bv, sc, FMT: tl.constexpr, NAN: tl.constexpr,
           WIDE: tl.constexpr, INJECT: tl.constexpr, ROW_E: tl.constexpr = False):
    """One loop step of a thread's two tiles (rows ra/rb, rc/rd): a, b += x rows g's sums;
    WIDE: av, bv += x rows g + 8's, from the same decoded weights (`_tile_wide`). sc:
    E4M3_B128's tile scale of the step (`_tile_step`)."""
    if WIDE:
        if FMT == "e4m3_b128":
            z = tl.zeros_like(sc)
            zs = (z, z, z, z)
            u = _tile_wide(ra, rb, xw, xv, zs, zs, FMT, NAN, INJECT)
            v = _tile_wide(rc, rd, xw, xv, zs, zs, FMT, NAN, INJECT)
            a = _scaled_sums((u[0], u[1], u[2], u[3]), sc, a)
            av = _scaled_sums((u[4], u[5], u[6], u[7]), sc, av)
            b = _scaled_sums((v[0], v[1], v[2], v[3]), sc, b)
            bv = _scaled_sums((v[4], v[5], v[6], v[7]), sc, bv)
        else:
            u = _tile_wide(ra, rb, xw, xv, a, av, FMT, NAN, INJECT, ROW_E)
            v = _tile_wide(rc, rd, xw, xv, b, bv, FMT, NAN, INJECT, ROW_E)
            a = (u[0], u[1], u[2], u[3])
            av = (u[4], u[5], u[6], u[7])
            b = (v[0], v[1], v[2], v[3])
            bv = (v[4], v[5], v[6], v[7])
    else:
        a = _tile_step(ra, rb, xw, a, sc, FMT, NAN, INJECT, ROW_E)
        b = _tile_step(rc, rd, xw, b, sc, FMT, NAN, INJECT, ROW_E)
    return a, b, av, bv
