"""Where a compiled decode step's GPU time goes: one variant of the 7B-shaped Llama of
`gpu_e2e_generate.py` (random weights), static cache + torch.compile("reduce-overhead") as
transformers' generate() runs it, one generate() call under torch.profiler, kernels ranked by
device time per generated token.

    python benchmarks/gpu_e2e_profile.py --variant e5m2 --layers 8      # on the GPU
    python benchmarks/gpu_e2e_profile.py --variant e5m2 --tiny --device cpu   # smoke test

Why: compiled, NVFP4 decoded 1.37x faster than fp16 end to end and E5M2 not at all (docs/decisions.md,
"GPU: the whole model"), while the `token` bench replays E5M2's linears alone at 2.07x fp16. The table shows
whether E5M2's own kernels or something around the `softfp8::linear` calls (copies, casts,
extra launches) takes the time. Kernel names are cut to --width characters.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def kernel_times(prof, cuda: bool) -> dict:
    """name -> [calls, us] over a torch.profiler run: the GPU's kernels by device time, or on a
    CPU every op by CPU time (also gpu_e2e_step.py's)."""
    per_kernel = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        us = e.device_time_total if cuda else e.cpu_time_total
        if cuda and (us <= 0 or e.device_type.name != "CUDA"):  # GPU: kernels only
            continue
        per_kernel[e.name][0] += 1
        per_kernel[e.name][1] += us
    return per_kernel


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", default="e5m2", help="fp16 or a softfp8 format")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=16, help="new tokens of the profiled call")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--backend", default="triton")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model (tests of this script)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--width", type=int, default=90)
    args = ap.parse_args(argv)

    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile

    import softfp8
    from gpu_e2e_generate import build_model, generate_seconds, mode_kwargs

    model = build_model(args, torch, transformers)
    if args.variant != "fp16":
        softfp8.quantize_model(model, args.variant, progress=False, backend=args.backend)
    ids = torch.randint(100, 200, (1, args.prompt), device=args.device,
                        generator=torch.Generator(args.device).manual_seed(1))
    kwargs = mode_kwargs("static-compile", transformers)
    for _ in range(3):  # compile, capture the graphs, settle
        generate_seconds(model, ids, args.tokens, kwargs, torch, args.device)
    cuda = args.device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        seconds = generate_seconds(model, ids, args.tokens, kwargs, torch, args.device)
    per_kernel = kernel_times(prof, cuda)
    total = sum(v[1] for v in per_kernel.values())
    # Host side: the runtime calls that launch work (one cudaGraphLaunch a step when the
    # decode step replays as a CUDA graph; hundreds of kernel launches when it does not) and
    # the CPU ops with the most self time (generate()'s own Python shows as the gaps).
    launches = defaultdict(int)
    for e in prof.events():
        if e.name in ("cudaGraphLaunch", "cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx",
                      "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaStreamSynchronize",
                      "cudaDeviceSynchronize"):
            launches[e.name] += 1
    print(f"# {args.variant}, {args.layers if not args.tiny else 2} layers, {args.tokens} new "
          f"tokens in {seconds * 1e3:.1f} ms ({seconds * 1e3 / args.tokens:.2f} ms a token, "
          f"prefill included); torch {torch.__version__}, "
          f"{torch.cuda.get_device_name() if cuda else 'cpu'}")
    print(f"# {'device' if cuda else 'cpu'} time of all events {total / 1e3:.2f} ms "
          f"({total / 1e3 / args.tokens:.3f} ms a token)")
    print("# runtime calls a token: " + ", ".join(
        f"{k} {v / args.tokens:.1f}" for k, v in sorted(launches.items())))
    print(f"{'us/token':>9} {'calls/tok':>9} {'share':>6}  kernel")
    for name, (calls, us) in sorted(per_kernel.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print(f"{us / args.tokens:9.1f} {calls / args.tokens:9.1f} {us / max(total, 1e-9):6.1%}  "
              f"{name[:args.width]}")
    print("# CPU ops by self time")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top,
                                    max_name_column_width=args.width))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
