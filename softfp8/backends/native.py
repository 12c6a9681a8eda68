"""The native backend: torch float8 dtypes and ``torch._scaled_mm`` on GPUs with FP8 units (W8A8).

The packed FP8 words *are* float8 tensors already: an E4M3/E5M2 row of int32 words
``[N, Kp / 4]`` is, byte for byte, a ``float8_e4m3fn``/``float8_e5m2`` row ``[N, Kp]`` (DESIGN.md
§2: code ``k`` sits in byte ``k`` of the row, little-endian), so the weight is handed to the FP8
tensor cores as a zero-copy view and never decoded or copied. The fp32 per-row weight scale is
exactly ``_scaled_mm``'s row-wise scale of that operand.

Activations are quantized per call, per row, to E4M3 (the row's absmax maps to 448; its scale is
the other row-wise scale). That is why this backend sets ``QUANTIZES_ACTIVATIONS``: its result is
not the weight-only ``x @ dequantize(W).T``.

Numerics (W8A8 vs the weight-only path, both on the same quantized weight):
    Quantizing an activation to E4M3 (3 mantissa bits) rounds it with a relative error of at most
    2^-4 (half an ulp), about 2.7% RMS for values spread over a binade; the errors of the K terms
    of a dot product are independent, so the *output* relative error ``‖y_native − y_wo‖ /
    ‖y_wo‖`` is of the same order, plus the bf16 output rounding (2^-9 relative, 0.2% RMS) and a
    different accumulation order (negligible in fp32). Expected: about 3%; documented bound:
    ``EXPECTED_REL_ERR_BOUND`` = 5% for activations without extreme in-row outliers. Rows with a
    huge outlier (absmax ≫ typical value, as in some LLM "massive activation" channels) lose
    more, because their small elements fall into E4M3's subnormals (below absmax · 2^-6 / 448);
    forbid activation quantization where that matters. Measured on CPU with an emulation of
    ``_scaled_mm`` that decodes and multiplies exactly (``python -m pytest -s tests/test_native.py
    -k documented_bound``; standard normal x [64, 1024], E4M3 weight [256, 1024]): 2.66%. That
    number, with its machine and versions, and the one measured on a GPU
    (benchmarks/gpu_native_crossover.py, column "err e4m3") belong in docs/performance.md.

``_scaled_mm`` constraints, handled here and invisible to the caller:
- K of both operands a multiple of 16: Kp already is (the packing pads K); x is padded with zeros.
- the second operand column-major with both dims multiples of 16, the first row-major; M is
  padded to a multiple of 16 (cuBLASLt's FP8 heuristics want it; M = 1 works that way too).
- row-wise scaling wants bf16 output (CUTLASS path) and an E4M3 second operand. So:
  * E4M3 weights with N % 16 == 0: ``y = x_q @ W.T``, the weight view transposed as mat2;
  * otherwise (E5M2 weights, or N not a multiple of 16) the product is computed transposed,
    ``y.T = W @ x_q.T``: the weight is the row-major first operand (which may be E5M2 and has no
    size rule beyond K), the quantized activations the second; still zero-copy on the weight;
  * the bf16 result is cast to x's dtype (fp32 and fp16 activations too).
- if a torch build refuses row-wise scaling for a shape (some cuBLASLt versions return
  NOT_SUPPORTED), the same product runs with tensor-wise unit scales and fp32 output, and the two
  row scales are applied to the output afterwards; warned once per shape.

Versions: the schema used here, ``_scaled_mm(self, mat2, scale_a, scale_b, bias=None,
scale_result=None, out_dtype=None, use_fast_accum=False) -> Tensor``, was read off torch 2.13 on
this machine (``torch._C._jit_get_schemas_for_operator("aten::_scaled_mm")``); it is the schema
torch has had since row-wise scales arrived in 2.5, so 2.11 on the GPU machine takes the same call
(the GPU tests exercise it there). torch 2.13 also has ``torch.nn.functional.scaled_mm``; it is not
used, so nothing depends on 2.11 having it. ``auto_accepts`` refuses torch < 2.5; torch < 2.4
returned ``(out, amax)``, which ``_first`` tolerates.
"""
from __future__ import annotations

