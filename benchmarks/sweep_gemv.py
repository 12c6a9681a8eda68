"""Sweep the Triton launch settings on this GPU, to build the launch table from measurements.

For each shape, format and M, every candidate setting (FMA GEMV kernel and tensor-core dot
kernel, tile sizes, warps, stages, split-K) is timed as a CUDA graph replaying one launch per
weight copy, with enough copies that the working set is >= 4x the L2 (HBM, not L2, is
measured); median of several replays. fp16 F.linear is timed the same way in the same process.
The FP8 decode is the integer one (what GPUs without FP8 units run), unless --hw.

    python benchmarks/sweep_gemv.py --ms 1 --out receipts/sweep.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import softfp8  # noqa: E402
from softfp8.backends import triton as tb  # noqa: E402
from softfp8.bench.timing import measure  # noqa: E402

SHAPES = [(4096, 4096), (22016, 4096), (4096, 11008), (128256, 4096)]
FP8 = ("e5m2", "e4m3")


def capture_graph(fns):
    """A CUDA graph that runs every fn once (warmed up on a side stream, replayed once)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    g.replay()
    torch.cuda.synchronize()
    return g


def graph_time(fns, reps=10):
    """Median ms per call of a CUDA graph that runs every fn once, timed as the bench times
    (`softfp8.bench.timing.measure`: replays untimed until the GPU has been busy WARM_GPU_S,
    then `reps` back to back between events). Before (2026-12-03), 10 replays with a sync each
    and no warm-up: a shape's first settings ran in the ~50 ms slow phase after its quantize
    (docs/decisions.md, Method), which is why sweeps had the head 10-15% slower
    than the bench did."""
    return measure(fns, torch.device("cuda"), warmup=1, reps=reps).seconds * 1e3


