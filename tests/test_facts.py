"""Per-weight facts (`backends/_facts.py`): NaN-free codes, MXFP4 row exponents, kept until a
tensor of the weight is replaced or written in place."""

import pytest
import torch
from conftest import triton_backend_or_skip

import softfp8
from softfp8.formats import Format, PackedWeight

triton_backend = triton_backend_or_skip()


@pytest.mark.parametrize("chunk", [None, 16])
def test_codes_nan_free_checks_once_and_again_after_an_in_place_write(chunk, monkeypatch):
    """chunk: the check reads one row at a time."""
    from softfp8.backends import _facts

    if chunk:
        monkeypatch.setattr(_facts, "CHECK_CHUNK_BYTES", chunk)
    g = torch.Generator().manual_seed(5)
    packed = softfp8.quantize(torch.randn(8, 64, generator=g), Format.E4M3)
    assert triton_backend.codes_nan_free(packed)
    packed.words.view(torch.uint8)[3, 7] = 0xFF  # E4M3 NaN, written in place: version moves
    assert not triton_backend.codes_nan_free(packed)
    packed.words.view(torch.uint8)[3, 7] = 0x7E  # 448: finite again
    assert triton_backend.codes_nan_free(packed)
    nan = PackedWeight(Format.E4M3, (1, 16),
                       torch.tensor([[0x7F000000, 0, 0, 0]], dtype=torch.int32), torch.ones(1))
    assert not triton_backend.codes_nan_free(nan)
    assert not triton_backend.codes_nan_free(softfp8.quantize(torch.ones(8, 64), Format.E5M2))


@pytest.mark.parametrize("fmt, nan_code", [(Format.NVFP4, 0x7F), (Format.NVFP4, 0xFF),
                                           (Format.MXFP4, 0xFF)])
def test_codes_nan_free_reads_fp4_block_scales(fmt, nan_code, monkeypatch):
    """FP4's NaN codes are its block scales' (E2M1 has none): checked, and again after an
    in-place write to the scales alone (the check a row at a time)."""
    from softfp8.backends import _facts

    monkeypatch.setattr(_facts, "CHECK_CHUNK_BYTES", 1)
    g = torch.Generator().manual_seed(6)
    packed = softfp8.quantize(torch.randn(8, 64, generator=g), fmt)
    assert triton_backend.codes_nan_free(packed)
    keep = packed.scales[2, 1].item()
    packed.scales[2, 1] = nan_code
    assert not triton_backend.codes_nan_free(packed)
    packed.scales[2, 1] = keep
    assert triton_backend.codes_nan_free(packed)
    packed.words.view(torch.uint8)[:] = 0xFF  # every E2M1 code -6: still no NaN
    assert triton_backend.codes_nan_free(packed)


@pytest.mark.parametrize("chunk", [None, 40])
def test_mx_row_exponents_are_each_rows_largest_nonzero_block_within_the_span(chunk,
                                                                               monkeypatch):
    """MXFP4 rows' E: the largest scale among blocks with a nonzero code; None once a nonzero
    block lies more than MX_ROW_E_SPAN below it, or a scale is NaN; checked again after an
    in-place write; None for the other formats. chunk: the check reads a row at a time."""
    from softfp8.backends import _facts
    from softfp8.backends._facts import MX_ROW_E_SPAN

    if chunk:
        monkeypatch.setattr(_facts, "CHECK_CHUNK_BYTES", chunk)

    g = torch.Generator().manual_seed(8)
    packed = softfp8.quantize(torch.randn(6, 256, generator=g), Format.MXFP4)
    scales = torch.randint(100, 110, (6, 8), generator=g, dtype=torch.int32)
    packed.scales.copy_(scales.to(torch.uint8))
    blocks = packed.words.view(torch.uint8).view(6, 8, 16)
    blocks[2, 5] = 0
    packed.scales[2, 5] = 200  # all zero codes: not the row's E
    want = packed.scales.to(torch.int32).clone()
    want[2, 5] = 0
    got = triton_backend.mx_row_exponents(packed)
    assert got.dtype == torch.int32 and torch.equal(got, want.amax(dim=1))
    packed.scales[4, 1] = got[4] - MX_ROW_E_SPAN  # the span's edge: still fine
    assert torch.equal(triton_backend.mx_row_exponents(packed), got)
    packed.scales[4, 1] = got[4] - MX_ROW_E_SPAN - 1
    assert triton_backend.mx_row_exponents(packed) is None
    packed.scales[4, 1] = got[4]
    assert torch.equal(triton_backend.mx_row_exponents(packed), got)
    packed.scales[0, 0] = 0xFF  # NaN
    assert triton_backend.mx_row_exponents(packed) is None
    nv = softfp8.quantize(torch.randn(6, 256, generator=g), Format.NVFP4)
    assert triton_backend.mx_row_exponents(nv) is None


def test_facts_are_dropped_with_their_weight_and_never_lent_to_a_reused_id():
    import gc
    import weakref

    from softfp8.backends import _facts

    packed = softfp8.quantize(torch.randn(8, 64), Format.E4M3)
    _facts.remember_fact(packed, "test fact", 1)
    key = id(packed.words)
    assert _facts.known_fact(packed, "test fact") == (1,) and key in _facts._FACTS
    del packed
    gc.collect()
    assert key not in _facts._FACTS  # the words tensor went, and its entry with it
    other = softfp8.quantize(torch.randn(8, 64), Format.E4M3)
    # an entry at this id whose tensor is gone (an id reused after a free): not other's fact
    _facts._FACTS[id(other.words)] = (weakref.ref(torch.zeros(1)), {"test fact": ((), 2)})
    assert _facts.known_fact(other, "test fact") is None
    _facts.remember_fact(other, "test fact", 3)  # replaces the stale entry
    assert _facts.known_fact(other, "test fact") == (3,)
