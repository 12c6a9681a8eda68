"""Why one shape's time differs between `sweep_gemv.py` and `softfp8-bench shapes`: times one
GEMV (default: the 128256 x 4096 vocabulary head, M = 1) per kernel setting under both methods.

- "sync": each graph replay between two events, the host waiting for it before the next
  (sweep_gemv.graph_time: the GPU idles between replays);
- "queued": all replays recorded back to back, one wait at the end (bench/timing.py);
each with 1 and 2 rotated copies of the weight in the graph, PDL as the table sets it and off;
then `softfp8.linear` in a graph and through the bench's own `timing.measure`.
Usage: python benchmarks/gpu_timing_method.py [--shape 128256,4096] [--fmt e5m2] [--reps 20]
"""
from __future__ import annotations

import argparse
import os
import statistics

import torch
import torch.nn.functional as F

import softfp8
import softfp8.backends.triton as tb
from sweep_gemv import capture_graph as graph_of  # benchmarks/ is on sys.path when run


def timed(g, calls, reps, queued):
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(reps)]
    for a, b in ev:
        a.record()
        g.replay()
        b.record()
        if not queued:
            b.synchronize()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) * 1000 / calls for a, b in ev)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="128256,4096")
    ap.add_argument("--fmt", default="e5m2")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--bench-data", action="store_true",
                    help="the weight and x as softfp8-bench makes them (seeded generators)")
    args = ap.parse_args()
    n, k = map(int, args.shape.split(","))
    dev = torch.device("cuda")
    info = tb.device_info(dev)
    if args.bench_data:
        from softfp8.bench import workload
        from softfp8.bench.presets import Shape
        st = workload.Settings(dev, torch.float16, 3, args.reps, True, 0, 4.0, 0, 0.05, 0)
        w = workload.random_weight(Shape("custom", n, k), st)
        x = workload.random_x(1, k, torch.float16, st)
    else:
        w = torch.randn(n, k, device=dev) * 0.02
        x = torch.randn(1, k, device=dev, dtype=torch.float16)
    p = softfp8.quantize(w, args.fmt)
    ps = [p, softfp8.PackedWeight(p.fmt, p.shape, p.words.clone(),
                                  None if p.scales is None else p.scales.clone(), p.global_scale)]
    w16 = [w.half(), w.half()]
    del w
    table = tb.launch_config(n, k, 1, p.fmt, info, torch.float16)
    dot = tb.LaunchConfig(tb.Kernel.SMALL_M, 16, 64, 256, 1, 4, 3)
    settings = [("table: mma_gemv w%d depth %d" % (table.num_warps, table.depth), table),
                ("dot 64x256 w4 st3", dot)]
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton "
          f"{__import__('triton').__version__}; {args.fmt} {n}x{k} M = 1, us per call")
    print(f"{'setting':60s} {'pdl':5s} {'copies':6s} {'sync':>8s} {'queued':>8s}")
    for copies in (1, 2):
        fns = [lambda w_=w_: F.linear(x, w_) for w_ in w16[:copies]]
        g = graph_of(fns)
        print(f"{'fp16 F.linear':60s} {'-':5s} {copies:<6d} {timed(g, copies, args.reps, False):8.1f} "
              f"{timed(g, copies, args.reps, True):8.1f}", flush=True)
    for pdl in ("auto", "off"):
        os.environ[tb.PDL_ENV] = pdl
        for name, cfg in settings:
            for copies in (1, 2):
                fns = [lambda p_=p_: tb.run(x, p_, None, cfg) for p_ in ps[:copies]]
                g = graph_of(fns)
                print(f"{name[:60]:60s} {pdl:5s} {copies:<6d} "
                      f"{timed(g, copies, args.reps, False):8.1f} "
                      f"{timed(g, copies, args.reps, True):8.1f}", flush=True)
    os.environ.pop(tb.PDL_ENV)
    # the library's own entry (what softfp8-bench times), then fp16 again with warm clocks
    g = graph_of([lambda: softfp8.linear(x, p, backend="triton")])
    print(f"{'softfp8.linear(backend=triton)':60s} {'auto':5s} {1:<6d} "
          f"{timed(g, 1, args.reps, False):8.1f} {timed(g, 1, args.reps, True):8.1f}")
    # the bench's own timing function on the same calls (warm-up 3, 50 queued replays)
    from softfp8.bench.timing import measure
    entries = (("bench measure(): softfp8.linear",
                lambda: softfp8.linear(x, p, backend="triton")),
               ("bench measure(): fp16 F.linear", lambda: F.linear(x, w16[0])))
    for name, fn in entries:
        t = measure([fn], dev, warmup=3, reps=50)
        print(f"{name:60s} {'auto':5s} {1:<6d} {'-':>8s} {t.seconds * 1e6:8.1f}", flush=True)
    g = graph_of([lambda: F.linear(x, w16[0])])
    print(f"{'fp16 F.linear (again)':60s} {'-':5s} {1:<6d} {timed(g, 1, args.reps, False):8.1f} "
          f"{timed(g, 1, args.reps, True):8.1f}", flush=True)


if __name__ == "__main__":
    main()
