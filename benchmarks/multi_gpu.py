"""A Llama split over two GPUs: accelerate's device_map (layers on both cards, CPU offload) and
tensor parallelism (softfp8.tensor_parallel, one process per GPU, NCCL). Random weights from a
seed, nothing downloaded.

    python benchmarks/multi_gpu.py --out $OUT          # both parts (it starts torchrun itself)
    python benchmarks/multi_gpu.py --part device-map   # one part
    torchrun --nproc-per-node 2 benchmarks/multi_gpu.py --part tp
    python benchmarks/multi_gpu.py --tiny --device cpu # the script's own logic on a CPU

Checks, each on a small model (--check-shape), greedy, softfp8's reference backend (torch):
  device_map  the model with its layers split over cuda:0 and cuda:1 gives the tokens of the
              same model on cuda:0 alone; so does a map that offloads half the layers to the
              CPU (offload_buffers=True), and the GPU then holds none of the offloaded layers
              after generate() (nothing kept of a moved-in weight); the auto backend's split
              tokens equal its one-GPU tokens too.
  tp          on every rank, the model sharded by its tp_plan gives the tokens of the whole
              model on that rank's GPU.
Speed, on a bigger model (--shape, default a 30B-shaped Llama: 65 GB in fp16) split over both
GPUs the same way for every variant: decode tokens/s of eager generate() as (T_long - T_short)
/ (n_long - n_short), fp16 against each format (auto backend), median of --repeats pairs; the
ratio is against fp16 in the same process (device_map) or the same torchrun (tp).
Output: a table per part and $OUT/multi_gpu.json (or --json).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

SHAPES = {  # hidden, intermediate, layers, heads, kv heads, vocab
    "tiny": (64, 128, 2, 4, 2, 256),
    "check": (1024, 2816, 8, 16, 8, 32000),
    "llama3-8b": (4096, 14336, 32, 32, 8, 128256),
    "30b": (6656, 17920, 60, 52, 52, 32000),  # Llama-1 30B's shapes
    "70b": (8192, 28672, 80, 64, 8, 128256),
}
VARIANTS = ("fp16", "e5m2", "e4m3", "nvfp4", "mxfp4")
TP_PLAN = {"self_attn.q_proj": "colwise", "self_attn.k_proj": "colwise",
           "self_attn.v_proj": "colwise", "self_attn.o_proj": "rowwise",
           "mlp.gate_proj": "colwise", "mlp.up_proj": "colwise", "mlp.down_proj": "rowwise"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", default="all", choices=("all", "device-map", "tp"))
    p.add_argument("--shape", default="30b", choices=sorted(SHAPES))
    p.add_argument("--layers", type=int, default=None, help="override the shape's layer count")
    p.add_argument("--check-shape", default="check", choices=sorted(SHAPES))
    p.add_argument("--check-fmt", default="nvfp4")
    p.add_argument("--variants", default="fp16,e4m3,nvfp4",
                   help=f"comma list of {', '.join(VARIANTS)} (each one a model build: ~1 min)")
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--short", type=int, default=8)
    p.add_argument("--long", type=int, default=40)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke test")
    p.add_argument("--tiny", action="store_true", help="tiny shapes for both models (tests)")
    p.add_argument("--out", default=os.environ.get("OUT", "receipts"))
    p.add_argument("--json", default=None, help="receipt path (default OUT/multi_gpu[_part].json)")
    args = p.parse_args(argv)
    if args.tiny:
        args.shape = args.check_shape = "tiny"
    return args


# -- models ------------------------------------------------------------------------------------

def config_of(shape: str, layers: int | None, transformers):
    h, i, n, heads, kv, vocab = SHAPES[shape]
    return transformers.LlamaConfig(
        hidden_size=h, intermediate_size=i, num_hidden_layers=layers or n,
        num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
        max_position_embeddings=4096, tie_word_embeddings=False)


def build(config, devices: list, fmt: str | None, backend: str, torch, transformers, *,
          tp=None):
    """The Llama with layer i on devices[i] (embedding on the first, norm and head on the last),
    each module made on its device from a seed of its own, then converted (fmt) and, with
    tp=(rank, world), sharded one layer at a time, so no device ever holds more than its part
    and one layer. Returns (model, device_map for accelerate.dispatch_model)."""
    import softfp8
    from softfp8.tensor_parallel import parallelize
    from transformers.models.llama import modeling_llama as L

    dtype = torch.float16 if devices[0] != "cpu" else torch.float32
    with torch.device("meta"):  # the skeleton; _from_config sets the attention implementation
        model = L.LlamaForCausalLM._from_config(config, dtype=dtype)

    def made(name, seed, device, make):
        torch.manual_seed(seed)
        with torch.device(device):
            module = make().to(dtype)
        with torch.no_grad():
            for p in module.parameters():
                if p.dim() == 2:  # weights: std 0.02 as Llama's init; norms stay 1
                    p.normal_(0, 0.02)
        if fmt and name != "model.embed_tokens":
            if isinstance(module, torch.nn.Linear):  # the head
                module = softfp8.Linear.from_linear(module, fmt, backend=backend)
            else:
                softfp8.quantize_model(module, fmt, backend=backend, progress=False)
        if tp is not None and (name == "lm_head" or name.startswith("model.layers.")):
            holder = torch.nn.ModuleDict({"m": module})  # names in the plan are relative to it
            plan = ({"m": "colwise_gather_output"} if name == "lm_head" else
                    {f"m.{k}": v for k, v in TP_PLAN.items()})
            parallelize(holder, plan, rank=tp[0], world=tp[1])
            module = holder["m"]
        return module

    n = config.num_hidden_layers
    first, last = devices[0], devices[-1]
    m = model.model
    m.embed_tokens = made("model.embed_tokens", 1, first, lambda: torch.nn.Embedding(
        config.vocab_size, config.hidden_size))
    with torch.device(first):
        m.rotary_emb = L.LlamaRotaryEmbedding(config)
    device_map = {"model.embed_tokens": first, "model.rotary_emb": first}
    for i in range(n):
        dev = devices[i]
        m.layers[i] = made(f"model.layers.{i}", 100 + i, dev,
                           lambda i=i: L.LlamaDecoderLayer(config, layer_idx=i))
        device_map[f"model.layers.{i}"] = dev
    m.norm = made("model.norm", 2, last, lambda: L.LlamaRMSNorm(config.hidden_size,
                                                               eps=config.rms_norm_eps))
    model.lm_head = made("lm_head", 3, last, lambda: torch.nn.Linear(
        config.hidden_size, config.vocab_size, bias=False))
    device_map.update({"model.norm": last, "lm_head": last})
    return model.eval(), device_map


def split(n: int, devices: list) -> list:
    """Layer i's device: the first half of the layers on devices[0], the rest on devices[1]."""
    return [devices[0] if i < n // 2 else devices[-1] for i in range(n)]


def dispatch(model, device_map: dict, torch, **kwargs):
    from accelerate import dispatch_model

    device_map = {k: (int(v.split(":")[1]) if v.startswith("cuda:") else v)
                  for k, v in device_map.items()}  # accelerate's own spelling of a GPU
    main = next(iter(device_map.values()))
    return dispatch_model(model, device_map=device_map, main_device=main, **kwargs)


# -- measuring ---------------------------------------------------------------------------------

T0 = time.perf_counter()


def log(*what) -> None:
    print(f"[{time.perf_counter() - T0:7.1f} s]", *what, file=sys.stderr, flush=True)


def sync(torch):
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            torch.cuda.synchronize(i)


def greedy(model, ids, new, torch):
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                              max_new_tokens=new, min_new_tokens=new, pad_token_id=0)


