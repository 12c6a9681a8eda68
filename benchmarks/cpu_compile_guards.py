"""Dynamo's guard check per call of a compiled, converted Llama: what torch.compile pays on the
host before every decode step (on a GPU with CUDA graphs, before the replay).

    python benchmarks/cpu_compile_guards.py [--layers 32] [--variants fp32,e5m2,nvfp4]

A Llama of transformers' architecture, small width (64) and `--layers` layers, random weights,
converted by `quantize_model` (backend torch; the guards do not depend on it) or left fp32;
`torch.compile(model.model, backend="eager")` (dynamo only), two warm-up calls, then 20 calls
under torch.profiler: the "TorchDynamo Cache Lookup" time a call (the fastest and the median of
the 20: this machine's phases move a mean by 2x), and the guards' count (lines of the guard
tree, LAMBDA_GUARDs: the ones dynamo checks in Python).
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def measure(variant: str, layers: int, calls: int = 20) -> dict:
    import torch
    import transformers
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    from torch.profiler import ProfilerActivity, profile

    import softfp8

    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=layers, num_attention_heads=2,
                                   num_key_value_heads=2, vocab_size=100)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    if variant != "fp32":
        softfp8.quantize_model(model, variant, progress=False, backend="torch")
    ids = torch.randint(0, 100, (1, 4))
    torch._dynamo.reset()
    compiled = torch.compile(model.model, backend="eager")
    with torch.no_grad():
        compiled(ids)
        compiled(ids)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(calls):
                compiled(ids)
    times = sorted(e.cpu_time_total for e in prof.events()
                   if e.name == "TorchDynamo Cache Lookup")
    entries = _debug_get_cache_entry_list(type(model.model).forward.__code__)
    guards = str(entries[0].guard_manager) if entries else ""
    return {"variant": variant, "layers": layers, "lookup_us_min": times[0],
            "lookup_us_median": times[len(times) // 2], "entries": len(entries),
            "guard_lines": len(guards.splitlines()), "lambda_guards": guards.count("LAMBDA_GUARD")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--variants", default="fp32,e5m2,nvfp4")
    args = ap.parse_args(argv)
    import torch

    print(f"# {datetime.datetime.now().isoformat(timespec='seconds')}  torch {torch.__version__}"
          f"  {args.layers} layers")
    print(f"{'variant':8s} {'guard check us: min':>19s} {'median':>7s} {'guard lines':>11s} "
          f"{'lambda guards':>13s}")
    for variant in args.variants.split(","):
        r = measure(variant.strip(), args.layers)
        print(f"{r['variant']:8s} {r['lookup_us_min']:19.0f} {r['lookup_us_median']:7.0f} "
              f"{r['guard_lines']:11d} {r['lambda_guards']:13d}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
