"""Encoders against torch's casts on a million values; packing; quantize's policy and errors;
quantize a chunk of rows at a time, the same bits and bounded memory."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import rel_err

import softfp8
from softfp8.decode import E2M1_TO_FLOAT32, decode_e2m1_to_f32, decode_e4m3_to_f32
from softfp8.formats import SPECS, Format, PackedWeight
from softfp8.quantize import (encode_e2m1, encode_e4m3, encode_e5m2, encode_e8m0_exponent,
                              pack_codes, unpack_codes)

EDGES = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), -float("nan"), 1e-45, -1e-40,
         2.0 ** -126, 57344.0, 61439.0, 61440.0, 61441.0, 65504.0, 1e9, -1e9, 448.0, 455.0,
         456.0, 464.0, 465.0, 480.0, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -11, 2.0 ** -16,
         2.0 ** -17, 3 * 2.0 ** -18]


def million_values(scale_exponents: tuple[int, int]) -> torch.Tensor:
    """1M float32 values over many binades, with exact ties and the edge values above."""
    g = torch.Generator().manual_seed(1234)
    n = 1 << 20
    lo, hi = scale_exponents
    x = torch.randn(n, generator=g) * torch.exp2(torch.randint(lo, hi, (n,), generator=g).float())
    # exact ties: odd multiples of half a quantum land exactly between two codes
    ties = (torch.randint(0, 1 << 10, (n // 8,), generator=g) * 2 + 1).float()
    ties = ties * torch.exp2(torch.randint(lo - 12, hi - 10, (n // 8,), generator=g).float())
    return torch.cat([x, ties, -ties, torch.tensor(EDGES)])


@pytest.mark.parametrize("encode, dtype, exps", [
    pytest.param(encode_e5m2, torch.float8_e5m2, (-26, 20), id="e5m2"),
    pytest.param(encode_e4m3, torch.float8_e4m3fn, (-14, 12), id="e4m3"),
])
def test_encoder_equals_torch_cast(encode, dtype, exps):
    x = million_values(exps)
    got = encode(x)
    want = x.to(dtype).view(torch.uint8)
    bad = got != want
    assert not bad.any(), list(zip(x[bad][:5].tolist(), got[bad][:5].tolist(), want[bad][:5].tolist()))


def nearest_even_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Brute force over the 8 magnitudes: nearest, ties to the even code; saturate past 6."""
    mags = E2M1_TO_FLOAT32[:8]
    dist = (x.abs()[:, None] - mags[None]).abs()
    nearest = dist == dist.min(dim=1, keepdim=True).values
    code = torch.where(nearest, torch.arange(8) % 2, 2).argmin(dim=1)  # even code wins a tie
    code = torch.where(x.abs() > 6, 7, code)
    return code | (torch.signbit(x).int() << 3)


def test_e2m1_encoder_equals_nearest_even():
    g = torch.Generator().manual_seed(5)
    x = torch.cat([(torch.rand(1 << 20, generator=g) - 0.5) * 16,
                   torch.arange(-32, 33) * 0.25,  # every tie and every value
                   torch.tensor([6.5, -7.0, 1e30, float("inf"), -float("inf"), 0.0, -0.0, 1e-45])])
    got = encode_e2m1(x).int()
    want = nearest_even_e2m1(x)
    assert torch.equal(got, want)


def test_e2m1_encode_decode_round_trip():
    codes = torch.arange(16)
    assert torch.equal(encode_e2m1(decode_e2m1_to_f32(codes)).long(), codes)


def test_e8m0_exponent_encoding_matches_torch():
    e = torch.arange(-127, 128)
    got = encode_e8m0_exponent(e)
    want = torch.exp2(e.double()).float().to(torch.float8_e8m0fnu).view(torch.uint8)
    assert torch.equal(got, want)


