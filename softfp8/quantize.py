"""quantize / dequantize / pack / unpack.

Rounding is round-to-nearest-even everywhere, computed with integer and exact float32 operations
that give the same bits on every device; the element encoders equal torch's own casts bit for bit
(`float8_e5m2`, `float8_e4m3fn`; E8M0 scales are exact powers of two; E2M1, which torch can't
cast to, against nearest-even over `E2M1_TO_FLOAT32`).

The policy for values a format can't hold (overflow, inf, NaN, zero blocks) is in `quantize`'s
docstring, the one place it is decided: `softfp8.quantize` is that function, which hides this
module, so help(softfp8.quantize) shows it.

Scales are either the absmax rule below or, with ``scales="mse"``, the least-error candidate
around it (`_scale_search`); either way the codes are the nearest-even codes under the chosen
scale, and the policy holds.
"""
from __future__ import annotations

import torch

from .decode import decode_e4m3_to_f32, decode_e8m0
from .formats import (E2M1_ELEMENT, E4M3_ELEMENT, E5M2_ELEMENT, SPECS, Format,
                      PackedWeight, ScaleKind, padded_k)
from . import _scale_search
from ._encode import _f32_bits, encode_minifloat
from ._scale_search import (DEFAULT_METHOD, ScaleMethod, chunk_rows, encode_saturating,
                            mxfp4_block_exponents, nvfp4_block_codes, search_row_scales)

_NVFP4_E4M3_NAN = 0x7F
_E8M0_NAN = 0xFF
_E8M0_ONE = 127


def encode_e5m2(x: torch.Tensor) -> torch.Tensor:
    """float to E5M2 codes, bit for bit as ``x.float().to(torch.float8_e5m2)``."""
    return encode_minifloat(x, E5M2_ELEMENT)


def encode_e4m3(x: torch.Tensor) -> torch.Tensor:
    """float to E4M3fn codes, bit for bit as ``x.float().to(torch.float8_e4m3fn)`` (saturating)."""
    return encode_minifloat(x, E4M3_ELEMENT)


def encode_e2m1(x: torch.Tensor) -> torch.Tensor:
    """float to E2M1 codes (0..15), nearest even, saturating at ±6; NaN gives ±0 (no NaN code)."""
    return encode_minifloat(x, E2M1_ELEMENT)


def encode_e8m0_exponent(exponent: torch.Tensor) -> torch.Tensor:
    """An integer power-of-two exponent to its E8M0 code (clamped to the range -127..127)."""
    return (exponent.to(torch.int32).clamp(-127, 127) + 127).to(torch.uint8)


# -- packing --------------------------------------------------------------------------------

def pack_codes(codes: torch.Tensor, fmt: Format | str) -> torch.Tensor:
    """uint8 codes [N, K] to int32 words [N, Kp / codes_per_word], zero-padded along K."""
    fmt = Format.parse(fmt)
    spec = SPECS[fmt]
    n, k = codes.shape
    kp = padded_k(k, fmt)
    padded = torch.zeros((n, kp), dtype=torch.uint8, device=codes.device)
    padded[:, :k] = codes
    if spec.bits == 4:  # even k in the low nibble of each byte, as float4_e2m1fn_x2
        padded = (padded[:, 0::2] & 0xF) | ((padded[:, 1::2] & 0xF) << 4)
    # Little-endian bytes make words with code j of a word in bits 8j.. (every supported host is LE)
    return padded.contiguous().view(torch.int32)


def unpack_codes(words: torch.Tensor, fmt: Format | str, k: int) -> torch.Tensor:
    """int32 words to uint8 codes [N, k] (inverse of `pack_codes`)."""
    fmt = Format.parse(fmt)
    b = words.contiguous().view(torch.uint8)
    if SPECS[fmt].bits == 4:
        b = torch.stack((b & 0xF, b >> 4), dim=-1).flatten(-2)
    return b[:, :k]


# -- quantize -------------------------------------------------------------------------------

