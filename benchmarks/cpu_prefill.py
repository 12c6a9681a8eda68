"""A small transformers Llama on the CPU: prompt (prefill) and generate() time, bf16 and fp32
weights against each softfp8 format, in one process (random weights, nothing downloaded).

    python benchmarks/cpu_prefill.py                      # 1B-shaped, 4 layers, 128 + 64 tokens
    python benchmarks/cpu_prefill.py --layers 2 --reps 3 --variants bf16,e4m3,mxfp4

Every variant is the same seeded model: `bf16` and `fp32` as built, a format as the bf16 model
(or, with --act fp32, the fp32 one) converted by softfp8.quantize_model (lm_head included). Per
round each variant runs, in turn, one forward over the prompt (`prefill`) and one greedy
generate() of --new tokens after it (`generate`: prefill + decode, end to end); medians over
--reps rounds, so the load of a shared machine falls on all alike. Also reported: the forward's
thread settings (torch and numba) and the threading layer numba runs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch


def build(layers: int, vocab: int, dtype: torch.dtype):
    import transformers

    cfg = transformers.LlamaConfig(hidden_size=2048, intermediate_size=8192,
                                   num_attention_heads=32, num_key_value_heads=8,
                                   num_hidden_layers=layers, vocab_size=vocab,
                                   tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    return model.to(dtype)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--act", choices=["bf16", "fp32"], default="bf16",
                    help="the activations (and so the dtype) of the softfp8 models")
    ap.add_argument("--variants", default="fp32,bf16,e5m2,e4m3,nvfp4,mxfp4")
    ap.add_argument("--numba-passive", action="store_true",
                    help="OMP_WAIT_POLICY=passive for numba's OpenMP pool only: set after torch's "
                         "libgomp has read its environment, before numba loads its own")
    args = ap.parse_args()
    if args.numba_passive:
        os.environ["OMP_WAIT_POLICY"] = "passive"
    import numba

    import softfp8

    act = torch.bfloat16 if args.act == "bf16" else torch.float32
    names = args.variants.split(",")
    models = {}
    for name in names:
        if name in ("fp32", "bf16"):
            models[name] = build(args.layers, args.vocab,
                                 torch.float32 if name == "fp32" else torch.bfloat16)
        else:
            m = build(args.layers, args.vocab, act)
            softfp8.quantize_model(m, name, progress=False)
            models[name] = m
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (1, args.prompt), generator=g)
    mask = torch.ones_like(ids)

    def prefill(m):
        with torch.inference_mode():
            m(input_ids=ids, attention_mask=mask, use_cache=True)

    def generate(m):
        with torch.inference_mode():
            m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new,
                       min_new_tokens=args.new, do_sample=False, pad_token_id=0)

    for m in models.values():  # warm: compile, first-call costs
        prefill(m)
        generate(m)
    t = {(n, w): [] for n in names for w in ("prefill", "generate")}
    for _ in range(args.reps):
        for n, m in models.items():
            for what, fn in (("prefill", prefill), ("generate", generate)):
                a = time.perf_counter()
                fn(m)
                t[(n, what)].append(time.perf_counter() - a)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} torch {torch.__version__} "
          f"threads {torch.get_num_threads()}, numba {numba.__version__} "
          f"({numba.threading_layer()}, {numba.get_num_threads()} threads), "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}"
          f"{' (numba only)' if args.numba_passive else ''}, loadavg "
          f"{os.getloadavg()[0]:.1f}; {args.layers} layers, hidden 2048, prompt {args.prompt}, "
          f"new {args.new}, softfp8 act {args.act}, reps {args.reps} (median)")
    base = {w: statistics.median(t[("bf16", w)]) for w in ("prefill", "generate")
            if ("bf16", w) in t}
    print("| variant | prefill s | x bf16 | generate s | x bf16 |\n|---|---|---|---|---|")
    for n in names:
        p, gen = (statistics.median(t[(n, w)]) for w in ("prefill", "generate"))
        bp, bg = base.get("prefill"), base.get("generate")
        print(f"| {n} | {p:.3f} | {bp / p if bp else float('nan'):.2f} | {gen:.3f} | "
              f"{bg / gen if bg else float('nan'):.2f} |", flush=True)


if __name__ == "__main__":
    main()
