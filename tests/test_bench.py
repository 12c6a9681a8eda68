"""softfp8.bench: every subcommand runs on the CPU and writes a sound receipt; presets and the
bandwidth-model arithmetic are right. Timings here are of tiny shapes on a shared CPU: the tests
check structure and internal consistency, never speed."""
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import softfp8
from softfp8.bench import main
from softfp8.bench import model
from softfp8.bench.presets import PRESETS, Shape, parse_shape
from softfp8.bench.timing import measure
from softfp8.bench.workload import runnable_backends
from softfp8.dispatch import Backend

REPO = Path(__file__).resolve().parents[1]
# Tiny and fast: two odd shapes, one copy of each weight, a 4 MiB bandwidth buffer.
TINY = ["--device", "cpu", "--shape", "96,160", "--shape", "40,72", "--rotate", "0.001",
        "--mbytes", "4", "--reps", "2", "--warmup", "1"]


def _positive_finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def _run(tmp_path, *argv):
    out = tmp_path / "receipt.json"
    rc = main([*argv, *TINY, "--out", str(out)])
    return rc, json.loads(out.read_text())


def _check_common(receipt, subcommand):
    assert receipt["subcommand"] == subcommand
    assert receipt["command"].startswith(f"softfp8-bench {subcommand} ")
    assert receipt["date"].startswith("20")
    assert receipt["versions"]["torch"] == torch.__version__
    assert {"triton", "numba", "softfp8"} <= set(receipt["versions"])
    assert receipt["device"]["type"] == "cpu" and receipt["device"]["name"]
    assert "probe" in receipt and receipt["settings"]["formats"]
    if "memory" in receipt:
        mem = receipt["memory"]
        assert _positive_finite(mem["read_bandwidth_GB_per_s"])
        assert _positive_finite(mem["copy"]["GB_per_s"])
        assert mem["read_bandwidth_GB_per_s"] == max(r["GB_per_s"] for r in mem["reads"])


def _check_rows(rows, numeric=("ms", "GB_per_s", "bytes", "speedup_vs_fp16")):
    assert rows
    for r in rows:
        assert "error" not in r, r
        for key in numeric:
            assert _positive_finite(r[key]), (key, r)
        assert r["GB_per_s"] == pytest.approx(r["bytes"] / (r["ms"] / 1e3) / 1e9)


def test_presets_have_the_fused_shapes():
    def nk(p):
        return [(s.n, s.k) for s in p.shapes()]

    assert nk(PRESETS["llama2-7b"]) == [(12288, 4096), (4096, 4096), (22016, 4096), (4096, 11008)]
    llama3 = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]
    assert nk(PRESETS["llama3-8b"]) == llama3 + [(128256, 4096)]
    assert nk(PRESETS["mistral-7b"]) == llama3 + [(32000, 4096)]
    assert [s.name for s in PRESETS["llama3-8b"].shapes()] == ["qkv", "o", "gate_up", "down",
                                                                "lm_head"]
    assert len(PRESETS["llama2-7b"].token_linears()) == 32 * 4 == 128
    assert len(PRESETS["llama3-8b"].token_linears()) == 129
    assert len(PRESETS["llama3-8b"].token_linears(head=False)) == 128
    two = PRESETS["llama3-8b"].token_linears(layers=2)  # the bench's --layers 2
    assert [s.name for s in two] == ["qkv", "o", "gate_up", "down"] * 2 + ["lm_head"]
    for name in ("llama2-7b", "llama3-8b"):  # the -hf split holds the same weights a layer
        fused, split = PRESETS[name], PRESETS[name + "-hf"]
        assert sum(s.n * s.k for s in fused.layer_shapes) == \
            sum(s.n * s.k for s in split.layer_shapes)
        assert fused.layers == split.layers
    assert [s.label for s in PRESETS["llama3-8b-hf"].shapes()] == [
        "q/o 4096x4096", "k/v 1024x4096", "gate/up 14336x4096", "down 4096x14336",
        "lm_head 128256x4096"]
    assert parse_shape("4096,11008") == Shape("custom", 4096, 11008)
    with pytest.raises(ValueError, match="shape"):
        parse_shape("4096")
    with pytest.raises(ValueError, match="positive"):
        parse_shape("0,5")