def _check_weight(weight: object) -> torch.Tensor:
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight: expected a torch.Tensor, got {type(weight).__name__}")
    if weight.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise TypeError(f"weight: expected a floating-point tensor (float32, float16, bfloat16 "
                        f"or float64), got {weight.dtype}")
    if weight.dim() != 2:
        raise ValueError(f"weight: expected a 2-D tensor [out_features, in_features], "
                         f"got {weight.dim()}-D of shape {tuple(weight.shape)}")
    if weight.numel() == 0:
        raise ValueError(f"weight: expected a non-empty tensor, got shape {tuple(weight.shape)}")
    if type(weight).__name__ == "DTensor":  # by name: torch.distributed may be absent
        # its ops mix with the plain tensors quantize makes only by raising somewhere inside
        raise TypeError("weight: is a DTensor (sharded by torch.distributed, e.g. transformers' "
                        "tp_plan); expected a plain tensor. Convert the whole model first, "
                        "then shard it with softfp8.tensor_parallel.parallelize")
    if weight.is_meta:
        # The policy checks (inf, E5M2 overflow) and the scales need values; meta has none.
        raise ValueError("weight: is on the meta device, which holds no values; expected a tensor "
                         "with data (materialise it first, e.g. with module.to_empty + load)")
    return weight.detach()  # converted to float32 a chunk of rows at a time (`_row_ranges`)