@pytest.mark.parametrize("fmt", list(Format))
@pytest.mark.parametrize("k", [1, 3, 17, 31, 32, 33, 4097])
def test_pack_unpack_round_trip(fmt, k):
    bits = SPECS[fmt].bits
    g = torch.Generator().manual_seed(k)
    codes = torch.randint(0, 1 << bits, (5, k), generator=g, dtype=torch.uint8)
    words = pack_codes(codes, fmt)
    assert words.dtype == torch.int32 and words.is_contiguous()
    assert (words.shape[1] * 4) % 16 == 0  # rows are whole 16-byte vectors
    assert torch.equal(unpack_codes(words, fmt, k), codes)
    assert (unpack_codes(words, fmt, words.shape[1] * 32 // bits)[:, k:] == 0).all()


def test_pack_layout_is_documented_little_endian():
    codes = torch.tensor([[0x01, 0x02, 0x03, 0x84]], dtype=torch.uint8)
    assert pack_codes(codes, "e5m2")[0, 0].item() == 0x84030201 - (1 << 32)
    nibbles = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]], dtype=torch.uint8)
    assert pack_codes(nibbles, "nvfp4")[0, 0].item() == 0x87654321 - (1 << 32)
    # the same bytes as torch's float4_e2m1fn_x2: even k in the low nibble
    assert pack_codes(nibbles, "mxfp4").view(torch.uint8)[0, :4].tolist() == [0x21, 0x43, 0x65, 0x87]


@pytest.mark.parametrize("fmt", list(Format))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_quantize_is_idempotent(fmt, dtype):
    w = (torch.randn(19, 77, generator=torch.Generator().manual_seed(0)) * 0.05).to(dtype)
    p = softfp8.quantize(w, fmt)
    assert p.shape == (19, 77) and p.fmt is fmt
    again = softfp8.quantize(softfp8.dequantize(p), fmt)
    assert torch.equal(again.words, p.words)
    for a, b in ((again.scales, p.scales), (again.global_scale, p.global_scale)):
        assert (a is None and b is None) or torch.equal(a, b)


def test_e5m2_codes_are_torch_cast_of_the_weight():
    w = torch.randn(8, 40) * 0.1
    p = softfp8.quantize(w, "e5m2")
    assert torch.equal(unpack_codes(p.words, "e5m2", 40), w.to(torch.float8_e5m2).view(torch.uint8))


def test_e4m3_row_scale_maps_absmax_to_448():
    w = torch.randn(6, 50)
    p = softfp8.quantize(w, "e4m3")
    torch.testing.assert_close(p.scales, w.abs().amax(1) / 448, rtol=0, atol=0)
    codes = unpack_codes(p.words, "e4m3", 50)
    assert (decode_e4m3_to_f32(codes).abs().amax(1) == 448).all()


def test_nvfp4_two_level_scale_and_mxfp4_power_of_two():
    w = torch.randn(4, 64) * 3
    nv = softfp8.quantize(w, "nvfp4", scales="absmax")
    assert nv.scales.shape == (4, 4) and torch.equal(nv.global_scale, w.abs().max() / (6 * 448))
    mx = softfp8.quantize(w, "mxfp4", scales="absmax")
    assert mx.scales.shape == (4, 2)
    scale = torch.exp2(mx.scales.float() - 127)
    amax = w.view(4, 2, 32).abs().amax(-1)
    assert torch.equal(scale, torch.exp2(torch.floor(torch.log2(amax)) - 2))  # OCP MX rule


def _b128_tiles(w):
    """w [N, K] zero-padded to whole 128 x 128 tiles, as [N / 128, K / 128, 128 * 128]."""
    n, k = w.shape
    tn, tk = -(-n // 128), -(-k // 128)
    padded = torch.zeros(tn * 128, tk * 128)
    padded[:n, :k] = w
    return padded.view(tn, 128, tk, 128).permute(0, 2, 1, 3).reshape(tn, tk, -1)


def _b128_spread(scales, n, k):
    return scales.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]


