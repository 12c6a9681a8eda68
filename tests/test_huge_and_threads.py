"""Huge weights (N*K >= 2^31 codes: any int32 index or byte offset overflows) and 8 threads at
once. The huge weights are built from random int32 words, not by quantizing 2^31 floats, and
checked row by row against an fp64 decode that shares no code with softfp8's decoders."""
import threading

import pytest
import torch
from hardening_support import backends_for

import softfp8
from softfp8 import Backend
from softfp8 import Format, PackedWeight
from softfp8.decode import E2M1_TO_FLOAT32
from softfp8.dispatch import select
from softfp8.formats import SPECS, padded_k

HUGE_K = 65_531  # odd: the padding is exercised too
HUGE_N = 2**31 // HUGE_K + 2  # N*K just past 2^31


def _random_packed(fmt: Format, n: int, k: int, device: str, seed: int = 0) -> PackedWeight:
    g = torch.Generator().manual_seed(seed)
    kp = padded_k(k, fmt)
    words = torch.randint(-2**31, 2**31 - 1, (n, kp * SPECS[fmt].bits // 32), dtype=torch.int32,
                          generator=g)
    if fmt is Format.E5M2:
        words &= 0xBFBFBFBF - 2**32  # bit 6 of every byte off: |value| < 2, no inf/NaN
    scales = global_scale = None
    if fmt is Format.NVFP4:
        scales = torch.randint(0x30, 0x40, (n, kp // 16), dtype=torch.uint8, generator=g)
        global_scale = torch.tensor(0.75)
    elif fmt is Format.MXFP4:
        scales = torch.randint(124, 131, (n, kp // 32), dtype=torch.uint8, generator=g)
    packed = PackedWeight(fmt, (n, k), words, scales, global_scale)
    return packed.to(device)


def _rows_fp64(packed: PackedWeight, rows: list[int]) -> torch.Tensor:
    """The listed rows of the weight in float64, from torch's own float8 views and the E2M1 table
    (no softfp8 decoder involved)."""
    n, k = packed.shape
    out = []
    for r in rows:
        b = packed.words[r].cpu().view(torch.uint8)
        if packed.fmt is Format.E5M2:
            out.append(b.view(torch.float8_e5m2).double()[:k])
            continue
        codes = torch.stack((b & 0xF, b >> 4), dim=-1).flatten().long()
        vals = E2M1_TO_FLOAT32.double()[codes]
        s = packed.scales[r].cpu()
        if packed.fmt is Format.NVFP4:
            scale = s.view(torch.float8_e4m3fn).double() * packed.global_scale.cpu().double()
        else:
            scale = torch.exp2(s.double() - 127)
        out.append((vals.view(-1, packed.spec.block) * scale[:, None]).flatten()[:k])
    return torch.stack(out)


def _check_huge(fmt: Format, device: str, backend) -> None:
    packed = _random_packed(fmt, HUGE_N, HUGE_K, device)
    assert HUGE_N * HUGE_K >= 2**31
    x = torch.randn(1, HUGE_K, generator=torch.Generator().manual_seed(1)).to(device)
    y = softfp8.linear(x, packed, backend=backend)[0].cpu()
    rows = [0, 1, HUGE_N // 2, HUGE_N - 2, HUGE_N - 1]  # the last rows start past 2^31 codes
    w64 = _rows_fp64(packed, rows)
    want = w64 @ x[0].cpu().double()
    # Any fp32 summation order of K products is within gamma_K * sum|w x| of the exact sum
    # (gamma_K = K u / (1 - K u), u = 2^-24; Higham, Accuracy and Stability, 4.2). Random codes
    # over E5M2's whole range cancel heavily, so an error relative to |y| says nothing; relative
    # to sum|w x|, a wrong row or an overflowed offset is an error of order 1.
    u = 2.0 ** -24
    gamma = HUGE_K * u / (1 - HUGE_K * u)
    magnitude = w64.abs() @ x[0].cpu().double().abs()
    assert ((y[rows].double() - want).abs() <= gamma * magnitude).all(), (y[rows], want)
    assert torch.isfinite(y).all()


@pytest.mark.slow
@pytest.mark.parametrize("backend", backends_for("e5m2", "cpu"), ids=str)
def test_huge_e5m2_weight_cpu(backend):
    _check_huge(Format.E5M2, "cpu", backend)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU")
@pytest.mark.parametrize("fmt", [Format.E5M2, Format.NVFP4, Format.MXFP4])
def test_huge_weight_gpu(fmt):
    for backend in backends_for(fmt, "cuda"):
        _check_huge(fmt, "cuda", backend)
        torch.cuda.empty_cache()


def test_independent_row_decode_agrees_with_dequantize():
    """The fp64 oracle above is itself checked, on a small weight, against dequantize."""
    for fmt in (Format.E5M2, Format.NVFP4, Format.MXFP4):
        packed = _random_packed(fmt, 4, 77, "cpu", seed=3)
        assert torch.equal(_rows_fp64(packed, [0, 1, 2, 3]).float(), softfp8.dequantize(packed))


# -- 8 threads at once -----------------------------------------------------------------------

def _in_threads(fn, count=8):
    barrier = threading.Barrier(count)
    results, errors = [None] * count, []

    def run(i):
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    return results


@pytest.mark.parametrize("fmt", list(Format))
def test_linear_from_8_threads_is_identical(fmt):
    g = torch.Generator().manual_seed(5)
    packed = softfp8.quantize(torch.randn(96, 200, generator=g), fmt)
    x = torch.randn(3, 200, generator=g)
    # Triton's interpreter (how triton runs on a CPU) patches module globals while a kernel runs
    # and is not thread-safe; compiled Triton on a GPU is (test_gpu variants cover it there).
    for backend in [b for b in backends_for(fmt, "cpu", 3) if b is not Backend.TRITON]:
        alone = softfp8.linear(x, packed, backend=backend)
        results = _in_threads(lambda i: softfp8.linear(x, packed, backend=backend))
        assert all(torch.equal(r, alone) for r in results), backend


def test_select_from_8_threads_is_identical():
    want = [select(f, m, "cpu") for f in Format for m in (1, 7)]
    results = _in_threads(lambda i: [select(f, m, "cpu") for f in Format for m in (1, 7)])
    assert all(r == want for r in results)


def test_probe_from_8_threads_is_identical():
    probe = softfp8.capability.probe
    import dataclasses

    results = _in_threads(lambda i: probe(refresh=(i == 0)) if i % 2 == 0 else probe())
    # A refresh measures again: its facts must be identical, its own duration may differ.
    facts = [dataclasses.replace(r, probe_seconds=0.0) for r in results]
    assert all(f == facts[0] for f in facts)
