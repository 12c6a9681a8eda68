"""End to end on CPU: a tiny transformers Llama from a config (random weights, nothing
downloaded), converted with quantize_model, run forward and with generate()."""
import copy

import pytest
import torch
from conftest import rel_err

import softfp8
from softfp8 import Format

transformers = pytest.importorskip("transformers")

# Logits error against the unquantized model, per format: loose sanity bounds (two layers, HF's
# std-0.02 init). Measured here (2026-11-29, 2-core CPU, torch 2.13, transformers 5.24; lm_head
# skipped / converted): e5m2 7.0% / 8.8%, e4m3 3.4% / 4.2%, nvfp4 11.9% / 15.4%,
# mxfp4 14.2% / 18.4%. The bounds are about twice that; the test prints the values.
GREEDY = dict(do_sample=False, pad_token_id=0)
BOUNDS = {Format.E5M2: 0.2, Format.E4M3: 0.08, Format.NVFP4: 0.3, Format.MXFP4: 0.35,
          Format.E4M3_B128: 0.08}  # (a tiny model's weights are one tile each)


@pytest.fixture(scope="module")
def tiny_llama():
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, max_position_embeddings=128,
        tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(ids).logits
    return model, ids, logits


@pytest.mark.parametrize("skip_lm_head", [True, False], ids=["skip-lm_head", "all"])
@pytest.mark.parametrize("fmt", list(Format))
def test_quantized_llama_logits_and_generate(tiny_llama, fmt, skip_lm_head):
    model, ids, ref = tiny_llama
    q = copy.deepcopy(model)
    summary = softfp8.quantize_model(q, fmt, skip="lm_head" if skip_lm_head else None,
                                     progress=False)
    assert len(summary.converted) == 2 * 7 + (0 if skip_lm_head else 1)
    assert summary.skipped == (("lm_head",) if skip_lm_head else ())
    assert summary.bytes_after < summary.bytes_before
    assert isinstance(q.model.layers[1].mlp.down_proj, softfp8.Linear)
    with torch.no_grad():
        logits = q(ids).logits
    err = rel_err(logits, ref)
    print(f"\n{fmt} ({'lm_head fp32' if skip_lm_head else 'all linears'}): logits error "
          f"{err:.2%}; {summary}")
    assert 0 < err < BOUNDS[fmt]

    out = q.generate(ids, **GREEDY, max_new_tokens=4, min_new_tokens=4)
    assert out.shape == (2, ids.shape[1] + 4) and torch.equal(out[:, :ids.shape[1]], ids)
    # Greedy decoding's first token is the argmax of the quantized model's own last logits.
    assert torch.equal(out[:, ids.shape[1]], logits[:, -1].argmax(-1))


def test_generate_with_static_cache_matches_dynamic(tiny_llama):
    model, ids, _ = tiny_llama
    q = copy.deepcopy(model)
    softfp8.quantize_model(q, "e4m3", progress=False)
    dynamic = q.generate(ids, **GREEDY, max_new_tokens=5, min_new_tokens=5)
    static = q.generate(ids, **GREEDY, max_new_tokens=5, min_new_tokens=5,
                        cache_implementation="static")
    assert torch.equal(dynamic, static)


def test_quantized_llama_state_dict_round_trips_through_safetensors(tiny_llama, tmp_path):
    from safetensors.torch import load_file, save_file

    model, ids, _ = tiny_llama
    q = copy.deepcopy(model)
    softfp8.quantize_model(q, "nvfp4", skip="lm_head", progress=False)
    path = tmp_path / "model.safetensors"
    save_file(q.state_dict(), str(path))
    # A fresh model of the same config, converted the same way, then loaded: same logits bit
    # for bit (its own random weights are overwritten by every saved tensor).
    torch.manual_seed(123)
    fresh = transformers.LlamaForCausalLM(model.config).eval()
    softfp8.quantize_model(fresh, "nvfp4", skip="lm_head", progress=False)
    with torch.no_grad():
        assert not torch.equal(fresh(ids).logits, q(ids).logits)
        fresh.load_state_dict(load_file(str(path)))
        assert torch.equal(fresh(ids).logits, q(ids).logits)