def decode_rate(model, ids, args, torch) -> dict:
    def seconds(new):
        sync(torch)
        t0 = time.perf_counter()
        greedy(model, ids, new, torch)
        sync(torch)
        return time.perf_counter() - t0

    for _ in range(2):  # warm-up: kernels compiled and launches recorded
        seconds(args.short), seconds(args.long)
    rates = []
    for _ in range(args.repeats):
        short, long = seconds(args.short), seconds(args.long)
        rates.append((args.long - args.short) / (long - short) if long > short else float("nan"))
    return {"tok_s": statistics.median(rates), "tok_s_all": rates}


def memory(torch) -> list:
    if not torch.cuda.is_available():
        return []
    return [round(torch.cuda.max_memory_allocated(i) / 2**30, 2)
            for i in range(torch.cuda.device_count())]


def fresh_memory(torch):
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        for i in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(i)


def prompt(config, args, torch, device):
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, config.vocab_size, (1, args.prompt), generator=g).to(device)


def gpus(args) -> list:
    if args.device == "cpu":
        return ["cpu", "cpu"]
    return ["cuda:0", "cuda:1"]


# -- the parts ---------------------------------------------------------------------------------

def device_map_part(args, torch, transformers) -> dict:
    import softfp8

    devs = gpus(args)
    cfg = config_of(args.check_shape, None, transformers)
    n = cfg.num_hidden_layers
    checks = {}
    ids = prompt(cfg, args, torch, devs[0])
    new = 16
    for backend in ("torch", "auto"):
        log(f"device_map check, backend {backend}")
        one, _ = build(cfg, [devs[0]] * n, args.check_fmt, backend, torch, transformers)
        want = greedy(one, ids, new, torch).cpu()
        del one
        fresh_memory(torch)
        two, dm = build(cfg, split(n, devs), args.check_fmt, backend, torch, transformers)
        dispatch(two, dm, torch)
        got = greedy(two, ids, new, torch).cpu()
        checks[f"split_tokens_equal_{backend}"] = bool(torch.equal(got, want))
        if backend == "auto" and devs[-1] != "cpu":
            # layers on cuda:1, called while cuda:0 is current, record their launches and
            # replay them (softfp8.Linear makes its own device current for the call)
            for index in (0, 1):
                on = [m for m in two.modules() if isinstance(m, softfp8.Linear)
                      and m.words.device.index == index]
                kept = sum(bool(m.__dict__.get("_eager_calls")) for m in on)
                checks[f"cuda{index}_layers_with_recorded_calls"] = f"{kept}/{len(on)}"
        del two
        fresh_memory(torch)
        if backend == "torch":
            # half the layers offloaded to CPU RAM, moved in by accelerate's hooks at each call
            model, dm = build(cfg, [devs[0]] * n, args.check_fmt, backend, torch, transformers)
            model.cpu()
            fresh_memory(torch)
            dm = {k: ("cpu" if k.startswith("model.layers.") and int(k.split(".")[2]) >= n // 2
                      else devs[0]) for k in dm}
            offloaded = sum(t.numel() * t.element_size() for i in range(n // 2, n)
                            for t in model.model.layers[i].buffers())
            dispatch(model, dm, torch, offload_buffers=True)
            # cuBLAS's workspace on cuda:0 exists already (the one-GPU run above): what grows
            # over generate() is what outlives it
            resident = torch.cuda.memory_allocated(0) if torch.cuda.is_available() else 0
            got = greedy(model, ids, new, torch).cpu()
            after = torch.cuda.memory_allocated(0) if torch.cuda.is_available() else 0
            checks["offload_tokens_equal_torch"] = bool(torch.equal(got, want))
            checks["offload_bytes_gpu_before_after_offloaded"] = [resident, after, offloaded]
            checks["offload_keeps_no_layer"] = bool(after - resident < offloaded // 2)
            del model
            fresh_memory(torch)
    cfg = config_of(args.shape, args.layers, transformers)
    n = cfg.num_hidden_layers
    ids = prompt(cfg, args, torch, devs[0])
    rows = []
    for variant in args.variants.split(","):
        fmt = None if variant == "fp16" else variant
        fresh_memory(torch)
        log(f"device_map speed: {variant}")
        try:
            model, dm = build(cfg, split(n, devs), fmt, "auto", torch, transformers)
            dispatch(model, dm, torch)
            row = {"variant": variant, **decode_rate(model, ids, args, torch)}
            row["max_gib_per_gpu"] = memory(torch)
            row["backend"] = ("torch fp16" if fmt is None else
                              sorted({m.selected_backend(1) for m in model.modules()
                                      if hasattr(m, "selected_backend")}))
            del model
        except torch.OutOfMemoryError as err:
            row = {"variant": variant, "tok_s": float("nan"), "error": f"OOM: {err}"[:200]}
        rows.append(row)
    ratio(rows)
    return {"checks": checks, "rows": rows, "shape": args.shape, "layers": n}


def tp_part(args, torch, transformers) -> dict | None:
    import torch.distributed as dist

    backend = "gloo" if args.device == "cpu" else "nccl"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = "cpu" if args.device == "cpu" else f"cuda:{rank}"
    if dev != "cpu":
        torch.cuda.set_device(rank)
    try:
        cfg = config_of(args.check_shape, None, transformers)
        n = cfg.num_hidden_layers
        ids = prompt(cfg, args, torch, dev)
        whole, _ = build(cfg, [dev] * n, args.check_fmt, "torch", torch, transformers)
        want = greedy(whole, ids, 16, torch).cpu()
        del whole
        sharded, _ = build(cfg, [dev] * n, args.check_fmt, "torch", torch, transformers,
                           tp=(rank, world))
        got = greedy(sharded, ids, 16, torch).cpu()
        del sharded
        same = torch.tensor([int(torch.equal(got, want))], device=dev)
        dist.all_reduce(same, op=dist.ReduceOp.MIN)
        checks = {"tp_tokens_equal_torch": bool(same.item())}
        cfg = config_of(args.shape, args.layers, transformers)
        n = cfg.num_hidden_layers
        ids = prompt(cfg, args, torch, dev)
        rows = []
        for variant in args.variants.split(","):
            fmt = None if variant == "fp16" else variant
            fresh_memory(torch)
            if rank == 0:
                log(f"tp speed: {variant}")
            model, _ = build(cfg, [dev] * n, fmt, "auto", torch, transformers, tp=(rank, world))
            dist.barrier()
            row = {"variant": variant, **decode_rate(model, ids, args, torch),
                   "max_gib_this_gpu": memory(torch)[rank:rank + 1]}
            del model
            rows.append(row)
        ratio(rows)
        return {"checks": checks, "rows": rows, "shape": args.shape, "layers": n,
                "world": world} if rank == 0 else None
    finally:
        dist.destroy_process_group()


def ratio(rows):
    base = next((r["tok_s"] for r in rows if r["variant"] == "fp16"), None)
    for r in rows:
        r["x_fp16"] = (r["tok_s"] / base) if base and r["tok_s"] == r["tok_s"] else None


def table(title: str, part: dict) -> str:
    lines = [f"## {title}: {part['shape']} ({part['layers']} layers)",
             "| variant | tok/s | x fp16 | GiB per GPU |", "|---|---|---|---|"]
    for r in part["rows"]:
        x = "-" if r.get("x_fp16") is None else f"{r['x_fp16']:.2f}"
        mem = r.get("max_gib_per_gpu", r.get("max_gib_this_gpu", ""))
        lines.append(f"| {r['variant']} | {r['tok_s']:.1f} | {x} | {mem} |"
                     + (f" {r['error']}" if "error" in r else ""))
    lines += [f"- {k}: {v}" for k, v in part["checks"].items()]
    return "\n".join(lines)


def versions(torch, transformers) -> dict:
    import accelerate

    import softfp8

    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "python": platform.python_version(), "torch": torch.__version__,
           "transformers": transformers.__version__, "accelerate": accelerate.__version__,
           "softfp8": softfp8.__file__}
    if torch.cuda.is_available():
        out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return out


def write(path: Path, receipt: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(receipt, indent=1, default=str))
    print(f"# receipt: {path}")


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    import transformers

    out = Path(args.out)
    if args.part == "tp":
        part = tp_part(args, torch, transformers)
        if part is not None:
            print(table("tensor parallel (tp_plan, torchrun)", part))
            write(Path(args.json or out / "multi_gpu_tp.json"),
                  {"versions": versions(torch, transformers), "tp": part})
        return 0
    if args.device != "cpu" and torch.cuda.device_count() < 2:
        print(f"needs 2 GPUs, found {torch.cuda.device_count()}", file=sys.stderr)
        return 2
    receipt = {"versions": versions(torch, transformers), "argv": sys.argv[1:]}
    receipt["device_map"] = device_map_part(args, torch, transformers)
    print(table("device_map over two GPUs (accelerate)", receipt["device_map"]))
    if args.part == "all":
        tp_json = out / "multi_gpu_tp.json"
        passed = [a for a in (argv if argv is not None else sys.argv[1:])
                  if not a.startswith("--part")]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               os.path.abspath(__file__), *passed, "--part", "tp", "--json", str(tp_json)]
        done = subprocess.run(cmd)
        receipt["tp"] = (json.loads(tp_json.read_text())["tp"] if done.returncode == 0
                         and tp_json.exists() else {"error": f"torchrun exited {done.returncode}"})
    write(Path(args.json or out / "multi_gpu.json"), receipt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
