"""The ceiling of a token made of separate kernels: the llama2-7b token's 128 weight reads as 128
pure-read kernels (no decode, no arithmetic worth the name), one CUDA graph, against the fp16
`F.linear` token in the same process.

Why: per shape, the MMA GEMV streams at ~95% of read bandwidth once running, plus a fixed ~2.7
us a kernel (H200 sweep), so the 8-bit token sits at ~80% of read bandwidth.
If a chain of plain reads of the same bytes pays the same fixed cost, the token target is a
property of launching 128 dependent kernels, not of the decode.

--pdl launches each chain under programmatic dependent launch too (sm_90+), placed as softfp8's
kernels place it, so the ceiling is that of kernels which may overlap as softfp8's do:
  off        plain launches (no PDL);
  late       wait first, the next kernel let in after the loads (softfp8's 8-bit default);
  early      the next kernel let in at once, the first load before the wait and the rest after
             it (a GEMV may hold only its first steps of weights before x is known);
  early-all  as early with every load before the wait: the most overlap any kernel could have,
             not a GEMV's (its later weights need registers that x's arithmetic frees);
  early-l2   as early, after one bulk prefetch of the program's bytes into L2 (no registers
             held: what a GEMV could do with SOFTFP8_PDL=early SOFTFP8_PDL_PREFETCH=bytes).
Each kernel's store comes after its wait, so the chain stays ordered.

    python benchmarks/gpu_read_chain.py [--preset llama2-7b] [--reps 50] [--json FILE]
        [--pdl off,late,early,early-all] [--tiles 4096x8x8,2048x4x4,1024x4x4] [--formats ...]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: E402

from softfp8.bench.memory import measure_memory  # noqa: E402
from softfp8.bench.presets import preset  # noqa: E402
from softfp8.backends.triton._kernels import _pdl_wait_after, _prefetch_l2  # noqa: E402
from softfp8.bench.timing import measure  # noqa: E402

PDL_MODES = {"off": 0, "early": 1, "late": 2, "early-all": 3, "early-l2": 4}
"""--pdl's names and the kernel's PDL value (softfp8's: 0 off, 1 early, 2 late)."""


@triton.jit
def _read(x_ptr, out_ptr, nonzero, BLOCK: tl.constexpr, ITERS: tl.constexpr,
          PDL: tl.constexpr = 0):
    """XOR BLOCK x ITERS consecutive int32 words (no float work) into one output word. PDL (see
    the module's docstring): 1, 3 and 4 let the next kernel launch at once and wait after the
    first (1; 4 after an L2 prefetch of all) or every (3) load, 2 waits first and lets it launch
    after the loads. The early waits are predicated on the loaded words (`_pdl_wait_after`:
    ptxas hoists a plain wait above every load); `nonzero` is never 0."""
    start = tl.program_id(0).to(tl.int64) * (BLOCK * ITERS)
    if PDL == 1 or PDL >= 3:
        gdc_launch_dependents()
    if PDL == 4:
        _prefetch_l2(x_ptr + start, BLOCK * ITERS * 4)
    if PDL == 2:
        gdc_wait()
    acc = tl.load(x_ptr + start + tl.arange(0, BLOCK))
    if PDL == 1 or PDL == 4:
        _pdl_wait_after(acc, nonzero, PDL)
    for i in tl.static_range(1, ITERS):
        acc ^= tl.load(x_ptr + start + i * BLOCK + tl.arange(0, BLOCK))
    if PDL == 3:
        _pdl_wait_after(acc, nonzero, PDL)
    if PDL == 2:
        gdc_launch_dependents()
    tl.store(out_ptr + tl.program_id(0), tl.xor_sum(acc, axis=0))


def weight_bytes(fmt: str, n: int, k: int) -> int:
    """Bytes one linear's weights take in `fmt` (what its token reads)."""
    return {"fp16": 2 * n * k, "e5m2": n * k + 4 * n, "nvfp4": n * k // 2 + n * k // 16 + 4,
            "mxfp4": n * k // 2 + n * k // 32}[fmt]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="llama2-7b")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json")
    ap.add_argument("--pdl", default="off", help="comma-separated: " + ",".join(PDL_MODES))
    ap.add_argument("--tiles", default="4096x8x8,2048x4x4,1024x4x4",
                    help="BLOCKxITERSxWARPS of a program, comma-separated")
    ap.add_argument("--formats", default="fp16,e5m2,nvfp4")
    a = ap.parse_args()
    modes = a.pdl.split(",")
    for m in modes:
        if m not in PDL_MODES:
            raise SystemExit(f"--pdl: {m!r} is not one of {', '.join(PDL_MODES)}")
    tiles = [tuple(int(v) for v in t.split("x")) for t in a.tiles.split(",")]
    fmts = a.formats.split(",")
    dev = torch.device("cuda")
    linears = preset(a.preset).token_linears(head=False)
    mem = measure_memory(dev, 1 << 30, warmup=3, reps=20)
    read_bw = mem.read_bandwidth
    rows = []

    def report(name, ms, nbytes, **extra):
        row = dict(name=name, ms=ms, bytes=nbytes, pct_read=100 * nbytes / (ms / 1e3) / read_bw,
                   **extra)
        rows.append(row)
        print(f"{name:34s} {ms:7.3f} ms  {nbytes / 1e9:6.3f} GB  {row['pct_read']:5.1f}% read",
              flush=True)

    # the baseline: the fp16 token, F.linear
    xs = {k: torch.randn(1, k, device=dev, dtype=torch.float16) for k in {s.k for s in linears}}
    ws = [torch.randn(s.n, s.k, device=dev, dtype=torch.float16) * 0.02 for s in linears]
    t = measure([lambda w=w, x=xs[w.shape[1]]: F.linear(x, w) for w in ws], dev, warmup=3,
                reps=a.reps)
    report("fp16 F.linear token", t.seconds * len(ws) * 1e3, sum(w.nbytes for w in ws))
    del ws
    if any(PDL_MODES[m] for m in modes) and torch.cuda.get_device_capability() < (9, 0):
        raise SystemExit("--pdl other than off needs sm_90+")
    for fmt in fmts:
        for block, iters, warps in tiles:
            chunk = block * iters  # int32 words a program reads
            bufs = []
            for s in linears:
                words = -(-weight_bytes(fmt, s.n, s.k) // (4 * chunk)) * chunk
                bufs.append(torch.randint(-2**31, 2**31 - 1, (words,), device=dev,
                                          dtype=torch.int32))
            outs = [torch.empty(b.numel() // chunk, device=dev, dtype=torch.int32) for b in bufs]
            # what the first kernel must write, under every mode (its output poisoned first)
            want = np.bitwise_xor.reduce(bufs[0].view(outs[0].numel(), -1).cpu().numpy(), axis=1)
            poison = torch.from_numpy(~want).to(dev)

            for mode in modes:
                pdl = PDL_MODES[mode]
                launch = dict(launch_pdl=True) if pdl else {}

                def call(b, o, block=block, iters=iters, warps=warps, pdl=pdl, launch=launch):
                    _read[(o.numel(),)](b, o, 12345, BLOCK=block, ITERS=iters, PDL=pdl,
                                        num_warps=warps, **launch)
                outs[0].copy_(poison)  # the kernel reads what it should, and writes it
                call(bufs[0], outs[0])
                if not np.array_equal(outs[0].cpu().numpy(), want):
                    raise SystemExit(f"read chain {fmt} {mode}: wrong XOR")
                t = measure([lambda b=b, o=o: call(b, o) for b, o in zip(bufs, outs)], dev,
                            warmup=3, reps=a.reps)
                report(f"read chain {fmt} {block}x{iters} w{warps} pdl {mode}",
                       t.seconds * len(bufs) * 1e3, sum(b.nbytes for b in bufs), fmt=fmt,
                       block=block, iters=iters, warps=warps, pdl=mode)
            del bufs, outs
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                triton=triton.__version__, read_bw=read_bw, preset=a.preset,
                linears=len(linears), command=" ".join(sys.argv))
    print(json.dumps(meta))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