@pytest.mark.parametrize("fmt", list(softfp8.Format))
@pytest.mark.parametrize("n,k", [(3, 17), (5, 64), (2, 100)])
def test_packed_nbytes_matches_quantize(fmt, n, k):
    w = torch.randn(n, k)
    assert model.packed_nbytes(n, k, fmt) == softfp8.quantize(w, fmt).nbytes
    if fmt is softfp8.Format.E5M2:
        assert (model.packed_nbytes(n, k, fmt, row_scale=True)
                == softfp8.quantize(w, fmt, row_scale=True).nbytes)


def test_bandwidth_model_arithmetic():
    # Synthetic card: 2 TB/s read; two fp16 GEMVs of 1 GB and 3 GB measured at 0.8 and 2.0 ms.
    bw, nbytes, secs = 2e12, [1e9, 3e9], [0.8e-3, 2.0e-3]
    # By the definition: ideal time 4 GB / 2 TB/s = 2 ms against 2.8 ms measured.
    coef = model.efficiency_coefficient(nbytes, secs, bw)
    assert coef == pytest.approx((sum(nbytes) / bw) / sum(secs))
    assert coef == pytest.approx(2.0 / 2.8)
    # The fp16 bytes of those shapes are predicted at exactly their measured total...
    t = model.predicted_seconds_per_token(sum(nbytes), bw, coef)
    assert t == pytest.approx(sum(secs))
    # ...and a format moving half the bytes at half of it; tok/s is the reciprocal.
    half = model.predicted_seconds_per_token(sum(nbytes) / 2, bw, coef)
    assert half == pytest.approx(sum(secs) / 2)
    assert model.predicted_tokens_per_second(sum(nbytes) / 2, bw, coef) == pytest.approx(1 / half)
    assert model.bytes_moved(100, 2, 3, 5, 2) == 100 + 2 * 5 * 2 + 2 * 3 * 2
    with pytest.raises(ValueError, match="one length"):
        model.efficiency_coefficient([1], [1.0, 2.0], bw)
    with pytest.raises(ValueError, match="positive"):
        model.predicted_seconds_per_token(1e9, 0.0, coef)


def test_measure_host_counts_calls():
    calls = []
    t = measure([lambda: calls.append(0), lambda: calls.append(1)], torch.device("cpu"),
                warmup=3, reps=4)
    assert len(calls) == 7 and calls[:4] == [0, 1, 0, 1]
    assert t.samples == 4 and 0 < t.low <= t.seconds <= t.high
    with pytest.raises(ValueError, match="reps"):
        measure([lambda: None], torch.device("cpu"), warmup=0, reps=0)


def test_measure_host_times_no_first_call_of_a_copy():
    """Each call's first run is slow (a weight computing what it keeps): with `warm_each` and
    fewer warm-up calls asked than there are calls, each is still made once before timing."""
    seen = set()

    def call(i):
        if i not in seen:
            seen.add(i)
            time.sleep(0.05)
    calls = [lambda i=i: call(i) for i in range(4)]
    t = measure(calls, torch.device("cpu"), warmup=0, reps=5, warm_each=True)
    assert t.high < 0.02
    seen.clear()
    assert measure(calls, torch.device("cpu"), warmup=0, reps=5).high >= 0.05


def test_backends_unavailable_are_skipped_with_reason():
    ok, skipped = runnable_backends(softfp8.Format.E4M3, 1, torch.device("cpu"),
                                    [Backend.NATIVE, Backend.TORCH])
    assert ok == [Backend.TORCH]
    assert skipped[0]["backend"] == "native" and skipped[0]["reason"]
    ok, _ = runnable_backends(softfp8.Format.E4M3, 1, torch.device("cpu"), None)
    assert ok[-1] is Backend.AUTO and Backend.NATIVE not in ok


