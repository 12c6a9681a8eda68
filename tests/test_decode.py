"""Every decoder over every code, bit for bit, against torch's casts and the E2M1 table."""
import pytest
import torch
from conftest import same_bits

from softfp8.decode import (E2M1_TO_FLOAT32, decode_e2m1_to_f32, decode_e2m1_to_f32_inject,
                            decode_e4m3_to_f32, decode_e5m2_to_f32, decode_e8m0)

ALL_BYTES = torch.arange(256, dtype=torch.int32)
ALL_NIBBLES = torch.arange(16, dtype=torch.int32)

TORCH_CASTS = [
    pytest.param(decode_e5m2_to_f32, torch.float8_e5m2, id="e5m2"),
    pytest.param(decode_e4m3_to_f32, torch.float8_e4m3fn, id="e4m3"),
    pytest.param(decode_e8m0, torch.float8_e8m0fnu, id="e8m0"),
]
E2M1_DECODERS = [pytest.param(decode_e2m1_to_f32, id="select"),
                 pytest.param(decode_e2m1_to_f32_inject, id="inject")]


@pytest.mark.parametrize("decode, dtype", TORCH_CASTS)
@pytest.mark.parametrize("code_dtype", [torch.uint8, torch.int32, torch.int64])
def test_every_byte_code_matches_torch(decode, dtype, code_dtype):
    got = decode(ALL_BYTES.to(code_dtype))
    want = ALL_BYTES.to(torch.uint8).view(dtype).to(torch.float32)
    assert got.dtype == torch.float32
    assert same_bits(got, want).all(), ALL_BYTES[~same_bits(got, want)].tolist()
    assert torch.equal(torch.isnan(got), torch.isnan(want))


@pytest.mark.parametrize("decode", E2M1_DECODERS)
def test_every_e2m1_code_matches_table(decode):
    got = decode(ALL_NIBBLES)
    assert same_bits(got, E2M1_TO_FLOAT32).all()
    assert torch.equal(torch.signbit(got), torch.signbit(E2M1_TO_FLOAT32))  # -0.0 is code 8


def test_e2m1_table_is_the_ocp_value_set():
    # sign | e1 e0 | m0, bias 1: the eight magnitudes of OCP MX v1.0 table 5
    assert E2M1_TO_FLOAT32[:8].tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert torch.equal(E2M1_TO_FLOAT32[8:], -E2M1_TO_FLOAT32[:8])


def test_e2m1_decoders_ignore_bits_above_the_nibble():
    assert same_bits(decode_e2m1_to_f32(ALL_NIBBLES | 0xF0), E2M1_TO_FLOAT32).all()
    assert same_bits(decode_e2m1_to_f32_inject(ALL_NIBBLES | 0x30), E2M1_TO_FLOAT32).all()


@pytest.mark.parametrize("n, k", [(257, 130), (3, 515)])
def test_every_e4m3_b128_code_in_every_tile_is_the_torch_value_times_its_scale(n, k):
    """E4M3_B128 decodes as E4M3: every code, at rows and columns that meet every tile (partial
    ones included), is torch's float8_e4m3fn value times its tile's scale, bit for bit."""
    from softfp8 import PackedWeight, dequantize
    from softfp8.quantize import pack_codes

    codes = ((torch.arange(n)[:, None] * 131 + torch.arange(k)[None, :]) % 256).to(torch.uint8)
    assert set(codes[:128, :128].flatten().tolist()) == set(range(256))  # one whole tile
    tn, tk = -(-n // 128), -(-k // 128)
    g = torch.Generator().manual_seed(n * k)
    scales = torch.exp2(torch.randint(-20, 20, (tn, tk), generator=g).float()) * (
        1 + torch.rand(tn, tk, generator=g))  # not powers of two: the product rounds
    got = dequantize(PackedWeight("e4m3_b128", (n, k), pack_codes(codes, "e4m3_b128"), scales))
    spread = scales.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    want = codes.view(torch.float8_e4m3fn).to(torch.float32) * spread
    assert same_bits(got, want).all()
    assert torch.equal(torch.isnan(got), (codes & 0x7F) == 0x7F)


def test_e4m3_nan_codes():
    nan = torch.isnan(decode_e4m3_to_f32(ALL_BYTES))
    assert ALL_BYTES[nan].tolist() == [0x7F, 0xFF]


def test_e5m2_inf_and_nan_codes():
    v = decode_e5m2_to_f32(ALL_BYTES)
    assert ALL_BYTES[torch.isinf(v)].tolist() == [0x7C, 0xFC]
    assert ALL_BYTES[torch.isnan(v)].tolist() == [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF]


def test_e8m0_edges():
    v = decode_e8m0(torch.tensor([0, 1, 127, 254, 255]))
    assert v[0].item() == 2.0 ** -127 and v[1].item() == 2.0 ** -126
    assert v[2].item() == 1.0 and v[3].item() == 2.0 ** 127 and torch.isnan(v[4])


def test_e5m2_is_fp16_shifted():
    as_fp16 = (ALL_BYTES << 8).to(torch.int16).view(torch.float16)
    assert same_bits(decode_e5m2_to_f32(ALL_BYTES), as_fp16.float()).all()


def test_decoders_reject_float_codes():
    with pytest.raises(TypeError, match="codes"):
        decode_e5m2_to_f32(torch.zeros(3))


def test_injection_flushes_half_where_denormals_flush(flush_denormals):
    inject = decode_e2m1_to_f32_inject(ALL_NIBBLES)
    select = decode_e2m1_to_f32(ALL_NIBBLES)
    assert inject[1].item() == 0.0 and inject[9].item() == 0.0  # ±0.5 read as ±0: the failure
    assert torch.signbit(inject[9])
    others = torch.ones(16, dtype=torch.bool)
    others[[1, 9]] = False
    assert same_bits(inject[others], E2M1_TO_FLOAT32[others]).all()
    assert same_bits(select, E2M1_TO_FLOAT32).all()  # select stays exact
