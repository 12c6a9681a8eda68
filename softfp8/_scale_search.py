"""Error-minimising scales: for each row or block, try a few candidate scales and keep the one whose
codes reconstruct the weights with the least squared error (`ScaleMethod.MSE`).

The candidates always include the absmax scale (the `ScaleMethod.ABSMAX` rule) and it wins ties,
so a block or row is never reconstructed worse than absmax would; every candidate is a scale the
format can store, and the codes are then the ordinary nearest-even codes under it, so decoders
need to know nothing about how a scale was chosen. Errors are summed in float64 from the same
float32 products the decoders form (code value times scale), so the error compared here is the
error `dequantize` shows. The search runs on the weight's device, vectorised over a chunk of rows
at a time (a Python loop over the handful of candidates only), so peak memory stays bounded.
"""
from __future__ import annotations


import torch

from ._choices import ParsedEnum
from ._encode import encode_minifloat
from .decode import decode_e4m3_to_f32, decode_e5m2_to_f32
from .formats import E4M3_ELEMENT, Format, MinifloatSpec

# Elements per chunk of rows in a search: a few float32/float64 temporaries of this size live at
# once (tens of MiB), whatever the weight's size.
CHUNK_ELEMENTS = 1 << 21

# NVFP4: where a block scale may put the block's largest magnitude on the E2M1 grid (6 is the
# absmax rule; 4 and 5 trade the top code for finer steps below it).
NVFP4_TARGETS = (6.0, 5.0, 4.0)
# NVFP4: E4M3 code steps around the absmax block scale (each step is 1/8 to 1/16 of a binade).
NVFP4_CODE_STEPS = (-1, 1)
# NVFP4: factors on the absmax tensor scale (which maps the largest block scale to 448).
NVFP4_TENSOR_FACTORS = (1.0,)
# MXFP4: E8M0 exponent steps around the OCP rule's exponent.
MXFP4_EXPONENT_STEPS = (-1, 1)
# E4M3 / E5M2 row scales: shrink factors (values past the format's max saturate, i.e. clip).
ROW_SHRINK = (0.97, 0.94, 0.9, 0.85)


class ScaleMethod(ParsedEnum):
    """How `quantize` chooses scales; its lower-case string (``"mse"``) works wherever one is
    expected."""

    ABSMAX = "absmax"
    """Each row or block's largest magnitude maps to the format's largest code (the OCP MX rule's
    power of two for MXFP4). One pass, no search."""
    MSE = "mse"
    """Per row or block, the candidate scale (absmax and a few neighbours) with the least squared
    reconstruction error. Never a larger error than absmax for any block or row; a few times the
    work of absmax at quantization time, nothing at decode time."""

    @classmethod
    def _words(cls) -> tuple[str, str, str]:
        return "scales", "a scale method", " (or None for the format's default)"


# The measured choice per format (docs/quality.md): the search pays for FP4, where each block has
# only 8 magnitudes; 8-bit row scales gain nothing measurable from it.
DEFAULT_METHOD = {Format.E5M2: ScaleMethod.ABSMAX, Format.E4M3: ScaleMethod.ABSMAX,
                  Format.E4M3_B128: ScaleMethod.ABSMAX,
                  Format.NVFP4: ScaleMethod.MSE, Format.MXFP4: ScaleMethod.MSE}


