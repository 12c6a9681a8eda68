"""FP4 GEMV weights in 2 MB pages against 4 KB pages, through numba_cpu.matmul, interleaved.

    python benchmarks/cpu_hugepages_ab.py [--shape 11008x4096] [--reps 40] [--x bf16|fp32]

The question (nineteenth session): does the row stream wait on the TLB? A 25 MB FP4 weight in
4 KB pages is ~6000 of them, past the second-level TLB's reach. Where transparent huge pages are
`madvise` (the usual default, and torch's allocator does not ask for them), each variant here
copies the packed words and scales into an anonymous mmap advised MADV_HUGEPAGE; /proc/meminfo's
AnonHugePages says whether the kernel gave them. Four copies of each weight are called in turn
(each read from memory, not the L3), every round in a random order (`cpu_gemv.shuffled_medians`).
"""
import argparse
import dataclasses
import mmap
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import softfp8  # noqa: E402
from cpu_gemv import DTYPES, shuffled_medians  # noqa: E402
from softfp8.backends import numba_cpu  # noqa: E402

HUGE = 2 << 20


def in_huge_pages(t: torch.Tensor) -> torch.Tensor:
    """A copy of t in an anonymous mapping advised MADV_HUGEPAGE, 2 MB aligned."""
    nbytes = t.numel() * t.element_size()
    m = mmap.mmap(-1, -(-(nbytes + HUGE) // HUGE) * HUGE,
                  flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE)
    buf = np.frombuffer(m, np.uint8)
    off = (-buf.ctypes.data) % HUGE
    arr = buf[off:off + nbytes].view(t.numpy().dtype).reshape(tuple(t.shape))
    arr[...] = t.numpy()
    out = torch.from_numpy(arr)
    out._mapping = m  # the mapping lives as long as the tensor
    return out


def anon_huge_kb() -> int:
    with open("/proc/meminfo") as f:
        return int(next(line for line in f if line.startswith("AnonHugePages")).split()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="11008x4096")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--x", default="bf16", choices=["bf16", "fp32"])
    args = ap.parse_args()
    n, k = (int(v) for v in args.shape.split("x"))
    g = torch.Generator().manual_seed(0)
    w = torch.randn(n, k, generator=g) * 0.02
    x = torch.randn(1, k, generator=g).to(DTYPES[args.x])
    before = anon_huge_kb()
    calls = {}
    for fmt in ("nvfp4", "mxfp4"):
        for pages in ("4 KB", "2 MB"):
            copies = []
            for _ in range(4):
                p = softfp8.quantize(w, fmt)
                if pages == "2 MB":
                    p = dataclasses.replace(p, words=in_huge_pages(p.words),
                                            scales=in_huge_pages(p.scales))
                copies.append(p)
            turn = [0]

            def call(copies=copies, turn=turn):
                turn[0] = (turn[0] + 1) % len(copies)
                return numba_cpu.matmul(x, copies[turn[0]])
            calls[(fmt, pages)] = call
    for fn in calls.values():
        fn(), fn()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  torch {torch.__version__}  {args.shape}  x "
          f"{args.x}  AnonHugePages {before} -> {anon_huge_kb()} kB  medians of {args.reps}, ms")
    ms = {key: s * 1e3 for key, s in shuffled_medians(calls, args.reps).items()}
    for fmt in ("nvfp4", "mxfp4"):
        small, huge = ms[(fmt, "4 KB")], ms[(fmt, "2 MB")]
        print(f"  {fmt}: 4 KB pages {small:.3f}  2 MB pages {huge:.3f}  ratio {huge / small:.3f}")


if __name__ == "__main__":
    main()
