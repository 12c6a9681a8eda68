"""Decode tokens/s of a 7B-shaped Llama (random fp16 weights, nothing downloaded): fp16 against
each softfp8 format, eager and with static cache + CUDA graphs (torch.compile "reduce-overhead"
through transformers' generate), on one GPU.

    python benchmarks/gpu_e2e_generate.py                       # all variants, both modes
    python benchmarks/gpu_e2e_generate.py --variants fp16,e5m2  # a subset (each compile ~1 min)
    python benchmarks/gpu_e2e_generate.py --tiny --device cpu   # smoke test of the script itself

Method. For each variant the fp16 model is built from the same seed directly on the device,
its prompt logits kept, then (for a format) converted in place by softfp8.quantize_model with
the backend forced (SOFTFP8_BACKEND=triton by default: the software-decode path), and its logits
error against fp16 measured. Decode speed is (T_long - T_short) / (n_long - n_short) of two
greedy generate() calls that differ only in max_new_tokens, so prefill and per-call overheads
cancel; timing starts after two warm-up pairs of such calls, or more (up to six) while a pair
still records a CUDA graph, and the row says how many graphs were recorded in timed calls. If
compilation fails, the row falls back to static cache without compile and then eager, and says
so in its "mode" column.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

VARIANTS = ("fp16", "e5m2", "e4m3", "nvfp4", "mxfp4")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--modes", default="eager,static-compile",
                   help="comma list of eager, static, static-compile")
    p.add_argument("--backend", default="triton", help="softfp8 backend for the formats")
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    p.add_argument("--short", type=int, default=16, help="new tokens of the short call")
    p.add_argument("--long", type=int, default=144, help="new tokens of the long call")
    p.add_argument("--repeats", type=int, default=3, help="timed pairs per row (median)")
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--skip-lm-head", action="store_true", help="keep lm_head in fp16")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="a 2-layer model (tests of this script)")
    p.add_argument("--json", default="receipts/e2e_generate.json", help="receipt path ('' for none)")
    p.add_argument("--log-calls", action="store_true",
                   help="lines on stderr around each generate() call (with the static caches "
                        "still alive at its start), at each CUDA-graph recording, and for each "
                        "failed replay check with the inputs that moved")
    p.add_argument("--gc-each-call", action="store_true",
                   help="gc.collect() before each generate() call (is a cache left for the "
                        "cyclic collector what moves the next one?)")
    return p.parse_args(argv)


def build_model(args, torch, transformers):
    """The fp16 Llama, built on the device (no fp32 or CPU copy), random weights from a seed."""
    if args.tiny:
        shape = dict(hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, vocab_size=256)
    else:  # Llama-2-7B's shapes
        shape = dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=args.layers,
                     num_attention_heads=32, num_key_value_heads=32, vocab_size=32000)
    config = transformers.LlamaConfig(**shape, max_position_embeddings=4096,
                                      tie_word_embeddings=False)
    dtype = torch.float16 if args.device != "cpu" else torch.float32
    torch.manual_seed(0)
    with torch.device(args.device):
        model = transformers.LlamaForCausalLM._from_config(config, dtype=dtype)
    return model.eval()


def sync(torch, device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


LOG_CALLS = False
GC_EACH_CALL = False
CACHES: list = []  # weak references to every transformers StaticCache made (--log-calls)


def generate_seconds(model, ids, new_tokens, kwargs, torch, device) -> float:
    if GC_EACH_CALL:
        gc.collect()
    sync(torch, device)
    if LOG_CALLS:
        alive = sum(ref() is not None for ref in CACHES)
        print(f"## generate({new_tokens} new tokens) start; static caches alive: {alive} of "
              f"{len(CACHES)} made", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                         max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0,
                         **kwargs)
    sync(torch, device)
    assert out.shape[1] == ids.shape[1] + new_tokens
    seconds = time.perf_counter() - t0
    if LOG_CALLS:
        print(f"## generate({new_tokens} new tokens) {seconds * 1e3:.1f} ms", file=sys.stderr,
              flush=True)
    return seconds


RECORDINGS = [0]
"""CUDA graphs torch's graph trees have recorded in this process (counted on a GPU)."""
WARMUP_PAIRS = (2, 6)
"""Warm-up (short, long) pairs: at least 2, then until a pair records no CUDA graph, at most 6.
Why: transformers makes a new static cache every generate() call, and where it lands can differ
from the recorded graph's (NVFP4's third call moved four layers' caches, `rerec14b`), so a
recording could fall inside a timed call."""