def chunk_rows(n: int, k: int) -> int:
    """Rows per chunk so that one chunk holds about CHUNK_ELEMENTS weights (at least one row)."""
    return max(1, min(n, CHUNK_ELEMENTS // max(k, 1)))


def e2m1_magnitude(x: torch.Tensor) -> torch.Tensor:
    """|E2M1 value| nearest to x >= 0, ties to the even code, saturating at 6: the same value as
    decoding `encode_e2m1(x)`, in a few operations (the grid's step is 0.5 below 2, 1 below 4,
    then 2; torch.round is ties-to-even, and an even multiple of the step is an even code)."""
    half = torch.round(x * 2.0) * 0.5
    one = torch.round(x)
    two = torch.round(x * 0.5) * 2.0
    return torch.where(x < 2.0, half, torch.where(x < 4.0, one, two)).clamp_max(6.0)


def fp4_block_error(mag: torch.Tensor, block_scale: torch.Tensor,
                    mag64: torch.Tensor | None = None) -> torch.Tensor:
    """Squared error (float64, summed over each block) of E2M1 codes under `block_scale`.

    mag: |weights| [..., blocks, B], finite (mag64: the same in float64, if the caller has it);
    block_scale: float32 [..., blocks], >= 0 (a zero scale stores the block as zeros, as the
    quantizer does)."""
    s = block_scale[..., None]
    safe = torch.where(s > 0, s, 1.0)
    q = torch.where(s > 0, e2m1_magnitude(mag / safe), 0.0) * s  # the decoder's product
    return ((mag.double() if mag64 is None else mag64) - q.double()).square().sum(dim=-1)


def best_of(candidates, error_of):
    """The candidate (tensor of per-block choices) with the least error, per block; the first
    candidate wins ties, so it is the baseline nothing may do worse than."""
    best = None
    for cand in candidates:
        err = error_of(cand)
        if best is None:
            best, best_err = cand.clone(), err
            continue
        better = err < best_err
        best = torch.where(better, cand, best)
        best_err = torch.where(better, err, best_err)
    return best, best_err


def nvfp4_block_codes(mag: torch.Tensor, amax: torch.Tensor, absmax_codes: torch.Tensor,
                      g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """E4M3 block-scale codes with the least error, and that error, under tensor scale `g`.

    Candidates: the absmax code, its neighbours on the E4M3 grid, and the scales that put the
    block's largest magnitude on 5 and 4 of the E2M1 grid. A block whose absmax code is 0 (too
    small for any non-zero scale to keep a code) keeps it."""
    ac = absmax_codes.to(torch.int32)
    cands = [ac]
    for step in NVFP4_CODE_STEPS:
        cands.append(ac + step)
    for target in NVFP4_TARGETS[1:]:
        cands.append(_encode_e4m3(amax / (target * g)).to(torch.int32))
    # Positive finite E4M3 codes only (0x7F is NaN); a kept-at-zero block stays at zero.
    cands = [torch.where(ac > 0, c.clamp(1, 0x7E), 0) for c in cands]
    mag64 = mag.double()
    codes, err = best_of(cands, lambda c: fp4_block_error(mag, decode_e4m3_to_f32(c) * g, mag64))
    return codes.to(torch.uint8), err


def mxfp4_block_exponents(mag: torch.Tensor, ocp_exponent: torch.Tensor,
                          keep: torch.Tensor) -> torch.Tensor:
    """E8M0 exponents with the least error: the OCP rule's and its neighbours, where `keep`
    (blocks the policy leaves at scale 1) is False."""
    cands = [ocp_exponent] + [(ocp_exponent + s).clamp(-127, 127) for s in MXFP4_EXPONENT_STEPS]
    cands = [torch.where(keep, ocp_exponent, c) for c in cands]
    mag64 = mag.double()
    exps, _ = best_of(cands, lambda e: fp4_block_error(mag, torch.exp2(e.to(torch.float32)), mag64))
    return exps


def row_scale_error(w: torch.Tensor, scales: torch.Tensor, element: MinifloatSpec) -> torch.Tensor:
    """Squared error per row (float64) of `element` codes under row `scales`; non-finite weights
    are left out (they are stored as what they are, whatever the scale)."""
    codes = encode_saturating(w / scales[:, None], element)
    table = (decode_e4m3_to_f32 if element is E4M3_ELEMENT else decode_e5m2_to_f32)(
        torch.arange(256, device=w.device))
    q = table[codes.long()] * scales[:, None]
    finite = torch.isfinite(w)
    d = torch.where(finite, w.double() - q.double(), 0.0)
    return d.square().sum(dim=1)


def encode_saturating(x: torch.Tensor, element: MinifloatSpec) -> torch.Tensor:
    """`element` codes of x, finite values past the max saturating to it (E5M2's own encoder
    turns them into inf; a shrunk row scale puts a row's largest values there on purpose)."""
    top = element.max_finite
    return encode_minifloat(torch.where(torch.isfinite(x), x.clamp(-top, top), x), element)


def search_row_scales(w: torch.Tensor, absmax_scales: torch.Tensor, amax: torch.Tensor,
                      element: MinifloatSpec) -> torch.Tensor:
    """Row scales with the least error: absmax's, and absmax times each of ROW_SHRINK."""
    cands = [absmax_scales]
    for f in ROW_SHRINK:
        cands.append(torch.where(amax > 0, (amax * f / element.max_finite).clamp_min(2.0**-126),
                                 absmax_scales))
    scales, _ = best_of(cands, lambda s: row_scale_error(w, s, element))
    return scales


def _encode_e4m3(x: torch.Tensor) -> torch.Tensor:
    return encode_minifloat(x, E4M3_ELEMENT)
