"""Where native FP8 (W8A8, torch._scaled_mm) beats the weight-only Triton path, measured.

For the llama3-8b linears (fused qkv 6144x4096, o 4096x4096, gate_up 28672x4096, down
4096x14336) and M = 1 ... 2048 it times, per call:
  native      softfp8's native backend, E4M3 weights, activations quantized per call (W8A8);
  native-e5m2 the same with E5M2 weights (the transposed _scaled_mm form; see native.py);
  quant       the activation quantizer alone (part of native's time);
  triton      softfp8's triton backend (weight-only, forced), if that module is in this build;
  fp16        torch.nn.functional.linear on fp16 weights;
and the relative error ‖y_native − y_weight_only‖ / ‖y_weight_only‖ (fp64 dequantize-matmul of
the same packed weight). It prints the tables and the measured crossover M: the smallest M from
which native is faster than triton for the whole layer (sum of the four shapes) at every larger
M measured; that value belongs in softfp8/backends/native.py (NATIVE_MIN_M).

Timing: CUDA events; warm-up first; each timed run makes `inner` calls, each on a different copy
of the weights so the working set is >= 4x the L2 cache; captured in one CUDA graph and replayed
(so Python launch overhead is not what is measured; --eager measures it as users without graphs
see it); the median over --reps runs. Activations are standard normal fp16.

Run on the H200 from the repository root:
    python benchmarks/gpu_native_crossover.py [--eager] [--reps 20] [--json receipt.json]
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
import warnings

import os

import torch
import torch.nn.functional as F

# Import the softfp8 of this checkout, not whichever one is installed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import softfp8  # noqa: E402
from softfp8 import dispatch  # noqa: E402
from softfp8.backends import native  # noqa: E402
from softfp8.dispatch import BackendUnavailable, E2M1Decode  # noqa: E402

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
MS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
COLUMNS = ("native", "native-e5m2", "quant", "triton", "fp16")


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    y, ref = y.double(), ref.double()
    return ((y - ref).norm() / ref.norm()).item()


def copies_for(nbytes: int, l2: int) -> int:
    """Enough copies that one rotation reads at least 4x the L2 (and never fewer than 2)."""
    return max(2, math.ceil(4 * l2 / nbytes))


def clone_packed(p: softfp8.PackedWeight) -> softfp8.PackedWeight:
    return softfp8.PackedWeight(p.fmt, p.shape, p.words.clone(),
                                None if p.scales is None else p.scales.clone(),
                                None if p.global_scale is None else p.global_scale.clone())


class Timer:
    def __init__(self, reps: int, warmup: int, graph: bool):
        self.reps, self.warmup, self.graph = reps, warmup, graph

    def __call__(self, fn, inner: int) -> tuple[float, str]:
        """Median milliseconds per call of fn(i), i cycling over `inner` rotation slots."""
        for i in range(self.warmup):
            fn(i % inner)
        torch.cuda.synchronize()
        run, mode = (lambda: [fn(i) for i in range(inner)]), "eager"
        if self.graph:
            try:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for i in range(inner):
                        fn(i)
                torch.cuda.current_stream().wait_stream(side)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for i in range(inner):
                        fn(i)
                run, mode = g.replay, "graph"
                run()
            except Exception as err:  # noqa: BLE001 - report and fall back, never abort the run
                print(f"    (graph capture failed, timing eagerly: {str(err).splitlines()[0]})")
                torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(self.reps):
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / inner)
        return statistics.median(times), mode


def triton_backend(device: torch.device):
    """The triton backend's module, or None and why not."""
    try:
        dispatch.select("e4m3", 1, device, backend="triton")
        return dispatch.load("triton"), None
    except (BackendUnavailable, ImportError) as err:
        return None, str(err)


def measure_shape(name, n, k, ms, timer, l2, triton_mod, device):
    g = torch.Generator(device=device).manual_seed(n + k)
    w = torch.randn(n, k, device=device, generator=g) * 0.02
    w16 = w.half()
    p8 = softfp8.quantize(w, "e4m3")
    p5 = softfp8.quantize(w, "e5m2", row_scale=True)
    c16, c8 = copies_for(w16.numel() * 2, l2), copies_for(p8.nbytes, l2)
    w16s = [w16] + [w16.clone() for _ in range(c16 - 1)]
    p8s = [p8] + [clone_packed(p8) for _ in range(c8 - 1)]
    p5s = [p5] + [clone_packed(p5) for _ in range(c8 - 1)]
    w_deq8, w_deq5 = softfp8.dequantize(p8).double(), softfp8.dequantize(p5).double()
    del w
    rows = []
    for m in ms:
        x = torch.randn(m, k, device=device, generator=g).half()
        cells = {}
        cells["native"] = timer(lambda i: native.matmul(x, p8s[i], None), c8)
        cells["native-e5m2"] = timer(lambda i: native.matmul(x, p5s[i], None), c8)
        cells["quant"] = timer(lambda i: native.quantize_activations(x), 8)
        if triton_mod is not None:
            cells["triton"] = timer(
                lambda i: triton_mod.matmul(x, p8s[i], None, e2m1=E2M1Decode.SELECT), c8)
        cells["fp16"] = timer(lambda i: F.linear(x, w16s[i]), c16)
        err = rel_err(native.matmul(x, p8, None), x.double() @ w_deq8.T)
        err5 = rel_err(native.matmul(x, p5, None), x.double() @ w_deq5.T)
        rows.append({"shape": name, "n": n, "k": k, "m": m, "err_e4m3": err, "err_e5m2": err5,
                     **{c: t for c, (t, _) in cells.items()},
                     "modes": {c: mode for c, (_, mode) in cells.items()}})
        print(_row(rows[-1]), flush=True)
    return rows


