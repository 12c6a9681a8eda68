"""`softfp8-bench generate` and `softfp8-bench calls`: what a transformers user gets.

generate: a transformers Llama built from a config preset (random weights from a seed, nothing
downloaded), fp16 (CPU: bf16) and each format converted in place by `softfp8.quantize_model`,
decoded by `model.generate()` in each mode, all in one process:
- eager: the default dynamic cache, nothing compiled;
- static: `cache_implementation="static"`, transformers compiling the step itself (its default
  compile config: `torch.compile(..., mode="reduce-overhead", fullgraph=True)`: CUDA graphs);
- static-eager: the static cache without compile (shows what the graphs remove).
Decode tok/s = (long - short) new tokens / (T_long - T_short) of two greedy calls that differ only
in max_new_tokens, so prefill and per-call setup cancel; after warm-up pairs until a pair records
no CUDA graph. Each row also says how many CUDA graphs were recorded in timed calls (should be 0)
and the peak GPU memory.

calls: host time of one eager batch-1 linear (a 4096 x 4096 layer by default) issued back to
back, fp16 `F.linear` against a `softfp8.Linear` per format, the FP8 formats with the integer
and (where the GPU has it) the hardware decode; the fastest of interleaved rounds, us a call; then
a profile of the E5M2 layer's calls (where the host time goes).
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import io
import math
import os
import pstats
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..formats import Format
from . import report
from ._device_arg import _device

LLAMA_PRESETS = {
    "llama2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, vocab_size=32000),
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                      rope_theta=500000.0),
    "llama-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                     num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                     rope_theta=500000.0),
    "tiny": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                 num_attention_heads=8, num_key_value_heads=8, vocab_size=4096),
}
"""transformers LlamaConfig fields of each `generate` preset (tiny: the CPU default)."""

MODES = ("eager", "static", "static-eager")
RECORDINGS = [0]
"""CUDA graphs torch's graph trees have recorded in this process (`_count_recordings`)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="softfp8-bench generate|calls", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="tok/s of transformers generate(), fp16 vs each format")
    g.add_argument("--preset", choices=sorted(LLAMA_PRESETS),
                   help="model shapes (default: llama2-7b on a GPU, tiny on the CPU)")
    g.add_argument("--layers", type=int, help="decoder layers (default: the preset's)")
    g.add_argument("--formats", default="e5m2,e4m3,nvfp4,mxfp4")
    g.add_argument("--modes", default="eager,static",
                   help=f"comma list of {', '.join(MODES)}")
    g.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    g.add_argument("--short", type=int, default=8, help="new tokens of the short call")
    g.add_argument("--long", type=int, default=72, help="new tokens of the long call "
                   "(long - short = 64 timed tokens by default)")
    g.add_argument("--repeats", type=int, default=2, help="timed pairs per row (median)")
    g.add_argument("--gpu-time", action="store_true", help="also the GPU's busy time per token "
                   "(torch.profiler over one more pair, after every timed row): what the loop around the step costs")
    c = sub.add_parser("calls", help="host time of one eager batch-1 linear, fp16 vs softfp8")
    c.add_argument("--shape", default="4096,4096", help="N,K of the layer")
    c.add_argument("--formats", default="e5m2,e4m3,nvfp4,mxfp4")
    c.add_argument("--calls", type=int, default=200, help="calls a round")
    c.add_argument("--rounds", type=int, default=10, help="interleaved rounds (fastest kept)")
    for q in (g, c):
        q.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
        q.add_argument("--backend", default="auto", help="softfp8 backend for the formats")
        q.add_argument("--out", type=Path, help="receipt path (default receipts/bench-<cmd>.json)")
    return p


def _formats(text: str) -> list[Format]:
    return [Format.parse(f.strip(), arg="--formats") for f in text.split(",") if f.strip()]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# -- generate ------------------------------------------------------------------------------------

