"""The CUDA backend (softfp8/backends/cuda: CuPy + NVRTC, for GPUs Triton can't reach) on a GPU,
in one call: the checks CI can't run, and its token timing.

    python benchmarks/gpu_cuda_backend.py [--layers 8] [--reps 50] [--no-bench]

1. probe: what the probe reports for the backend here (cuda_kernels, ftz_cuda);
2. exact: every code of every format through every kernel (GEMV at M = 1..16 in float32,
   float16 and bfloat16 x, with and without the special-code fix, E2M1 by injection and by
   selection; and the dequant + cuBLAS path at M = 17 and 64), bit for bit against
   `softfp8.dequantize` (NaN as NaN, the sign of zero aside);
3. parity: random weights (odd N and K) with bias against the reference backend, relative error
   ||y - ref|| / ||ref|| at most 1e-5 for float32 x (float16 / bfloat16 x: their rounding);
4. token: every linear of llama2-7b (`--layers` layers and the lm_head) at M = 1, replayed as one
   CUDA graph per variant: fp16 and fp32 cuBLAS (F.linear), this backend forced for each format
   with fp16 and fp32 x, and Triton where it runs; the read bandwidth measured in the same
   process; % of it reached, and the bandwidth model's prediction for a P40 (347 GB/s);
5. unless --no-bench: `softfp8-bench token --backends cuda,triton --layers 4` as well.

Prints tables; writes gpu_cuda_backend.json (and the bench receipt) to $OUT (or --out).
Exit status 1 if any exactness or parity check fails.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import softfp8
from softfp8 import Backend, Format, capability, dispatch
from softfp8.bench.presets import preset
from softfp8.formats import SPECS, PackedWeight, padded_k
from softfp8.quantize import dequantize, pack_codes

P40_GBPS = 347.0
FP4 = (Format.NVFP4, Format.MXFP4)
X_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
PARITY_TOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.float(), b.float()
    return (a == b) | (torch.isnan(a) & torch.isnan(b))


# --- weights holding every code -----------------------------------------------------------
def every_code_weight(fmt: Format, device, *, specials: bool, row_scale: bool = True
                      ) -> PackedWeight:
    """Row n holds code c_n in column 0 (the rest zeros): every code (FP8: 256 rows; FP4: 16
    codes x 256 block-scale codes), or only the codes without the special-code fix."""
    k = 24
    if fmt in FP4:
        sc = torch.arange(256).repeat_interleave(16)
        codes = torch.arange(16).repeat(256)
        if not specials and fmt is Format.NVFP4:
            keep = (sc & 0x7F) != 0x7F
            sc, codes = sc[keep], codes[keep]
    else:
        codes = torch.arange(256)
        if not specials:
            bad = (codes & 0x7C) == 0x7C if fmt is Format.E5M2 else (codes & 0x7F) == 0x7F
            codes = codes[~bad]
    n = codes.numel()
    full = torch.zeros((n, k), dtype=torch.uint8)
    full[:, 0] = codes.to(torch.uint8)
    words = pack_codes(full, fmt)
    g = torch.Generator().manual_seed(1)
    scales, gscale = None, None
    if fmt in FP4:
        scales = torch.full((n, padded_k(k, fmt) // SPECS[fmt].block), 0x38 if fmt is
                            Format.NVFP4 else 127, dtype=torch.uint8)
        scales[:, 0] = sc.to(torch.uint8)
        gscale = torch.tensor(1.3125) if fmt is Format.NVFP4 else None
    elif row_scale or fmt is Format.E4M3:
        scales = (torch.rand(n, generator=g) + 0.5).to(torch.float32)
    return PackedWeight(fmt, (n, k), words, scales, gscale).to(device)


def ms_for(dtype, full: bool) -> list[int]:
    """M of each check: every GEMV M (--full) or a spread for float32 x, fewer for 16-bit x
    (each M x dtype x flag is a kernel NVRTC compiles on first use); then the dequant path."""
    if full:
        return list(range(1, 17)) + [17, 64]
    return ([1, 2, 3, 4, 5, 8, 16] if dtype == torch.float32 else [1, 4, 16]) + [17, 64]


def check_exact(device, backend: str = "cuda", full: bool = False) -> list[dict]:
    rows = []
    for fmt in Format:
        weights = [("all codes", every_code_weight(fmt, device, specials=True)),
                   ("no special codes", every_code_weight(fmt, device, specials=False))]
        if fmt is Format.E5M2:
            weights.append(("all codes, unscaled",
                            every_code_weight(fmt, device, specials=True, row_scale=False)))
        for label, p in weights:
            w0 = dequantize(p)[:, 0]  # the reference decode of each row's code
            for dtype in X_DTYPES:
                for m in ms_for(dtype, full):
                    x = torch.zeros((m, p.shape[1]), dtype=dtype, device=device)
                    x[:, 0] = 1.0
                    decodes = ("inject", "select") if fmt in FP4 else ("select",)
                    for e2m1 in decodes:
                        y = softfp8.linear(x, p, backend=backend, e2m1=e2m1)
                        hit = same(y, w0.to(dtype)[None, :].expand(m, -1))
                        ok, bad = bool(hit.all()), int((~hit).sum())
                        rows.append({"format": str(fmt), "weight": label, "x": str(dtype)[6:],
                                     "m": m, "e2m1": e2m1, "codes": p.shape[0], "exact": ok,
                                     "mismatches": bad})
    return rows


def check_parity(device, backend: str = "cuda", full: bool = False) -> list[dict]:
    rows = []
    g = torch.Generator(device="cpu").manual_seed(0)
    n, k = 2999, 4100
    w = torch.randn(n, k, generator=g) * 0.05
    bias = torch.randn(n, generator=g).to(device)
    for fmt in Format:
        p = softfp8.quantize(w.to(device), fmt)
        for dtype in X_DTYPES:
            for m in ms_for(dtype, full):
                x = torch.randn(m, k, generator=g).to(device, dtype)
                for e2m1 in (("inject", "select") if fmt in FP4 else ("select",)):
                    for b in (None, bias.to(dtype)):
                        y = softfp8.linear(x, p, b, backend=backend, e2m1=e2m1)
                        ref = softfp8.linear(x, p, b, backend="torch")
                        err = ((y.double() - ref.double()).norm() / ref.double().norm()).item()
                        rows.append({"format": str(fmt), "x": str(dtype)[6:], "m": m,
                                     "e2m1": e2m1, "bias": b is not None, "rel_err": err,
                                     "ok": err <= PARITY_TOL[dtype]})
    return rows


def precompile(device, full: bool) -> int:
    """Compile every kernel the checks will launch, on 16 threads (CuPy keeps them, in memory
    and on disk): the checks are run once with the launch only recording what it would run."""
    from concurrent.futures import ThreadPoolExecutor

    from softfp8.backends.cuda import _runtime
    seen, real = set(), _runtime.launch
    _runtime.launch = lambda dev, variant, grid, block, args: seen.add(variant)
    try:
        check_exact(device, full=full)
        check_parity(device, full=full)
    finally:
        _runtime.launch = real
    try:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda v: _runtime.kernel(device.index, v), seen))
    except Exception as exc:  # the checks compile what is left, one at a time
        print(f"parallel compile failed ({type(exc).__name__}: {exc}); compiling as needed")
    return len(seen)


# --- token timing ---------------------------------------------------------------------------
def read_bandwidth(device) -> float:
    src = torch.ones((1 << 31) // 4, dtype=torch.float32, device=device)
    for _ in range(3):
        torch.sum(src)
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.sum(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    del src
    return (1 << 31) / statistics.median(times) / 1e9


def time_graph(fn, reps: int) -> float:
    """Median seconds of one replay of `fn` captured as a CUDA graph (warmed up eagerly)."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def token(device, layers: int, reps: int, bw: float) -> list[dict]:
    shapes = preset("llama2-7b").token_linears(layers=layers)
    full = preset("llama2-7b").token_linears()  # the whole model: bytes scale with parameters
    full_ratio = sum(s.n * s.k for s in full) / sum(s.n * s.k for s in shapes)
    g = torch.Generator(device=device).manual_seed(0)
    dense16 = [torch.randn(s.n, s.k, device=device, generator=g, dtype=torch.float16) * 0.02
               for s in shapes]
    rows = []

    def run_dense(dtype):
        ws = [w.to(dtype) for w in dense16] if dtype != torch.float16 else dense16
        xs = {s.k: torch.randn(1, s.k, device=device, dtype=dtype) for s in shapes}
        t = time_graph(lambda: [torch.nn.functional.linear(xs[s.k], w)
                                for s, w in zip(shapes, ws)], reps)
        nbytes = sum(w.numel() * w.element_size() for w in ws)
        del ws
        torch.cuda.empty_cache()
        return t, nbytes

    base = {}
    for dtype in (torch.float16, torch.float32):
        t, nbytes = run_dense(dtype)
        base[dtype] = t
        rows.append({"variant": f"{str(dtype)[6:]} cuBLAS F.linear", "format": None,
                     "backend": "cublas", "x": str(dtype)[6:], "seconds": t, "bytes": nbytes})
    for fmt in Format:
        packed = [softfp8.quantize(w, fmt) for w in dense16]
        nbytes = sum(p.nbytes for p in packed)
        for backend in (Backend.CUDA, Backend.TRITON):
            for dtype in (torch.float16, torch.float32):
                try:
                    dispatch.select(fmt, 1, device, backend=backend)
                except dispatch.BackendUnavailable as exc:
                    rows.append({"variant": f"{fmt} {backend}", "format": str(fmt),
                                 "backend": str(backend), "x": str(dtype)[6:],
                                 "skipped": str(exc)})
                    continue
                xs = {s.k: torch.randn(1, s.k, device=device, dtype=dtype) for s in shapes}
                t = time_graph(lambda: [softfp8.linear(xs[s.k], p, backend=backend)
                                        for s, p in zip(shapes, packed)], reps)
                rows.append({"variant": f"{fmt} {backend}", "format": str(fmt),
                             "backend": str(backend), "x": str(dtype)[6:], "seconds": t,
                             "bytes": nbytes})
        del packed
        torch.cuda.empty_cache()
    for r in rows:
        if "seconds" not in r:
            continue
        frac = r["bytes"] / r["seconds"] / 1e9 / bw
        r.update(GB_per_s=r["bytes"] / r["seconds"] / 1e9, pct_read_bw=100 * frac,
                 vs_fp16=base[torch.float16] / r["seconds"],
                 vs_fp32=base[torch.float32] / r["seconds"],
                 # the model: the same fraction of a P40's bandwidth; and the roofline
                 p40_ms_same_fraction=1e3 * r["bytes"] / (P40_GBPS * 1e9 * frac),
                 p40_ms_roofline=1e3 * r["bytes"] / (P40_GBPS * 1e9),
                 p40_tok_per_s_full_model=P40_GBPS * 1e9 * frac / (r["bytes"] * full_ratio))
        if r["backend"] == "cuda":
            need = 65.0 if r["format"] in ("nvfp4", "mxfp4") else 80.0
            r["issue_target_pct"] = need
            r["meets_target"] = r["pct_read_bw"] >= need
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--full", action="store_true", help="exact and parity at every M = 1..16 "
                    "and dtype (default: a spread; each M x dtype x flag is a kernel to compile)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "receipts")))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False  # the dequant path's cuBLAS must be fp32
    device = torch.device("cuda", torch.cuda.current_device())
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    report = capability.probe()
    dev = report.device(device)
    props = torch.cuda.get_device_properties(device)
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "device": props.name, "capability": list(torch.cuda.get_device_capability(device)),
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "command": " ".join(["python", *sys.argv]),
           "probe": {"cuda_kernels": [str(dev.cuda_kernels.status), dev.cuda_kernels.detail],
                     "ftz_cuda": [str(dev.ftz_cuda.status), dev.ftz_cuda.detail]}}
    print(f"{props.name} ({device}), torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(f"probe: cuda_kernels {dev.cuda_kernels.status}: {dev.cuda_kernels.detail}")
    print(f"probe: ftz_cuda {dev.ftz_cuda.status}: {dev.ftz_cuda.detail}")
    failed = False
    try:
        import cupy
        out["cupy"] = cupy.__version__
    except ImportError:
        print("cupy is not installed: nothing else to check")
        (args.out / "gpu_cuda_backend.json").write_text(json.dumps(out, indent=1))
        return 1

    t0 = time.time()
    kernels = precompile(device, args.full)
    out["kernels_compiled"] = kernels
    print(f"\ncompiled {kernels} kernels in {time.time() - t0:.0f} s")
    t0 = time.time()
    exact = check_exact(device, full=args.full)
    out["exact"] = exact
    bad = [r for r in exact if not r["exact"]]
    print(f"\nexact decode: {len(exact)} runs (format x weight x x dtype x M x e2m1), "
          f"{len(bad)} with mismatches ({time.time() - t0:.0f} s)")
    for r in bad[:40]:
        print("  MISMATCH", r)
    failed |= bool(bad)

    parity = check_parity(device, full=args.full)
    out["parity"] = parity
    worst = {}
    for r in parity:
        key = (r["format"], r["x"])
        worst[key] = max(worst.get(key, 0.0), r["rel_err"])
    print("\nparity vs the reference backend (2999 x 4100, bias and none; worst rel err):")
    print("| format | x | worst rel err | tolerance |\n|---|---|---|---|")
    for (fmt, x), e in worst.items():
        tol = PARITY_TOL[getattr(torch, x)]
        print(f"| {fmt} | {x} | {e:.2e} | {tol:.0e} {'ok' if e <= tol else 'FAIL'} |")
    failed |= not all(r["ok"] for r in parity)
    (args.out / "gpu_cuda_backend.json").write_text(json.dumps(out, indent=1))

    bw = read_bandwidth(device)
    out["read_bandwidth_GB_per_s"] = bw
    rows = token(device, args.layers, args.reps, bw)
    out["token"] = {"preset": "llama2-7b", "layers": args.layers, "head": True, "m": 1,
                    "reps": args.reps, "rows": rows}
    print(f"\ntoken: llama2-7b, {args.layers} layers + lm_head, M = 1, one CUDA graph per variant, "
          f"median of {args.reps}; read bandwidth {bw:.0f} GB/s (torch.sum over 2 GiB)")
    print("| variant | x | ms | GB/s | % read bw | vs fp16 | vs fp32 | P40 ms (same %) | "
          "P40 ms (roofline) | P40 tok/s, 32 layers |\n|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "seconds" not in r:
            print(f"| {r['variant']} | {r['x']} | skipped: {r['skipped'][:80]} |")
            continue
        flag = "" if r.get("meets_target", True) else f" (< {r['issue_target_pct']:.0f}%)"
        print(f"| {r['variant']} | {r['x']} | {1e3 * r['seconds']:.3f} | {r['GB_per_s']:.0f} | "
              f"{r['pct_read_bw']:.1f}{flag} | {r['vs_fp16']:.2f} | {r['vs_fp32']:.2f} | "
              f"{r['p40_ms_same_fraction']:.2f} | {r['p40_ms_roofline']:.2f} | "
              f"{r['p40_tok_per_s_full_model']:.1f} |")
    print("P40 columns are predictions (bytes / (347 GB/s x the fraction measured here), and the "
          "roofline), not measurements.")
    (args.out / "gpu_cuda_backend.json").write_text(json.dumps(out, indent=1))

    if not args.no_bench:
        cmd = [sys.executable, "-m", "softfp8.bench", "token", "--backends", "cuda,triton",
               "--layers", "4", "--out", str(args.out / "bench-token-cuda.json")]
        print("\n$ " + " ".join(cmd[1:]))
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        print(proc.stdout[-6000:], proc.stderr[-2000:])
        out["bench_token_rc"] = proc.returncode
    out["seconds"] = time.time() - started
    (args.out / "gpu_cuda_backend.json").write_text(json.dumps(out, indent=1))
    print(f"\n{'FAILED' if failed else 'all checks passed'}; {out['seconds']:.0f} s; "
          f"JSON in {args.out / 'gpu_cuda_backend.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