def _row(r) -> str:
    def cell(c):
        return f"{r[c]:10.4f}" if c in r else f"{'-':>10}"
    speed = f"{r['triton'] / r['native']:8.2f}x" if "triton" in r else f"{'-':>9}"
    return (f"{r['shape']:>8} {r['m']:5d} " + " ".join(cell(c) for c in COLUMNS)
            + f" {speed} {r['fp16'] / r['native']:8.2f}x {r['err_e4m3']:9.4f} {r['err_e5m2']:9.4f}")


def crossover(totals: dict[int, dict[str, float]], versus: str) -> int | None:
    """Smallest M from which native beats `versus` at every larger measured M."""
    best = None
    for m in sorted(totals, reverse=True):
        if totals[m]["native"] < totals[m][versus]:
            best = m
        else:
            break
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eager", action="store_true", help="time eagerly, not as CUDA graph replay")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--ms", type=lambda s: tuple(int(v) for v in s.split(",")), default=MS)
    ap.add_argument("--shapes", default=",".join(SHAPES), help="subset of " + ",".join(SHAPES))
    ap.add_argument("--json", help="write every number and the context to this file")
    args = ap.parse_args(argv)

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    cap = torch.cuda.get_device_capability(device)
    why = native.NEEDS.why_not(softfp8.Format.E4M3, device, cap)
    if why:
        print(f"native can't run here: {why}", file=sys.stderr)
        return 2
    l2 = getattr(props, "L2_cache_size", 0) or 50 * 2**20
    triton_mod, triton_why = triton_backend(device)
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    context = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
               "gpu": props.name, "capability": list(cap), "l2_bytes": l2,
               "torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton_version,
               "timing": "eager" if args.eager else "cuda-graph replay",
               "command": " ".join([sys.executable, *sys.argv])}
    for key, v in context.items():
        print(f"# {key}: {v}")
    if triton_mod is None:
        print(f"# triton backend skipped: {triton_why}")

    timer = Timer(args.reps, args.warmup, graph=not args.eager)
    print(f"{'shape':>8} {'M':>5} " + " ".join(f"{c + ' ms':>10}" for c in COLUMNS)
          + f" {'tri/nat':>9} {'fp16/nat':>9} {'err e4m3':>9} {'err e5m2':>9}")
    rows = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in args.shapes.split(","):
            n, k = SHAPES[name]
            rows += measure_shape(name, n, k, args.ms, timer, l2, triton_mod, device)
            torch.cuda.empty_cache()
    for w in {str(w.message) for w in caught}:
        print(f"# warning: {w}")

    versus = "triton" if triton_mod is not None else "fp16"
    totals = {m: {c: sum(r[c] for r in rows if r["m"] == m) for c in ("native", versus)}
              for m in args.ms}
    print(f"\nlayer total (sum of {args.shapes}), ms per call")
    print(f"{'M':>5} {'native':>10} {versus:>10} {'max err':>9}")
    for m in args.ms:
        err = max(r["err_e4m3"] for r in rows if r["m"] == m)
        print(f"{m:5d} {totals[m]['native']:10.4f} {totals[m][versus]:10.4f} {err:9.4f}")
    for name in args.shapes.split(","):
        per = {r["m"]: r for r in rows if r["shape"] == name}
        print(f"crossover for {name} alone: M = {crossover(per, versus)}")
    cross = crossover(totals, versus)
    if cross is None:
        print(f"\nmeasured crossover: native never beats {versus} at the largest M measured")
    else:
        print(f"\nmeasured crossover M (native faster than {versus} from here on): {cross}"
              f"\n  -> NATIVE_MIN_M = {cross} in softfp8/backends/native.py"
              f" (now {native.NATIVE_MIN_M}, provisional)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"context": context, "rows": rows, "crossover_m": cross,
                       "crossover_versus": versus}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
