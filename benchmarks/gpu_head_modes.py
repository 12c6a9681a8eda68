"""Is the M = 1 vocabulary head's two-speed timing a property of the process, of where its
weight lies, or of the run? (BENCHMARKS.md, twenty-sixth session: the llama3-8b head took 0.121
or 0.136 ms for E4M3, 0.118 or 0.135 for E5M2, one speed per bench run, same code.)

    python benchmarks/gpu_head_modes.py [--formats e5m2,e4m3] [--shape 128256,4096] [--m 1]
                                        [--allocs 6] [--repeats 3] [--trace W] [--json FILE]

Per format, the weight is quantized once; then `allocs` times a fresh copy of it is made
behind a spacer allocation whose size changes each time (so the copy's address moves), and the
copy's GEMV is timed `repeats` times (a CUDA graph of one call, replays between CUDA events,
median: `softfp8.bench.timing.measure`), each row with the copy's address modulo 2 MiB and the
SM clock nvidia-smi reports after it. Reading it: one speed for every copy and repeat in a
process but another in the next process: a state of the process or the GPU; the speed moving
with the copy: where the weight lies; moving between repeats of one copy: the run. Run it in
two or three processes (it prints which one it is by pid). --trace W: right after each
format's quantize, W back-to-back windows of 20 replays (the slow speed's time course: in
ncu27 the slow speed came only as a process's first E4M3 timing). --m: x rows, a comma list
(each M timed in turn on the same copies; the dot kernel's head at M = 8..16 moved ~30% between
bench runs, final27 / final28). `--device cpu --backend torch`: a dry run of the script itself
(no trace there).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from softfp8 import Backend, Format, linear, quantize  # noqa: E402
from softfp8.bench.timing import measure  # noqa: E402
from softfp8.bench.workload import clone_packed  # noqa: E402


def sm_clock_mhz() -> int | None:
    """The SM clock now, by nvidia-smi (None where it is not there)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm",
                              "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        return int(out.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def trace(call, windows: int, per_window: int = 20) -> list:
    """[(ms since the first window's start, us a call)] over `windows` back-to-back windows of
    `per_window` replays of a one-call CUDA graph, enqueued without a sync between them (one
    eager call first: it compiles)."""
    call()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        call()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(windows + 1)]
    ev[0].record()
    for i in range(windows):
        for _ in range(per_window):
            g.replay()
        ev[i + 1].record()
    torch.cuda.synchronize()
    return [(ev[0].elapsed_time(ev[i]), ev[i].elapsed_time(ev[i + 1]) * 1e3 / per_window)
            for i in range(windows)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--formats", default="e5m2,e4m3")
    ap.add_argument("--shape", default="128256,4096", metavar="N,K")
    ap.add_argument("--m", default="1", help="x rows, a comma list (default 1)")
    ap.add_argument("--allocs", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json", default=None)
    ap.add_argument("--device", default="cuda", help="cpu with --backend torch: a dry run")
    ap.add_argument("--backend", default="triton")
    ap.add_argument("--trace", type=int, default=0, metavar="WINDOWS",
                    help="also, right after each format's quantize: WINDOWS back-to-back windows "
                         "of 20 graph replays each, timed by events (the speed's time course)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_head_modes.py: --device cuda needs a CUDA GPU")
    n, k = (int(v) for v in args.shape.split(","))
    backend = Backend(args.backend)
    gen = torch.Generator(device=dev).manual_seed(0)
    w = torch.randn(n, k, generator=gen, device=dev, dtype=torch.float16)
    ms = [int(v) for v in args.m.split(",")]
    xs = {m: torch.randn(m, k, generator=gen, device=dev, dtype=torch.float16) for m in ms}
    rows = []
    name_of = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"
    print(f"pid {os.getpid()}, {name_of}, shape {n}x{k}, backend {backend}, M = {args.m}")
    print(f"{'format':6s} {'M':>3s} {'copy':>4s} {'addr % 2 MiB':>12s} {'repeat':>6s} "
          f"{'us':>8s} {'GB/s':>7s} {'SM MHz':>6s}")
    traces = {}
    for name in args.formats.split(","):
        packed = quantize(w, Format(name))
        nbytes = packed.nbytes
        if args.trace and dev.type == "cuda":
            traces[name] = trace(lambda p=packed: linear(xs[ms[0]], p, backend=backend),
                                 args.trace)
            print(f"{name} M = {ms[0]} trace, us a call per window of 20 (time from the first "
                  f"window's start, ms): "
                  + " ".join(f"{us:.1f}@{at:.0f}" for at, us in traces[name]))
        for a in range(args.allocs):
            # a spacer of (a + 1) * 1.25 MiB before the copy moves its address
            spacer = torch.empty(int((a + 1) * 1.25 * 2**20), dtype=torch.uint8, device=dev)
            copy = clone_packed(packed)
            addr = copy.words.data_ptr() % (2 << 20)
            for r, m in ((r, m) for m in ms for r in range(args.repeats)):
                t = measure([lambda p=copy, x=xs[m]: linear(x, p, backend=backend)], dev,
                            warmup=3, reps=args.reps)
                mhz = sm_clock_mhz()
                us = t.seconds * 1e6
                rows.append(dict(pid=os.getpid(), format=name, m=m, copy=a, addr_mod_2mib=addr,
                                 repeat=r, us=us, gb_per_s=nbytes / t.seconds / 1e9,
                                 sm_mhz=mhz, method=t.method))
                print(f"{name:6s} {m:3d} {a:4d} {addr:12d} {r:6d} {us:8.1f} "
                      f"{nbytes / t.seconds / 1e9:7.1f} {mhz if mhz is not None else '-':>6}")
            del copy, spacer
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(argv=sys.argv, device=name_of,
                           torch=torch.__version__, rows=rows, traces=traces), f, indent=1)


if __name__ == "__main__":
    main()