def _count_recordings() -> None:
    """Count each CUDA-graph recording of torch's cudagraph trees (RECORDINGS); private API,
    so a torch without it leaves the count at zero (the receipt says "unknown")."""
    try:
        from torch._inductor import cudagraph_trees as trees
    except ImportError:
        return
    record = trees.CUDAGraphTreeManager.record_function
    if getattr(record, "_softfp8_counted", False):
        return

    def counted(self, new_inputs, function_id):
        RECORDINGS[0] += 1
        return record(self, new_inputs, function_id)

    counted._softfp8_counted = True
    trees.CUDAGraphTreeManager.record_function = counted


def build_model(preset: str, layers: int | None, dtype: torch.dtype, device: torch.device):
    """A LlamaForCausalLM of the preset's shapes with random weights from seed 0, built on the
    device (no full-precision copy anywhere else)."""
    import transformers

    shape = dict(LLAMA_PRESETS[preset])
    if layers:
        shape["num_hidden_layers"] = layers
    config = transformers.LlamaConfig(**shape, max_position_embeddings=4096,
                                      tie_word_embeddings=False)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.LlamaForCausalLM._from_config(config, dtype=dtype)
    return model.eval()


def _mode_kwargs(mode: str) -> dict:
    if mode == "eager":
        return {"disable_compile": True}
    if mode == "static":
        import transformers

        config = transformers.CompileConfig(fullgraph=True, mode="reduce-overhead")
        config._compile_all_devices = True  # transformers compiles on GPUs only otherwise
        return {"cache_implementation": "static", "compile_config": config}
    if mode == "static-eager":
        return {"cache_implementation": "static", "disable_compile": True}
    raise SystemExit(f"--modes: unknown mode {mode!r}; expected some of {', '.join(MODES)}")


def _generate_seconds(model, ids, new_tokens: int, kwargs: dict, device) -> float:
    _sync(device)
    t0 = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                         max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0,
                         **kwargs)
    _sync(device)
    if out.shape[1] != ids.shape[1] + new_tokens:
        raise RuntimeError(f"generate() returned {out.shape[1] - ids.shape[1]} new tokens, "
                           f"expected {new_tokens}")
    return time.perf_counter() - t0


def _decode_rate(model, ids, mode: str, args, device) -> dict:
    kwargs = _mode_kwargs(mode)
    pairs = 0
    while True:  # warm-up: compile, record graphs; until a pair records none (2..6 pairs)
        before = RECORDINGS[0]
        _generate_seconds(model, ids, args.short, kwargs, device)
        _generate_seconds(model, ids, args.long, kwargs, device)
        pairs += 1
        if pairs >= 6 or (pairs >= 2 and RECORDINGS[0] == before):
            break
    before = RECORDINGS[0]
    per_token, calls = [], []
    for _ in range(args.repeats):
        t_short = _generate_seconds(model, ids, args.short, kwargs, device)
        t_long = _generate_seconds(model, ids, args.long, kwargs, device)
        per_token.append((t_long - t_short) / (args.long - args.short))
        calls.append(t_long)
    s = statistics.median(per_token)
    out = {"tok_per_s": 1.0 / s if s > 0 else float("nan"), "ms_per_token": s * 1e3,
           "call_tok_per_s": args.long / statistics.median(calls), "warmup_pairs": pairs,
           "graphs_recorded_timed": RECORDINGS[0] - before if device.type == "cuda" else None}
    return out


def _gpu_busy_per_token(model, ids, mode: str, args, device) -> float:
    """GPU busy ms a token of `mode` (the long call's minus the short call's, each profiled
    after one warm-up pair). Run after every timed row: a torch.profiler session with CUDA
    activity leaves the process slower to launch kernels afterwards, and an eager row timed
    after one is host time the profiler added."""
    kwargs = _mode_kwargs(mode)
    _generate_seconds(model, ids, args.short, kwargs, device)
    _generate_seconds(model, ids, args.long, kwargs, device)
    busy = [_gpu_busy_ms(model, ids, n, kwargs, device) for n in (args.short, args.long)]
    return (busy[1] - busy[0]) / (args.long - args.short)


