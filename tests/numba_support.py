"""What the Numba backend's tests share: a packed weight of random normal values, by format, with
some of its codes edited, the inputs the bf16-product kernels must hand back, and what the
backend must then still compute."""
from __future__ import annotations

import torch
from conftest import rel_err

import softfp8
from softfp8.formats import PackedWeight


def quantized(fmt: str, n: int, k: int, seed: int):
    """(PackedWeight of an [n, k] normal weight in `fmt`, the generator for what comes next);
    "e5m2_rowscale": E5M2 with per-row scales, on a weight three times wider."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    if fmt == "e5m2_rowscale":
        return softfp8.quantize(w * 3, "e5m2", row_scale=True), g
    return softfp8.quantize(w, fmt), g


def with_codes(fmt: str, n: int, k: int, edit):
    """`quantized(fmt, n, k, seed=9)` with `edit(code bytes, scales)` applied to copies of its
    words (as uint8) and scales: (PackedWeight, generator)."""
    packed, g = quantized(fmt, n, k, seed=9)
    words = packed.words.clone()
    scales = None if packed.scales is None else packed.scales.clone()
    edit(words.view(torch.uint8), scales)
    return PackedWeight(fmt, packed.shape, words, scales, packed.global_scale), g


HAND_BACK_CASES = ["e5m2 inf code", "nvfp4 NaN scale", "mxfp4 scale 0", "mxfp4 scale 2^-100",
                   "tiny x", "huge x", "x inf"]
"""A weight or an x the bf16-product kernels can't take exactly (`hand_back_case`)."""


def hand_back_case(case: str, m: int, n: int, k: int):
    """(PackedWeight [n, k], x [m, k]) for one of HAND_BACK_CASES (a case prefixed with a format,
    "nvfp4 tiny x", takes that format's weight; x cases default to E4M3): an E5M2 inf code, an
    NVFP4 NaN scale, MXFP4 scale codes 0 and 27 (2^-100), an E4M3_B128 tile scale inf or NaN, or
    x[2, 7] at 2^-120, 2^95 or inf."""
    fmt = case.split()[0] if case.split()[0] in ("e5m2", "nvfp4", "mxfp4", "e4m3_b128") else "e4m3"
    edits = {"e5m2 inf code": lambda w, s: w[2].__setitem__(5, 0x7C),
             "e4m3_b128 inf scale": lambda w, s: s[0].__setitem__(0, float("inf")),
             "e4m3_b128 NaN scale": lambda w, s: s[0].__setitem__(0, float("nan")),
             "nvfp4 NaN scale": lambda w, s: s[1].__setitem__(0, 0x7F),
             "mxfp4 scale 0": lambda w, s: s[1].__setitem__(0, 0),
             "mxfp4 scale 2^-100": lambda w, s: s[1].__setitem__(0, 27)}
    packed, g = with_codes(fmt, n, k, edits.get(case, lambda w, s: None))
    x = torch.randn(m, k, generator=g)
    if case.endswith("tiny x"):
        x[2, 7] = 2.0 ** -120
    elif case.endswith("huge x"):
        x[2, 7] = 2.0 ** 95
    elif case.endswith("x inf"):
        x[2, 7] = float("inf")
    return packed, x


def assert_backend_matches_reference(x: torch.Tensor, packed: PackedWeight) -> None:
    """The numba backend's y = x @ W.T (whatever path it takes) against the torch reference: NaN
    exactly where the reference has NaN, within 1e-5 relative where the reference is finite."""
    from softfp8.backends import numba as cpu_backend

    y = cpu_backend.matmul(x, packed)
    ref = softfp8.linear(x, packed, backend="torch")
    fin = torch.isfinite(ref)
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    assert rel_err(y[fin], ref[fin]) <= 1e-5
