"""Where Kernel.MMA_GEMV's time goes (H200 diagnostics): the production kernel (FP4: with the
table decode, "kernel", and by exponent injection, "inject") against the same
loop with the decode removed (DIAG=1: the raw words go to the mma) and with the mma removed too
(DIAG=2: the words are xor-ed, so only the loads remain). DIAG variants give wrong results by
design; timing only. CUDA graphs over enough weight copies that HBM, not L2, is read.

    python benchmarks/gpu_mma_probe.py [--shapes "22016,4096;4096,4096"]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import softfp8  # noqa: E402
from softfp8.backends import triton as tb  # noqa: E402
from softfp8.backends.triton._mma import mma_gemv_kernel  # noqa: E402
from sweep_gemv import graph_time  # noqa: E402


def launch(x, p, y, cfg, diag, inject=False, maxnreg=0, ring_x=True):
    w = p.words.view(torch.uint8)
    n, k = p.shape
    rb = w.shape[1]
    sb = p.scales.shape[1] if p.scales is not None and p.scales.dim() == 2 else 0
    s = p.scales if p.scales is not None else w
    per_split, split = tb.split_bytes(rb, cfg, p.spec.bits)  # as the launcher splits K
    ws = torch.empty((split, 1, n), device=x.device) if split > 1 else y
    g = p.global_scale if p.global_scale is not None else w
    runs, tiles = tb.mma_layout(cfg)
    mma_gemv_kernel[(-(-n // cfg.block_n), split)](
        x, w, s, g, w, y, ws, w, 1, n, k, rb, sb, per_split, FMT=p.fmt.value, HAS_BIAS=False,
        WARPS=cfg.num_warps, PARTIAL=split > 1, num_warps=cfg.num_warps, num_stages=1,
        AHEAD=cfg.num_stages, DEPTH=cfg.depth, DIAG=diag, RUNS=runs, TILES=tiles, INJECT=inject, RING=cfg.ring,
        RING_X=ring_x, **(dict(maxnreg=maxnreg) if maxnreg else {}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="22016,4096;32000,4096;4096,11008;4096,4096")
    ap.add_argument("--formats", default="e5m2,nvfp4,mxfp4")
    ap.add_argument("--maxnreg", default="",
                    help="comma list: only the table's setting, FP4 by injection, with ptxas "
                         "held to each register count (more warps an SM, spills to local memory)")
    ap.add_argument("--depth2", action="store_true",
                    help="with --maxnreg: also the table's setting at depth 2 (two register "
                         "buffers) at each register count")
    ap.add_argument("--ring", default="",
                    help="comma list of ring stages: the table's setting against the ring (2 "
                         "warps) with x through the ring and by registers, and its loads alone")
    args = ap.parse_args()
    dev = torch.device("cuda")
    info = tb.device_info(dev)
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton "
          f"{__import__('triton').__version__}; GB/s of packed bytes (split-K reduction not run)")
    for shape in args.shapes.split(";"):
        n, k = map(int, shape.split(","))
        w = torch.randn(n, k, device=dev) * 0.02
        x = torch.randn(1, k, device=dev, dtype=torch.float16)
        copies = max(2, min(48, -(-4 * l2 // (n * k * 2))))
        wc = [w.half() for _ in range(copies)]
        t16 = graph_time([lambda w_=w_: F.linear(x, w_) for w_ in wc])
        del wc
        print(f"{n}x{k}: fp16 F.linear {t16 * 1000:.1f} us ({n * k * 2 / t16 / 1e6:.0f} GB/s)")
        for fmt in args.formats.split(","):
            p = softfp8.quantize(w, fmt)
            ps = [softfp8.PackedWeight(p.fmt, p.shape, p.words.clone(),
                                       None if p.scales is None else p.scales.clone(),
                                       p.global_scale)
                  for _ in range(max(2, min(64, -(-4 * l2 // p.nbytes))))]
            table = tb.launch_config(n, k, 1, p.fmt, info, torch.float16)
            y = torch.empty(1, n, device=dev, dtype=torch.float16)
            if args.ring:
                rows = [(table, 0, True, "table")]
                for r in map(int, args.ring.split(",")):
                    c = dataclasses.replace(table, num_warps=2, depth=1, ring=r,
                                            block_n=tb.mma_rows(table.block_m, 2))
                    rows += [(c, 0, True, f"ring{r} x ring"), (c, 0, False, f"ring{r} x regs"),
                             (c, 2, True, f"ring{r} loads only")]
                for c, diag, rx, name in rows:
                    t = graph_time([lambda p_=p_: launch(x, p_, y, c, diag, True, 0, rx)
                                    for p_ in ps])
                    print(f"  {fmt} {name:18s} w{c.num_warps} s{c.split_k}: {t * 1000:.1f} us "
                          f"{p.nbytes / t / 1e6:.0f} GB/s x{t16 / t:.2f}", flush=True)
                del ps
                continue
            if args.maxnreg:
                for depth in (1, 2) if args.depth2 else (1,):
                    c = dataclasses.replace(table, depth=depth)
                    for mr in (0, *map(int, args.maxnreg.split(","))):
                        t = graph_time([lambda p_=p_: launch(x, p_, y, c, 0, True, mr)
                                        for p_ in ps])
                        print(f"  {fmt} inject depth {depth} maxnreg {mr or '-'}: "
                              f"{t * 1000:.1f} us {p.nbytes / t / 1e6:.0f} GB/s x{t16 / t:.2f}",
                              flush=True)
                del ps
                continue
            cfgs = [table] + [tb.LaunchConfig(tb.Kernel.MMA_GEMV, 1, tb.mma_rows(1, w, t), 128,
                                              s, w, 0)
                              for w, t, s in ((4, 2, 1), (4, 4, 1), (8, 2, 2), (2, 4, 1))]
            fp4 = p.fmt.value in ("nvfp4", "mxfp4")
            for cfg in cfgs:
                for diag, name, inj in ((0, "kernel", False), (0, "inject", True),
                                        (1, "no decode", False), (2, "loads only", False)):
                    if inj and not fp4:
                        continue  # 8-bit: one decode
                    t = graph_time([lambda p_=p_: launch(x, p_, y, cfg, diag, inj) for p_ in ps])
                    runs, tiles = tb.mma_layout(cfg)
                    print(f"  {fmt} {name:10s} r{runs} t{tiles} "
                          f"w{cfg.num_warps} s{cfg.split_k} a{cfg.num_stages}: {t * 1000:.1f} us "
                          f"{p.nbytes / t / 1e6:.0f} GB/s x{t16 / t:.2f}", flush=True)
            del ps


if __name__ == "__main__":
    main()
