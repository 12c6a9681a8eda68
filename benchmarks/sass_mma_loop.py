"""SASS opcode counts of Kernel.MMA_GEMV's main loop, cross-compiled here for a GPU that is not
(no GPU needed: triton.compile to a cubin, then the wheel's nvdisasm). Counting first is how a
decode change gets predicted before device time is spent (docs/decisions.md: where the count misled, too).

    python benchmarks/sass_mma_loop.py nvfp4 --set INJECT=1 [--warps N] [--arch 90] [--dump]

The kernel's settings default to what the table picks for a 4096 x 4096 weight at M = 1 on that
GPU (`triton_compile_worker.table_m1`: the run mapping, its warps, depth, ring and PDL mode),
with whole steps; --facts adds what the launcher takes from a quantized weight's facts (no NaN
code: NAN = 0 for E4M3 and FP4; MXFP4 against its rows' exponents, ROW_E = 1, and x where
`mma_x_in_step` then puts it; FP4 by exponent injection, as on NVIDIA GPUs); --warps and --set
NAME=VALUE override (ints). Prints registers, spills, the
loop's instruction count and its opcodes (modifiers dropped), and the integer-ALU share: the
opcodes that issue to sm_80/sm_90's ALU pipe (PRMT, LOP3, SHF, ISETP, IADD3, SEL, LEA, VIADD,
VIMNMX) against those on the FMA pipe (IMAD*, HMUL2, HFMA2, FFMA).
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

import triton_compile_worker as worker  # noqa: E402
from triton_compile_worker import ALU_OPS, FMA_OPS, loop_ops, opcode  # noqa: E402
from softfp8.backends.triton import DeviceInfo  # noqa: E402
from softfp8.backends.triton._mma_flags import mma_x_in_step  # noqa: E402
from softfp8.formats import Format  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("fmt", choices=("e5m2", "e4m3", "nvfp4", "mxfp4", "e4m3_b128"))
    ap.add_argument("--warps", type=int, default=None, help="default: the table's")
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--dump", action="store_true", help="print the loop's instructions too")
    ap.add_argument("--facts", action="store_true",
                    help="as a quantized weight runs: no NaN fix, MXFP4 on its rows' exponents")
    args = ap.parse_args()
    info = DeviceInfo(sm_count=132, capability=(args.arch // 10, args.arch % 10),
                      interpreter=False)
    _, c = worker.table_m1(args.fmt, info, ZERO=False)
    if args.facts and args.fmt != "e5m2":
        c["NAN"] = False
        if args.fmt in ("nvfp4", "mxfp4"):
            c["INJECT"] = True
        if args.fmt == "mxfp4":
            c["ROW_E"] = True
            c["X_IN_STEP"] = mma_x_in_step(Format.MXFP4, True) and c["X_IN_STEP"]
    if args.warps:
        c["WARPS"] = args.warps
    for kv in args.set:
        name, value = kv.split("=", 1)
        c[name] = int(value)
    k = triton.compile(worker.source(worker.MMA_GEMV, c, "fp16"),
                       target=GPUTarget("cuda", args.arch, 32),
                       options=dict(num_warps=c["WARPS"], num_stages=1))
    regs, spills = worker.resources("cuda", args.arch, k)  # ptxas: every wheel has it
    print(f"{args.fmt} sm_{args.arch} {c}")
    sass = worker.sass_text(k.asm["cubin"])
    if sass is None:
        print(f"registers {regs}, spills {spills}; loop: not read (this Triton wheel bundles no "
              f"nvdisasm)")
        return
    body = loop_ops(sass)
    if not body:
        raise SystemExit("no loop found in the SASS")
    ops = collections.Counter(opcode(i) for i in body)
    print(f"registers {regs}, spills {spills}; loop: {len(body)} instructions")
    print("  " + ", ".join(f"{op} {n}" for op, n in ops.most_common()))
    print(f"  integer ALU {sum(ops[o] for o in ALU_OPS)}, FMA pipe {sum(ops[o] for o in FMA_OPS)} "
          f"(IMAD {ops['IMAD']}), HMMA {ops['HMMA']}")
    if args.dump:
        print("\n".join(body))


if __name__ == "__main__":
    main()
