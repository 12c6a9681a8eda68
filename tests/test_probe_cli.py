"""`python -m softfp8.probe`: a real subprocess (cold probe, JSON), and the text report."""
import importlib
import json
import os
import subprocess
import sys

import pytest
from fake_backends import install, mock_gpus

import softfp8
from softfp8 import Format, capability
from softfp8.capability import Check

# softfp8.probe is also the function; the module is the CLI.
probe_cli = importlib.import_module("softfp8.probe")


def test_cli_json_in_a_fresh_process(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SOFTFP8_", "TRITON_INT"))}
    env["NUMBA_CACHE_DIR"] = str(tmp_path)  # an empty cache: the cold probe compiles
    out = subprocess.run([sys.executable, "-m", "softfp8.probe", "--json"], env=env, check=True,
                         capture_output=True, text=True, timeout=120).stdout
    data = json.loads(out)
    report = data["report"]
    cpu = report["devices"][0]
    assert cpu["device"] == "cpu" and cpu["ftz_torch"]["status"] == "no"
    # The acceptance bound, on this 2-core machine, Numba compilation included.
    assert report["probe_seconds"] < 10, report["probe_seconds"]
    rows = [r for r in data["routing"] if r["device"] == "cpu"]
    assert sorted((r["format"], r["m"]) for r in rows) == sorted(
        (f.value, m) for f in Format for m in (1, probe_cli.LARGE_M))
    for row in rows:
        assert row["backend"] in ("numba", "torch") and row["reason"].startswith("auto: ")
        assert (row["e2m1"] is None) == (row["format"] in ("e5m2", "e4m3", "e4m3_b128"))


def test_text_report_names_every_check_and_format(capsys):
    assert probe_cli.main([]) == 0
    text = capsys.readouterr().out
    for needle in ("devices", "cpu (cpu)", "FTZ, torch ops", "Triton launches", "Numba runs",
                   "routing", "why: auto:", "E2M1:", *(f.value for f in Format)):
        assert needle in text, needle


def test_text_report_for_a_mocked_gpu(monkeypatch, capsys):
    install(monkeypatch)
    mock_gpus(monkeypatch, [(8, 6)])
    facts = {("cuda:0", "triton"): Check.yes("mocked: launched"),
             ("cuda:0", "ftz_triton"): Check.no("mocked: survive"),
             ("cuda:0", "scaled_mm"): Check.no("mocked: torch._scaled_mm raised")}
    report = capability.collect(facts=facts)
    monkeypatch.setattr(capability, "probe", lambda *a, **k: report)
    probe_cli.main(["--json"])
    rows = json.loads(capsys.readouterr().out)["routing"]
    gpu = {(r["format"], r["m"]): r for r in rows if r["device"] == "cuda:0"}
    assert gpu[("nvfp4", 1)]["backend"] == "triton" and gpu[("nvfp4", 1)]["e2m1"] == "inject"
    probe_cli.main([])
    text = capsys.readouterr().out
    assert "cuda:0 (cuda): Fake GPU 0, sm_86, compute capability 8.6, 16.0 GiB" in text
    assert "-> triton, E2M1 inject" in text


def test_routing_errors_are_reported_not_raised(monkeypatch, capsys):
    monkeypatch.setenv("SOFTFP8_BACKEND", "warp-drive")
    assert probe_cli.main([]) == 0
    assert "error: SOFTFP8_BACKEND='warp-drive' is not valid" in capsys.readouterr().out


def test_native_fp8_line_says_whether_backend_native_runs_on_each_device(monkeypatch, capsys):
    """'native FP8 yes' only where backend='native' runs: not on the CPU, though torch's float8
    tensors and _scaled_mm work there, nor on a GPU below compute capability 8.9; the JSON says
    the same, with the reason."""
    from softfp8.backends import native

    install(monkeypatch, native={"NEEDS": native.NEEDS})
    mock_gpus(monkeypatch, [(9, 0), (8, 6)])
    works = Check.yes("mocked: works")
    facts = {(d, c): works for d in ("cpu", "cuda:0", "cuda:1") for c in ("float8", "scaled_mm")}
    report = capability.collect(facts=facts)
    monkeypatch.setattr(capability, "probe", lambda *a, **k: report)
    probe_cli.main([])
    lines = [ln.split(None, 2)[2] for ln in capsys.readouterr().out.splitlines()
             if ln.strip().startswith("native FP8")]
    assert len(lines) == 3, lines  # cpu, cuda:0, cuda:1
    cpu, h100, a100 = lines
    assert cpu.startswith("no ") and "not cpu" in cpu, cpu
    assert h100.startswith("yes ") and "backend='native' runs here" in h100, h100
    assert a100.startswith("no ") and "8.9 or newer, this GPU has 8.6" in a100, a100
    probe_cli.main(["--json"])
    native_fp8 = json.loads(capsys.readouterr().out)["native_fp8"]
    assert {d: v["runs"] for d, v in native_fp8.items()} == {
        "cpu": False, "cuda:0": True, "cuda:1": False}
    assert "not cpu" in native_fp8["cpu"]["why_not"] and native_fp8["cuda:0"]["why_not"] is None


def test_overrides_line_shows_every_setting_and_what_is_wrong_with_it(monkeypatch, capsys):
    """Every SOFTFP8_* variable set is shown (not only the routing ones), an invalid value with
    what it takes, a name no setting has as read by nothing; every routing row then reports
    the invalid value as its error."""
    monkeypatch.setenv("SOFTFP8_FP8_DECODE", "integer")
    monkeypatch.setenv("SOFTFP8_NUMBA_FP4_LUT", "avx3")
    monkeypatch.setenv("SOFTFP8_MMA_STAGES", "3")
    assert probe_cli.main([]) == 0
    text = capsys.readouterr().out
    overrides = next(ln for ln in text.splitlines() if ln.startswith("overrides: "))
    assert "SOFTFP8_FP8_DECODE=integer," in overrides, overrides
    assert ("SOFTFP8_NUMBA_FP4_LUT=avx3 (invalid: expected one of '1', '0', 'avx2', 'avx512')"
            in overrides), overrides
    assert "SOFTFP8_MMA_STAGES=3 (read by nothing: no such setting)" in overrides, overrides
    errors = [ln for ln in text.splitlines() if "-> error: SOFTFP8_NUMBA_FP4_LUT='avx3'" in ln]
    assert len(errors) == len(Format), text


def test_overrides_line_names_the_launch_settings_in_force(capsys):
    """Inside a `launch_settings` block the report names what the block put in force (and
    nothing outside one)."""
    import softfp8

    assert probe_cli.main([]) == 0
    assert "in force here" not in capsys.readouterr().out
    with softfp8.launch_settings(backend="torch", numba_fp4_lut="0"):
        assert probe_cli.main([]) == 0
    overrides = next(ln for ln in capsys.readouterr().out.splitlines()
                     if ln.startswith("overrides: "))
    assert overrides.endswith("in force here: launch_settings(backend='torch'), "
                              "launch_settings(numba_fp4_lut='0')"), overrides


def test_softfp8_probe_stays_callable_after_the_cli_module_is_imported():
    import softfp8.probe  # noqa: F401 - rebinds the package attribute to the module
    assert isinstance(softfp8.probe(), softfp8.CapabilityReport)
    assert softfp8.probe() is capability.probe()


@pytest.mark.gpu
def test_gpu_report_on_real_hardware(capsys):
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    report = capability.probe(bandwidth=True)
    gpu = report.device("cuda:0")
    assert gpu.triton.is_yes and gpu.ftz_triton.status is not capability.Status.UNKNOWN
    assert gpu.bandwidth.is_yes and gpu.bandwidth.value > 50
    probe_cli.main(["--bandwidth"])
    assert "cuda:0" in capsys.readouterr().out