import warnings

import torch

from .._checks import check_matrix_args
from .._choices import E2M1Decode
from .._needs import Needs
from ..formats import Format, PackedWeight

NEEDS = Needs(formats=frozenset({Format.E4M3, Format.E5M2}), device_types=frozenset({"cuda"}),
              min_capability=(8, 9))

QUANTIZES_ACTIVATIONS = True
"""W8A8: activations are rounded to E4M3 per call (see the module docstring for the bound)."""

# Auto uses native from this M upwards and the weight-only (Triton) path below it. Measured on
# the H200 (llama3-8b layer shapes, E4M3 W8A8 against Triton weight-only, `python
# benchmarks/gpu_native_crossover.py --ms 1,4,16,32,64,128,256,512,2048 --reps 10`;
# docs/performance.md): native is faster for gate_up and down from M = 256 and for the whole
# layer from M = 256.
NATIVE_MIN_M = 256

EXPECTED_REL_ERR_BOUND = 0.05
"""Documented bound on ‖y_native − y_weight_only‖ / ‖y_weight_only‖ (module docstring)."""

E4M3_MAX = 448.0
_M_MULTIPLE = 16  # pad M to this: mat2 dims must be multiples of 16 in the transposed form
_FAST_ACCUM = False  # Hopper's fast FP8 accumulation skips fp32 promotion: keep precision
_MIN_TORCH = (2, 5)  # row-wise scale_a [M, 1] / scale_b [1, N] in _scaled_mm
_ROWWISE_REFUSED: set[tuple] = set()  # shapes a build refused row-wise for (warned once)

_FP8_DTYPE = {Format.E4M3: torch.float8_e4m3fn, Format.E5M2: torch.float8_e5m2}


def auto_accepts(fmt: Format, m: int, device: torch.device, report: object = None) -> str | None:
    """None if auto dispatch should use native for this (format, M, device), else why not.

    Called after ``NEEDS.why_not`` accepted the device. `report` is the probe's CapabilityReport;
    it is accepted for the common hook signature and not consulted yet (the capability check is
    NEEDS'; the probe's own measurement of ``_scaled_mm`` can refine this when it lands)."""
    fmt = Format.parse(fmt)
    if fmt not in NEEDS.formats:
        return f"native does not implement {fmt}"
    if not hasattr(torch, "_scaled_mm") or torch.__version__ < _MIN_TORCH:
        return (f"torch {torch.__version__} lacks row-wise torch._scaled_mm "
                f"(needs {'.'.join(map(str, _MIN_TORCH))} or newer)")
    if torch.device(device).type == "cuda" and torch.version.hip is not None:
        return ("not verified on ROCm (MI300 uses the fnuz FP8 encoding, not the e4m3fn codes "
                "softfp8 stores); force backend='native' to try it")
    if m < NATIVE_MIN_M:
        return (f"M = {m} is below the native crossover M = {NATIVE_MIN_M} (measured on the H200); "
                "the weight-only path is faster there")
    return None