def _gpu_busy_ms(model, ids, new_tokens: int, kwargs: dict, device) -> float:
    """Milliseconds the GPU spent in kernels during one generate() call (torch.profiler's
    device self time, summed): against the wall time per token, what the loop leaves idle."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        _generate_seconds(model, ids, new_tokens, kwargs, device)
    return sum(e.self_device_time_total for e in prof.key_averages()) / 1e3


def generate_cmd(args) -> tuple[list[dict], dict]:
    import softfp8
    from softfp8.convert import model_bytes

    device = _device(args.device)
    cuda = device.type == "cuda"
    preset = args.preset or ("llama2-7b" if cuda else "tiny")
    base_dtype = torch.float16 if cuda else torch.bfloat16
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        _mode_kwargs(m)
    if cuda:
        _count_recordings()
    variants = ["fp16" if cuda else "bf16"] + [f.value for f in _formats(args.formats)]
    rows = []
    print(f"{'variant':8s} {'mode':13s} {'tok/s':>8s} {'x base':>7s} {'ms/tok':>8s} "
          f"{'weights GB':>10s} {'peak GB':>8s} {'logits err':>10s}  notes", flush=True)
    base: dict[str, float] = {}
    def variant_model(variant):
        model = build_model(preset, args.layers, base_dtype, device)
        ids = torch.randint(100, 200, (1, args.prompt), device=device,
                            generator=torch.Generator(device).manual_seed(1))
        with torch.no_grad():
            ref = model(ids).logits.float()
        err = 0.0
        if variant in ("fp16", "bf16"):
            weights = model_bytes(model)
        else:
            summary = softfp8.quantize_model(model, variant, backend=args.backend,
                                             progress=False)
            weights = summary.bytes_after
            with torch.no_grad():
                err = ((model(ids).logits.float() - ref).norm() / ref.norm()).item()
        return model, ids, ref, weights, err

    for variant in variants:
        model, ids, ref, weights, err = variant_model(variant)
        for mode in modes:
            torch._dynamo.reset()
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            row = {"variant": variant, "mode": mode, "preset": preset, "weight_bytes": weights,
                   "logits_rel_err": err}
            try:
                row.update(_decode_rate(model, ids, mode, args, device))
            except Exception as exc:  # one mode failing must not lose the table
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                traceback.print_exc(limit=4)
            row["peak_gpu_bytes"] = torch.cuda.max_memory_allocated(device) if cuda else None
            rate = row.get("tok_per_s", float("nan"))
            if variant in ("fp16", "bf16") and math.isfinite(rate):
                base[mode] = rate
            if mode in base and math.isfinite(rate):
                row["speedup_vs_base"] = rate / base[mode]
            rows.append(row)
            peak = row["peak_gpu_bytes"] / 1e9 if row["peak_gpu_bytes"] else float("nan")
            note = row.get("error") or f"warm-up {row['warmup_pairs']} pairs"
            if row.get("graphs_recorded_timed") is not None:
                note += f", {row['graphs_recorded_timed']} graphs recorded in timed calls"
            print(f"{variant:8s} {mode:13s} {row.get('tok_per_s', float('nan')):8.1f} "
                  f"{row.get('speedup_vs_base', float('nan')):7.2f} "
                  f"{row.get('ms_per_token', float('nan')):8.2f} {weights / 1e9:10.2f} "
                  f"{peak:8.1f} {err:10.2%}  {note}", flush=True)
        del model, ref
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    if cuda and getattr(args, "gpu_time", False):  # after every timed row (_gpu_busy_per_token)
        for variant in variants:
            model, ids, ref, *_ = variant_model(variant)
            for mode in modes:
                torch._dynamo.reset()
                busy = _gpu_busy_per_token(model, ids, mode, args, device)
                for row in rows:
                    if row["variant"] == variant and row["mode"] == mode:
                        row["gpu_busy_ms_per_token"] = busy
                print(f"{variant:8s} {mode:13s} GPU busy {busy:.2f} ms/token", flush=True)
            del model, ref
            gc.collect()
            torch.cuda.empty_cache()
    return rows, {"preset": preset, "modes": modes, "base_dtype": str(base_dtype),
                  "method": f"decode tok/s = ({args.long} - {args.short}) tokens / "
                            f"(T_long - T_short), prompt {args.prompt}, batch 1, greedy, "
                            f"median of {args.repeats} pairs"}


# -- calls ---------------------------------------------------------------------------------------

def _round_us(fn, x, calls: int, device) -> float:
    _sync(device)
    t = time.perf_counter()
    for _ in range(calls):
        fn(x)
    t = time.perf_counter() - t
    _sync(device)
    return t / calls * 1e6


def _fp8_decode(value: str | None):
    """The launch settings with this FP8 decode (`softfp8.launch_settings`); None: as they are."""
    from .. import launch_settings

    return launch_settings() if value is None else launch_settings(fp8_decode=value)


def calls_cmd(args) -> tuple[list[dict], dict]:
    import softfp8

    device = _device(args.device)
    cuda = device.type == "cuda"
    n, k = (int(v) for v in args.shape.split(","))
    dtype = torch.float16 if cuda else torch.float32
    torch.manual_seed(0)
    dense = nn.Linear(k, n, bias=False, device=device, dtype=dtype)
    x = torch.randn(1, k, device=device, dtype=dtype)
    cells: list[tuple[str, str | None, object]] = [("fp16 F.linear" if cuda else "fp32 F.linear",
                                                    None, lambda t: F.linear(t, dense.weight))]
    decodes = [None]
    if cuda:
        decodes = ["integer"]
        if softfp8.probe().device(device) is not None and torch.cuda.get_device_capability(
                device) >= (8, 9):
            decodes.append("hardware")
    for fmt in _formats(args.formats):
        layer = softfp8.Linear.from_linear(dense, fmt, backend=args.backend)
        fp8 = fmt in (Format.E5M2, Format.E4M3)
        for decode in (decodes if fp8 else [None]):
            label = f"{fmt} Linear" + (f" ({decode})" if decode else "")
            cells.append((label, decode, layer))
    for _, decode, fn in cells:  # warm-up: compile, record, first-call work
        with _fp8_decode(decode), torch.no_grad():
            for _ in range(20):
                fn(x)
    best = {label: float("inf") for label, _, _ in cells}
    with torch.no_grad():
        for _ in range(args.rounds):
            for label, decode, fn in cells:
                with _fp8_decode(decode):
                    best[label] = min(best[label], _round_us(fn, x, args.calls, device))
    base = best[cells[0][0]]
    rows = [{"impl": label, "us_per_call": best[label], "vs_base": best[label] / base}
            for label, _, _ in cells]
    print(f"{'impl':28s} {'us/call':>8s} {'x base':>7s}")
    for r in rows:
        print(f"{r['impl']:28s} {r['us_per_call']:8.1f} {r['vs_base']:7.2f}")
    profile = ""
    e5m2 = next((fn for label, d, fn in cells if label.startswith("e5m2")), None)
    if e5m2 is not None:
        prof = cProfile.Profile()
        with torch.no_grad(), _fp8_decode(decodes[0]):
            prof.enable()
            for _ in range(args.calls):
                e5m2(x)
            prof.disable()
        _sync(device)
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
        profile = buf.getvalue()
        print(f"\nwhere an E5M2 call's host time goes (cProfile, {args.calls} calls, tottime):")
        print("\n".join(profile.splitlines()[:30]))
    return rows, {"shape": [n, k], "calls": args.calls, "rounds": args.rounds,
                  "method": "fastest of interleaved rounds of back-to-back calls, us a call",
                  "profile": profile}


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    t0 = time.perf_counter()
    rows, body = (generate_cmd if args.command == "generate" else calls_cmd)(args)
    device = _device(args.device)
    receipt = {"subcommand": args.command, "command": "softfp8-bench " + " ".join(argv),
               **report.environment(device), "seconds": time.perf_counter() - t0,
               "backend": args.backend,
               "SOFTFP8_FP8_DECODE": os.environ.get("SOFTFP8_FP8_DECODE"), **body, "rows": rows}
    try:
        import transformers
        receipt.setdefault("versions", {})
        if isinstance(receipt["versions"], dict):
            receipt["versions"]["transformers"] = transformers.__version__
    except ImportError:
        pass
    out = args.out or Path("receipts") / f"bench-{args.command}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    report.write_receipt(out, receipt)
    print(f"receipt: {out} ({receipt['seconds']:.1f} s)", file=sys.stderr)
    return 1 if any("error" in r for r in rows) else 0