def test_shapes_cpu(tmp_path):
    rc, r = _run(tmp_path, "shapes", "--backends", "torch,auto")
    assert rc == 0
    _check_common(r, "shapes")
    rows = r["rows"]
    _check_rows(rows)
    # CPU baselines: fp32, fp16 and bf16, as F.linear and as mv, and torch's int8 weight-only
    # kernel (bf16 x); speedup vs the fastest of them. onnxruntime's MatMulNBits beside, not among them.
    torch_impls = {x["impl"] for x in rows if x["kind"] == "torch"}
    assert torch_impls == {f"torch {d} {op}" for d in ("float32", "float16", "bfloat16")
                           for op in ("F.linear", "mv")} | {"torch int8pack bfloat16"}
    anchors = [x for x in rows if x["kind"] == "anchor"]
    if importlib.util.find_spec("onnxruntime") and importlib.util.find_spec("onnx"):
        assert {x["impl"] for x in anchors} == {f"onnxruntime MatMulNBits {b}-bit" for b in (8, 4)}
        assert all("ms" in x and x["rel_err_vs_decoded"] < 0.05 for x in anchors)
    for shape in ("custom 96x160", "custom 40x72"):
        group = [x for x in rows if x["shape"] == shape]
        fastest = min(x["ms"] for x in group if x["kind"] == "torch")
        fp16 = next(x["ms"] for x in group if x["impl"] == "torch float16 F.linear")
        for x in group:
            assert x["speedup_vs_fastest_torch"] == pytest.approx(fastest / x["ms"])
            assert x["speedup_vs_fp16"] == pytest.approx(fp16 / x["ms"])
    soft = [x for x in rows if x["kind"] == "softfp8"]
    assert {(x["format"], x["backend"]) for x in soft} == {
        (f.value, b) for f in softfp8.Format for b in ("torch", "auto")}
    for x in soft:
        assert x["check"] == "ok" and x["rel_err_vs_torch_ref"] <= 1e-6
        # FP4 rows say which E2M1 decoder ran (the torch reference selects), 8-bit rows none
        fp4 = x["format"] in ("nvfp4", "mxfp4")
        assert ("e2m1" in x) == fp4 and (not fp4 or x["e2m1"] in ("inject", "select"))
        if x["backend"] == "torch" and fp4:
            assert x["e2m1"] == "select" and "selection" in x["e2m1_reason"]
        n, k = x["n"], x["k"]
        assert x["bytes"] == model.packed_nbytes(n, k, x["format"]) + 4 * (n + k)  # fp32 x, y
    assert {a["impl"] for a in r["summary"]} == {x["impl"] for x in rows}
    logged = [json.loads(line) for line in (tmp_path / "receipt.log.jsonl").read_text().splitlines()]
    # The progress log holds the memory report, then every row as it was measured.
    assert logged[0]["memory"]["read_method"] == r["memory"]["read_method"]
    assert [(x["impl"], x["ms"]) for x in logged[1:]] == [(x["impl"], x["ms"]) for x in rows]
    md = (tmp_path / "receipt.md").read_text()  # the table for docs/performance.md, with its command
    assert f"`{r['command']}`" in md and r["date"] in md and f"torch {torch.__version__}" in md
    assert md.count("| custom 96x160 |") == len([x for x in rows if x["shape"] == "custom 96x160"])


def test_token_cpu(tmp_path):
    rc, r = _run(tmp_path, "token", "--layers", "3", "--formats", "e4m3,mxfp4")
    assert rc == 0
    _check_common(r, "token")
    assert r["token_linears"] == 6 and len(r["linears"]) == 6
    assert _positive_finite(r["coefficient"]["value"])
    _check_rows(r["rows"], numeric=("ms", "GB_per_s", "bytes", "speedup_vs_fp16", "predicted_ms",
                                    "tok_per_s"))
    assert {x["impl"] for x in r["rows"]} >= {"torch float16 F.linear", "e4m3 auto", "mxfp4 auto"}
    mx = next(x for x in r["rows"] if x["impl"] == "mxfp4 auto")
    assert mx["e2m1"] in ("inject", "select") and mx["e2m1_reason"]
    for x in r["rows"]:
        assert "plain loop" in x["method"]
        assert x["tok_per_s"] == pytest.approx(1e3 / x["ms"])
        bw = r["memory"]["read_bandwidth_GB_per_s"] * 1e9
        pred = model.predicted_seconds_per_token(x["bytes"], bw, r["coefficient"]["value"])
        assert x["predicted_ms"] == pytest.approx(pred * 1e3)