# -- demos --------------------------------------------------------------------------------

REPO = __import__("pathlib").Path(__file__).resolve().parents[1]


@pytest.mark.slow  # runs a demo/benchmark script end to end (CI's -m slow run)
def test_demo_runs_and_writes_its_receipt(tmp_path):
    import json
    import subprocess
    import sys

    cmd = [sys.executable, str(REPO / "demos" / "demo.py"), "--device", "cpu", "--shape", "48,80",
           "--repeats", "2", "--out", str(tmp_path)]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    receipt = json.loads((tmp_path / "receipt.json").read_text())
    assert receipt["ok"] is True
    assert set(receipt["backend_per_layer"]) == {f.value for f in Format}
    assert all(r["reference_decoder_bit_exact"] for r in receipt["decode"])
    assert [r["codes"] for r in receipt["decode"]][:4] == [256, 256, 16, 16]
    gemv = receipt["gemv"]["rows"]
    assert [r["format"] for r in gemv[1:]] == [f.value for f in Format]
    assert all(0 < r["error_vs_fp32_layer"] < 0.2 and r["parity_vs_reference"] <= 1e-5
               and r["seconds"] > 0 for r in gemv[1:])
    assert receipt["versions"]["torch"] == torch.__version__
    assert "--shape 48,80" in receipt["command"]
    assert receipt["probe"] is not None and receipt["probe_text"].startswith("softfp8 capability")


