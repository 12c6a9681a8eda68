"""The CPU GEMV kernels' rows a pass and prefetch distance, swept in one process, interleaved.

    python benchmarks/cpu_rows_sweep.py [--shapes 11008x4096,4096x11008,16384x2048,32768x1024]
        [--formats e5m2,e4m3,nvfp4,mxfp4] [--ahead 0,1,2,4] [--rows 4] [--locality 1]
        [--x fp32|bf16] [--reps 15]

For each shape and format: the FP8 kernel (_numba_fp8_rows) or this CPU's FP4 table kernel
(_numba_lut on AVX-512, _numba_pshufb on AVX2: one row a pass) built from the package's source
with `PREFETCH_ROWS * nrows` replaced by `A * nrows` (prefetch A passes ahead; 0 = none), each
called directly (x prepared once, the backend's chunk) at 1 and 4 rows a pass, and torch's fp16
mv, in rounds of random order (`cpu_gemv.shuffled_medians`). `--rows` builds the multi-row
kernels for each row count given (`ROWS = 4` replaced); FP4 runs the GEMV numba_cpu picks
for the weight's scale codes (`numba_cpu._fp4_kernel`: the scales decoded in the loop, for
quantize's codes). `--x bf16` gives the AVX-512 FP4 kernel
bf16 activations (its bf16 products, _numba_dpbf16). `--locality` builds each with its
prefetches of that llvm.prefetch locality (3 prefetcht0; 2 prefetcht1; 1 prefetcht2, the
package's `_numba_ir.PREFETCH_LOCALITY`; 0 prefetchnta). Each variant reads its own copy of
the weight, so no call finds the previous call's weight in the L3 (an FP4 11008 x 4096 weight,
25 MB, fits a 32 MB L3). The values behind `_numba_ir.PREFETCH_ROWS` and `numba_cpu.
MULTIROW_MIN_K` / `MULTIROW_MIN_K_FP4`. Medians, us; every variant's result is checked against
the first.
"""
import argparse
import functools
import inspect
import os
import sys
import time

import numba
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import softfp8  # noqa: E402
from cpu_fp4_ablate import from_source  # noqa: E402
from cpu_gemv import shuffled_medians  # noqa: E402
from softfp8.backends import (_numba_dpbf16, _numba_fp8_rows, _numba_ir, _numba_lut,  # noqa: E402
                              numba_cpu)
from softfp8.formats import SPECS  # noqa: E402

AHEAD = "PREFETCH_ROWS * nrows"


ROWS = "ROWS = 4\n"


def with_ahead(mod, ahead: int, rows: int = 4, locality: int = _numba_ir.PREFETCH_LOCALITY):
    """`mod` rebuilt from its source with the prefetch `ahead` passes ahead, `rows` rows a
    pass in its multi-row kernel and prefetches of `locality`."""
    src = inspect.getsource(mod)
    assert AHEAD in src and (ROWS in src or rows == 4), f"{mod.__name__} changed: update me"
    new = from_source(f"{mod.__name__.rsplit('.', 1)[-1]}_ahead{ahead}_rows{rows}_loc{locality}",
                      src.replace(AHEAD, f"{ahead} * nrows").replace(ROWS, f"ROWS = {rows}\n"))
    new.prefetch = functools.partial(_numba_ir.prefetch, locality=locality)  # its IR's calls
    return new