def _row_ranges(n: int, k: int, unit: int = 1) -> list[tuple[int, int]]:
    """Rows [start, stop) of about CHUNK_ELEMENTS weights each, whole `unit`s of rows (a tile's
    rows share a scale). Why: the encoders' int32/float32 temporaries take ~27 bytes a weight,
    so a weight encoded in one piece needs over ten times its fp16 size (a 128256 x 2048 head:
    ~7 GB); a chunk at a time they stay near 120 MiB, and quantize's result is the same."""
    step = max(unit, chunk_rows(n, k) // unit * unit)
    return [(i, min(i + step, n)) for i in range(0, n, step)]


def _rows_f32(w: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    return w[start:stop].to(torch.float32)


def _finite_absmax(w: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.where(torch.isfinite(w), w.abs(), 0.0).amax(dim=dim)


def _refuse_inf(w: torch.Tensor, fmt: Format) -> None:
    if torch.isinf(w).any():
        raise ValueError(f"weight: contains ±inf, which {fmt} cannot represent (it has no infinity); "
                         "expected finite values or NaN, or use fmt='e5m2'")


def _row_absmax(w: torch.Tensor, chunks: list[tuple[int, int]],
                refuse_inf: Format | None = None) -> torch.Tensor:
    """Each row's largest finite magnitude, float32 [N], a chunk of rows at a time; with
    `refuse_inf`, ValueError where w holds ±inf (that format has no infinity)."""
    parts = []
    for a, b in chunks:
        rows = _rows_f32(w, a, b)
        if refuse_inf is not None:
            _refuse_inf(rows, refuse_inf)
        parts.append(_finite_absmax(rows, dim=1))
    return torch.cat(parts)


def _quantize_8bit(w: torch.Tensor, fmt: Format, scaled: bool,
                   method: ScaleMethod) -> PackedWeight:
    """E5M2 (scaled or not) and E4M3: one scale a row, codes encoded a chunk of rows at a time
    straight into the packed words' bytes."""
    spec = SPECS[fmt]
    n, k = w.shape
    chunks = _row_ranges(n, k)
    row_scales = None
    if scaled:  # E5M2 keeps ±inf (inf times a finite scale)
        amax = _row_absmax(w, chunks, fmt if fmt is Format.E4M3 else None)
        # Keep the scale a normal float32: a denormal one (rows of denormal weights) is
        # rounded so coarsely that w / scale can pass the max, and E5M2 made that inf.
        row_scales = torch.where(amax > 0,
                                 (amax / spec.element.max_finite).clamp_min(2.0**-126), 1.0)
        if method is ScaleMethod.MSE:
            row_scales = torch.cat([
                search_row_scales(_rows_f32(w, a, b), row_scales[a:b], amax[a:b], spec.element)
                for a, b in chunks])
    # a shrunk (mse) scale clips on purpose
    encode = encode_saturating if scaled and method is ScaleMethod.MSE else encode_minifloat
    padded = torch.zeros((n, padded_k(k, fmt)), dtype=torch.uint8, device=w.device)
    overflow_count, overflow_max = 0, 0.0
    for a, b in chunks:
        rows = _rows_f32(w, a, b)
        if scaled:
            rows = rows / row_scales[a:b, None]
        codes = encode(rows, spec.element)
        if not scaled and fmt is Format.E5M2:
            overflow = torch.isfinite(rows) & (codes & 0x7F == 0x7C)
            if overflow.any():
                overflow_count += int(overflow.sum())
                overflow_max = max(overflow_max, rows[overflow].abs().max().item())
        padded[a:b, :k] = codes
        del rows, codes
    if overflow_count:
        raise ValueError(f"weight: {overflow_count} finite values lie beyond E5M2's range "
                         f"(±57344, largest here {overflow_max:g}); expected smaller values, or "
                         "quantize with row_scale=True")
    # as pack_codes: code j of a word in bits 8j.. (little-endian bytes)
    return PackedWeight(fmt, (n, k), padded.view(torch.int32), row_scales)


def quantize(weight: torch.Tensor, fmt: Format | str = Format.E5M2, *,
             row_scale: bool | None = None,
             scales: ScaleMethod | str | None = None) -> PackedWeight:
    """Quantize a weight [N, K] (out_features × in_features, as nn.Linear stores it) to `fmt`.

    Runs on the weight's device; the result lives there too. `row_scale` only concerns E5M2
    (default False: plain E5M2, whose decode is a shift); E4M3 always has row scales.

    `scales` chooses how row and block scales are found (`ScaleMethod`): ``"absmax"`` maps each
    row's or block's largest magnitude to the format's largest code; ``"mse"`` tries a few
    candidates around that per row or block and keeps the least squared error (never worse than
    absmax; a few times slower to quantize; decoding is unchanged). None takes the format's
    default: mse for NVFP4 and MXFP4, absmax for E4M3 and E5M2, as measured on real weights in
    docs/quality.md. Unscaled E5M2 has no scale to choose, so `scales` changes nothing there.

    Policy for values a format can't hold (the one place it is decided):
    - Element encoders, as torch's casts do: E5M2 turns finite overflow and ±inf into ±inf;
      E4M3 saturates finite overflow and ±inf to ±448; E2M1 saturates to ±6. NaN stays NaN
      (E5M2 0x7F, E4M3 0x7F, with the sign); E2M1 has no NaN (its encoder gives ±0, see below).
    - `quantize()` never lets a *finite* weight overflow: scales map each row/block into range,
      and unscaled E5M2 raises ValueError if a finite weight lies beyond ±57344 (use
      ``row_scale=True``).
    - NaN weights stay NaN so that a matmul touching them gives NaN, as torch's would: E5M2/E4M3
      store the NaN code; NVFP4/MXFP4 mark the whole block NaN through its scale (every output
      reading that row is NaN anyway). Scales come from the finite values only.
    - ±inf weights: E5M2 stores ±inf (scaled E5M2 too: inf times a finite scale is inf). The
      other formats have no infinity, so they raise ValueError rather than store a wrong value.
    - Zero rows, tiles and blocks get scale 1 (E4M3 row, E4M3_B128 tile, E8M0 code 127), never 0
      or a denormal; so does an MXFP4 block that even the smallest E8M0 scale would leave all
      zeros (amax <= 2^-129).
    """
    fmt = Format.parse(fmt)
    method = DEFAULT_METHOD[fmt] if scales is None else ScaleMethod.parse(scales)
    w = _check_weight(weight)
    if row_scale is not None and not isinstance(row_scale, bool):
        raise TypeError(f"row_scale: expected True, False or None, got {row_scale!r}")
    spec = SPECS[fmt]
    if row_scale is not None and spec.scale_required:
        raise ValueError(f"row_scale: only applies to e5m2 (its scale is optional); {fmt} always "
                         "has its own scales")
    n, k = w.shape
    if fmt is Format.E4M3_B128:
        if method is not ScaleMethod.ABSMAX:
            raise ValueError(f"scales={method.value!r}: e4m3_b128's tile scales are found by "
                             "absmax only (as its checkpoints' producers do); expected "
                             "scales='absmax' or None")
        return _quantize_tiles(w, fmt)
    if fmt in (Format.E5M2, Format.E4M3):
        return _quantize_8bit(w, fmt, fmt is Format.E4M3 or bool(row_scale), method)
    return _quantize_fp4(w, fmt, method)


def _tile_scales(scales: torch.Tensor, n: int, k: int, spec) -> torch.Tensor:
    """Tile scales [ceil(n / block_n), ceil(k / block)] spread to one per weight, [n, k]."""
    return scales.repeat_interleave(spec.block_n, 0)[:n].repeat_interleave(spec.block, 1)[:, :k]


def _quantize_tiles(w: torch.Tensor, fmt: Format) -> PackedWeight:
    """E4M3_B128: one fp32 scale per 128 x 128 tile, amax / 448, as transformers' fine-grained FP8
    quantizer picks it; codes are w / scale rounded to nearest even (the float8_e4m3fn cast).
    A band of whole tiles of rows at a time, so the temporaries stay bounded (`_row_ranges`)."""
    spec = SPECS[fmt]
    n, k = w.shape
    tk = spec.scales_shape(n, k)[1]
    padded = torch.zeros((n, padded_k(k, fmt)), dtype=torch.uint8, device=w.device)
    bands = []
    for a, b in _row_ranges(n, tk * spec.block, unit=spec.block_n):
        rows = _rows_f32(w, a, b)
        _refuse_inf(rows, fmt)
        tn = -(-(b - a) // spec.block_n)
        tiles = torch.zeros((tn * spec.block_n, tk * spec.block), dtype=torch.float32,
                            device=w.device)
        tiles[:b - a, :k] = rows
        tiles = tiles.view(tn, spec.block_n, tk, spec.block).transpose(1, 2).reshape(tn, tk, -1)
        amax = _finite_absmax(tiles, dim=-1)
        del tiles
        # A normal float32 scale, as for E4M3's rows: a denormal one is too coarse for w / scale.
        scales = torch.where(amax > 0, (amax / spec.element.max_finite).clamp_min(2.0**-126), 1.0)
        padded[a:b, :k] = encode_minifloat(rows / _tile_scales(scales, b - a, k, spec),
                                           spec.element)
        bands.append(scales)
    return PackedWeight(fmt, (n, k), padded.view(torch.int32), torch.cat(bands).contiguous())


def _quantize_fp4(w: torch.Tensor, fmt: Format, method: ScaleMethod) -> PackedWeight:
    n, k = w.shape
    kp = padded_k(k, fmt)
    chunks = _row_ranges(n, kp)
    amax = _row_absmax(w, chunks, fmt)
    g = None
    if fmt is Format.NVFP4:
        # Two levels: the tensor scale maps the largest block scale to E4M3's max (448).
        g = amax.amax() / (6.0 * 448.0)
        g = torch.where(g > 0, g, 1.0).clamp_min(2.0**-126)  # normal, as for row scales
    best = None
    # mse: each candidate tensor scale shifts the E4M3 grid the block scales lie on; keep the
    # one with the least total error (the absmax one first, so it wins ties).
    tensor_scales = [g] if g is None or method is ScaleMethod.ABSMAX else [
        g * f for f in _scale_search.NVFP4_TENSOR_FACTORS]
    for gs in tensor_scales:
        parts = [_fp4_rows(_rows_f32(w, a, b), fmt, kp, gs, method) for a, b in chunks]
        total = sum(err for _, _, err in parts)
        if best is None or total < best[0]:
            best = (total, gs, parts)
    _, g, parts = best
    codes = torch.cat([c for c, _, _ in parts])
    scale_codes = torch.cat([s for _, s, _ in parts])
    words = pack_codes(codes.view(n, kp)[:, :k], fmt)
    return PackedWeight(fmt, (n, k), words, scale_codes.contiguous(),
                        None if g is None else g.reshape(()))


def _fp4_rows(w: torch.Tensor, fmt: Format, kp: int, g: torch.Tensor | None,
              method: ScaleMethod) -> tuple[torch.Tensor, torch.Tensor, float]:
    """E2M1 codes [rows, kp / block, block], block-scale codes of some rows of the weight, and
    their squared error (mse only; 0 for absmax, which compares nothing)."""
    spec = SPECS[fmt]
    n, k = w.shape
    blocks = torch.zeros((n, kp), dtype=torch.float32, device=w.device)
    blocks[:, :k] = w
    blocks = blocks.view(n, kp // spec.block, spec.block)
    has_nan = torch.isnan(blocks).any(dim=-1)
    amax = _finite_absmax(blocks, dim=-1)
    search = method is ScaleMethod.MSE
    total = 0.0
    mag = torch.where(torch.isnan(blocks), 0.0, blocks.abs()) if search else None
    if fmt is Format.NVFP4:
        scale_codes = encode_minifloat(amax / (6.0 * g), E4M3_ELEMENT)
        # A block whose scale rounds to zero (amax / 6g at or below half of E4M3's smallest
        # subnormal, 2^-10) would be flushed whole, even where the smallest scale (code 1,
        # 2^-9 * g) holds its values exactly. Take that scale whenever it keeps a non-zero
        # code (amax above a quarter of it; at a quarter E2M1 rounds to 0, ties to even), so
        # that re-quantizing a dequantized weight makes the same choice.
        keeps = amax > 0.25 * (2.0**-9 * g)
        scale_codes = torch.where(keeps & (scale_codes == 0), 1, scale_codes).to(torch.uint8)
        if search:
            scale_codes, err = nvfp4_block_codes(mag, amax, scale_codes, g)
            total = err[~has_nan].sum().item()
        block_scale = decode_e4m3_to_f32(scale_codes) * g
        nan_code = _NVFP4_E4M3_NAN
    else:
        # OCP MX v1.0 §6.3: shared exponent = floor(log2(amax)) - emax(E2M1) = ... - 2.
        exponent = ((_f32_bits(amax) >> 23) & 0xFF) - 127 - 2
        # A block whose codes all round to zero even under the smallest scale (2^-127: amax at
        # or below 2^-129, a quarter of it, ties to even) takes the scale of an all-zero block,
        # so that re-quantizing its dequantized zeros makes the same choice (hypothesis found
        # [[7.7473e-40]]: scale code 0 on the first pass, 127 on the second).
        flushed = amax <= 2.0**-129
        if search:
            exponent = mxfp4_block_exponents(mag, exponent.clamp(-127, 127), flushed)
        scale_codes = torch.where(flushed, _E8M0_ONE, encode_e8m0_exponent(exponent))
        scale_codes = scale_codes.to(torch.uint8)
        block_scale = decode_e8m0(scale_codes)
        nan_code = _E8M0_NAN
    # A scale that rounds to zero (a block far below the tensor's largest) keeps its codes at 0.
    safe = torch.where(block_scale > 0, block_scale, 1.0)[..., None]
    codes = torch.where(block_scale[..., None] > 0, encode_e2m1(blocks / safe), 0).to(torch.uint8)
    codes = torch.where(has_nan[..., None], 0, codes).to(torch.uint8)
    scale_codes = torch.where(has_nan, nan_code, scale_codes).to(torch.uint8)
    return codes, scale_codes, total


def dequantize(packed: PackedWeight, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The weight [N, K] the packed codes stand for, in `dtype` (float32 by default, exact).

    This materialises the full weight: it is the reference path and a debugging aid, never used
    by the fast backends."""
    if not isinstance(packed, PackedWeight):
        raise TypeError(f"packed: expected a PackedWeight, got {type(packed).__name__}")
    # An integer dtype would silently truncate the values and turn NaN/inf into garbage.
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype: expected a floating-point torch.dtype, got {dtype!r}")
    return dequantize_rows(packed, 0, packed.shape[0]).to(dtype)


def dequantize_rows(packed: PackedWeight, start: int, stop: int) -> torch.Tensor:
    """Rows start..stop of the weight, float32 [stop - start, K]."""
    from .decode import decode_e2m1_to_f32, decode_e5m2_to_f32

    spec = packed.spec
    k = packed.shape[1]
    rows = slice(start, stop)
    codes = unpack_codes(packed.words[rows], packed.fmt, packed.padded_k)
    # Decode through a table of every code, built by the bit-operation decoder itself: the same
    # bits, about 7x faster on a CPU than running the bit operations on every element (it is
    # what lets the reference backend handle an N*K >= 2^31 weight in reasonable time).
    # int64 indices: indexing with uint8 would be read as a boolean mask.
    if spec.scale in (ScaleKind.ROW, ScaleKind.TILE_F32):
        decode = decode_e5m2_to_f32 if packed.fmt is Format.E5M2 else decode_e4m3_to_f32
        w = decode(torch.arange(256, device=codes.device))[codes.long()][:, :k]
        if spec.scale is ScaleKind.TILE_F32:
            tile_rows = torch.arange(start, stop, device=codes.device) // spec.block_n
            w = w * packed.scales[tile_rows].repeat_interleave(spec.block, 1)[:, :k]
        elif packed.scales is not None:
            w = w * packed.scales[rows, None]
        return w
    if packed.fmt is Format.NVFP4:
        block_scale = decode_e4m3_to_f32(packed.scales[rows]) * packed.global_scale
    else:
        block_scale = decode_e8m0(packed.scales[rows])
    w = decode_e2m1_to_f32(torch.arange(16, device=codes.device))[codes.long()]
    w = w.view(stop - start, -1, spec.block) * block_scale[..., None]
    return w.view(stop - start, -1)[:, :k]
