"""softfp8.bench.clocks: nvidia-smi's lines parsed and summarized right, and the sampler run
against a stand-in nvidia-smi (a script on PATH that answers like the real one), so the
subprocess, its fallback without the clock-event reasons and the windows are tested without a
GPU."""
import json
import stat
import time
from datetime import datetime

import pytest
import torch

from softfp8.bench import clocks
from softfp8.bench.clocks import ClockSample, ClockSampler, annotate, parse_line, summarize


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def test_parse_line_reads_nvidia_smi_csv():
    t = 1_780_000_000.25
    s = parse_line(f"{_stamp(t)}, 1980, 3201, 412.57, 0x0000000000000004")
    assert s == ClockSample(pytest.approx(t, abs=1e-3), 1980.0, 3201.0, 412.57, 4)
    no_power = parse_line(f"{_stamp(t)}, 1755, 3201, [N/A], 0x0000000000000000")
    assert no_power.power_w is None and no_power.reasons == 0 and no_power.sm_mhz == 1755
    four = parse_line(f"{_stamp(t)}, 1410, 3201, 300.0", fields=4)
    assert four.reasons is None and four.sm_mhz == 1410
    for bad in ("", "timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz]",
                f"{_stamp(t)}, [N/A], 3201, 300.0, 0x0",
                "No devices were found", f"{_stamp(t)}, 1980, 3201, 300.0"):
        assert parse_line(bad) is None, bad


def test_summarize_takes_extremes_and_ors_the_reasons():
    samples = [ClockSample(1.0, 1980, 3201, 400.0, 0), ClockSample(2.0, 1410, 3201, None, 0x4),
               ClockSample(3.0, 1755, 2619, 650.5, 0x20)]
    got = summarize(samples)
    assert got == {"samples": 3, "sm_mhz_min": 1410, "sm_mhz_max": 1980, "mem_mhz_min": 2619,
                   "mem_mhz_max": 3201, "power_w_max": 650.5, "reasons": "0x24"}
    assert summarize([]) is None
    assert summarize([ClockSample(1.0, 1980, 3201, None, None)])["reasons"] is None
    assert clocks.sm_mhz_label(got) == "1410-1980"
    assert clocks.sm_mhz_label(summarize(samples[:1])) == "1980"
    assert clocks.sm_mhz_label(None) is None


FAKE = """#!/usr/bin/env python3
# a stand-in nvidia-smi: --query-gpu=... --format=csv,noheader,nounits [-lms=N]
import sys, time
from datetime import datetime
args = sys.argv[1:]
query = next(a for a in args if a.startswith("--query-gpu=")).split("=", 1)[1].split(",")
if REFUSE and "clocks_event_reasons.active" in query:
    print('Field "clocks_event_reasons.active" is not a valid field to query.', file=sys.stderr)
    sys.exit(2)
loop = next((int(a.split("=")[1]) for a in args if a.startswith("-lms=")), None)
def line(i):
    vals = {"timestamp": datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3],
            "clocks.sm": str(1980 - (i % 2) * 570), "clocks.mem": "3201",
            "power.draw": "401.25", "clocks_event_reasons.active": "0x0000000000000001"}
    return ", ".join(vals[q] for q in query)
i = 0
while True:
    print(line(i), flush=True)  # a pipe: without it the lines wait in a buffer
    if loop is None:
        break
    i += 1
    time.sleep(loop / 1000)
"""