@pytest.mark.parametrize("n, k", [(1, 1), (130, 259), (257, 128), (128, 383)])
def test_e4m3_b128_is_tile_absmax_and_the_torch_cast(n, k):
    g = torch.Generator().manual_seed(n + k)
    w = torch.randn(n, k, generator=g) * torch.rand(n, 1, generator=g) * 3
    w[:min(n, 128), :min(k, 128)] = 0  # an all-zero tile: scale 1
    p = softfp8.quantize(w, "e4m3_b128")
    assert p.scales.dtype == torch.float32 and p.global_scale is None
    amax = _b128_tiles(w).abs().amax(-1)
    assert p.scales.shape == amax.shape == (-(-n // 128), -(-k // 128))
    want = torch.where(amax > 0, amax / 448, 1.0)
    assert torch.equal(p.scales, want) and p.scales[0, 0] == 1
    # the codes: w / scale cast by torch, bit for bit, and each tile's largest code is 448
    scaled = w / _b128_spread(p.scales, n, k)
    codes = unpack_codes(p.words, "e4m3_b128", k)
    assert torch.equal(codes, scaled.to(torch.float8_e4m3fn).view(torch.uint8))
    top = _b128_tiles(decode_e4m3_to_f32(codes)).abs().amax(-1)
    assert torch.equal(top, torch.where(amax > 0, 448.0, 0.0))
    dq = softfp8.dequantize(p)
    assert torch.equal(dq, decode_e4m3_to_f32(codes) * _b128_spread(p.scales, n, k))


@pytest.mark.parametrize("scales, match", [
    (torch.ones(3, 2), r"scales: expected a torch.float32 tensor of shape \(2, 3\), got "
                       r"torch.float32 of shape \(3, 2\)"),
    (torch.ones(130), r"shape \(2, 3\), got torch.float32 of shape \(130,\)"),
    (torch.ones(2, 3, dtype=torch.uint8), r"float32.*got torch.uint8 of shape \(2, 3\)"),
    (torch.ones(2, 3, dtype=torch.float64), r"float32.*got torch.float64"),
    (None, r"scales: missing; expected a torch.float32 tensor of shape \(2, 3\)"),
])
def test_e4m3_b128_bad_scales_name_found_and_expected(scales, match):
    p = softfp8.quantize(torch.randn(130, 259), "e4m3_b128")
    with pytest.raises(ValueError, match=match):
        PackedWeight("e4m3_b128", (130, 259), p.words, scales)
    with pytest.raises(ValueError, match="global_scale: only nvfp4"):
        PackedWeight("e4m3_b128", (130, 259), p.words, p.scales, torch.tensor(1.0))
    # K padding is E4M3's (16 codes): K = 272 has these words, and 3 tiles along K
    assert PackedWeight("e4m3_b128", (130, 272), p.words, p.scales).padded_k == 272
    with pytest.raises(ValueError, match=r"words: .*\(130, 100\), got .*\(130, 68\)"):
        PackedWeight("e4m3_b128", (130, 400), p.words, p.scales)


@pytest.mark.parametrize("fmt, expected", [("e5m2", 0.06), ("e4m3", 0.035), ("nvfp4", 0.12),
                                           ("mxfp4", 0.14), ("e4m3_b128", 0.035)])
def test_quantization_error_is_sane_and_reported(fmt, expected):
    w = torch.randn(256, 1024, generator=torch.Generator().manual_seed(3)) * 0.02
    err = rel_err(softfp8.dequantize(softfp8.quantize(w, fmt)), w)
    print(f"\n{fmt}: relative weight error {err:.2%}")
    assert 0 < err < expected


def test_zero_weight_and_zero_rows():
    for fmt in Format:
        w = torch.zeros(3, 40)
        w[1, 5] = 1.0
        p = softfp8.quantize(w, fmt)
        assert torch.equal(softfp8.dequantize(p), w)


# -- the policy for values a format can't hold ----------------------------------------------

@pytest.mark.parametrize("fmt", list(Format))
def test_nan_weight_makes_its_row_nan_and_leaves_others(fmt):
    w = torch.randn(3, 48)
    w[1, 7] = float("nan")
    y = softfp8.linear(torch.randn(2, 48), softfp8.quantize(w, fmt))
    assert torch.isnan(y[:, 1]).all() and torch.isfinite(y[:, [0, 2]]).all()


def test_inf_weight_is_inf_in_e5m2():
    w = torch.randn(2, 16)
    w[0, 3] = float("inf")
    for row_scale in (False, True):
        dq = softfp8.dequantize(softfp8.quantize(w, "e5m2", row_scale=row_scale))
        assert dq[0, 3] == float("inf") and torch.isfinite(dq[1]).all()


@pytest.mark.parametrize("fmt", ["e4m3", "nvfp4", "mxfp4", "e4m3_b128"])
def test_inf_weight_refused_where_no_infinity(fmt):
    w = torch.randn(2, 16)
    w[1, 1] = -float("inf")
    with pytest.raises(ValueError, match="weight.*inf"):
        softfp8.quantize(w, fmt)


def test_e5m2_overflow_refused_unless_row_scaled():
    w = torch.randn(2, 16)
    w[0, 0] = 1e6
    with pytest.raises(ValueError, match="weight.*E5M2.*row_scale=True"):
        softfp8.quantize(w, "e5m2")
    dq = softfp8.dequantize(softfp8.quantize(w, "e5m2", row_scale=True))
    assert dq[0, 0].item() == pytest.approx(1e6, rel=0.13)


# -- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("weight, exc, match", [
    (torch.randn(4), ValueError, "weight.*2-D"),
    (torch.randn(2, 3, 4), ValueError, "weight.*2-D"),
    (torch.zeros(0, 4), ValueError, "weight.*non-empty"),
    (torch.ones(3, 4, dtype=torch.int32), TypeError, "weight.*floating-point"),
    (torch.ones(3, 4, dtype=torch.complex64), TypeError, "weight.*floating-point"),
    ([[1.0, 2.0]], TypeError, "weight.*torch.Tensor"),
])
def test_bad_weight(weight, exc, match):
    with pytest.raises(exc, match=match):
        softfp8.quantize(weight, "e5m2")


