"""Kernel.DEQUANT, the large-M path: bounded slabs of rows decoded to x's dtype on a side
stream, each multiplied by torch's GEMM (cuBLAS) into y's column slice, then one exact tiled pass
for the rows that dtype can't hold. The slabs never add up to a copy of the weights: at most two
of DEQUANT_SLAB_BYTES exist at a time."""
from __future__ import annotations

import contextlib

import torch

from ...dispatch import E2M1Decode
from ._table import device_info, dot_upcast, tiled_config, uses_ptx_decode

# Rows whose largest |value| lies outside these float32 bounds are not held exactly by a slab
# of that dtype (overflow above, precision lost to subnormals below): the exact pass redoes them.
_FIX_BOUNDS = {torch.float16: (0x477FE000, 0x38800000),   # 65504, 2^-14
               torch.bfloat16: (0x7F7F0000, 0x04800000)}  # bf16's max, 2^-118


def dequant_matmul(x, packed, bias, cfg, e2m1, w, s, g, b, y, rb, sb, has_scale):
    """Kernel.DEQUANT: per slab of cfg.block_n rows, dequant_kernel writes the rows in x's dtype
    (rounded once: the products code x scales are exact in float32) and torch.mm / addmm writes
    y's columns for those rows in place (a column slice of y is a valid cuBLAS output). On CUDA
    the decode runs on a side stream into two alternating slabs, so decoding slab i + 1 (memory-
    bound) overlaps the GEMM of slab i (compute-bound). For fp16/bf16 x, the decode also records
    each row's largest |value|, and one tiled dot_kernel pass (FIX) recomputes exactly the row
    blocks that the slab's dtype can't hold (|w| > 65504 or a whole row below 2^-14 in fp16);
    its other programs exit at once. w, s, g, b, y, rb, sb, has_scale: as `_launch` prepared
    them (b: the bias, or w as a placeholder; y: the output to fill)."""
    from . import _kernels as K_

    m, k = x.shape
    n = packed.shape[0]
    rows = min(cfg.block_n, n)
    nslabs = -(-n // rows)
    slabs = [torch.empty((rows, k), dtype=x.dtype, device=x.device)
             for _ in range(min(2, nslabs))]
    bounds = _FIX_BOUNDS.get(x.dtype)
    info = torch.zeros(n if bounds else 1, dtype=torch.int32, device=x.device)
    block_r, block_kb = 16, cfg.block_k * packed.spec.bits // 8
    bias_x = None if bias is None else bias.to(x.dtype)
    cuda = x.device.type == "cuda"
    main = torch.cuda.current_stream(x.device) if cuda else None
    side = _side_stream(x.device) if cuda else None
    if cuda:
        side.wait_stream(main)  # the slabs, the weights, info and x are ready on main
        for t in (*slabs, info, w, s, g):
            t.record_stream(side)  # the allocator must not hand them out while side uses them
        ready = [torch.cuda.Event() for _ in slabs]
        free = [torch.cuda.Event() for _ in slabs]
    for i in range(nslabs):
        r0 = i * rows
        r = min(rows, n - r0)
        slab = slabs[i % 2]
        with torch.cuda.stream(side) if cuda else contextlib.nullcontext():
            if cuda and i >= 2:
                side.wait_event(free[i % 2])  # the GEMM of slab i - 2 has read this buffer
            K_.dequant_kernel[(-(-r // block_r), -(-rb // block_kb))](
                w, s, g, slab, info, n, k, rb, sb, r0, FMT=packed.fmt.value,
                HAS_SCALE=has_scale, INJECT=e2m1 is E2M1Decode.INJECT, BLOCK_R=block_r,
                BLOCK_KB=block_kb, CHECK=bounds is not None, num_warps=cfg.num_warps)
            if cuda:
                ready[i % 2].record(side)
        if cuda:
            main.wait_event(ready[i % 2])
        part = slab[:r].t()
        if bias_x is None:
            torch.mm(x, part, out=y[:, r0:r0 + r])
        else:
            torch.addmm(bias_x[r0:r0 + r], x, part, out=y[:, r0:r0 + r])
        if cuda:
            free[i % 2].record(main)
    if bounds:
        _exact_pass(x, packed, bias is not None, e2m1, w, s, g, b, y, info, rb, sb, has_scale,
                    bounds)
    return y


def _exact_pass(x, packed, has_bias, e2m1, w, s, g, b, y, info, rb, sb, has_scale, bounds):
    """dot_kernel over every output tile with FIX: only row blocks flagged in `info` compute.
    Tiles as launch_config's TILED kernel (`tiled_config`)."""
    from . import _kernels as K_

    m, k = x.shape
    n = packed.shape[0]
    dev = device_info(x.device)
    fma_dot = dev.capability is not None and dev.capability < (8, 0)  # x is fp16/bf16 here
    cfg = tiled_config(m, packed.fmt, dev, fma_dot)
    step = cfg.block_k * packed.spec.bits // 8
    per_split = -(-rb // step) * step
    K_.dot_kernel[(-(-n // cfg.block_n), -(-m // cfg.block_m), 1)](
        x, w, s, g, b, y, info, m, n, k, rb, sb, per_split,
        FMT=packed.fmt.value, HAS_SCALE=has_scale, HAS_BIAS=has_bias,
        INJECT=e2m1 is E2M1Decode.INJECT, HW=False, ASM=uses_ptx_decode(dev, False),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, PARTIAL=False,
        PRECISION="ieee", UPCAST=dot_upcast(x), FIX=True, FIX_HI=bounds[0], FIX_LO=bounds[1],
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)


_SIDE_STREAMS: dict = {}


def _side_stream(device: torch.device):
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _SIDE_STREAMS:
        _SIDE_STREAMS[key] = torch.cuda.Stream(device=device)
    return _SIDE_STREAMS[key]