def install_graph_hooks(torch, verbose: bool) -> None:
    """Count each CUDA-graph recording of torch's cudagraph trees (RECORDINGS). verbose: also
    print it, and each failed replay check (which leads to a new recording unless another
    recorded graph matches) with its status and the inputs whose data pointer moved since the
    recording. TORCH_LOGS=+cudagraphs computes that reason too, but in torch 2.11 it asserts
    when the graph has partitions (`length mismatch between inputs, recorded_data_ptr, and
    placeholders`), and the benchmark then loses its compiled row."""
    from torch._inductor import cudagraph_trees as trees

    check, record = trees.CUDAGraphNode.check_invariants, trees.CUDAGraphTreeManager.record_function

    def probed_check(self, inputs):
        before = [(t.data_ptr(), tuple(t.shape), str(t.dtype).replace("torch.", ""))
                  if isinstance(t, torch.Tensor) else None for t in inputs]
        status, reason = check(self, inputs)
        if status != trees.CheckInvariantStatus.SUCCESS:
            recorded = self.static_input_data_ptrs
            kind = ["static" if i in self.static_input_idxs else "managed"
                    for i in range(len(before))]
            moved = [f"[{i}] {shape} {dtype} {kind[i]}"
                     for i, item in enumerate(before) if item is not None
                     and i < len(recorded) and recorded[i] is not None
                     for ptr, shape, dtype in [item] if ptr != recorded[i]]
            print(f"## replay check failed: {status.name}; {len(moved)} inputs moved: "
                  f"{'; '.join(moved[:12])}", file=sys.stderr, flush=True)
        return status, reason

    def counted_record(self, new_inputs, function_id):
        RECORDINGS[0] += 1
        if verbose:
            print(f"## recording a CUDA graph ({len(new_inputs)} inputs)", file=sys.stderr,
                  flush=True)
        return record(self, new_inputs, function_id)

    trees.CUDAGraphTreeManager.record_function = counted_record
    if verbose:
        trees.CUDAGraphNode.check_invariants = probed_check
        track_static_caches()


def track_static_caches() -> None:
    """Keep a weak reference to every transformers StaticCache made (CACHES): generate() makes
    one a call, and one still alive when the next call's prefill allocates its own (a
    reference cycle left for the cyclic collector, say) changes where the new one lands."""
    import weakref

    from transformers import cache_utils

    init = cache_utils.StaticCache.__init__

    def tracked_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        CACHES.append(weakref.ref(self))

    cache_utils.StaticCache.__init__ = tracked_init


def mode_kwargs(mode: str, transformers) -> dict:
    if mode == "eager":
        return {"disable_compile": True}
    if mode == "static":
        return {"cache_implementation": "static", "disable_compile": True}
    if mode == "static-compile":
        config = transformers.CompileConfig(fullgraph=True, mode="reduce-overhead")
        # _compile_all_devices lets the smoke test compile on a CPU; a GPU compiles anyway.
        config._compile_all_devices = True
        return {"cache_implementation": "static", "compile_config": config}
    raise ValueError(f"--modes: unknown mode {mode!r}; expected eager, static or static-compile")


def decode_rate(model, ids, mode, args, torch, transformers):
    """(tokens/s, ms/token, what actually ran, {warm-up pairs, CUDA graphs recorded in timed
    calls}) with fallbacks when compilation fails."""
    import statistics

    attempts = [mode] + (["static", "eager"] if mode == "static-compile" else [])
    notes = []
    for attempt in attempts:
        kwargs = mode_kwargs(attempt, transformers)
        try:
            pairs = 0  # warm-up: compile, capture graphs, autotune (WARMUP_PAIRS)
            while True:
                before = RECORDINGS[0]
                generate_seconds(model, ids, args.short, kwargs, torch, args.device)
                generate_seconds(model, ids, args.long, kwargs, torch, args.device)
                pairs += 1
                if pairs >= WARMUP_PAIRS[1] or (pairs >= WARMUP_PAIRS[0]
                                                 and RECORDINGS[0] == before):
                    break
            before = RECORDINGS[0]
            per_token = []
            for _ in range(args.repeats):
                t_short = generate_seconds(model, ids, args.short, kwargs, torch, args.device)
                t_long = generate_seconds(model, ids, args.long, kwargs, torch, args.device)
                per_token.append((t_long - t_short) / (args.long - args.short))
            s = statistics.median(per_token)
            warm = {"warmup_pairs": pairs, "graphs_recorded_timed": RECORDINGS[0] - before}
            if s <= 0:  # the longer call was not slower: noise, not a speed
                return float("nan"), float("nan"), "; ".join(
                    [*notes, f"{attempt}: T_long <= T_short (timing noise), no rate"]), warm
            compiled = getattr(model, "_compiled_call", None) is not None
            ran = attempt + ("" if attempt != "static-compile" or compiled
                             else " (transformers did not compile)")
            return 1.0 / s, s * 1e3, "; ".join([*notes, ran]), warm
        except Exception as err:  # keep going: a failed compile must not lose the table
            notes.append(f"{attempt} failed: {type(err).__name__}: {str(err).splitlines()[0][:120]}"
                         if str(err) else f"{attempt} failed: {type(err).__name__}")
            traceback.print_exc(limit=3)
            torch._dynamo.reset()
    return float("nan"), float("nan"), "; ".join(notes), {}


