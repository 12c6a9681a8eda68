"""Sweep the Triton GEMV launch settings on this GPU (M = 1 and small M), to build the launch table.

Each setting is timed as a CUDA graph that replays one launch per weight copy, with enough
copies that the working set is >= 4x the L2 (so HBM, not L2, is measured), median of several
replays; fp16 F.linear is timed the same way in the same process as the baseline.

    python benchmarks/sweep_gemv.py --out receipts/sweep.json
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import softfp8
from softfp8.backends import triton as tb

SHAPES = [(4096, 4096), (12288, 4096), (22016, 4096), (4096, 11008), (128256, 4096)]


def graph_time(fn_list, reps=20):
    """Median ms per call of a CUDA graph that runs every fn in fn_list once."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fn_list:
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fn_list:
            f()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / len(fn_list))
    return statistics.median(times)


def copies_for(nbytes, l2):
    return max(2, min(64, -(-4 * l2 // nbytes)))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--formats", default="e5m2,e4m3,nvfp4,mxfp4")
    ap.add_argument("--ms", default="1")
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    info = tb.device_info(dev)
    results = []
    t0 = time.time()
    for n, k in SHAPES:
        w = torch.randn(n, k, device=dev) * 0.02
        base = {}
        for m in [int(v) for v in args.ms.split(",")]:
            x = torch.randn(m, k, device=dev, dtype=torch.float16)
            wc = [w.half() for _ in range(copies_for(n * k * 2, l2))]
            t16 = graph_time([lambda w_=w_: F.linear(x, w_) for w_ in wc])
            del wc
            bw16 = n * k * 2 / t16 / 1e6
            print(f"{n}x{k} M={m} fp16 F.linear {t16*1000:.1f} us {bw16:.0f} GB/s", flush=True)
            for fmt in args.formats.split(","):
                p = softfp8.quantize(w, fmt)
                ps = [p] + [softfp8.PackedWeight(p.fmt, p.shape, p.words.clone(),
                            None if p.scales is None else p.scales.clone(), p.global_scale)
                            for _ in range(copies_for(p.nbytes, l2) - 1)]
                ref = softfp8.linear(x.float(), p, backend="torch")
                default = tb.launch_config(n, k, m, p.fmt, info, x.dtype)
                bns = [4, 8, 16, 32] if not args.quick else [8]
                bks = ([512, 1024, 2048] if not args.quick else [1024])
                cands = {default}
                for bn, bkb, nw in itertools.product(bns, bks, [4, 8]):
                    bk = bkb * 8 // p.spec.bits
                    c = tb.LaunchConfig(tb.Kernel.GEMV, max(1, m if m <= 4 else 1) if m <= 4 else 1,
                                        bn, bk, 1, nw, 1)
                    if m > 4:
                        continue
                    for split in sorted({1, tb.launch_config(n, k, m, p.fmt, info, x.dtype).split_k}):
                        cands.add(tb.LaunchConfig(c.kernel, c.block_m, c.block_n, c.block_k, split, nw, 1))
                best = None
                for c in sorted(cands, key=str):
                    try:
                        y = tb.run(x, p, None, c)
                        err = ((y.double() - ref.double()).norm() / ref.double().norm()).item()
                        t = graph_time([lambda p_=p_: tb.run(x, p_, None, c) for p_ in ps])
                    except Exception as e:  # a setting that doesn't compile is a data point too
                        print(f"  {fmt} {c}: FAILED {type(e).__name__}: {str(e)[:120]}", flush=True)
                        continue
                    bw = p.nbytes / t / 1e6
                    row = dict(n=n, k=k, m=m, fmt=fmt, cfg=c.__dict__ | {"kernel": c.kernel.value},
                               us=t * 1000, gbps=bw, vs_fp16=t16 / t, err=err, default=c == default)
                    results.append(row)
                    if best is None or t < best["us"] / 1000:
                        best = row
                    if c == default:
                        print(f"  {fmt} default {c.block_n}x{c.block_k} w{c.num_warps} s{c.split_k}: "
                              f"{t*1000:.1f} us {bw:.0f} GB/s x{t16/t:.2f} err {err:.1e}", flush=True)
                b = best
                print(f"  {fmt} BEST {b['cfg']['block_n']}x{b['cfg']['block_k']} w{b['cfg']['num_warps']} "
                      f"s{b['cfg']['split_k']}: {b['us']:.1f} us {b['gbps']:.0f} GB/s x{b['vs_fp16']:.2f}",
                      flush=True)
                del ps
        del w
        torch.cuda.empty_cache()
    print(f"sweep took {time.time() - t0:.0f} s")
    if args.out:
        meta = dict(gpu=props.name, torch=torch.__version__, date=time.strftime("%Y-%m-%d"),
                    triton=__import__("triton").__version__, argv=sys.argv)
        json.dump(dict(meta=meta, results=results), open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