def _make_figures():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_figures", REPO / "demos" / "make_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # runs a demo/benchmark script end to end (CI's -m slow run)
def test_make_figures_measures_locally_without_a_bench_receipt(tmp_path, capsys):
    assert _make_figures().main(["--quick", "--device", "cpu", "--out", str(tmp_path / "figs"),
                                 "--receipts", str(tmp_path / "none")]) == 0
    pngs = sorted(p.name for p in (tmp_path / "figs").glob("*.png"))
    assert pngs == ["bandwidth_model.png", "error_per_format.png", "speedups.png"]
    assert all((tmp_path / "figs" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    out = capsys.readouterr().out
    assert "over 3840 outputs" in out and "local measurement" in out


def test_make_figures_reads_bench_receipts():
    import json

    figures = _make_figures()
    receipt = {"gpu": "NVIDIA H200", "token": [
        {"format": "e5m2", "predicted_ms": 1.6, "measured_ms": 1.7},
        {"format": "fp16", "predicted_ms": 3.2, "measured_ms": 3.5}],
        "shapes": [{"shape": "4096x4096", "format": "nvfp4", "speedup_vs_fp16": 3.1},
                   {"shape": "4096x4096", "kind": "torch", "impl": "torch float16 F.linear",
                    "speedup_vs_fp16": 1.0}]}
    small_m = {"subcommand": "small-m", "gpu": "NVIDIA H200",
               "rows": [{"shape": "4096x4096", "m": 1, "format": "e5m2", "speedup_vs_fp16": 1.7}]}
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        (__import__("pathlib").Path(tmp) / "bench.json").write_text(json.dumps(receipt))
        (__import__("pathlib").Path(tmp) / "smallm.json").write_text(json.dumps(small_m))
        model, speed, files = figures.bench_points(__import__("pathlib").Path(tmp))
    assert model == [("NVIDIA H200", "e5m2", 1.6, 1.7), ("NVIDIA H200", "fp16", 3.2, 3.5)]
    # grouped by shape, one bar per format; the torch baseline and small-m receipts left out
    assert speed == [("NVIDIA H200", "4096x4096", "nvfp4", 3.1)]
    assert len(files) == 1


def _load_script(name: str):
    """benchmarks/<name>.py as a module (the GPU scripts' logic, run here on a tiny model)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.mark.slow  # runs a demo/benchmark script end to end (CI's -m slow run)
def test_gpu_e2e_script_smoke_on_cpu(tmp_path, monkeypatch, capsys):
    # The H200 script's own logic (build, convert, time, receipt) on a tiny model, eager only.
    import json

    monkeypatch.setenv("SOFTFP8_BACKEND", "torch")  # restored after; main() sets it too
    script = _load_script("gpu_e2e_generate")
    receipt = tmp_path / "e2e.json"
    assert script.main(["--tiny", "--device", "cpu", "--backend", "torch", "--variants",
                        "fp16,e4m3", "--modes", "eager", "--short", "1", "--long", "17",
                        "--repeats", "1", "--json", str(receipt)]) == 0
    rows = json.loads(receipt.read_text())["rows"]
    assert [(r["variant"], r["ran"]) for r in rows] == [("fp16", "eager"), ("e4m3", "eager")]
    assert rows[0]["logits_rel_err"] == 0 and 0 < rows[1]["logits_rel_err"] < 0.1
    assert all(r["tok_s"] > 0 for r in rows) and rows[1]["weight_bytes"] < rows[0]["weight_bytes"]
    assert "# versions:" in capsys.readouterr().out


def test_gpu_e2e_generate_warms_up_until_a_pair_records_no_graph(monkeypatch):
    """The warm-up goes on while a (short, long) pair still records a CUDA graph (counted by
    the hook on torch's graph trees), at least 2 pairs and at most 6, and the row says how many
    graphs the timed calls recorded."""
    from types import SimpleNamespace

    from torch._inductor import cudagraph_trees as trees

    script = _load_script("gpu_e2e_generate")
    recorded = []
    monkeypatch.setattr(trees.CUDAGraphTreeManager, "record_function",
                        lambda self, inputs, fid: recorded.append(fid) or "out")
    script.install_graph_hooks(torch, verbose=False)
    assert trees.CUDAGraphTreeManager.record_function(None, [], 7) == "out"
    assert recorded == [7] and script.RECORDINGS == [1]

    def calls_recording(pairs):  # generate() calls of which the first `pairs` pairs record
        calls = iter(range(100))

        def generate_seconds(model, ids, new_tokens, kwargs, torch_, device):
            if next(calls) < 2 * pairs:
                script.RECORDINGS[0] += 1
            return 0.001 * new_tokens
        return generate_seconds

    args = SimpleNamespace(short=1, long=3, repeats=2, device="cpu")
    for recording_pairs, warmup, timed in [(0, 2, 0), (3, 4, 0), (9, 6, 4)]:
        monkeypatch.setattr(script, "generate_seconds", calls_recording(recording_pairs))
        tok_s, ms, ran, warm = script.decode_rate(None, None, "eager", args, torch, None)
        assert ran == "eager" and ms == pytest.approx(1.0)
        assert warm == {"warmup_pairs": warmup, "graphs_recorded_timed": timed}, recording_pairs


@pytest.mark.slow  # runs a demo/benchmark script end to end (CI's -m slow run)
def test_gpu_e2e_generate_log_calls_counts_the_static_caches(monkeypatch, capsys):
    """--log-calls on a CPU: each call's start line says how many of transformers' static caches
    (one made a call) are still alive; --gc-each-call runs the collector first."""
    from transformers import cache_utils

    monkeypatch.setattr(cache_utils.StaticCache, "__init__", cache_utils.StaticCache.__init__)
    monkeypatch.setenv("SOFTFP8_BACKEND", "torch")  # restored after; main() sets it too
    script = _load_script("gpu_e2e_generate")
    assert script.main(["--tiny", "--device", "cpu", "--backend", "torch", "--variants", "e5m2",
                        "--modes", "static", "--short", "1", "--long", "2", "--repeats", "1",
                        "--json", "", "--log-calls", "--gc-each-call"]) == 0
    starts = [line for line in capsys.readouterr().err.splitlines() if line.endswith(" made")]
    assert len(starts) == 6  # 2 warm-up pairs and 1 timed pair
    assert starts[0].endswith("alive: 0 of 0 made") and starts[-1].endswith("alive: 0 of 5 made")


@pytest.mark.slow  # runs a demo/benchmark script end to end (CI's -m slow run)
def test_gpu_e2e_step_smoke_on_cpu(tmp_path, monkeypatch):
    # The decode-step script's own logic on a tiny model: eager steps stand in for the graph
    # (CPU), one row per variant and PDL mode, the receipt.
    import json

    monkeypatch.setenv("SOFTFP8_BACKEND", "torch")  # main() sets both; restored after
    monkeypatch.setenv("SOFTFP8_PDL", "auto")
    script = _load_script("gpu_e2e_step")
    receipt = tmp_path / "step.json"
    assert script.main(["--tiny", "--device", "cpu", "--backend", "torch", "--variants",
                        "fp16,e4m3", "--pdl-modes", "off,late", "--prompt", "4", "--rounds", "2",
                        "--replays", "2", "--json", str(receipt)]) == 0
    rows = json.loads(receipt.read_text())["rows"]
    assert [r["variant"] for r in rows] == ["fp16", "e4m3/pdl=off", "e4m3/pdl=late"]
    assert all(r["graph_vs_eager"] == 0 and r["ms_per_step"] > 0 for r in rows)
    assert rows[1]["weight_bytes"] < rows[0]["weight_bytes"]


def test_gpu_e2e_step_check_catches_a_wrong_step(monkeypatch):
    # Without the cache's write counter put back, the checked step attends to one more token
    # than the eager one: the check must refuse it.
    import argparse

    import torch
    import transformers

    monkeypatch.setenv("SOFTFP8_BACKEND", "torch")
    script = _load_script("gpu_e2e_step")
    args = argparse.Namespace(tiny=True, layers=2, device="cpu", prompt=4, rounds=1, replays=1)
    model = script.build_model(args, torch, transformers)
    step = script.Step(model, model, args, torch, transformers)
    if not step.counters():
        pytest.skip("this transformers writes the cache at cache_position: nothing to put back")
    monkeypatch.setattr(script.Step, "counters", lambda self: [])
    with pytest.raises(script.StepMismatch, match="graph logits differ from eager"):
        script.check_and_capture(step, cuda=False)


@pytest.mark.slow  # runs a demo/benchmark script end to end (CI's -m slow run)
def test_gpu_e2e_step_keeps_the_other_rows_when_a_variant_fails(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("SOFTFP8_BACKEND", "torch")
    script = _load_script("gpu_e2e_step")
    real, calls = script.check_and_capture, []

    def second_fails(step, cuda):
        calls.append(1)
        if len(calls) == 2:
            raise script.StepMismatch("graph logits differ from eager by 0.5")
        return real(step, cuda)

    monkeypatch.setattr(script, "check_and_capture", second_fails)
    receipt = tmp_path / "step.json"
    assert script.main(["--tiny", "--device", "cpu", "--backend", "torch", "--variants",
                        "fp16,e5m2,nvfp4", "--prompt", "4", "--rounds", "1", "--replays", "1",
                        "--json", str(receipt)]) == 1
    r = json.loads(receipt.read_text())
    assert [row["variant"] for row in r["rows"]] == ["fp16", "nvfp4"]
    assert list(r["failed"]) == ["e5m2"] and "differ" in r["failed"]["e5m2"]


@pytest.mark.slow  # builds six tiny models and generates with each: ~20 s of CPU, minutes here
def test_multi_gpu_script_device_map_part_smoke_on_cpu(tmp_path, capsys):
    """benchmarks/multi_gpu.py's device_map part (build, split, offload, checks, receipt) with
    both "GPUs" the CPU; its tp part needs torchrun (run by hand: see the script's docstring)."""
    import json

    pytest.importorskip("accelerate")  # the script places the model with it (the dev extra)
    script = _load_script("multi_gpu")
    receipt = tmp_path / "mg.json"
    assert script.main(["--tiny", "--device", "cpu", "--part", "device-map", "--variants",
                        "fp16,e4m3", "--short", "1", "--long", "3", "--repeats", "1",
                        "--json", str(receipt)]) == 0
    part = json.loads(receipt.read_text())["device_map"]
    assert part["checks"]["split_tokens_equal_torch"] and part["checks"]["split_tokens_equal_auto"]
    assert part["checks"]["offload_tokens_equal_torch"]
    assert [r["variant"] for r in part["rows"]] == ["fp16", "e4m3"]
    assert part["rows"][1]["backend"] == [softfp8.dispatch.select("e4m3", 1, "cpu").backend.value]
    assert "## device_map over two GPUs" in capsys.readouterr().out