def test_unknown_format_lists_valid_names():
    with pytest.raises(ValueError, match="fmt='e3m4'.*'e5m2', 'e4m3', 'nvfp4', 'mxfp4'"):
        softfp8.quantize(torch.randn(2, 2), "e3m4")
    assert softfp8.quantize(torch.randn(2, 2), "E4M3").fmt is Format.E4M3


def test_row_scale_only_for_e5m2():
    with pytest.raises(ValueError, match="row_scale"):
        softfp8.quantize(torch.randn(2, 2), "nvfp4", row_scale=True)


def test_corrupted_packed_weight_is_refused():
    p = softfp8.quantize(torch.randn(4, 40), "nvfp4")
    with pytest.raises(ValueError, match="scales"):
        PackedWeight(p.fmt, p.shape, p.words, p.scales[:, :1].contiguous(), p.global_scale)
    with pytest.raises(ValueError, match="words"):
        PackedWeight(p.fmt, (4, 400), p.words, p.scales, p.global_scale)
    with pytest.raises(ValueError, match="global_scale"):
        PackedWeight(p.fmt, p.shape, p.words, p.scales, None)
    with pytest.raises(ValueError, match="words"):
        PackedWeight(p.fmt, p.shape, p.words.float(), p.scales, p.global_scale)


def test_help_of_softfp8_quantize_reaches_the_policy():
    """`softfp8.quantize` is the function, which hides the module: the function's own docstring
    holds the policy for values a format can't hold, so help(softfp8.quantize) shows every rule
    of it, and the module's docstring points there."""
    import pydoc
    import sys

    shown = " ".join(pydoc.render_doc(softfp8.quantize, renderer=pydoc.plaintext).split())
    for rule in ("Policy for values a format can't hold",
                 "E5M2 turns finite overflow and ±inf into ±inf",
                 "E4M3 saturates finite overflow and ±inf to ±448; E2M1 saturates to ±6",
                 "unscaled E5M2 raises ValueError if a finite weight lies beyond ±57344",
                 "NVFP4/MXFP4 mark the whole block NaN through its scale",
                 "The other formats have no infinity, so they raise ValueError",
                 "Zero rows, tiles and blocks get scale 1 (E4M3 row, E4M3_B128 tile, E8M0 code 127)",
                 "(amax <= 2^-129)"):
        assert rule in shown, rule
    assert "`quantize`'s docstring" in " ".join(sys.modules["softfp8.quantize"].__doc__.split())


def test_a_weight_sharded_as_a_dtensor_is_refused_clearly(monkeypatch):
    """transformers' tp_plan loads nn.Linear weights as DTensors: quantizing one raised deep in
    torch (mixed Tensor and DTensor); it names what to do instead."""
    import socket

    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        monkeypatch.setenv("MASTER_PORT", str(sock.getsockname()[1]))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        w = distribute_tensor(torch.randn(8, 64), init_device_mesh("cpu", (1,)), [Shard(0)])
        with pytest.raises(TypeError, match=r"weight: is a DTensor .*tensor_parallel.parallelize"):
            softfp8.quantize(w, Format.E4M3)
    finally:
        dist.destroy_process_group()


