"""The AVX2 FP4 kernel's inner loop (`_numba_pshufb`) through llvm-mca: its x86 instructions a step
(64 codes of a row) and the per-port pressure of a CPU model (default znver3), the "count first"
instrument for the CPU kernel (the GPU's is sass_mma_loop.py). A model, not a measurement.

    python benchmarks/cpu_fp4_mca.py [--fmt mxfp4|nvfp4] [--mcpu znver3] [--mca llvm-mca]

Compiles the row function afresh (numba's cache holds no assembly) for this machine's target and
takes the loop that holds the `vpshufb`s.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

import numba as nb
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import softfp8  # noqa: E402
from softfp8.backends import _numba_pshufb as L  # noqa: E402
from softfp8.backends._numba_decode import _JIT  # noqa: E402
from softfp8.formats import SPECS  # noqa: E402


def loop_asm(fmt: str) -> str:
    """The text of the loop (label to its backward branch) that holds the table lookups."""
    n, k = 64, 4096
    p = softfp8.quantize(torch.randn(n, k) * 0.02, fmt)
    xs, xp = L.x_steps(torch.randn(k), SPECS[p.fmt].block)
    y = np.empty(n, np.float32)
    fn = L._mxfp4_rows if fmt == "mxfp4" else L._nvfp4_rows
    fresh = nb.njit(**{key: v for key, v in _JIT.items() if key != "cache"})(fn.py_func)
    words, scales = p.words.numpy(), p.scales.numpy()
    if fmt == "mxfp4":
        fresh(words, scales, xs, xp, y, 0, n)
    else:
        fresh(words, scales, np.float32(1.0), xs, xp, y, 0, n)
    lines = list(fresh.inspect_asm().values())[0].splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\.LBB\w+):", line)
        if not m:
            continue
        for j in range(i + 1, len(lines)):
            if re.match(r"^\.LBB\w+:", lines[j]):
                break
            if re.search(rf"\bj\w+\s+{re.escape(m.group(1))}$", lines[j]):
                body = [s for s in lines[i + 1:j + 1]
                        if s.strip() and not s.strip().startswith(("#", ".loc", ".p2align"))]
                if any("vpshufb" in s for s in body):
                    return "\n".join(body) + "\n"
                break
    raise SystemExit("no loop with vpshufb found (is numba targeting AVX2 here?)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fmt", default="mxfp4", choices=("mxfp4", "nvfp4"))
    ap.add_argument("--mcpu", default="znver3")
    ap.add_argument("--mca", default="llvm-mca")
    args = ap.parse_args()
    if not L.available():
        raise SystemExit("numba does not target AVX2 here")
    body = loop_asm(args.fmt)
    print(f"# {args.fmt}: {len(body.splitlines())} instructions a step (64 codes)")
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        f.write(body)
    out = subprocess.run([args.mca, f"-mcpu={args.mcpu}", "-iterations=200", f.name],
                         capture_output=True, text=True)
    os.unlink(f.name)
    if out.returncode:
        raise SystemExit(out.stderr)
    text = out.stdout
    print(text[:text.index("Instruction Info:")].strip())
    i = text.index("Resources:")
    print(text[i:text.index("Resource pressure by instruction:")].strip())


if __name__ == "__main__":
    main()
