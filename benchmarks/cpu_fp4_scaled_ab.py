"""A/B (tried and dropped, BENCHMARKS.md seventeenth session): the AVX2 FP4 table kernel
(_numba_pshufb, A) against a copy (B) that multiplies each decoded vector by its block scales and
adds it into one of 8 accumulators of its own, so no step's sums funnel through one chain into
a scaled multiply-add (the question: is the loop bound by that dependency chain, the
`cpu_fp4_ablate.py` loop without its decode being barely faster?). B is built from A's source
text with four edits (`cpu_fp4_ablate.variant`); also prints both results' error against fp64.

    python benchmarks/cpu_fp4_scaled_ab.py
"""
import inspect
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_fp4_ablate as ab  # noqa: E402
import softfp8  # noqa: E402
from cpu_fp4_kernels import vector_scaling  # noqa: E402

ACCS = ("    accs = [[cgutils.alloca_once_value(builder, ir.Constant(vf, None)) for _ in "
        "range(2)]\n")
ACCS8 = ACCS.replace("range(2)", "range(8)")  # 8 accumulators a row, not 2
PART = "            part = [None, None]\n"
SCALES_FIRST = '''            few = ir.VectorType(f32, nblk)
            sv = vload(builder, srows[i], builder.udiv(w0, ir.Constant(intp, wpb)), few)
            sv = builder.shuffle_vector(sv, ir.Constant(few, None),
                                        ir.Constant(vi, [ir.Constant(i32, j % nblk)
                                                         for j in range(8)]))
            scales = [builder.call(permps, [sv, picks[h]]) for h in range(2)]
'''
OLD_FMA = ("                        part[h] = builder.fmul(val, xvec) if part[h] is None else "
           "builder.call(\n                            fma, [val, xvec, part[h]])\n")
NEW_FMA = '''                        a = accs[i][4 * h + 2 * p + sh]
                        builder.store(builder.call(fma, [builder.fmul(val, scales[h]), xvec,
                                                         builder.load(a)]), a)
'''
src = inspect.getsource(ab.A)
i = src.index("            # the step's scales, one vpermps a vector")
j = src.index("    return rows_totals(")
TAIL = src[i:j]
edits = ((ACCS, ACCS8), (PART, SCALES_FIRST), (OLD_FMA, NEW_FMA), (TAIL, ""))


def main():
    B = ab.variant("scaled", edits)
    print("vector scaling %.2f" % vector_scaling())
    ab.ab_rounds(B, ("mxfp4", "nvfp4"), errors)


def errors(shape, fmt, p, x, ys):
    """Both results' largest error against fp64, relative to the largest output."""
    ref = softfp8.dequantize(p).double() @ x.double()
    for m in "AB":
        e = (torch.from_numpy(ys[m]).double() - ref).abs().max() / ref.abs().max()
        print(f"  {shape} {fmt} {m} max err rel {e:.2e}")


if __name__ == "__main__":
    main()