CHUNK_CASES = [(fmt, row_scale, scales) for fmt in Format for scales in ("absmax", "mse")
               for row_scale in ((None, True) if fmt is Format.E5M2 else (None,))
               if not (fmt is Format.E4M3_B128 and scales == "mse")]


@pytest.mark.parametrize("fmt, row_scale, scales", CHUNK_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_quantize_in_chunks_of_rows_equals_one_piece(monkeypatch, fmt, row_scale, scales, dtype):
    # quantize encodes a chunk of rows at a time; with chunks of 3 rows (whole 128-row tiles for
    # E4M3_B128: 333 rows make two and a partial one) the bits must be those of one piece:
    # NVFP4's tensor scale is still the whole weight's (its largest value sits in a later
    # chunk), NaN and zero rows included.
    from softfp8 import _scale_search

    for n in (1, 17, 333):
        torch.manual_seed(n)
        w = torch.randn(n, 96, dtype=torch.float64) * torch.rand(n, 1, dtype=torch.float64) * 3
        if n > 20:
            w[200, 5] = 40.0
            w[5, 3], w[7] = float("nan"), 0.0
        w = w.to(dtype)
        kwargs = dict(scales=scales) | ({} if row_scale is None else dict(row_scale=row_scale))
        monkeypatch.setattr(_scale_search, "CHUNK_ELEMENTS", 1 << 40)
        whole = softfp8.quantize(w, fmt, **kwargs)
        monkeypatch.setattr(_scale_search, "CHUNK_ELEMENTS", 3 * 96)
        chunked = softfp8.quantize(w, fmt, **kwargs)
        assert len(whole.tensors()) == len(chunked.tensors())
        for a, b in zip(whole.tensors(), chunked.tensors()):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def test_e5m2_overflow_counted_over_every_chunk(monkeypatch):
    from softfp8 import _scale_search

    monkeypatch.setattr(_scale_search, "CHUNK_ELEMENTS", 8)
    w = torch.zeros(6, 8)
    w[0, 0], w[5, 7] = 6.2e4, -7e4  # in the first chunk and the last
    with pytest.raises(ValueError, match=r"2 finite values .*largest here 70000"):
        softfp8.quantize(w, "e5m2")


PEAK_SCRIPT = textwrap.dedent("""
    import json, resource, sys, torch, softfp8
    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    w = torch.empty(16384, 2048, dtype=torch.float16).normal_(0, 0.02)  # no temporaries
    softfp8.quantize(w[:4], sys.argv[1])  # imports and first-call work before the baseline
    base = peak()
    packed = softfp8.quantize(w, sys.argv[1])
    print(json.dumps({"grew": peak() - base,
                      "packed": sum(t.numel() * t.element_size() for t in packed.tensors())}))
""")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["e4m3", "e4m3_b128", "nvfp4"])
def test_quantize_memory_is_the_packed_weight_plus_one_chunk(fmt):
    # A 64 MiB fp16 weight: the process may grow by a few times the packed weight (codes before
    # packing, FP4's parts) + 160 MiB for one chunk's temporaries (CHUNK_ELEMENTS weights at
    # ~60 bytes each), never by a multiple of the weight (encoded in one piece, E4M3 grew by
    # 1.7 GiB). MALLOC_MMAP_THRESHOLD_ as in test_hub_loader: resident memory follows use.
    out = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, fmt], capture_output=True, text=True,
                         check=True, env=dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072",
                                              PYTHONPATH=str(Path(softfp8.__file__).parents[1])))
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{fmt}: grew {r['grew'] / 2**20:.0f} MiB, packed {r['packed'] / 2**20:.0f} MiB")  # -s
    bound = 4 * r["packed"] + 160 * 2**20
    assert bound < 5 * 16384 * 2048 * 2  # the bound catches a quantize five times the weight
    assert r["grew"] < bound, (r["grew"] / 2**20, bound / 2**20)
