"""CPU linears at M = 1 .. 2048: softfp8's numba paths against torch's dtypes, in one process.

Per shape and M, every variant is timed round-robin (one call each, `--reps` rounds, medians), so
the load of a shared machine falls on all of them alike:
- torch fp32 and bf16 F.linear, and torch.ops.aten._weight_int8pack_mm (int8 weight, bf16 x)
  where this torch has it; with `--ort` onnxruntime's MatMulNBits 8- and 4-bit (an outside
  anchor, not among "torch's fastest");
- each format through softfp8.linear(backend="numba") as dispatched (`auto`), and with
  `--paths` each M > 1 path forced (`_forced`): M GEMVs (`rows`), the fused small-M kernel
  (`fused`), the bf16-product one (`dp`), the float32 one (`small`), the dequantise-a-tile
  path (`tile`), FP4's AVX2 x-rows kernel (`xrows`) (`--paths fused,dp`: those only): how the
  crossovers in those tables are measured.

    python benchmarks/cpu_small_m.py --shapes 4096x4096 --m 1,2,4,8,16,32,64,128 --paths
    python benchmarks/cpu_small_m.py --preset llama3-8b --m 1,4,16,128

Prints a row per (shape, M) as it is measured: ms per call, and x fastest torch (the fastest
torch dtype's time / this one's). `--act bf16` gives softfp8 bf16 activations.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch
import torch.nn.functional as F

import softfp8
from softfp8.backends import numba as cpu_backend
from softfp8.backends.numba import _batch, _dp_rows
from softfp8.bench.anchors import ort_session
from softfp8.bench.presets import preset
from softfp8.formats import Format

NEVER = 1 << 30


CLOCK = time.perf_counter
"""The clock `_timed` reads: wall time, or with `--cpu-time` the process's CPU time (all its
threads), which other processes' load on a shared machine leaves alone; with one thread only
(`--threads 1`: torch's OpenMP threads spin between calls, which counts as CPU time)."""


def _timed(fn) -> float:
    t = CLOCK()
    fn()
    return CLOCK() - t


def _forced(fmt: Format, path: str, call):
    """`call` with the tables set so that M > 1 takes `path`: rows (a GEMV per row), fused (the
    fused small-M kernel, where it can run), dp (the bf16-product kernel, where it can run),
    small (the float32 small-M kernel), tile, xrows (FP4 on AVX2: the table decode for several x
    rows, where it runs)."""
    tables = (_batch.TILE_MIN_M, _batch.TILE_MIN_M_BF16, cpu_backend.GEMV_ROWS_MAX_M,
              _dp_rows.DP_TILE_MIN_M, _dp_rows.DP_TILE_MIN_M_BF16, _dp_rows.FUSED_MAX_ROWS,
              cpu_backend.XROWS_MAX_M)
    values = {"rows": (NEVER, NEVER, NEVER, 0, 0, 0, 0),
              "fused": (NEVER, NEVER, 1, NEVER, NEVER, NEVER, 0),
              "dp": (NEVER, NEVER, 1, NEVER, NEVER, 0, 0),
              "small": (NEVER, NEVER, 1, 0, 0, 0, 0), "tile": (2, 2, 1, 0, 0, 0, 0),
              "xrows": (NEVER, NEVER, 1, 0, 0, 0, NEVER)}[path]

    def run():
        saved = [t.get(fmt) for t in tables]  # None: a table without the format (left so)
        for t, v in zip(tables, values):
            t[fmt] = v
        try:
            call()
        finally:
            for t, v in zip(tables, saved):
                if v is None:
                    del t[fmt]
                else:
                    t[fmt] = v
    return run


def variants(w: torch.Tensor, m: int, formats, packed, act: torch.dtype, paths: tuple,
             ort: dict | None = None):
    k = w["fp32"].shape[1]
    g = torch.Generator().manual_seed(m * 7 + k)
    x = torch.randn(m, k, generator=g)
    xb = x.bfloat16()
    xa = x.to(act)
    out = {"torch fp32": lambda: F.linear(x, w["fp32"]),
           "torch bf16": lambda: F.linear(xb, w["bf16"])}
    if "int8" in w:
        out["torch int8pack"] = lambda: torch.ops.aten._weight_int8pack_mm(xb, w["int8"],
                                                                          w["int8s"])
    for bits, sess in (ort or {}).items():
        xn = x.numpy()
        out[f"ort {bits}-bit"] = lambda sess=sess, xn=xn: sess.run(None, {"A": xn})
    for fmt in formats:
        p = packed[fmt]
        auto = (lambda p=p: softfp8.linear(xa, p, backend="numba"))
        out[f"{fmt}"] = auto
        for path in paths if m > 1 else ():
            out[f"{fmt} {path}"] = _forced(fmt, path, auto)
    return out


def weights(n: int, k: int, int8: bool) -> dict:
    g = torch.Generator().manual_seed(n + 31 * k)
    w32 = torch.randn(n, k, generator=g) * 0.02
    w = {"fp32": w32, "bf16": w32.bfloat16(), "raw": w32}
    if int8:
        s = w32.abs().amax(1) / 127
        w["int8"] = torch.round(w32 / s[:, None]).to(torch.int8)
        w["int8s"] = s.bfloat16()
    return w


def has_int8pack() -> bool:
    try:
        torch.ops.aten._weight_int8pack_mm(torch.ones(1, 32, dtype=torch.bfloat16),
                                           torch.ones(8, 32, dtype=torch.int8),
                                           torch.ones(8, dtype=torch.bfloat16))
        return True
    except Exception:  # noqa: BLE001 - absent or unsupported here: left out of the table
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="4096x4096", help="comma list of NxK")
    ap.add_argument("--preset", help="a softfp8.bench preset's shapes instead")
    ap.add_argument("--m", default="1,2,4,8,16,32,64,128")
    ap.add_argument("--formats", default="e5m2,e4m3,nvfp4,mxfp4")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--act", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--paths", nargs="?", const="rows,fused,dp,small,tile,xrows", default="",
                    help="time these M > 1 paths too (a comma list; alone: all of them)")
    ap.add_argument("--ort", action="store_true", help="onnxruntime MatMulNBits 8- and 4-bit "
                    "beside (float32 x; softfp8.bench.anchors says how its formats differ)")
    ap.add_argument("--cpu-time", action="store_true", help="time CPU time, not wall time (with "
                    "--threads 1: see CLOCK)")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (numba follows: it runs "
                    "the fewer of its and torch's)")
    args = ap.parse_args()
    if args.preset:
        shapes = [(s.n, s.k) for s in preset(args.preset).shapes()]
    else:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    ms = [int(v) for v in args.m.split(",")]
    formats = [Format.parse(f) for f in args.formats.split(",")]
    act = torch.float32 if args.act == "fp32" else torch.bfloat16
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cpu_time:
        global CLOCK
        CLOCK = time.process_time
    int8 = has_int8pack()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  {platform.processor() or ''}"
          f" torch {torch.__version__} threads {torch.get_num_threads()}  loadavg "
          f"{os.getloadavg()[0]:.1f}  act {args.act}  reps {args.reps} (median)  "
          f"clock {'CPU' if args.cpu_time else 'wall'}", flush=True)
    for n, k in shapes:
        w = weights(n, k, int8)
        packed = {f: softfp8.quantize(w["raw"], f) for f in formats}
        ort = ({bits: ort_session(w["raw"], bits, torch.get_num_threads())[0] for bits in (8, 4)}
               if args.ort else None)
        for m in ms:
            vs = variants(w, m, formats, packed, act, tuple(p for p in args.paths.split(",") if p),
                          ort)
            for fn in vs.values():
                fn()  # compile / warm
            samples = {name: [] for name in vs}
            for _ in range(args.reps):
                for name, fn in vs.items():
                    samples[name].append(_timed(fn))
            med = {name: statistics.median(v) * 1e3 for name, v in samples.items()}
            fastest = min(v for name, v in med.items() if name.startswith("torch"))
            cells = "  ".join(f"{name} {v:.3f} ({fastest / v:.2f}x)" for name, v in med.items())
            print(f"{n}x{k} M={m}: {cells}  [load {os.getloadavg()[0]:.1f}]", flush=True)
        del w, packed


if __name__ == "__main__":
    main()