def calls(fmt: str, w: torch.Tensor, x: torch.Tensor, mods: dict, y: np.ndarray,
          bf16: bool = False) -> dict:
    """{(ahead, rows, locality): call} for one format: the kernels as numba_cpu.matmul calls them
    (mods keyed by (ahead, multi-row count, locality)); bf16: FP4 x as bf16 steps."""
    p = softfp8.quantize(w, fmt)
    n = w.shape[0]
    chunk = numba_cpu._chunk(n, numba_cpu._threads(numba.get_num_threads()))
    out = {}
    if fmt in ("e5m2", "e4m3"):
        c16 = p.words.view(torch.uint16).numpy()
        xe, xo = np.ascontiguousarray(x[0::2].numpy()), np.ascontiguousarray(x[1::2].numpy())
        kind = _numba_fp8_rows.E5M2_KIND if fmt == "e5m2" else _numba_fp8_rows.E4M3_FINITE_KIND
        for (a, _, loc), m in mods.items():
            for g in (1, m.ROWS):
                if (a, g, loc) in out:
                    continue
                out[(a, g, loc)] = lambda m=m, g=g, c16=c16.copy(): m.gemv_fp8(
                    c16, xe, xo, y, chunk, kind, g)
        return out
    words, scales = p.words.numpy(), p.scales.numpy()
    block = SPECS[p.fmt].block
    xs, xp = (_numba_dpbf16.x_steps(x.bfloat16(), block) if bf16 else
              next(iter(mods.values())).x_steps(x.numpy(), block))
    gs = np.float32(p.global_scale.item()) if fmt == "nvfp4" else None
    for (a, _, loc), m in mods.items():
        for g in sorted({1, m.ROWS}):
            if (a, g, loc) in out:
                continue
            group = (g,) if m.ROWS > 1 else ()
            wc, sc = words.copy(), scales.copy()
            kernel = numba_cpu._fp4_kernel(m, fmt == "mxfp4", p.scales)
            if gs is None:
                out[(a, g, loc)] = lambda kernel=kernel, group=group, wc=wc, sc=sc: kernel(
                    wc, sc, xs, xp, y, chunk, *group)
            else:
                out[(a, g, loc)] = lambda kernel=kernel, group=group, wc=wc, sc=sc: kernel(
                    wc, sc, gs, xs, xp, y, chunk, *group)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="11008x4096,4096x11008,16384x2048,32768x1024")
    ap.add_argument("--formats", default="e5m2,e4m3,nvfp4,mxfp4")
    ap.add_argument("--ahead", default="0,1,2,4")
    ap.add_argument("--rows", default="4", help="row counts of the multi-row kernels")
    ap.add_argument("--locality", default=str(_numba_ir.PREFETCH_LOCALITY),
                    help="llvm.prefetch localities of the variants")
    ap.add_argument("--x", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    fp4 = numba_cpu._fp4_table_kernels()
    bf16 = args.x == "bf16"
    if bf16 and (fp4 is not _numba_lut or not _numba_dpbf16.available()):
        raise SystemExit("--x bf16 needs the AVX-512 FP4 kernel and AVX-512 BF16")
    if bf16 and args.locality != str(_numba_ir.PREFETCH_LOCALITY):
        raise SystemExit("--locality applies to float32 steps (the bf16 rows take the package's)")
    variants = [(int(a), int(r), int(loc)) for a in args.ahead.split(",")
                for r in args.rows.split(",") for loc in args.locality.split(",")]
    fp8_mods = {v: with_ahead(_numba_fp8_rows, *v) for v in variants}
    fp4_mods = {v: with_ahead(fp4, *v) for v in variants} if fp4 is not None else {}
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  torch {torch.__version__}  numba "
          f"{numba.__version__}  threads {numba.get_num_threads()}  FP4 kernel "
          f"{fp4.__name__ if fp4 else None}  x {args.x}; medians of {args.reps} rounds, us; "
          "columns: passes ahead x rows a pass x locality")
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.lower().split("x"))
        g = torch.Generator().manual_seed(0)
        w = torch.randn(n, k, generator=g) * 0.02
        x = torch.randn(k, generator=g)
        w16, x16 = w.half(), x.half()
        y = np.empty(n, np.float32)
        for fmt in args.formats.split(","):
            mods = fp8_mods if fmt in ("e5m2", "e4m3") else fp4_mods
            if not mods:
                continue
            todo = calls(fmt, w, x, mods, y, bf16)
            first = None
            for fn in todo.values():
                fn()
                if first is None:
                    first = y.copy()
                assert np.abs(y - first).max() <= 1e-5 * np.abs(first).max(), shape
            todo["fp16"] = lambda: torch.mv(w16, x16)
            us = {key: s * 1e6 for key, s in shuffled_medians(todo, args.reps).items()}
            cells = "  ".join(f"{key[0]}x{key[1]}x{key[2]} {us[key]:.0f}" for key in todo
                              if key != "fp16")
            print(f"{shape} {fmt:>5}: {cells}  torch fp16 {us['fp16']:.0f}", flush=True)


if __name__ == "__main__":
    main()
