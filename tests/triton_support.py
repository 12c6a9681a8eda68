"""What the Triton backend's test modules share: the device, the decodes and dtypes they sample,
tolerances, a weight holding every code."""
import torch

import softfp8
from softfp8.dispatch import E2M1Decode
from softfp8.formats import Format, PackedWeight

HAS_GPU = torch.cuda.is_available()
DEVICE = "cuda" if HAS_GPU else "cpu"

DECODES = [(Format.E5M2, E2M1Decode.SELECT), (Format.E4M3, E2M1Decode.SELECT),
           (Format.NVFP4, E2M1Decode.SELECT), (Format.NVFP4, E2M1Decode.INJECT),
           (Format.MXFP4, E2M1Decode.SELECT), (Format.MXFP4, E2M1Decode.INJECT)]
CODE_DECODES = DECODES + [(Format.E4M3_B128, E2M1Decode.SELECT)]
"""DECODES and E4M3_B128 (its parity cases: test_triton_tile_scales.py)."""
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def tolerance(dtype):
    """1e-5 for fp32 (issue 4); otherwise one unit of the activation dtype's precision."""
    return 1e-5 if dtype == torch.float32 else torch.finfo(dtype).eps


def every_code(fmt: Format, device) -> tuple[PackedWeight, torch.Tensor]:
    """A weight whose row r holds one code (or one scale code) at k = 0, and its exact values."""
    from softfp8.decode import decode_e4m3_to_f32, decode_e5m2_to_f32, decode_e8m0
    from softfp8.quantize import pack_codes

    spec = Format(fmt)
    k = 32
    if fmt is Format.E4M3_B128:  # rows 0..127 under tile scale 1, rows 128..255 under 0.75
        codes = torch.zeros(256, k, dtype=torch.uint8)
        codes[:, 0] = torch.arange(256)
        scales = torch.tensor([[1.0], [0.75]])  # e4m3 * 0.75: exact in float32
        return (PackedWeight(fmt, (256, k), pack_codes(codes, fmt), scales).to(device),
                decode_e4m3_to_f32(torch.arange(256)) * scales.repeat_interleave(128, 0)[:, 0])
    if fmt in (Format.E5M2, Format.E4M3):
        codes = torch.zeros(256, k, dtype=torch.uint8)
        codes[:, 0] = torch.arange(256)
        dec = decode_e5m2_to_f32 if fmt is Format.E5M2 else decode_e4m3_to_f32
        scales = None if fmt is Format.E5M2 else torch.ones(256)
        return (PackedWeight(spec, (256, k), pack_codes(codes, fmt), scales).to(device),
                dec(torch.arange(256)))
    # FP4: rows 0..15 every E2M1 code under scale 1; rows 16.. every scale code under E2M1 1.0
    e2m1 = torch.cat([torch.arange(16), torch.full((256,), 2)])
    codes = torch.zeros(272, k, dtype=torch.uint8)
    codes[:, 0] = e2m1
    if fmt is Format.NVFP4:
        one, dec = 0x38, decode_e4m3_to_f32  # E4M3 0x38 = 1.0
    else:
        one, dec = 127, decode_e8m0
    sc = torch.full((272, k // softfp8.formats.SPECS[fmt].block), one, dtype=torch.uint8)
    sc[16:, 0] = torch.arange(256)
    expect = softfp8.decode.E2M1_TO_FLOAT32[e2m1] * dec(sc[:, 0])
    g = torch.tensor(1.0) if fmt is Format.NVFP4 else None
    return PackedWeight(fmt, (272, k), pack_codes(codes, fmt), sc, g).to(device), expect
