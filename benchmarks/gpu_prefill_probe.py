"""Where Kernel.DEQUANT's prefill time goes (H200, M = 2048): per format and llama3-8b shape,
fp16 F.linear against the library's path with the per-weight row-range cache warm and cleared
before each call (the first-call cost: CHECK and the exact pass), the slab GEMMs alone (the
slabs pre-filled, no decode), and one slab's decode alone by the current dequant_kernel and by
the previous one (`_OLD`, kept below for the comparison), each with and without CHECK; then
slab sizes for the largest shapes. --sweep instead times, per shape and format, slab sizes both
as CUDA graphs (what softfp8-bench prefill replays) and eagerly
(do_bench: what a plain prefill pays, host launches included), and the host time the pieces
of one slab take to issue.

    python benchmarks/gpu_prefill_probe.py [--m 2048] [--json out.json]
    python benchmarks/gpu_prefill_probe.py --sweep --formats e4m3,nvfp4 [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import softfp8  # noqa: E402
from softfp8.backends import _facts  # noqa: E402
from softfp8.backends import triton as tb  # noqa: E402
from softfp8.backends.triton import _kernels  # noqa: E402
from softfp8.backends.triton._decode import e2m1_to_f32, e4m3_to_f32, e5m2_to_f32, e8m0_to_f32  # noqa: E402,E501

SHAPES = [("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096),
          ("down", 4096, 14336), ("lm_head", 128256, 4096)]


@triton.jit
def _old_dequant_kernel(w_ptr, s_ptr, g_ptr, out_ptr, info_ptr, N, K, RB, SB, ROW0,
                        FMT: tl.constexpr, HAS_SCALE: tl.constexpr, INJECT: tl.constexpr,
                        BLOCK_R: tl.constexpr, BLOCK_KB: tl.constexpr, CHECK: tl.constexpr):
    """dequant_kernel as of 6a43170 (E4M3 by re-bias, FP4 scales gathered per code)."""
    pid_r = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    rows = ROW0 + offs_r
    offs_b = pid_k * BLOCK_KB + tl.arange(0, BLOCK_KB)
    rmask = rows[:, None] < N
    codes = tl.load(w_ptr + rows[:, None].to(tl.int64) * RB + offs_b[None, :],
                    mask=rmask & (offs_b[None, :] < RB), other=0)
    out_rows = out_ptr + offs_r[:, None].to(tl.int64) * K
    if FMT == "e5m2" or FMT == "e4m3":
        w = e5m2_to_f32(codes, False) if FMT == "e5m2" else e4m3_to_f32(codes, False)
        if HAS_SCALE:
            w = w * tl.load(s_ptr + rows, mask=rows < N, other=1.0)[:, None]
        if CHECK:
            top = tl.max(tl.abs(w), axis=1)
            tl.atomic_max(info_ptr + rows, top.to(tl.int32, bitcast=True), mask=rows < N)
        tl.store(out_rows + offs_b[None, :], w.to(out_ptr.dtype.element_ty),
                 mask=rmask & (offs_b[None, :] < K))
    else:
        HB: tl.constexpr = 8 if FMT == "nvfp4" else 16
        sc = tl.load(s_ptr + rows[:, None].to(tl.int64) * SB + offs_b[None, :] // HB,
                     mask=rmask & (offs_b[None, :] < RB), other=0)
        s = e4m3_to_f32(sc, False) if FMT == "nvfp4" else e8m0_to_f32(sc)
        if FMT == "nvfp4":
            s = s * tl.load(g_ptr)
        lo = e2m1_to_f32(codes, INJECT) * s
        hi = e2m1_to_f32(codes >> 4, INJECT) * s
        if CHECK:
            top = tl.maximum(tl.max(tl.abs(lo), axis=1), tl.max(tl.abs(hi), axis=1))
            tl.atomic_max(info_ptr + rows, top.to(tl.int32, bitcast=True), mask=rows < N)
        w = tl.reshape(tl.join(lo, hi), (BLOCK_R, 2 * BLOCK_KB))
        kk = 2 * pid_k * BLOCK_KB + tl.arange(0, 2 * BLOCK_KB)
        tl.store(out_rows + kk[None, :], w.to(out_ptr.dtype.element_ty),
                 mask=rmask & (kk[None, :] < K))


def bench(fn) -> float:
    """Median microseconds (triton.testing.do_bench: events, L2 flushed between calls)."""
    return 1e3 * triton.testing.do_bench(fn, warmup=50, rep=200, return_mode="median")


def _enter_exit(stream):
    with torch.cuda.stream(stream):
        pass


def sweep(args) -> list:
    from gpu_host_overhead import host_us
    from sweep_gemv import graph_time

    dev = torch.device("cuda")
    out = []
    g = torch.Generator(device=dev).manual_seed(0)
    for name, n, k in SHAPES:
        w = torch.randn(n, k, device=dev, generator=g) * 0.02
        x = torch.randn(args.m, k, device=dev, generator=g).half()
        w16 = w.half()
        f16 = dict(graph=1e3 * graph_time([lambda: F.linear(x, w16)]),
                   eager=bench(lambda: F.linear(x, w16)))
        del w16
        for fmt in args.formats.split(","):
            packed = softfp8.quantize(w, fmt)
            tb.matmul(x, packed)  # fills the row-range cache
            row = dict(shape=name, n=n, k=k, m=args.m, fmt=fmt, fp16=f16, runs=[])
            for rows in (512, 1024, 2048, 4096, 8192):
                if rows > 2 * n:
                    continue
                cfg = tb.launch_config(n, k, args.m, packed.fmt, tb.device_info(dev), x.dtype)
                cfg = tb.LaunchConfig(tb.Kernel.DEQUANT, 1, rows, cfg.block_k, num_warps=4,
                                      num_stages=1)
                call = (lambda cfg=cfg: tb.run(x, packed, None, cfg))
                r = dict(rows=rows, slabs=-(-n // min(rows, n)), graph=1e3 * graph_time([call]),
                         eager=bench(call), host=host_us(call))
                row["runs"].append(r)
                print(f"{name:8} {fmt:6} rows {rows:5} slabs {r['slabs']:3}  graph "
                      f"{r['graph']:8.1f} ({f16['graph'] / r['graph']:5.3f}x)  eager "
                      f"{r['eager']:8.1f} ({f16['eager'] / r['eager']:5.3f}x)  host/call "
                      f"{r['host']:8.1f}", flush=True)
            out.append(row)
            del packed
        del w
        torch.cuda.empty_cache()
    # the pieces of one slab, host time to issue (lm_head-sized slab of E4M3)
    n, k = 8192, 4096
    packed = softfp8.quantize(torch.randn(n, k, device=dev) * 0.02, "e4m3")
    x = torch.randn(args.m, k, device=dev).half()
    wb = packed.words.view(torch.uint8)
    slab = torch.empty((2048, k), dtype=x.dtype, device=dev)
    y = torch.empty((args.m, n), dtype=x.dtype, device=dev)
    side = torch.cuda.Stream()
    ev = torch.cuda.Event()
    pieces = {
        "triton dequant launch": lambda: _kernels.dequant_kernel[(128, 8)](
            wb, packed.scales, wb, slab, wb, n, k, k, 0, 0, FMT="e4m3", HAS_SCALE=True,
            INJECT=False, BLOCK_R=16, BLOCK_KB=512, CHECK=False, num_warps=4),
        "torch.mm into a column slice": lambda: torch.mm(x, slab.t(), out=y[:, :2048]),
        "stream context": lambda: _enter_exit(side),
        "event record + wait": lambda: (ev.record(side), torch.cuda.current_stream().wait_event(ev)),
        "4 new events": lambda: [torch.cuda.Event() for _ in range(4)],
        "record_stream x6": lambda: [t.record_stream(side) for t in (slab, slab, wb, wb, x, y)],
        "launch_config": lambda: tb.launch_config(n, k, args.m, packed.fmt, tb.device_info(dev), x.dtype),
        "whole matmul (4 slabs)": lambda: tb.matmul(x, packed),
    }
    host = {kk: host_us(fn) for kk, fn in pieces.items()}
    for kk, v in host.items():
        print(f"host us to issue: {kk:32} {v:8.1f}", flush=True)
    out.append(dict(host_pieces_us=host))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=2048)
    ap.add_argument("--formats", default="e5m2,e4m3,nvfp4,mxfp4")
    ap.add_argument("--json")
    ap.add_argument("--sweep", action="store_true")
    args = ap.parse_args()
    if args.sweep:
        rows = sweep(args)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return
    dev = torch.device("cuda")
    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}  triton "
          f"{triton.__version__}  M = {args.m}", flush=True)
    rows_out = []
    g = torch.Generator(device=dev).manual_seed(0)
    for name, n, k in SHAPES:
        w = torch.randn(n, k, device=dev, generator=g) * 0.02
        x = torch.randn(args.m, k, device=dev, generator=g).half()
        w16 = w.half()
        t16 = bench(lambda: F.linear(x, w16))
        del w16
        for fmt in args.formats.split(","):
            packed = softfp8.quantize(w, fmt)
            cfg = tb.launch_config(n, k, args.m, packed.fmt, tb.device_info(dev), x.dtype)
            lib = bench(lambda: tb.matmul(x, packed))

            def cold():
                _facts._FACTS.pop(packed.words, None)  # as on a weight's first call
                return tb.matmul(x, packed)
            first = bench(cold)
            spec = packed.spec
            wb = packed.words.view(torch.uint8)
            rb = wb.shape[1]
            s = packed.scales if packed.scales is not None else wb
            gg = packed.global_scale if packed.global_scale is not None else wb
            sb = packed.scales.shape[1] if packed.scales is not None and packed.scales.dim() == 2 else 0
            has_scale = packed.scales is not None and packed.scales.dim() == 1
            rws = min(cfg.block_n, n)
            slab = torch.empty((rws, k), dtype=x.dtype, device=dev)
            info = torch.zeros(n, dtype=torch.int32, device=dev)
            block_kb = cfg.block_k * spec.bits // 8
            grid = (-(-rws // 16), -(-rb // block_kb))
            dec = {}
            for tag, kern in (("new", _kernels.dequant_kernel), ("old", _old_dequant_kernel)):
                for check in (False, True):
                    dec[f"{tag}{'+check' if check else ''}"] = bench(lambda kern=kern, check=check: kern[grid](
                        wb, s, gg, slab, info, n, k, rb, sb, 0, FMT=fmt, HAS_SCALE=has_scale,
                        INJECT=False, BLOCK_R=16, BLOCK_KB=block_kb, CHECK=check, num_warps=4))
            y = torch.empty((args.m, n), dtype=x.dtype, device=dev)

            def gemms():
                for r0 in range(0, n, rws):
                    r = min(rws, n - r0)
                    torch.mm(x, slab[:r].t(), out=y[:, r0:r0 + r])
            gemm = bench(gemms)
            nslabs = -(-n // rws)
            row = dict(shape=name, n=n, k=k, m=args.m, fmt=fmt, fp16_us=t16, lib_us=lib,
                       first_call_us=first, slab_gemms_us=gemm, slabs=nslabs, slab_rows=rws,
                       decode_one_slab_us=dec)
            if name in ("gate_up", "lm_head"):
                sizes = {}
                for rr in (1024, 4096, 8192):
                    c2 = tb.LaunchConfig(tb.Kernel.DEQUANT, 1, rr, cfg.block_k, num_warps=4,
                                         num_stages=1)
                    sizes[rr] = bench(lambda c2=c2: tb.run(x, packed, None, c2))
                row["slab_rows_us"] = sizes
            rows_out.append(row)
            print(f"{name:8} {fmt:6} fp16 {t16:8.1f}  lib {lib:8.1f} ({t16 / lib:5.3f}x)  first "
                  f"{first:8.1f}  gemms {gemm:8.1f} ({t16 / gemm:5.3f}x, {nslabs} slabs)  decode/slab "
                  + " ".join(f"{kk} {v:6.1f}" for kk, v in dec.items())
                  + ("  rows " + " ".join(f"{kk}:{v:.1f}" for kk, v in row.get("slab_rows_us", {}).items())
                     if "slab_rows_us" in row else ""), flush=True)
            del packed
        del w
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows_out, f, indent=1)


if __name__ == "__main__":
    main()
