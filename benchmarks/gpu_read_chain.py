"""The ceiling of a token made of separate kernels: the llama2-7b token's 128 weight reads as 128
pure-read kernels (no decode, no arithmetic worth the name), one CUDA graph, against the fp16
`F.linear` token in the same process.

Why: per shape, the MMA GEMV streams at ~95% of read bandwidth once running, plus a fixed ~2.7
us a kernel (H200 sweep, BENCHMARKS.md), so the 8-bit token sits at ~80% of read bandwidth.
If a chain of plain reads of the same bytes pays the same fixed cost, the token target is a
property of launching 128 dependent kernels, not of the decode.

    python benchmarks/gpu_read_chain.py [--preset llama2-7b] [--reps 50] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from softfp8.bench.memory import measure_memory  # noqa: E402
from softfp8.bench.presets import preset  # noqa: E402
from softfp8.bench.timing import measure  # noqa: E402


@triton.jit
def _read(x_ptr, out_ptr, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    """Sum BLOCK x ITERS consecutive int32 words (XOR: no float work) into one output word."""
    start = tl.program_id(0).to(tl.int64) * (BLOCK * ITERS)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for i in tl.static_range(ITERS):
        acc ^= tl.load(x_ptr + start + i * BLOCK + tl.arange(0, BLOCK))
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
    a = ap.parse_args()
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
    for fmt in ("fp16", "e5m2", "nvfp4"):
        for block, iters, warps in ((4096, 8, 8), (2048, 4, 4), (1024, 4, 4)):
            chunk = block * iters  # int32 words a program reads
            bufs = []
            for s in linears:
                words = -(-weight_bytes(fmt, s.n, s.k) // (4 * chunk)) * chunk
                bufs.append(torch.randint(-2**31, 2**31 - 1, (words,), device=dev,
                                          dtype=torch.int32))
            outs = [torch.empty(b.numel() // chunk, device=dev, dtype=torch.int32) for b in bufs]

            def call(b, o, block=block, iters=iters, warps=warps):
                _read[(o.numel(),)](b, o, BLOCK=block, ITERS=iters, num_warps=warps)
            t = measure([lambda b=b, o=o: call(b, o) for b, o in zip(bufs, outs)], dev, warmup=3,
                        reps=a.reps)
            report(f"read chain {fmt} {block}x{iters} w{warps}", t.seconds * len(bufs) * 1e3,
                   sum(b.nbytes for b in bufs), fmt=fmt, block=block, iters=iters, warps=warps)
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
