"""Kernel.DEQUANT, the large-M path: bounded slabs of rows decoded to x's dtype on a side
stream, each multiplied by torch's GEMM (cuBLAS) into y's column slice, then one exact tiled pass
for the rows that dtype can't hold. Nothing persists between calls, and the workspace is bounded
whatever the model: two slabs of max(DEQUANT_SLAB_BYTES, DEQUANT_MIN_SLAB_ROWS rows) each. A
layer smaller than one slab (4096 x 4096 in fp16 is 32 MiB) is decoded whole, transiently: at
large M the GEMM is compute-bound and one slab measured faster than two (_table)."""
from __future__ import annotations

import contextlib

import torch

from ..._choices import E2M1Decode
from .._facts import known_fact, remember_fact
from ._device import device_info
from ._table import dot_upcast, tiled_config, uses_ptx_decode

# Rows whose largest |value| lies outside these float32 bounds are not held exactly by a slab
# of that dtype (overflow above, precision lost to subnormals below): the exact pass redoes them.
_FIX_BOUNDS = {torch.float16: (0x477FE000, 0x38800000),   # 65504, 2^-14
               torch.bfloat16: (0x7F7F0000, 0x04800000)}  # bf16's max, 2^-118


def dequant_matmul(x, packed, bias, plan, e2m1, w, s, g, b, y):
    """Kernel.DEQUANT: per slab of cfg.block_n rows, dequant_kernel writes the rows in x's dtype
    (rounded once: the products code x scales are exact in float32) and torch.mm / addmm writes
    y's columns for those rows in place (a column slice of y is a valid cuBLAS output). On CUDA,
    with two slabs or more, the decode runs on a side stream into two alternating slabs, so
    decoding slab i + 1 (memory-bound) overlaps the GEMM of slab i (compute-bound). For fp16/bf16
    x, the first call's decode also records each row's largest |value| (cached per weight and
    dtype, `_row_ranges`), and one tiled dot_kernel pass (FIX) recomputes exactly the row blocks
    that the slab's dtype can't hold (|w| > 65504 or a whole row below 2^-14 in fp16); its other
    programs exit at once, and it is not launched at all for a weight known to have no such row.
    plan: its `_plan.Plan` (slab rows, decode, sizes); w, s, g, b, y: as `_launch` prepared
    them (b: the bias, or w as a placeholder; y: the output to fill)."""
    from . import _kernels as K_

    m, k = x.shape
    n = packed.shape[0]
    cfg, asm, nan = plan.cfg, plan.asm, plan.nan
    rb, sb = plan.sizes[3], plan.sizes[4]
    has_scale = plan.has_scale
    rows = min(cfg.block_n, n)
    nslabs = -(-n // rows)
    slabs = [torch.empty((rows, k), dtype=x.dtype, device=x.device)
             for _ in range(min(2, nslabs))]
    bounds = _FIX_BOUNDS.get(x.dtype)
    known = _row_ranges(packed, x.dtype) if bounds else None
    check = bounds is not None and known is None  # the row ranges are this call's to find
    if check:
        info = torch.zeros(n, dtype=torch.int32, device=x.device)
    else:  # no bounds (float32 x), or cached: None when no row needs the exact pass
        info = known[0] if known is not None else None
    info_arg = info if info is not None else w  # a placeholder pointer: CHECK=False never writes it
    block_r, block_kb = 16, cfg.block_k * packed.spec.bits // 8
    bias_x = None if bias is None else bias.to(x.dtype)
    # one slab has nothing to overlap: it stays on the caller's stream, without the side stream's
    # events and record_stream calls (host time that eager calls pay)
    overlap = x.device.type == "cuda" and nslabs > 1
    main = torch.cuda.current_stream(x.device) if overlap else None
    side = _side_stream(x.device) if overlap else None
    if overlap:
        side.wait_stream(main)  # the slabs, the weights, info and x are ready on main
        for t in (*slabs, info_arg, w, s, g):
            t.record_stream(side)  # the allocator must not hand them out while side uses them
        ready = [torch.cuda.Event() for _ in slabs]
        free = [torch.cuda.Event() for _ in slabs]
    for i in range(nslabs):
        r0 = i * rows
        r = min(rows, n - r0)
        slab = slabs[i % 2]
        with torch.cuda.stream(side) if overlap else contextlib.nullcontext():
            if overlap and i >= 2:
                side.wait_event(free[i % 2])  # the GEMM of slab i - 2 has read this buffer
            K_.dequant_kernel[(-(-r // block_r), -(-rb // block_kb))](
                w, s, g, slab, info_arg, n, k, rb, sb, r0, FMT=packed.fmt.value,
                HAS_SCALE=has_scale, INJECT=e2m1 is E2M1Decode.INJECT, BLOCK_R=block_r,
                BLOCK_KB=block_kb, CHECK=check, ASM=asm, NAN=nan, num_warps=cfg.num_warps)
            if overlap:
                ready[i % 2].record(side)
        if overlap:
            main.wait_event(ready[i % 2])
        part = slab[:r].t()
        if bias_x is None:
            torch.mm(x, part, out=y[:, r0:r0 + r])
        else:
            torch.addmm(bias_x[r0:r0 + r], x, part, out=y[:, r0:r0 + r])
        if overlap:
            free[i % 2].record(main)
    if check:
        info = _remember_row_ranges(packed, x.dtype, info, bounds)
    if info is not None and bounds:
        _exact_pass(x, packed, bias is not None, e2m1, w, s, g, b, y, info, rb, sb, has_scale,
                    bounds)
    return y


def _row_ranges(packed, dtype):
    """(info or None,) remembered for this weight and slab dtype (`known_fact`: each row's
    largest |value| is a property of the weight alone, so the decode's CHECK, an atomic max per
    row and program, and the exact pass's launch are paid on the first call only, and not at
    all when no row is out of range), or None: not checked yet, or written in place since."""
    return known_fact(packed, ("row ranges", dtype))


def _remember_row_ranges(packed, dtype, info, bounds):
    """Cache the CHECK's per-row maxima (eager calls only: the flag needs one device->host read,
    which CUDA graph capture forbids; a captured call keeps its info and exact pass). Returns
    the info the exact pass needs, or None when no row is out of the slab dtype's range."""
    if info.is_cuda and torch.cuda.is_current_stream_capturing():
        return info
    hi, lo = bounds
    flagged = bool(((info > hi) | ((info > 0) & (info < lo))).any())
    kept = info if flagged else None
    remember_fact(packed, ("row ranges", dtype), kept)
    return kept


def _exact_pass(x, packed, has_bias, e2m1, w, s, g, b, y, info, rb, sb, has_scale, bounds):
    """dot_kernel over every output tile with FIX: only row blocks flagged in `info` compute.
    Tiles as launch_config's TILED kernel (`tiled_config`)."""
    from . import _fma

    m, k = x.shape
    n = packed.shape[0]
    dev = device_info(x.device)
    fma_dot = dev.capability is not None and dev.capability < (8, 0)  # x is fp16/bf16 here
    cfg = tiled_config(m, packed.fmt, dev, fma_dot)
    step = cfg.block_k * packed.spec.bits // 8
    per_split = -(-rb // step) * step
    _fma.dot_kernel[(-(-n // cfg.block_n), -(-m // cfg.block_m), 1)](
        x, w, s, g, b, y, info, w, m, n, k, rb, sb, per_split,
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

