"""softfp8.from_pretrained on a GPU: a Llama-shaped checkpoint in every layout, loaded and run.

Writes a >= 1B-parameter Llama-3.2-1B-shaped model (random weights) in each checkpoint layout
(compressed-tensors by compressed-tensors where it is installed, the rest by the writers in
tests/hub_support.py), loads each with `softfp8.from_pretrained`, and greedily generates 64
tokens. Beside each: (a) the fp16 model and (b) transformers' own loading of the same
checkpoint, where transformers can load it. Per run: load seconds, seconds per GB read, peak GPU
memory while loading and while generating, tok/s. One process, one GPU.

    python benchmarks/gpu_load.py                  # all layouts, results in $OUT/gpu_load.json
    python benchmarks/gpu_load.py --tiny --device cpu   # a smoke run of the script on a CPU
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # softfp8 from this tree
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import hub_support as hs  # noqa: E402

import softfp8  # noqa: E402
from softfp8 import Format  # noqa: E402

PROMPT_LEN, NEW_TOKENS = 16, 64


def build_model(tiny: bool, device: str):
    import transformers as tf

    if tiny:
        cfg = tf.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=4, vocab_size=1024,
                             tie_word_embeddings=True)
    else:  # Llama-3.2-1B's shape: 1.24 B parameters
        cfg = tf.LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                             num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                             tie_word_embeddings=True, rope_theta=500000.0,
                             max_position_embeddings=4096)
    torch.manual_seed(0)
    with torch.device(device):
        model = tf.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    return model


def write_all(model, root: Path, layouts: list[str]) -> dict[str, Path]:
    """Each layout's folder; a layout that can't be written here is left out (and said why)."""
    folders, why = {}, {}
    have_ct = _importable("compressed_tensors")
    has_b128 = hasattr(Format, "E4M3_B128")
    writers = {
        "dense-bf16": lambda d: hs.write_dense(model, d, dtype=torch.bfloat16),
        "fbgemm_fp8": lambda d: hs.write_fbgemm_fp8(model, d)[0],
        "fp8-block": lambda d: hs.write_finegrained_fp8(model, d)[0],
        "fp8-tensor": lambda d: hs.write_finegrained_fp8(model, d, block=None)[0],
        "modelopt-nvfp4": lambda d: hs.write_modelopt_nvfp4(model, d)[0],
        "ct-fp8-channel": lambda d: hs.write_compressed_tensors(model, d, "FP8_DYNAMIC"),
        "ct-fp8-block": lambda d: hs.write_compressed_tensors(model, d, "FP8_BLOCK"),
        "ct-nvfp4": lambda d: hs.write_compressed_tensors(model, d, "NVFP4A16"),
        "ct-mxfp4": lambda d: hs.write_compressed_tensors(model, d, "MXFP4A16"),
    }
    for name in layouts:
        if name.startswith("ct-") and not have_ct:
            why[name] = "compressed-tensors is not installed"
            continue
        if name in ("fp8-block", "ct-fp8-block") and not has_b128:
            why[name] = "this softfp8 has no e4m3_b128 format"
            continue
        t0 = time.perf_counter()
        try:
            with torch.no_grad():
                folders[name] = writers[name](root / name)
        except Exception as err:  # one writer failing here leaves the other layouts to run
            why[name] = f"writer failed: {type(err).__name__}: {str(err)[:200]}"
            traceback.print_exc(limit=3)
            continue
        finally:
            gc.collect()
        print(f"wrote {name} in {time.perf_counter() - t0:.1f} s", flush=True)
    return folders, why


def _importable(name: str) -> bool:
    try:
        __import__(name)
        return True
    except ImportError:
        return False


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def run(label: str, loader, folder: Path, device: str) -> dict:
    """Load with `loader`, then greedy-generate NEW_TOKENS; timings and peak memory."""
    cuda = device.startswith("cuda")
    out = {"run": label, "folder": folder.name, "gb_read": folder_bytes(folder) / 1e9}
    try:
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        model = loader()
        if cuda:
            torch.cuda.synchronize()
        out["load_s"] = time.perf_counter() - t0
        out["load_s_per_gb"] = out["load_s"] / out["gb_read"]
        if cuda:
            out["load_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
            out["resident_gib"] = torch.cuda.memory_allocated() / 2**30
        ids = torch.randint(0, model.config.vocab_size, (1, PROMPT_LEN),
                            generator=torch.Generator().manual_seed(1)).to(device)
        gen = dict(do_sample=False, pad_token_id=0, min_new_tokens=NEW_TOKENS)
        with torch.no_grad():
            model.generate(ids, max_new_tokens=8, **(gen | {"min_new_tokens": 8}))  # compile, warm
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            tokens = model.generate(ids, max_new_tokens=NEW_TOKENS, **gen)
            if cuda:
                torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        out["tok_s"] = NEW_TOKENS / seconds
        if cuda:
            out["generate_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        out["tokens_head"] = tokens[0, PROMPT_LEN:PROMPT_LEN + 8].tolist()
        report = getattr(model, "softfp8_load_report", None)
        if report is not None:
            out["layout"] = str(report.layout)
            out["packed"], out["quantized"] = len(report.packed), len(report.quantized)
            out["backend"] = next(m.selected_backend(1) for m in model.modules()
                                  if isinstance(m, softfp8.Linear))
        del model
    except Exception as err:  # a loader that can't run here is a result too, not a crash
        out["error"] = f"{type(err).__name__}: {str(err)[:300]}"
        traceback.print_exc(limit=2)
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model: a smoke run")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--layouts", default="dense-bf16,fbgemm_fp8,fp8-block,fp8-tensor,"
                    "modelopt-nvfp4,ct-fp8-channel,ct-fp8-block,ct-nvfp4,ct-mxfp4")
    ap.add_argument("--no-transformers", action="store_true",
                    help="skip (b), transformers' own loading of the quantized checkpoints")
    ap.add_argument("--workdir", default=None, help="where checkpoints go (default: a temp dir)")
    args = ap.parse_args()
    import transformers

    device = args.device
    backend = "torch" if device == "cpu" else "auto"
    root = Path(args.workdir or tempfile.mkdtemp(prefix="softfp8_gpu_load_"))
    model = build_model(args.tiny, device)
    n_params = sum(p.numel() for p in model.parameters())
    folders, why = write_all(model, root, [s for s in args.layouts.split(",") if s])
    del model
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()

    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "device": (torch.cuda.get_device_name() if device.startswith("cuda")
                       else platform.processor() or "cpu"),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "softfp8": softfp8.__version__, "compressed_tensors": _version("compressed_tensors"),
            "params": n_params, "prompt": PROMPT_LEN, "new_tokens": NEW_TOKENS,
            "not_written": why, "command": " ".join(sys.argv)}
    results = _Results(out_dir / "gpu_load.json", meta | {"partial": True})
    dense = folders.get("dense-bf16")
    auto = transformers.AutoModelForCausalLM
    if dense is not None:
        # twice: the process's first generate() ran 4x slower than any after it (16.5 tok/s on
        # the H100, docs/performance.md); the second is the baseline
        for label in ("fp16 (transformers, the process's first run)", "fp16 (transformers)"):
            results.append(run(label, lambda: auto.from_pretrained(
                dense, dtype=torch.float16, device_map=device).eval(), dense, device))
        for fmt in ("e4m3", "nvfp4"):
            results.append(run(f"softfp8 {fmt} from bf16", lambda fmt=fmt: softfp8.from_pretrained(
                dense, fmt, device_map=device, dtype=torch.float16, backend=backend),
                dense, device))
    for name, folder in folders.items():
        if name == "dense-bf16":
            continue
        results.append(run(f"softfp8 {name}", lambda folder=folder: softfp8.from_pretrained(
            folder, device_map=device, dtype=torch.float16, backend=backend), folder, device))
        if not args.no_transformers:
            # bfloat16, the checkpoint's dtype: compressed-tensors decompresses FP4 in bfloat16
            # and fails a float16 model's matmul
            results.append(run(f"transformers {name}", lambda folder=folder: auto.from_pretrained(
                folder, dtype=torch.bfloat16, device_map=device).eval(), folder, device))

    base = next((r for r in results if r["run"] == "fp16 (transformers)" and "tok_s" in r), None)
    for r in results:
        if base and "tok_s" in r:
            r["tok_s_vs_fp16"] = r["tok_s"] / base["tok_s"]
    results.meta = meta  # complete: "partial" dropped
    results.save()
    print(json.dumps(meta))
    print_table(results)
    if args.workdir is None:
        shutil.rmtree(root, ignore_errors=True)


class _Results(list):
    """The runs so far, saved after each one: a run cut short by a time limit keeps its results."""

    def __init__(self, path: Path, meta: dict):
        super().__init__()
        self.path, self.meta = path, meta

    def append(self, item: dict) -> None:
        super().append(item)
        self.save()

    def save(self) -> None:
        self.path.write_text(json.dumps({"meta": self.meta, "results": list(self)}, indent=1))


def _version(name: str) -> str | None:
    try:
        return __import__(name).__version__
    except ImportError:
        return None


def print_table(results: list[dict]) -> None:
    cols = [("run", "{}", 34), ("gb_read", "{:.2f}", 7), ("load_s", "{:.1f}", 7),
            ("load_s_per_gb", "{:.1f}", 7), ("load_peak_gib", "{:.2f}", 9),
            ("generate_peak_gib", "{:.2f}", 9), ("tok_s", "{:.1f}", 7),
            ("tok_s_vs_fp16", "{:.2f}", 6)]
    print(" | ".join(name[:w].ljust(w) for name, _, w in cols))
    for r in results:
        cells = [(fmt.format(r[name]) if name in r else "-").ljust(w)[:w] for name, fmt, w in cols]
        line = " | ".join(cells)
        if "error" in r:
            line += f"  ERROR {r['error'][:120]}"
        print(line)


if __name__ == "__main__":
    main()
