"""One decode step of a whole 7B-shaped Llama (transformers' own modules, random fp16 weights,
nothing downloaded), replayed as a CUDA graph: fp16 against each softfp8 format, same process.

    python benchmarks/gpu_e2e_step.py                          # 32 layers, all variants
    python benchmarks/gpu_e2e_step.py --variants fp16,e5m2 --layers 8
    python benchmarks/gpu_e2e_step.py --tiny --device cpu      # smoke test (eager steps, no graph)

Why: compiled generate() hides the model (docs/decisions.md, "GPU: the whole model"): transformers'
decode loop spends ~2 ms of host time a token (about 69 eager launches of its own and a host
sync), longer than an 8-layer model's whole device step, so every variant ran at the host's
pace. This script times what a serving loop that keeps the host off the critical path gets: the
model's forward for one token (attention over the static cache, norms, rotary, every linear and
the lm_head) captured once with torch.cuda.graph and replayed. No torch.compile: the capture
takes seconds at 32 layers where compiling did not finish inside a device step.

Method. Each variant's model is built from the same seed on the device, converted in place by
softfp8.quantize_model (backend forced, SOFTFP8_BACKEND=triton by default: the software-decode
path), given a StaticCache, prefilled with the prompt, and its next-token step captured. The
graph's logits are checked against an eager forward of the same step (the cache's write counter
put back between the two, so both write the same slot with the same values); a variant that
fails is reported and left out, the others timed (exit status 1). All variants stay resident;
timing rounds interleave them (--rounds, each --replays graph replays between two CUDA events)
and the median round counts.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_e2e_generate import VARIANTS, build_model, versions  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--backend", default="triton", help="softfp8 backend for the formats")
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--prompt", type=int, default=64, help="tokens in the cache before the step")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--replays", type=int, default=20, help="graph replays a timed round")
    p.add_argument("--device", default="cuda")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the forward (inductor fuses the norms, rotary and "
                        "attention glue) before the capture")
    p.add_argument("--profile", type=int, default=0, metavar="TOP",
                   help="after timing, each variant's kernels under torch.profiler (10 replays): "
                        "the TOP by device time a step")
    p.add_argument("--pdl-modes", default="",
                   help="comma list of PDL modes (off, late, early: launch_settings(pdl=)): "
                        "each format's step "
                        "captured once per mode, same model, same process (default: as set)")
    p.add_argument("--tiny", action="store_true", help="a 2-layer model (tests of this script)")
    p.add_argument("--json", default="", help="receipt path")
    return p.parse_args(argv)


class Step:
    """A model with a prefilled static cache and its next-token forward as a callable."""

    def __init__(self, model, forward, args, torch, transformers):
        self.forward, self.torch = forward, torch
        # Newer transformers' StaticCache writes at its own counter (a device tensor that each
        # forward, replays included, advances), so the cache holds every step this script runs;
        # attention reads the whole static buffer either way, as generate()'s does.
        self.budget = args.rounds * args.replays + 32  # + warm-up, capture, check, profile
        cache = transformers.StaticCache(config=model.config,
                                         max_cache_len=args.prompt + self.budget)
        dev = args.device
        ids = torch.randint(100, 200, (1, args.prompt), device=dev,
                            generator=torch.Generator(dev).manual_seed(1))
        with torch.no_grad():
            model(ids, past_key_values=cache, cache_position=torch.arange(args.prompt, device=dev),
                  use_cache=True)
        self.cache = cache
        self.token = torch.full((1, 1), 123, device=dev, dtype=torch.long)
        self.position = torch.full((1,), args.prompt, device=dev, dtype=torch.long)
        self.graph = None

    def counters(self) -> list:
        """The cache's write counters where it keeps them (see __init__), else []."""
        layers = getattr(self.cache, "layers", [])
        return [c for c in (getattr(layer, "cumulative_length", None) for layer in layers)
                if isinstance(c, self.torch.Tensor)]

    def _spend(self) -> None:
        """Count one step against the cache's size: past the static buffer's end the cache's
        index_copy_ would fault the device."""
        self.budget -= 1
        if self.budget < 0:
            raise RuntimeError("Step: more steps than the cache was sized for")

    def eager(self):
        self._spend()
        with self.torch.no_grad():
            return self.forward(self.token, past_key_values=self.cache,
                              cache_position=self.position, position_ids=self.position[None],
                              use_cache=True).logits

    def capture(self):
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the default stream, as capture wants
            for _ in range(3):
                self.eager()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self.eager()

    def run(self):
        if self.graph is None:
            return self.eager()
        self._spend()
        self.graph.replay()
        return self.logits


def time_round(step, replays, torch, cuda) -> float:
    """Seconds a step, `replays` steps back to back."""
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            step.run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / replays
    t0 = time.perf_counter()
    for _ in range(replays):
        step.run()
    return (time.perf_counter() - t0) / replays


class StepMismatch(ValueError):
    """A captured step whose logits are not the eager step's."""