def candidates(fmt, n, k, m, info, dtype, kernels, mma_pipes=((1, 0),), mma_warps=None,
               mma_tiles=tb.MMA_RUN_TILES, mma_runs=None):
    """The settings tried: the current table's choice, then a grid around it, for the kernels
    named in `kernels` (gemv, small_m, mma_gemv, tiled, dequant). mma_pipes: the (depth, L2
    prefetch steps[, ring stages]) settings tried on the run mapping (depth 2 and the ring only
    with 2 tiles a warp; the ring at depth 1 where `mma_ring_fits`). mma_runs: the run
    mapping's layouts (x rows, each >= M) tried, default the next power of two >= M (a wider
    one reads shorter runs of each row a step)."""
    bits = 8 if fmt in FP8 else 4
    mx = fmt == "mxfp4"
    out = [tb.launch_config(n, k, m, softfp8.Format(fmt), info, dtype)]
    if m <= 4 and "gemv" in kernels:
        for bn in (4, 8, 16):
            for kbytes in (512, 1024):
                for nw in (4, 8):
                    if bn * kbytes // (32 * nw) < 4:  # under 4 bytes a thread: no 16 B loads
                        continue
                    for st in (1, 3):
                        out.append(tb.LaunchConfig(tb.Kernel.GEMV, max(1, m), bn,
                                                   kbytes * 8 // bits, 1, nw, st))
    if m <= 16 and "small_m" in kernels:
        tiles = [(bn, bk, nw, 3) for bn in (16, 32, 64, 128)
                 for bk in ((128, 256) if bits == 8 else ((32,) if mx else (128, 256)))
                 for nw in (4, 8)]
        if bits == 8:  # deeper pipelines for the large shapes (lm_head)
            tiles += [(64, 256, 4, 4), (64, 256, 4, 5), (64, 512, 4, 3), (128, 256, 8, 4),
                      (128, 128, 4, 4), (128, 256, 4, 4), (128, 512, 4, 3), (256, 256, 8, 3),
                      (256, 128, 8, 4)]
        for bn, bk, nw, st in tiles:
            # unsplit, and K split for about 2 and 4 programs an SM (the table's rule: 4)
            programs, steps = -(-n // bn), -(-k // bk)
            for split in sorted({1} | {min(16, steps, -(-per_sm * info.sm_count // programs))
                                       for per_sm in (2, 4)}):
                out.append(tb.LaunchConfig(tb.Kernel.SMALL_M, 16, bn, bk, split, nw, st))
    if m <= tb.MMA_GROUPS_MAX_M and "mma_gemv" in kernels and tb.mma_gemv_runs(
            k, m, softfp8.Format(fmt), info, dtype):
        # the run mapping laid out for the next power of two >= M, 2 or 4 tiles a warp, splits
        # for ~12 (M = 1: and ~24, M > 1: and ~6) resident warps an SM and none; M > 1 also the
        # 32-row tiles (block_m 8)
        mp0 = min(tb.MMA_MAX_M, 1 << (m - 1).bit_length())
        layouts = [mp0] if not mma_runs else [v for v in mma_runs if v >= mp0]
        for mp, nw in [(mp, nw) for mp in layouts for nw in (
                mma_warps or ((2, 4, 8) if m == 1 else (4, 8)) if m <= tb.MMA_MAX_M else ())]:
            for tiles in mma_tiles:
                rows = tb.mma_rows(mp, nw, tiles)
                splits = {1} | {tb.mma_split(-(-n // rows), nw, info, per_sm)
                                for per_sm in ((12, 24) if m == 1 else (6, 12))}
                for s in sorted(splits):
                    for depth, ahead, *ring in mma_pipes:
                        ring = ring[0] if ring else 0
                        if ring and not (tiles == 2 and depth == 1
                                         and tb.mma_ring_fits(ring, nw)):
                            continue
                        if depth == 1 or tiles == 2:
                            out.append(tb.LaunchConfig(tb.Kernel.MMA_GEMV, mp, rows, 128, s,
                                                       nw, ahead, depth, ring))
        if m > 1:
            for nw in (4, 8):
                for s in (1, 2, 4):
                    out.append(tb.LaunchConfig(tb.Kernel.MMA_GEMV, tb.MMA_MAX_M, tb.MMA_TILE_ROWS,
                                               128, s, nw, 2))
        if m > tb.MMA_MAX_M:  # one program for all 16 x rows, the weights decoded once (WIDE)
            for nw in (4, 8):
                for s in (1, 2, 4):
                    out.append(tb.LaunchConfig(tb.Kernel.MMA_GEMV, tb.MMA_WIDE_M,
                                               tb.MMA_TILE_ROWS, 128, s, nw, 2))
            for nw in (2, 4):  # the runs laid out for 8 rows, 2 tiles, one or two buffers
                rows = tb.mma_rows(tb.MMA_MAX_M, nw, 2)
                split = tb.mma_split(-(-n // rows), nw, info)
                for s in sorted({1, split}):
                    for depth in (1, 2):
                        out.append(tb.LaunchConfig(tb.Kernel.MMA_GEMV, tb.MMA_WIDE_M, rows, 128,
                                                   s, nw, 0, depth))
    if m > 16:
        bk = 32 if mx else 64
        if "dequant" in kernels:  # slab rows; block_k = codes per dequant program
            out += [tb.LaunchConfig(tb.Kernel.DEQUANT, 1, rows, 512, 1, 4, 1)
                    for rows in (1024, 4096)]
        if "tiled" in kernels:
            out += [tb.LaunchConfig(tb.Kernel.TILED, 128, 128, bk, 1, 8, 3),
                    tb.LaunchConfig(tb.Kernel.TILED, 128, 256, bk, 1, 8, 3)]
    seen, uniq = set(), []
    for c in out:
        if c not in seen:
            seen.add(c)
            uniq.append(c)
    return uniq


def with_split(c, n, m, sms):
    """The split-K the table's rule gives this setting (>= 4 programs per SM), and none."""
    if c.kernel in (tb.Kernel.DEQUANT, tb.Kernel.MMA_GEMV):  # MMA_GEMV: its own splits
        return [c.split_k]
    programs = -(-n // c.block_n) * -(-m // c.block_m)
    split = 1 if programs >= 4 * sms else min(16, -(-4 * sms // programs))
    return sorted({1, split})


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--formats", default="e5m2,e4m3,nvfp4,mxfp4")
    ap.add_argument("--ms", default="1")
    ap.add_argument("--shapes", default=None, help="N,K;N,K;... (default: llama2-7b + lm_head)")
    ap.add_argument("--hw", action="store_true", help="hardware FP8 conversion (sm_89+)")
    ap.add_argument("--kernels", default="gemv,small_m,tiled,dequant",
                    help="which kernels' settings to sweep (gemv, small_m, mma_gemv, tiled, dequant) (the table's choice always runs)")
    ap.add_argument("--e2m1", default="auto", choices=("auto", "select", "inject"),
                    help="FP4 decoder; auto (default): the one softfp8 picks for the triton "
                         "backend here, as the bench and users get it (inject where the probe "
                         "found denormals honoured)")
    ap.add_argument("--mma-pipes", default="1:0",
                    help="Kernel.MMA_GEMV run mapping: depth:prefetch[:ring] settings, e.g. "
                         "1:0,2:0,2:4,1:0:3 (ring: stages of the shared-memory ring)")
    ap.add_argument("--mma-warps", default=None, help="Kernel.MMA_GEMV warps tried (default 2,4,8 at M = 1)")
    ap.add_argument("--mma-tiles", default="2,4", help="Kernel.MMA_GEMV run mapping: tiles a warp")
    ap.add_argument("--mma-runs", default=None,
                    help="Kernel.MMA_GEMV run mapping: layouts (x rows) tried, e.g. 1,2,4,8 "
                         "(default: the next power of two >= M)")
    ap.add_argument("--budget", type=float, default=400, help="seconds; stop sweeping after")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    info = tb.device_info(dev)
    shapes = SHAPES if not args.shapes else [tuple(map(int, s.split(","))) for s in args.shapes.split(";")]
    results, best_rows = [], []
    t0 = time.time()
    for n, k in shapes:
        w = torch.randn(n, k, device=dev) * 0.02
        for m in [int(v) for v in args.ms.split(",")]:
            x = torch.randn(m, k, device=dev, dtype=torch.float16)
            copies = max(2, min(48, -(-4 * l2 // (n * k * 2))))
            wc = [w.half() for _ in range(copies)]
            t16 = graph_time([lambda w_=w_: F.linear(x, w_) for w_ in wc])
            del wc
            print(f"{n}x{k} M={m} fp16 F.linear {t16*1000:.1f} us "
                  f"{n*k*2/t16/1e6:.0f} GB/s", flush=True)
            for fmt in args.formats.split(","):
                if time.time() - t0 > args.budget:
                    print("budget spent; stopping", flush=True)
                    break
                p = softfp8.quantize(w, fmt)
                ncopy = max(2, min(64, -(-4 * l2 // p.nbytes)))
                ps = [p] + [softfp8.PackedWeight(p.fmt, p.shape, p.words.clone(),
                            None if p.scales is None else p.scales.clone(), p.global_scale)
                            for _ in range(ncopy - 1)]
                ref = softfp8.linear(x.float(), p, backend="torch").double()
                hw = args.hw and fmt in FP8
                default = tb.launch_config(n, k, m, p.fmt, info, x.dtype)
                best = None
                e2m1 = (softfp8.dispatch.select(p.fmt, m, dev, backend="triton").e2m1
                        if args.e2m1 == "auto" else tb.E2M1Decode(args.e2m1))
                pipes = [tuple(map(int, v.split(":"))) for v in args.mma_pipes.split(",")]
                warps = [int(v) for v in args.mma_warps.split(",")] if args.mma_warps else None
                tiles = tuple(int(v) for v in args.mma_tiles.split(","))
                runs = [int(v) for v in args.mma_runs.split(",")] if args.mma_runs else None
                for c0 in candidates(fmt, n, k, m, info, x.dtype, args.kernels.split(","),
                                     pipes, warps, tiles, runs):
                    for split in with_split(c0, n, m, info.sm_count):
                        c = dataclasses.replace(c0, split_k=split)
                        try:
                            y = tb.run(x, p, None, c, hw_fp8=hw, e2m1=e2m1)
                            err = ((y.double() - ref).norm() / ref.norm()).item()
                            t = graph_time([lambda p_=p_: tb.run(x, p_, None, c, hw_fp8=hw, e2m1=e2m1)
                                            for p_ in ps])
                        except Exception as e:  # a setting that fails to compile is data too
                            print(f"  {fmt} {c}: FAILED {type(e).__name__}: {str(e)[:100]}")
                            continue
                        row = dict(n=n, k=k, m=m, fmt=fmt, hw=hw, e2m1=e2m1.value, kernel=c.kernel.value,
                                   block_m=c.block_m, block_n=c.block_n, block_k=c.block_k,
                                   split_k=c.split_k, num_warps=c.num_warps,
                                   num_stages=c.num_stages, depth=c.depth, ring=c.ring, us=t * 1000,
                                   gbps=p.nbytes / t / 1e6, vs_fp16=t16 / t, err=err,
                                   is_default=c == default)
                        results.append(row)
                        if err > 1e-2:
                            print(f"  {fmt} {c}: WRONG err {err:.2e}")
                            continue
                        if best is None or row["us"] < best["us"]:
                            best = row
                        if c == default:
                            print(f"  {fmt} table: {c.kernel.value} m{c.block_m} {c.block_n}x{c.block_k} "
                                  f"w{c.num_warps} st{c.num_stages} d{c.depth} r{c.ring} s{c.split_k}: {t*1000:.1f} us "
                                  f"{row['gbps']:.0f} GB/s x{t16/t:.2f}", flush=True)
                if best:
                    best_rows.append(best)
                    print(f"  {fmt} BEST:  {best['kernel']} m{best['block_m']} {best['block_n']}x{best['block_k']} "
                          f"w{best['num_warps']} st{best['num_stages']} d{best['depth']} r{best['ring']} s{best['split_k']}: "
                          f"{best['us']:.1f} us {best['gbps']:.0f} GB/s x{best['vs_fp16']:.2f}",
                          flush=True)
                del ps
        del w
        torch.cuda.empty_cache()
    print(f"sweep took {time.time() - t0:.0f} s")
    if args.out:
        meta = dict(gpu=props.name, torch=torch.__version__, date=time.strftime("%Y-%m-%d"),
                    triton=__import__("triton").__version__, argv=sys.argv, l2=l2)
        with open(args.out, "w") as f:
            json.dump(dict(meta=meta, best=best_rows, results=results), f, indent=1)


if __name__ == "__main__":
    main()
