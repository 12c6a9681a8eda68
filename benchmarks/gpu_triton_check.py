"""GPU check of the Triton backend: parity, then a first timing table. Run on the GPU machine:

    python benchmarks/gpu_triton_check.py            # parity + timings (a few minutes)
    python benchmarks/gpu_triton_check.py --parity   # parity only

Parity: every format, M in {1, 8, 64}, >= 3840 outputs, fp32 activations, against an fp64
dequantize-then-matmul: relative error <= 1e-5 (fp16/bf16 reported, not asserted). Timings:
triton vs fp16 torch.nn.functional.linear in the same run, CUDA events, median of 50 calls, the
weights rotated over enough copies that the working set is >= 4x the L2, so every call reads HBM.
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch
import torch.nn.functional as F

import softfp8
from softfp8.backends import triton as tb
from softfp8.formats import Format

SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (128256, 4096)]
MS = [1, 2, 8, 16]


def rel_err(y, ref):
    return ((y.double() - ref).norm() / ref.norm()).item()


def parity() -> bool:
    ok = True
    for fmt in Format:
        g = torch.Generator().manual_seed(0)
        packed = softfp8.quantize(torch.randn(3840, 4103, generator=g), fmt).to("cuda")
        w = softfp8.dequantize(packed).double()
        for m in (1, 8, 64):
            x = torch.randn(m, 4103, generator=g).cuda()
            for dtype, tol in ((torch.float32, 1e-5), (torch.float16, None), (torch.bfloat16, None)):
                xd = x.to(dtype)
                y = tb.matmul(xd, packed)
                err = rel_err(y, xd.double() @ w.T)
                good = tol is None or err <= tol
                ok &= good
                cfg = tb.launch_config(3840, 4103, m, fmt, tb.device_info(x.device), dtype)
                print(f"parity {fmt!s:6s} M={m:<3d} {str(dtype)[6:]:9s} {cfg.kernel.value:8s} "
                      f"split={cfg.split_k:<2d} rel err {err:.2e} {'ok' if good else 'FAIL'}")
    return ok


def time_calls(fn, copies, iters=50):
    for i in range(5):
        fn(copies[i % len(copies)])
    torch.cuda.synchronize()
    times = []
    for i in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(copies[i % len(copies)])
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def n_copies(nbytes, l2):
    return max(2, -(-4 * l2 // nbytes))


def timings() -> None:
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    print(f"\n{props.name}, {props.multi_processor_count} SMs, L2 {l2 >> 20} MiB, torch "
          f"{torch.__version__}, triton {__import__('triton').__version__}")
    print(f"{'N x K':>13s} {'M':>3s} {'fmt':>6s} {'kernel':>8s} {'split':>5s} {'us':>8s} "
          f"{'GB/s':>7s} {'fp16 us':>8s} {'speedup':>7s}  hw/sw us (fp8)")
    for n, k in SHAPES:
        g = torch.Generator().manual_seed(1)
        w32 = torch.randn(n, k, generator=g) * 0.02
        w16 = w32.half().cuda()
        f16 = [w16] + [w16.clone() for _ in range(n_copies(w16.numel() * 2, l2) - 1)]
        for fmt in Format:
            p = softfp8.quantize(w32, fmt).to("cuda")
            packs = [p] + [type(p)(p.fmt, p.shape, p.words.clone(),
                                   None if p.scales is None else p.scales.clone(), p.global_scale)
                           for _ in range(n_copies(p.nbytes, l2) - 1)]
            for m in MS:
                x = torch.randn(m, k, device="cuda", dtype=torch.float16)
                info = tb.device_info(x.device)
                cfg = tb.launch_config(n, k, m, fmt, info, x.dtype)
                us = time_calls(lambda q: tb.matmul(x, q), packs)
                ref = time_calls(lambda w: F.linear(x, w), f16)
                extra = ""
                if fmt in (Format.E5M2, Format.E4M3) and tb.uses_hardware_fp8(fmt, info):
                    sw = time_calls(lambda q: tb.run(x, q, None, cfg, hw_fp8=False), packs)
                    extra = f"{us:.1f}/{sw:.1f}"
                print(f"{n:>6d}x{k:<6d} {m:>3d} {fmt!s:>6s} {cfg.kernel.value:>8s} "
                      f"{cfg.split_k:>5d} {us:8.1f} {p.nbytes / us / 1e3:7.0f} {ref:8.1f} "
                      f"{ref / us:7.2f}  {extra}")
            del packs
        del f16


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parity", action="store_true", help="parity only, no timings")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA/ROCm GPU here")
        return 2
    ok = parity()
    if not args.parity:
        timings()
    print("\nparity:", "all within 1e-5 (fp32)" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
