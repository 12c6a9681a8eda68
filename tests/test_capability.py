"""probe(): what it measures on this (CPU-only) machine, FTZ for real, caching, threads, and
injected facts for hardware that isn't here."""
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time

import pytest
import torch

import softfp8
from fake_backends import mock_gpus
from softfp8 import _probes, capability
from softfp8.capability import Check, Runtime, Status

NO_GPU = not torch.cuda.is_available()
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@pytest.fixture
def report():
    return capability.probe()


def test_cpu_report(report):
    cpu = report.device("cpu")
    assert cpu is not None and cpu.runtime is Runtime.CPU and cpu is report.devices[0]
    assert report.versions.torch == torch.__version__
    assert cpu.ftz_torch.status is Status.NO, cpu.ftz_torch  # FTZ off: denormals survive
    assert cpu.ftz_torch.value == (0.5, -0.5)
    assert cpu.float8.status is not Status.UNKNOWN and cpu.scaled_mm.status is not Status.UNKNOWN
    assert cpu.native_fp8 == (cpu.float8.is_yes and cpu.scaled_mm.is_yes)
    assert report.thread_denormals == "FTZ off, DAZ off"
    json.dumps(report.to_dict())  # plain data all the way down


@pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="numba not installed")
def test_numba_ftz_measured_off(report):
    import numba
    cpu = report.device("cpu")
    assert report.versions.numba == numba.__version__
    assert cpu.numba.is_yes, cpu.numba
    assert cpu.ftz_numba.status is Status.NO and cpu.ftz_numba.value == (0.5, -0.5), cpu.ftz_numba
    assert "parallel workers" in cpu.ftz_numba.detail


@pytest.mark.skipif(not NO_GPU or INTERPRET, reason="needs a CPU-only machine, no interpreter")
def test_triton_unavailable_with_reason(report):
    assert report.gpus == ()
    assert report.triton.status is Status.NO and "no GPU" in report.triton.detail
    cpu = report.device("cpu")
    assert cpu.triton.is_no and "TRITON_INTERPRET=1" in cpu.triton.detail
    assert cpu.ftz_triton.status is Status.UNKNOWN


def test_ftz_is_measured_on_the_calling_thread(report, flush_denormals):
    assert capability.thread_denormal_mode() == (True, True)
    flushed = capability.probe()  # another denormal mode: another cache entry, measured now
    assert flushed is not report and flushed.thread_denormals == "FTZ on, DAZ on"
    cpu = flushed.device("cpu")
    assert cpu.ftz_torch.is_yes and cpu.ftz_torch.value == (0.0, -0.0), cpu.ftz_torch
    if cpu.numba.is_yes:
        assert cpu.ftz_numba.is_yes, cpu.ftz_numba
    assert capability.probe(refresh=True).device("cpu").ftz_torch.is_yes


def test_cached_call_under_a_millisecond(report):
    assert capability.probe() is report
    start = time.perf_counter()
    for _ in range(1000):
        capability.probe()
    per_call = (time.perf_counter() - start) / 1000
    assert per_call < 1e-3, f"{per_call * 1e6:.1f} us per cached call"


def test_eight_threads_get_one_report(monkeypatch):
    monkeypatch.setattr(capability, "_CACHE", {})  # cold: the threads race to measure
    barrier, results, errors = threading.Barrier(8), [], []

    def call():
        try:
            barrier.wait()
            results.append(capability.probe())
        except Exception as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(results) == 8
    assert all(r is results[0] for r in results)


def test_a_failing_sub_probe_is_unknown(monkeypatch):
    def boom(self, dev):
        raise RuntimeError("boom")

    monkeypatch.setattr(_probes.SubProbes, "float8", boom)
    cpu = capability.collect().device("cpu")
    assert cpu.float8.status is Status.UNKNOWN and "RuntimeError: boom" in cpu.float8.detail
    assert cpu.ftz_torch.status is Status.NO  # the others still ran


def test_probe_never_raises(monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(capability, "_CACHE", {})
    monkeypatch.setattr(capability, "collect", broken)
    report = capability.probe(refresh=True)
    assert isinstance(report, capability.CapabilityReport)
    assert "a bug" in report.devices[0].name


def test_missing_numba_is_reported(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "numba" else real(name, *a))
    report = capability.collect()
    cpu = report.device("cpu")
    assert report.versions.numba is None
    assert cpu.numba.is_no and "not installed" in cpu.numba.detail
    assert cpu.ftz_numba.status is Status.UNKNOWN


def test_injected_facts_replace_sub_probes():
    fake = Check.yes("mocked flush")
    report = capability.collect(facts={("cpu", "ftz_numba"): fake, ("*", "float8"): Check.no("x")})
    assert report.device("cpu").ftz_numba is fake
    assert report.device("cpu").float8 == Check.no("x")


def test_mocked_cuda_devices_are_enumerated(monkeypatch):
    mock_gpus(monkeypatch, [(6, 1), (9, 0)])
    report = capability.collect(facts={("cuda:1", "triton"): Check.yes("mocked")})
    p40, h = report.device("cuda:0"), report.device("cuda:1")
    assert (p40.runtime, p40.capability, p40.arch, p40.name) == (Runtime.CUDA, (6, 1), "sm_61",
                                                                 "Fake GPU 0")
    assert h.capability == (9, 0) and h.memory_bytes == 2 << 34
    # Measured by the probe's own logic, no GPU needed: Triton's floor is 7.0.
    assert p40.triton.is_no and "6.1 is below 7.0" in p40.triton.detail
    assert h.triton.detail == "mocked"
    # Sub-probes that need the (absent) hardware fail as UNKNOWN/NO with a reason, never raise.
    assert p40.ftz_torch.status is Status.UNKNOWN and "sub-probe failed" in p40.ftz_torch.detail
    assert report.triton.is_yes and "cuda:1" in report.triton.detail


def test_mocked_rocm_device(monkeypatch):
    mock_gpus(monkeypatch, [(9, 4)], hip="6.2")
    dev = capability.collect(facts={("*", "triton"): Check.no("mocked")}).device("cuda:0")
    assert dev.runtime is Runtime.ROCM and dev.capability is None
    assert dev.arch.startswith("gfx942")


def test_cpu_bandwidth_is_measured():
    check = capability.collect(bandwidth=True).device("cpu").bandwidth
    assert check.is_yes and check.value > 0.1, check  # GB/s; any real machine reads faster


def test_import_has_no_side_effects():
    code = ("import sys, softfp8, softfp8.dispatch, softfp8.capability; "
            "assert softfp8.capability._CACHE == {}; "
            "assert 'numba' not in sys.modules and 'triton' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_public_names():
    assert softfp8.CapabilityReport is capability.CapabilityReport
    assert isinstance(softfp8.probe(), softfp8.CapabilityReport)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")
def test_triton_sub_probe_in_the_interpreter(monkeypatch):
    # The real Triton FTZ kernel, run on the CPU by Triton's interpreter: both modes measured.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(_probes, "_TRITON_KERNEL", None)  # define it anew, interpreted
    report = capability.collect()
    cpu = report.device("cpu")
    assert report.triton_interpret and report.triton.is_yes, report.triton
    assert cpu.triton.is_yes and "interpreter" in cpu.triton.detail
    assert cpu.ftz_triton.is_no and cpu.ftz_triton.value == (0.5, -0.5), cpu.ftz_triton
    if torch.set_flush_denormal(True):
        try:
            flushed = capability.collect().device("cpu").ftz_triton
        finally:
            torch.set_flush_denormal(False)
        assert flushed.is_yes and flushed.value == (0.0, -0.0), flushed