def test_bandwidth_cpu(tmp_path):
    rc, r = _run(tmp_path, "bandwidth", "--formats", "e5m2,nvfp4")
    assert rc == 0
    _check_common(r, "bandwidth")
    coef = r["coefficient"]
    assert _positive_finite(coef["value"]) and len(coef["rows"]) == 2
    preds = {p["impl"]: p for p in r["token_predictions"]}
    assert set(preds) == {"token model: fp16", "token model: e5m2", "token model: nvfp4"}
    for p in preds.values():
        assert _positive_finite(p["predicted_ms"]) and _positive_finite(p["bytes"])
    # fp16 bytes of the shapes are predicted at the measured fp16 total (the definition).
    fp16_total = sum(x["ms"] for x in coef["rows"])
    assert preds["token model: fp16"]["predicted_ms"] == pytest.approx(fp16_total)
    assert preds["token model: nvfp4"]["predicted_ms"] < preds["token model: e5m2"]["predicted_ms"]


@pytest.mark.parametrize("sub,ms", [("small-m", "1,2,4"), ("prefill", "8,16")])
def test_small_m_and_prefill_cpu(tmp_path, sub, ms):
    rc, r = _run(tmp_path, sub, "--m", ms, "--formats", "e5m2,nvfp4")
    assert rc == 0
    _check_common(r, sub)
    _check_rows(r["rows"])
    wanted = [int(v) for v in ms.split(",")]
    assert sorted({x["m"] for x in r["rows"]}) == wanted
    if sub == "small-m":
        for x in r["rows"]:
            assert _positive_finite(x["bw_vs_m1"]) and (x["m"] != 1 or x["bw_vs_m1"] == 1.0)
        assert {a["m"] for a in r["summary"] if a["bw_vs_m1"] is not None} == set(wanted)
    else:
        for x in r["rows"]:
            assert x["TFLOP_per_s"] == pytest.approx(2 * x["m"] * x["n"] * x["k"] / x["ms"] / 1e9)


def test_bad_arguments_name_what_was_expected(capsys):
    with pytest.raises(SystemExit):
        main(["shapes", "--device", "cpu", "--formats", "e9m9"])
    assert "--formats" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["shapes", "--device", "cpu", "--shape", "12"])
    assert "N,K" in capsys.readouterr().err


