"""The bandwidth model, and the bytes a linear moves.

At batch 1 a linear layer does about 2 FLOP per weight byte, so its time is the time to move its
bytes. The model predicts

    time per token  = bytes per token / (read bandwidth x coefficient)
    tokens / second = read bandwidth x coefficient / bytes per token

`read bandwidth` is measured on the card by a pure-read kernel (`softfp8.bench.memory`), and the
coefficient is the fraction of it that fp16 cuBLAS GEMV reaches over a preset's shapes:

    coefficient = sum over shapes of (fp16 bytes moved / read bandwidth)
                  / sum over shapes of (measured fp16 GEMV time)

so it is at most about 1 (an efficiency, not a slowdown factor), is weighted by bytes the way a
token is, and makes the model's fp16 prediction for those shapes exact by construction: what the
model then claims is that every format moves its bytes at fp16 cuBLAS's efficiency.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from ..formats import SPECS, Format, ScaleKind, padded_k


def packed_nbytes(n: int, k: int, fmt: Format | str, *, row_scale: bool = False) -> int:
    """Bytes `quantize(weight[n, k], fmt).nbytes` will have (words, scales, tensor scale)."""
    fmt = Format.parse(fmt)
    spec = SPECS[fmt]
    kp = padded_k(k, fmt)
    words = n * (kp // spec.codes_per_word) * 4
    if spec.scale is ScaleKind.ROW:
        scales = 4 * n if (spec.scale_required or row_scale) else 0
    else:  # one uint8 code per block, or one fp32 per tile
        scales = math.prod(spec.scales_shape(n, k)) * spec.scales_dtype.itemsize
    tensor_scale = 4 if fmt is Format.NVFP4 else 0
    return words + scales + tensor_scale


def bytes_moved(weight_bytes: int, m: int, n: int, k: int, act_bytes: int) -> int:
    """Fewest bytes one linear moves: the weight once, x [m, k] read, y [m, n] written."""
    return weight_bytes + m * k * act_bytes + m * n * act_bytes


def efficiency_coefficient(fp16_bytes: Sequence[int], fp16_seconds: Sequence[float],
                           read_bandwidth: float) -> float:
    """The model's coefficient (module docstring) from per-shape fp16 bytes and times."""
    if len(fp16_bytes) != len(fp16_seconds) or not fp16_bytes:
        raise ValueError("fp16_bytes and fp16_seconds: expected two non-empty lists of one length")
    if read_bandwidth <= 0 or any(t <= 0 for t in fp16_seconds):
        raise ValueError("read_bandwidth and fp16_seconds: expected positive values")
    ideal = sum(fp16_bytes) / read_bandwidth
    return ideal / sum(fp16_seconds)


def predicted_seconds_per_token(bytes_per_token: float, read_bandwidth: float,
                                coefficient: float) -> float:
    if bytes_per_token <= 0 or read_bandwidth <= 0 or coefficient <= 0:
        raise ValueError("bytes_per_token, read_bandwidth, coefficient: expected positive values")
    return bytes_per_token / (read_bandwidth * coefficient)


def predicted_tokens_per_second(bytes_per_token: float, read_bandwidth: float,
                                coefficient: float) -> float:
    return 1.0 / predicted_seconds_per_token(bytes_per_token, read_bandwidth, coefficient)
