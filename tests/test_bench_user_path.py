"""softfp8-bench generate and calls (softfp8/bench/user_path.py) run on the CPU and write sound
receipts. Timings here are of a tiny model on a shared CPU: structure, never speed."""
from __future__ import annotations

import json
import math

import pytest

from softfp8.bench import main
from softfp8.bench.user_path import LLAMA_PRESETS


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def test_generate_on_cpu_reports_each_variant_against_bf16(tmp_path):
    out = tmp_path / "gen.json"
    rc = main(["generate", "--device", "cpu", "--preset", "tiny", "--layers", "1",
               "--formats", "e5m2,nvfp4", "--modes", "eager", "--short", "1", "--long", "3",
               "--repeats", "1", "--out", str(out)])
    assert rc == 0
    receipt = json.loads(out.read_text())
    assert receipt["subcommand"] == "generate" and receipt["preset"] == "tiny"
    assert receipt["command"].startswith("softfp8-bench generate ")
    rows = receipt["rows"]
    assert [(r["variant"], r["mode"]) for r in rows] == [("bf16", "eager"), ("e5m2", "eager"),
                                                         ("nvfp4", "eager")]
    for r in rows:
        assert _positive(r["call_tok_per_s"]), r
        # the decode rate is a difference of two timings: on a loaded CPU it may come out
        # non-positive, and then it must say so (NaN), never a negative speed
        assert _positive(r["tok_per_s"]) or (math.isnan(r["tok_per_s"])
                                             and r["ms_per_token"] <= 0), r
        assert r["graphs_recorded_timed"] is None  # CPU: no CUDA graphs to count
        assert _positive(r["weight_bytes"])
    assert rows[0].get("speedup_vs_base") in (1.0, None)  # None: the base rate was noise
    assert rows[1]["weight_bytes"] < rows[0]["weight_bytes"]  # packed: fewer bytes
    assert rows[2]["weight_bytes"] < rows[1]["weight_bytes"]
    assert 0 < rows[1]["logits_rel_err"] < 0.5  # converted, and not garbage
    if "speedup_vs_base" in rows[1]:
        assert rows[1]["speedup_vs_base"] == pytest.approx(rows[1]["tok_per_s"]
                                                           / rows[0]["tok_per_s"])


def test_calls_on_cpu_times_each_format_against_f_linear(tmp_path, capsys):
    out = tmp_path / "calls.json"
    rc = main(["calls", "--device", "cpu", "--shape", "64,128", "--calls", "5", "--rounds", "2",
               "--out", str(out)])
    assert rc == 0
    receipt = json.loads(out.read_text())
    impls = [r["impl"] for r in receipt["rows"]]
    assert impls == ["fp32 F.linear", "e5m2 Linear", "e4m3 Linear", "nvfp4 Linear",
                     "mxfp4 Linear"]
    assert all(_positive(r["us_per_call"]) for r in receipt["rows"])
    assert receipt["rows"][0]["vs_base"] == 1.0
    assert "gemv" in receipt["profile"] or "matmul" in receipt["profile"]  # the E5M2 profile
    assert "where an E5M2 call's host time goes" in capsys.readouterr().out


def test_bad_arguments_name_what_was_expected():
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--device", "cpu", "--modes", "warp"])
    assert "unknown mode 'warp'" in str(exc.value.code)
    with pytest.raises(ValueError, match="not a softfp8 format"):
        main(["calls", "--device", "cpu", "--formats", "e9m9"])


def test_presets_are_llama_configs():
    import transformers

    for name, fields in LLAMA_PRESETS.items():
        config = transformers.LlamaConfig(**fields)
        assert config.hidden_size % config.num_attention_heads == 0, name