def test_python_dash_m_writes_receipt(tmp_path):
    out = tmp_path / "sub.json"
    proc = subprocess.run([sys.executable, "-m", "softfp8.bench", "shapes", *TINY, "--formats",
                           "e5m2", "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "torch float16 F.linear" in proc.stdout and f"receipt: {out}" in proc.stdout
    r = json.loads(out.read_text())
    _check_rows(r["rows"])


def test_triton_read_kernel_interpreted():
    pytest.importorskip("triton")
    code = ("import torch\nfrom softfp8.bench import _triton_read as t\n"
            "x = torch.randn(3 * t.CHUNK)\nout = torch.empty(3)\nt.read_sum(x, out)\n"
            "ref = x.double().view(3, -1).sum(1)\n"
            "assert torch.allclose(out.double(), ref, rtol=1e-4, atol=1e-2), (out, ref)\n")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_triton_read_kernel_issues_16_byte_loads_on_sm90():
    pytest.importorskip("triton")
    # Compiled in a subprocess without TRITON_INTERPRET (conftest sets it for this process, and
    # interpreted @triton.jit objects can't be compiled).
    code = (
        "import triton\nfrom triton.backends.compiler import GPUTarget\n"
        "from softfp8.bench import _triton_read as t\n"
        "src = triton.compiler.ASTSource(fn=t._sum_chunks, signature={'x_ptr': '*fp32', "
        "'out_ptr': '*fp32', 'BLOCK': 'constexpr', 'ITERS': 'constexpr'}, "
        "constexprs={'BLOCK': t.BLOCK, 'ITERS': t.ITERS}, "
        "attrs={(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]]})\n"
        "ptx = triton.compile(src, target=GPUTarget('cuda', 90, 32), "
        "options={'num_warps': 8}).asm['ptx']\n"
        "print('\\n'.join(l.split()[0] for l in ptx.splitlines() if 'ld.global' in l))\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loads = proc.stdout.split()
    assert loads and all(".v4." in op for op in loads), sorted(set(loads))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_shapes_cuda_uses_graphs(tmp_path):
    out = tmp_path / "gpu.json"
    rc = main(["shapes", "--device", "cuda", "--shape", "4096,4096", "--formats", "e5m2",
               "--reps", "10", "--out", str(out)])
    r = json.loads(out.read_text())
    assert rc == 0
    _check_rows(r["rows"])
    assert all("cuda graph" in x["method"] for x in r["rows"])
    assert r["settings"]["l2"] > 0


@pytest.mark.parametrize("name, config", [
    ("llama2-7b-hf", dict(intermediate_size=11008, num_key_value_heads=32, vocab_size=32000)),
    ("llama3-8b-hf", dict(intermediate_size=14336, num_key_value_heads=8, vocab_size=128256)),
])
def test_hf_presets_are_transformers_linears(name, config):
    """The -hf presets list the Linear shapes transformers' Llama holds, in its order."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(hidden_size=4096, num_attention_heads=32, num_hidden_layers=1,
                                   tie_word_embeddings=False, **config)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    linears = [(m.out_features, m.in_features) for m in model.modules()
               if isinstance(m, torch.nn.Linear)]
    p = PRESETS[name]
    assert linears == [(s.n, s.k) for s in p.layer_shapes] + [(p.head.n, p.head.k)]


def test_token_cpu_on_a_preset_whose_linears_share_shapes(tmp_path, monkeypatch):
    # transformers' layouts repeat one N x K under several names (q, k, v): each distinct shape
    # is one weight to rotate, each linear its own copy (a dict keyed by the named Shape raised
    # KeyError here before)
    from softfp8.bench.presets import Preset

    tiny = Preset("tiny-hf", 2, (Shape("q", 48, 64), Shape("k", 48, 64), Shape("up", 96, 64),
                                 Shape("down", 64, 96)), head=Shape("lm_head", 80, 64))
    monkeypatch.setitem(PRESETS, "tiny-hf", tiny)
    assert [s.label for s in tiny.shapes()] == ["q/k 48x64", "up 96x64", "down 64x96",
                                                "lm_head 80x64"]
    out = tmp_path / "receipt.json"
    assert main(["token", "--preset", "tiny-hf", "--formats", "e5m2", "--device", "cpu",
                 "--rotate", "0.001", "--mbytes", "4", "--reps", "2", "--warmup", "1",
                 "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["token_linears"] == 2 * 4 + 1
    rows = {x["impl"]: x for x in r["rows"]}
    n_k = [(48, 64), (48, 64), (96, 64), (64, 96)] * 2 + [(80, 64)]
    fp16_bytes = sum(model.bytes_moved(2 * n * k, 1, n, k, 2) for n, k in n_k)
    assert rows["torch float16 F.linear"]["bytes"] == fp16_bytes
    assert all(x["ms"] > 0 for x in rows.values())


@pytest.mark.parametrize("sub", ["small-m", "prefill", "token"])
def test_cpu_defaults_are_cpu_sized(tmp_path, monkeypatch, sub):
    """On the CPU, small-m, prefill and token default to a 1B model's shapes (prefill at M = 128
    and 512, token over 2 layers and the head): the GPU's 7-8B defaults ran for minutes there
    printing nothing, and token's copies of every weight took 14 GB."""
    from softfp8.bench import commands

    seen = {}

    def fake(name):
        def run(s, shapes, *rest):
            seen.update(name=name, shapes=[(x.n, x.k) for x in shapes], rest=rest, echo=s.echo)
            return [], {"rows": []}
        return run

    monkeypatch.setattr(commands, "small_m_cmd", fake("small-m"))
    monkeypatch.setattr(commands, "prefill_cmd", fake("prefill"))
    monkeypatch.setattr(commands, "token_cmd", fake("token"))
    assert main([sub, "--device", "cpu", "--out", str(tmp_path / "r.json")]) == 0
    one_b = [(s.n, s.k) for s in PRESETS["llama3.2-1b"].shapes()]
    assert seen["name"] == sub and seen["shapes"] == one_b and seen["echo"]
    if sub == "prefill":
        assert seen["rest"][-1] == [128, 512]
    if sub == "token":
        assert len(seen["rest"][0]) == 2 * 4 + 1  # linears: two layers and the lm_head


def test_cpu_rows_are_printed_as_they_are_measured(tmp_path, capsys):
    rc, r = _run(tmp_path, "small-m", "--m", "1,3", "--formats", "e4m3")
    assert rc == 0
    printed = capsys.readouterr().out
    for x in r["rows"]:
        assert f"  {x['shape']} {x['m']} {x['impl']}: {x['ms']:.3f} ms" in printed
    assert {x["impl"] for x in r["rows"]} >= {"torch float32 F.linear",
                                              "torch bfloat16 F.linear"}