def versions(torch) -> dict:
    found = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("triton", "transformers", "softfp8"):
        try:
            found[name] = __import__(name).__version__
        except Exception:
            found[name] = None
    return found


def main(argv=None) -> int:
    global LOG_CALLS, GC_EACH_CALL
    args = parse_args(argv)
    LOG_CALLS, GC_EACH_CALL = args.log_calls, args.gc_each_call
    os.environ["SOFTFP8_BACKEND"] = args.backend  # before softfp8 reads it; the software path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's softfp8
    import torch
    import transformers

    if args.device.startswith("cuda"):
        install_graph_hooks(torch, verbose=args.log_calls)
    elif args.log_calls:
        track_static_caches()
    import softfp8
    from softfp8.convert import model_bytes

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"--variants: unknown {v!r}; expected some of {', '.join(VARIANTS)}")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        mode_kwargs(m, transformers)
    gpu = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else \
        platform.processor() or platform.machine()
    header = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "gpu": gpu,
              "versions": versions(torch), "command": " ".join([sys.executable, *sys.argv]),
              "SOFTFP8_BACKEND": args.backend,
              "model": "tiny llama" if args.tiny else f"llama-7b shapes, {args.layers} layers, fp16",
              "method": f"decode tok/s = ({args.long}-{args.short}) tokens / (T_long - T_short), "
                        f"prompt {args.prompt}, batch 1, greedy, median of {args.repeats}"}
    for key, value in header.items():
        print(f"# {key}: {value}")
    rows = []
    print(f"{'variant':8s} {'mode':16s} {'tok/s':>8s} {'ms/tok':>8s} {'weights GB':>10s} "
          f"{'peak GB':>8s} {'logits err':>10s}  backend / notes", flush=True)
    for variant in variants:
        model = build_model(args, torch, transformers)
        ids = torch.randint(100, 200, (1, args.prompt), device=args.device,
                            generator=torch.Generator(args.device).manual_seed(1))
        with torch.no_grad():
            ref = model(ids).logits.float()
        err, backend = 0.0, "cuBLAS"
        if variant != "fp16":
            summary = softfp8.quantize_model(model, variant, progress=False, backend=args.backend,
                                             skip="lm_head" if args.skip_lm_head else None)
            backend = model.model.layers[0].mlp.down_proj.selected_backend(1)
            with torch.no_grad():
                logits = model(ids).logits.float()
            err = ((logits - ref).norm() / ref.norm()).item()
            weights = summary.bytes_after
        else:
            weights = model_bytes(model)
        for mode in modes:
            torch._dynamo.reset()
            if args.device.startswith("cuda"):
                torch.cuda.reset_peak_memory_stats()
            tok_s, ms, ran, warm = decode_rate(model, ids, mode, args, torch, transformers)
            peak = torch.cuda.max_memory_allocated() / 1e9 if args.device.startswith("cuda") \
                else float("nan")
            row = {"variant": variant, "mode": mode, "ran": ran, "tok_s": tok_s, "ms_per_token": ms,
                   "weight_bytes": weights, "peak_gb": peak, "logits_rel_err": err,
                   "backend": backend, **warm}
            rows.append(row)
            graphs = (f"; warm-up {warm['warmup_pairs']} pairs, "
                      f"{warm['graphs_recorded_timed']} graphs recorded in timed calls"
                      if warm and args.device.startswith("cuda") else "")
            print(f"{variant:8s} {mode:16s} {tok_s:8.1f} {ms:8.2f} {weights / 1e9:10.2f} "
                  f"{peak:8.1f} {err:10.2%}  {backend}; {ran}{graphs}", flush=True)
        del model, ref
        gc.collect()
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**header, "rows": rows}, indent=2) + "\n")
        print(f"# receipt: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