def _fake_smi(tmp_path, refuse: bool) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text(FAKE.replace("REFUSE", str(refuse)))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.mark.parametrize("refuse", [False, True])
def test_sampler_runs_nvidia_smi_and_windows_its_samples(tmp_path, refuse):
    exe = _fake_smi(tmp_path, refuse)
    sampler = ClockSampler("GPU-0", period_ms=10, exe=exe)
    assert sampler.source.startswith(exe) and ("clocks_event_reasons" in sampler.source) != refuse
    t0 = time.time()
    with sampler:
        time.sleep(0.4)
        t1 = time.time()
        time.sleep(0.2)
    assert sampler._proc is None  # stopped: the subprocess is gone
    got = sampler.window(t0, t1)
    assert got is not None and got["samples"] >= 5
    assert (got["sm_mhz_min"], got["sm_mhz_max"], got["mem_mhz_max"]) == (1410, 1980, 3201)
    assert got["reasons"] == (None if refuse else "0x1")
    everything = sampler.window(t0 - 1, t1 + 10)["samples"]
    assert everything > got["samples"]  # the 0.2 s after t1 sampled, outside the window
    assert sampler.window(t1 + 60, t1 + 61) is None
    t_mid = t0 + 0.2
    rows = [{"impl": "a", "window_s": [t0, t_mid, t1]}, {"impl": "b"},
            {"impl": "c", "window_s": [t1 + 60, t1 + 60.5, t1 + 61]},
            {"impl": "d", "window_s": [t0, t1 - 0.001, t1]}]
    annotate(rows, sampler)
    assert rows[0]["clocks"] == got and rows[0]["sm_mhz"] == "1410-1980"
    assert 1 <= rows[0]["clocks_timed"]["samples"] < got["samples"]
    assert rows[0]["clocks_timed"] == sampler.window(t_mid - 0.01, t1 + 0.01)
    assert "clocks" not in rows[1] and "clocks" not in rows[2] and "sm_mhz" not in rows[2]
    # a timed part shorter than the period still gets the samples a period either side of it
    assert rows[3]["clocks_timed"]["samples"] >= 1


def test_sampler_of_nothing_says_why(tmp_path):
    cpu = ClockSampler.for_device(torch.device("cpu"))
    assert cpu.source == "none (not an NVIDIA GPU)"
    with cpu:  # starts and stops nothing
        pass
    assert cpu.window(0, time.time()) is None
    missing = ClockSampler("GPU-0", exe=str(tmp_path / "no-such-nvidia-smi"))
    assert "not found" in missing.source
    broken = tmp_path / "broken-smi"
    broken.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    said = ClockSampler("GPU-0", exe=str(broken))
    assert said.source == f"none ({broken} said: NVIDIA-SMI has failed)"
    assert said.start()._proc is None
    with pytest.raises(ValueError, match="period_ms=0"):
        ClockSampler("GPU-0", period_ms=0)


def test_cpu_bench_rows_have_no_clocks(tmp_path):
    from softfp8.bench import main
    out = tmp_path / "r.json"
    assert main(["shapes", "--device", "cpu", "--shape", "40,72", "--formats", "e5m2",
                 "--backends", "torch", "--rotate", "0.001", "--mbytes", "4", "--reps", "2",
                 "--warmup", "1", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["settings"]["clocks"] == "off"
    assert all("clocks" not in x and "window_s" not in x for x in r["rows"])
    assert "SM MHz" not in out.with_suffix(".md").read_text()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_bench_rows_carry_their_clocks(tmp_path):
    """On an NVIDIA GPU with nvidia-smi every timed row gets the clocks seen while it ran."""
    from softfp8.bench import main
    out = tmp_path / "g.json"
    assert main(["shapes", "--device", "cuda", "--shape", "4096,4096", "--formats", "e5m2",
                 "--backends", "triton", "--reps", "10", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    for x in r["rows"]:
        t0, t_timed, t1 = x["window_s"]
        assert t_timed - t0 >= 0.2 and t1 > t_timed  # the warm-up alone is >= 200 ms busy
        # the warm-up's ~10 ms chunks, ms a call each: >= 0.2 s busy in all
        assert len(x["warm_ms"]) >= 2 and all(w > 0 for w in x["warm_ms"])
    if r["settings"]["clocks"].startswith("none") or torch.version.hip:
        pytest.skip(f"no clocks here: {r['settings']['clocks']}")
    for x in r["rows"] + [r["memory"]["copy"], *r["memory"]["reads"]]:
        assert x["clocks"]["samples"] >= 2 and x["clocks"]["sm_mhz_min"] > 0, x
        assert x["clocks_timed"]["samples"] >= 1, x
    assert "SM MHz" in out.with_suffix(".md").read_text()

