"""The ceiling the fused small-M kernel works under: vdpbf16ps (zmm) a second on one core.

- `chains`: independent accumulators (two dependent vdpbf16ps each a step), every operand in
  registers (latency vs throughput);
- `x from L1`: R accumulators, each vdpbf16ps reading its x vector from a block of `block`
  steps (R rows x 2 vectors of 64 bytes a step), as the fused kernel's loops read x, the weight
  vectors in registers (no decode).

    python benchmarks/cpu_dp_peak.py

Needs AVX-512 BF16 (numba targets it). CPU time, best of 5.
"""
from __future__ import annotations

import os
import time

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from softfp8.backends.numba._decode import _JIT
from softfp8.backends.numba._fused_ir import _dot_fn
from softfp8.backends.numba._ir import vload


def _loop(rows: int, xmem: bool, block: int):
    """A jitted f(n, x): n steps of 2 x rows vdpbf16ps into `rows` accumulators."""
    @intrinsic
    def loop(typingctx, n, x):
        sig = types.float32(n, x)

        def codegen(context, builder, sig, args):
            f32, i32 = ir.FloatType(), ir.IntType(32)
            vf, vi = ir.VectorType(f32, 16), ir.VectorType(i32, 16)
            intp = context.get_value_type(types.intp)
            dot = _dot_fn(builder)
            xarr = context.make_array(sig.args[1])(context, builder, args[1])
            accs = [cgutils.alloca_once_value(builder, ir.Constant(vf, [ir.Constant(f32, i)] * 16))
                    for i in range(max(rows, 3))]
            w = [builder.bitcast(builder.load(accs[i]), vi) for i in range(2)]
            const_x = builder.bitcast(builder.load(accs[2]), vi)
            n = context.cast(builder, args[0], sig.args[0], types.intp)
            with cgutils.for_range(builder, n, intp=intp) as lp:
                s = builder.urem(lp.index, ir.Constant(intp, block))
                for v in range(2):
                    for j in range(rows):
                        xv = const_x
                        if xmem:
                            at = builder.add(builder.mul(s, ir.Constant(intp, 2 * rows)),
                                             ir.Constant(intp, v * rows + j))
                            xv = vload(builder, xarr.data, builder.mul(at, ir.Constant(intp, 32)),
                                       vi)
                        builder.store(builder.call(dot, [builder.load(accs[j]), w[v], xv]),
                                      accs[j])
            tot = builder.load(accs[0])
            for acc in accs[1:rows]:
                tot = builder.fadd(tot, builder.load(acc))
            return builder.extract_element(tot, ir.Constant(i32, 0))
        return sig, codegen

    @nb.njit(**_JIT)
    def f(n, x):
        return loop(n, x)
    return f


def rate(rows: int, xmem: bool, block: int, n: int = 200_000) -> float:
    """G vdpbf16ps a second, best of 5."""
    x = np.random.default_rng(0).integers(0, 1 << 14, size=block * 2 * rows * 32).astype(np.uint16)
    f = _loop(rows, xmem, block)
    f(10, x)
    best = float("inf")
    for _ in range(5):
        t = time.process_time()
        f(n, x)
        best = min(best, time.process_time() - t)
    return n * 2 * rows / best / 1e9


def main() -> None:
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} loadavg "
          f"{os.getloadavg()[0]:.1f}, one thread, CPU time, best of 5", flush=True)
    for rows in (1, 2, 3, 4, 8):
        print(f"chains {rows}: registers only "
              f"{rate(rows, False, 1):.2f} G/s", flush=True)
    for rows, block in ((4, 32), (8, 16), (16, 8), (16, 16)):
        kib = block * 2 * rows * 64 // 1024
        print(f"rows {rows}, x from a {kib} KiB block: {rate(rows, True, block):.2f} G/s "
              f"(x in registers {rate(rows, False, block):.2f})", flush=True)


if __name__ == "__main__":
    main()
