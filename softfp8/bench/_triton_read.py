"""A pure-read Triton kernel: each program sums BLOCK x ITERS consecutive float32 values and
writes one partial sum, so it reads the whole buffer and writes almost nothing.

No masks (the caller passes a length that is a multiple of BLOCK x ITERS), so every load is a
full 16-byte vector; the unrolled ITERS loop keeps several loads in flight per thread.
Imported only when the bench measures a CUDA device with triton installed.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 4096
ITERS = 8
CHUNK = BLOCK * ITERS  # float32 values per program


@triton.jit
def _sum_chunks(x_ptr, out_ptr, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    start = pid.to(tl.int64) * (BLOCK * ITERS)  # int64: buffers may exceed 2^31 elements
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in tl.static_range(ITERS):
        acc += tl.load(x_ptr + start + i * BLOCK + tl.arange(0, BLOCK))
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def read_sum(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Partial sums of float32 `x` (1-D, length a multiple of CHUNK) into `out` [len(x) // CHUNK]."""
    if x.dtype != torch.float32 or x.dim() != 1 or x.numel() % CHUNK or not x.is_contiguous():
        raise ValueError(f"x: expected a contiguous 1-D float32 tensor whose length is a multiple "
                         f"of {CHUNK}, got {x.dtype} {tuple(x.shape)}")
    grid = (x.numel() // CHUNK,)
    if out.shape != grid or out.dtype != torch.float32:
        raise ValueError(f"out: expected float32 of shape {grid}, got {out.dtype} {tuple(out.shape)}")
    _sum_chunks[grid](x, out, BLOCK=BLOCK, ITERS=ITERS, num_warps=8)
    return out