def check_and_capture(step, cuda) -> float:
    """Capture the step (CUDA) and return its logits' relative distance from an eager step."""
    if cuda:
        step.capture()
    saved = [c.clone() for c in step.counters()]
    eager = step.eager().float()
    for c, v in zip(step.counters(), saved):  # the same cache slot again, same values
        c.copy_(v)
    replayed = step.run().float()
    err = ((replayed - eager).norm() / eager.norm()).item()
    # The graph must compute the eager step (NaN fails too). Not to the bit: cuBLAS and
    # attention may pick other algorithms under capture, and 32 layers of random weights
    # magnify a last-bit difference (fp16 itself: 2.0e-3 at 32 layers, `graph11`; the softfp8
    # kernels alone give the eager bits, tests/test_gpu_graphs.py). A wrong graph (another
    # cache slot: 0.147 on the 2-layer CPU model) is far off.
    if not (err < 0.02):
        raise StepMismatch(f"graph logits differ from eager by {err:.3g}")
    return err


def profile_kernels(variant, step, top, torch, cuda, replays=10) -> None:
    """Kernels of `replays` steps by device time a step (CPU: ops by CPU time). Under PDL a
    kernel's time can include its wait on the one before, so the sum may pass the step."""
    from torch.profiler import ProfilerActivity, profile

    from gpu_e2e_profile import kernel_times

    acts = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    with profile(activities=acts) as prof:
        for _ in range(replays):
            step.run()
        if cuda:
            torch.cuda.synchronize()
    per = kernel_times(prof, cuda)
    total = sum(v[1] for v in per.values())
    calls = sum(v[0] for v in per.values())
    print(f"## {variant}: {calls / replays:.0f} kernels a step, {total / replays / 1e3:.3f} ms of "
          f"kernel time a step")
    for name, (n, us) in sorted(per.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{us / replays:9.1f} us {n / replays:6.1f}x  {name[:100]}")


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ["SOFTFP8_BACKEND"] = args.backend  # before softfp8 reads it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's softfp8
    import torch
    import transformers

    import softfp8
    from softfp8.convert import model_bytes

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"--variants: unknown {v!r}; expected some of {', '.join(VARIANTS)}")
    cuda = args.device.startswith("cuda")
    gpu = torch.cuda.get_device_name(args.device) if cuda else "cpu (eager steps, no graph)"
    header = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "gpu": gpu,
              "versions": versions(torch), "command": " ".join([sys.executable, *sys.argv]),
              "SOFTFP8_BACKEND": args.backend,
              "model": "tiny llama" if args.tiny else f"llama-7b shapes, {args.layers} layers, fp16",
              "method": f"one decode step (batch 1, {args.prompt} tokens cached"
                        f"{', torch.compile' if args.compile else ''}) as a CUDA graph; "
                        f"median of {args.rounds} interleaved rounds of {args.replays} replays"}
    for key, value in header.items():
        print(f"# {key}: {value}", flush=True)
    steps, info, failed = {}, {}, {}
    modes = [m.strip() for m in args.pdl_modes.split(",") if m.strip()]
    for variant in variants:
        model = build_model(args, torch, transformers)
        weights = model_bytes(model)
        if variant != "fp16":
            weights = softfp8.quantize_model(model, variant, progress=False,
                                             backend=args.backend).bytes_after
        forward = torch.compile(model, fullgraph=True) if args.compile else model
        for mode in (modes if modes and variant != "fp16" else [None]):
            label = variant if mode is None else f"{variant}/pdl={mode}"
            # planned when the step's kernels are launched, i.e. captured
            settings = {} if mode is None else {"pdl": mode}
            try:
                with softfp8.launch_settings(**settings):
                    step = Step(model, forward, args, torch, transformers)
                    err = check_and_capture(step, cuda)
            except Exception as exc:  # one variant's failure must not lose the others' rows
                failed[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                print(f"# {label}: FAILED: {failed[label]}", flush=True)
                continue
            steps[label] = step
            info[label] = {"weight_bytes": weights, "graph_vs_eager": err, "pdl": mode}
            print(f"# {label}: built, {weights / 1e9:.2f} GB of weights, graph vs eager "
                  f"{err:.1e}", flush=True)
    variants = list(steps)
    times = {v: [] for v in variants}
    for _ in range(args.rounds):
        for v in variants:
            times[v].append(time_round(steps[v], args.replays, torch, cuda))
    base = statistics.median(times["fp16"]) if "fp16" in times and times["fp16"] else None
    print(f"{'variant':15s} {'ms/step':>8s} {'min':>7s} {'max':>7s} {'x fp16':>7s} "
          f"{'weights GB':>10s} {'GB/s':>7s}")
    rows = []
    for v in variants:
        med = statistics.median(times[v])
        row = {"variant": v, "ms_per_step": med * 1e3, "min_ms": min(times[v]) * 1e3,
               "max_ms": max(times[v]) * 1e3, "speedup_vs_fp16": base / med if base else None,
               **info[v]}
        rows.append(row)
        speed = f"{base / med:7.2f}" if base else f"{'-':>7s}"
        print(f"{v:15s} {med * 1e3:8.3f} {min(times[v]) * 1e3:7.3f} {max(times[v]) * 1e3:7.3f} "
              f"{speed} {info[v]['weight_bytes'] / 1e9:10.2f} "
              f"{info[v]['weight_bytes'] / med / 1e9:7.0f}", flush=True)
    if args.profile:
        for v in variants:
            profile_kernels(v, steps[v], args.profile, torch, cuda)
    for label, why in failed.items():
        print(f"{label:15s} FAILED: {why}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({**header, "rows": rows, "failed": failed},
                                              indent=1))
        print(f"# receipt: {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