def quantize_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row dynamic E4M3 quantization: (codes float8_e4m3fn [M, K], scale fp32 [M, 1]).

    ``x ≈ codes.float() * scale``; each row's largest |value| maps to ±448, rounded to nearest
    even by torch's cast of the exact fp32 quotient. All-zero rows get scale 1 (codes 0). A row
    holding NaN or inf gets NaN codes, so its outputs are NaN (torch's matmul gives inf or NaN).

    Three passes over x, no fp32 copy of it: the absmax is an exact reduction in x's own dtype,
    the quotient is computed in fp32 straight from x, then cast."""
    absmax = torch.linalg.vector_norm(x, ord=float("inf"), dim=1, keepdim=True).to(torch.float32)
    scale = torch.where(absmax > 0, absmax / E4M3_MAX, torch.ones_like(absmax))
    # No clamp needed: x / scale exceeds 448 by at most a few fp32 ulps, far below 464, the
    # point where the cast would round up (or, in casts that don't saturate, turn to NaN).
    codes = torch.div(x, scale).to(torch.float8_e4m3fn)
    return codes, scale


def matmul(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None = None, *,
           e2m1: E2M1Decode = E2M1Decode.SELECT, checked: bool = False) -> torch.Tensor:
    """y = x @ W.T + bias with W8A8 FP8 tensor-core math, in x's dtype (contract: backends/__init__).

    `e2m1` is accepted for the common signature; FP8 formats have no E2M1 codes."""
    if not checked:
        check_matrix_args(x, packed, bias)
    if packed.fmt not in _FP8_DTYPE:
        raise ValueError(f"packed: the native backend runs e4m3 and e5m2 weights, got {packed.fmt}")
    m, k = x.shape
    n, kp = packed.shape[0], packed.padded_k
    mp = -(-m // _M_MULTIPLE) * _M_MULTIPLE
    # Zero rows and columns add nothing to the product; skip the copy when none are needed.
    xp = x if (kp, mp) == (k, m) else torch.nn.functional.pad(x, (0, kp - k, 0, mp - m))
    xq, x_scale = quantize_activations(xp)
    # Zero-copy: int32 words [N, Kp/4] -> bytes [N, Kp] -> float8 [N, Kp], the same storage.
    wq = packed.words.view(torch.uint8).view(_FP8_DTYPE[packed.fmt])
    w_scale = packed.scales
    if w_scale is None:  # unscaled E5M2
        w_scale = torch.ones(n, dtype=torch.float32, device=x.device)
    if packed.fmt is Format.E4M3 and n % 16 == 0:
        # bf16 activations and output: the bias rides in _scaled_mm's epilogue.
        fused = bias is not None and x.dtype == torch.bfloat16
        out = _scaled_mm(xq, wq.t(), x_scale, w_scale.view(1, n),
                         bias.to(torch.bfloat16) if fused else None)[:m]
    else:
        fused = False  # _scaled_mm's bias runs along mat2's columns, which are M here
        out = _scaled_mm(wq, xq.t(), w_scale.view(n, 1), x_scale.view(1, mp), None)[:, :m].t()
    return _finish(out, x.dtype, None if fused else bias)


def _finish(out: torch.Tensor, dtype: torch.dtype, bias: torch.Tensor | None) -> torch.Tensor:
    """`out` (+ bias, added in fp32 and rounded once) as a contiguous [M, N] tensor of `dtype`."""
    if bias is not None:
        out = out.to(torch.float32) + bias.to(torch.float32)
    if out.dtype == dtype and out.is_contiguous():
        return out
    return torch.empty(out.shape, dtype=dtype, device=out.device).copy_(out)


def _scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
               bias: torch.Tensor | None) -> torch.Tensor:
    """a [R, K] row-major @ b [K, C] column-major, scaled by scale_a [R, 1] and scale_b [1, C].

    Row-wise with bf16 output where the build takes it; else tensor-wise unit scales, fp32 out,
    and the row scales (and bias) applied here."""
    key = (a.device, a.dtype, b.dtype, tuple(a.shape), tuple(b.shape), bias is not None)
    if key not in _ROWWISE_REFUSED:
        try:
            return _first(torch._scaled_mm(a, b, scale_a, scale_b, bias=bias,
                                           out_dtype=torch.bfloat16, use_fast_accum=_FAST_ACCUM))
        except RuntimeError as err:
            if "out of memory" in str(err):
                raise
            _ROWWISE_REFUSED.add(key)
            warnings.warn(f"softfp8 native: torch._scaled_mm refused row-wise scaling for "
                          f"{tuple(a.shape)} x {tuple(b.shape)} ({str(err).splitlines()[0]}); "
                          "using tensor-wise scaling and scaling the output instead",
                          RuntimeWarning, stacklevel=3)
    one = torch.ones((), dtype=torch.float32, device=a.device)
    out = _first(torch._scaled_mm(a, b, one, one, out_dtype=torch.float32,
                                  use_fast_accum=_FAST_ACCUM))
    out.mul_(scale_a).mul_(scale_b)
    if bias is not None:
        out.add_(bias.to(torch.float32))
    return out


def _first(result: torch.Tensor | tuple) -> torch.Tensor:
    # torch < 2.4 returned (out, amax); newer ones return the tensor alone.
    return result[0] if isinstance(result, tuple) else result
