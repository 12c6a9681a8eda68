"""select(): routing by the probe report, for this machine and for GPUs mocked with their measured
facts; overrides, activation quantization, the E2M1 decoder, the cache; FTZ end to end."""
import importlib.util
import time

import pytest
import torch
from conftest import rel_err
from fake_backends import NATIVE_MIN_M, install, mock_gpus, remove

import softfp8
from softfp8 import ActivationQuant, Backend, E2M1Decode, Format, _settings, capability, dispatch
from softfp8.capability import CapabilityReport, Check, DeviceReport, Runtime
from softfp8.dispatch import BackendUnavailable, select
from softfp8.quantize import unpack_codes

FP4 = (Format.NVFP4, Format.MXFP4)
LARGE_M = 4096
# The CPU facts are measured elsewhere (test_capability); here they are given, to keep this fast.
CPU_FACTS = {("cpu", "float8"): Check.yes("given"), ("cpu", "scaled_mm"): Check.yes("given"),
             ("cpu", "ftz_torch"): Check.no("given"), ("cpu", "numba"): Check.yes("given"),
             ("cpu", "ftz_numba"): Check.no("given")}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in (dispatch.BACKEND_ENV, dispatch.E2M1_DECODE_ENV, dispatch.ACTIVATION_QUANT_ENV):
        monkeypatch.delenv(name, raising=False)


# name: (compute capability, hip version, _scaled_mm works, what a GPU of that kind is)
GPUS = {
    "p40": ((6, 1), None, False), "v100": ((7, 0), None, False), "t4": ((7, 5), None, False),
    "a100": ((8, 0), None, False), "rtx3090": ((8, 6), None, False), "l4": ((8, 9), None, True),
    "h100": ((9, 0), None, True), "mi300x": ((9, 4), "6.2", True),
    "mi250": ((9, 0), "6.2", False),
}


def gpu_report(monkeypatch, name, *, triton_flushes=False):
    """The probe's report on a mocked GPU, with the facts its sub-probes would measure there."""
    cap, hip, fp8 = GPUS[name]
    mock_gpus(monkeypatch, [cap], hip=hip, arch="gfx90a" if name == "mi250" else "gfx942")
    facts = dict(CPU_FACTS)
    facts[("cuda:0", "float8")] = Check.yes("mocked: float8 round trip exact")
    facts[("cuda:0", "scaled_mm")] = (Check.yes("mocked: _scaled_mm ran") if fp8 else Check.no(
        "mocked: torch._scaled_mm raised RuntimeError: needs FP8 hardware"))
    facts[("cuda:0", "ftz_torch")] = Check.no("mocked: denormals survive")
    if not hip:  # the CUDA backend's kernels run on any NVIDIA GPU with CuPy
        facts[("cuda:0", "cuda_kernels")] = Check.yes("mocked: compiled and launched")
        facts[("cuda:0", "ftz_cuda")] = Check.no("mocked: +0.5, -0.5")
    if hip or cap >= (7, 0):  # below 7.0 the probe itself refuses to launch Triton
        facts[("cuda:0", "triton")] = Check.yes("mocked: launched")
        facts[("cuda:0", "ftz_triton")] = (Check.yes("mocked: inject(1, 9) = +0, -0") if
                                           triton_flushes else Check.no("mocked: +0.5, -0.5"))
    return capability.collect(facts=facts)


def expected(name, fmt, m):
    cap, hip, fp8 = GPUS[name]
    if not hip and cap < (7, 0):
        return Backend.CUDA, E2M1Decode.INJECT
    if fp8 and fmt in (Format.E4M3, Format.E5M2) and m >= NATIVE_MIN_M:
        return Backend.NATIVE, E2M1Decode.SELECT
    return Backend.TRITON, E2M1Decode.INJECT


@pytest.mark.parametrize("name", list(GPUS))
def test_gpu_routing(monkeypatch, name):
    install(monkeypatch)
    report = gpu_report(monkeypatch, name)
    for fmt in Format:
        for m in (1, LARGE_M):
            choice = select(fmt, m, "cuda:0", report=report)
            want_backend, want_decode = expected(name, fmt, m)
            assert choice.backend is want_backend, (fmt, m, choice.reason)
            if fmt in FP4:
                assert choice.e2m1 is want_decode, (fmt, m, choice.e2m1_reason)
            assert f"{want_backend} is the first" in choice.reason
            if want_backend is Backend.CUDA:  # the P40: the reason names the capability
                assert "6.1" in choice.reason and "7.0" in choice.reason
            elif want_backend is Backend.TRITON and fmt not in (Format.E4M3, Format.E5M2):
                assert "not native: it does not implement" in choice.reason
            elif want_backend is Backend.TRITON and not GPUS[name][2]:
                assert "not native: no native FP8 matmul on cuda:0" in choice.reason
            elif want_backend is Backend.TRITON:
                assert "weight-only path is faster" in choice.reason
            if choice.e2m1 is E2M1Decode.INJECT:
                path = "CUDA backend's" if want_backend is Backend.CUDA else "Triton"
                assert f"measured exact in the {path} kernel" in choice.e2m1_reason


def test_triton_that_flushes_gets_select(monkeypatch):
    install(monkeypatch)
    report = gpu_report(monkeypatch, "a100", triton_flushes=True)
    for fmt in FP4:
        choice = select(fmt, 1, "cuda:0", report=report)
        assert (choice.backend, choice.e2m1) == (Backend.TRITON, E2M1Decode.SELECT)
        assert "flushes denormals" in choice.e2m1_reason


def test_mixed_gpus_are_probed_and_routed_per_device(monkeypatch):
    """One machine, an RTX 3090 (8.6) and a P40 (6.1), as a device_map spreads a model over
    them: each device has its own probe facts and its own (cached) choice, whichever is current."""
    install(monkeypatch)
    mock_gpus(monkeypatch, [(8, 6), (6, 1)])
    facts = dict(CPU_FACTS)
    for dev in ("cuda:0", "cuda:1"):
        facts[(dev, "float8")] = Check.yes("mocked: float8 round trip exact")
        facts[(dev, "scaled_mm")] = Check.no("mocked: needs FP8 hardware")
        facts[(dev, "ftz_torch")] = Check.no("mocked: denormals survive")
    facts[("cuda:0", "triton")] = Check.yes("mocked: launched")
    facts[("cuda:0", "ftz_triton")] = Check.no("mocked: +0.5, -0.5")
    report = capability.collect(facts=facts)
    assert report.device("cuda:0").triton.is_yes and report.device("cuda:1").triton.is_no
    current = [0]
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current[0])
    for fmt in Format:
        for _ in range(2):  # the second round from the cache
            ampere = select(fmt, 1, "cuda:0", report=report)
            pascal = select(fmt, 1, "cuda:1", report=report)
            assert ampere.backend is Backend.TRITON, (fmt, ampere.reason)
            assert pascal.backend is Backend.TORCH and "6.1" in pascal.reason, (fmt, pascal.reason)
        current[0] = 1  # "cuda" is the current device: the P40's choice
        assert select(fmt, 1, "cuda", report=report).backend is Backend.TORCH
        current[0] = 0
        assert select(fmt, 1, "cuda", report=report).backend is Backend.TRITON


def test_mps_routes_to_torch(monkeypatch):
    install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    report = capability.collect(facts={**CPU_FACTS, ("mps", "float8"): Check.no("mocked"),
                                       ("mps", "scaled_mm"): Check.no("mocked"),
                                       ("mps", "ftz_torch"): Check.yes("mocked: flushes")})
    assert report.device("mps").triton.is_no  # no Metal backend, known without running
    for fmt in Format:
        choice = select(fmt, 1, "mps", report=report)
        assert (choice.backend, choice.e2m1) == (Backend.TORCH, E2M1Decode.SELECT)
        assert "auto uses it on CUDA/ROCm GPUs only" in choice.reason


def test_native_absent_is_skipped(monkeypatch):
    install(monkeypatch, Backend.TRITON, Backend.NUMBA)
    remove(monkeypatch, Backend.NATIVE)
    choice = select("e4m3", LARGE_M, "cuda:0", report=gpu_report(monkeypatch, "h100"))
    assert choice.backend is Backend.TRITON
    assert "softfp8.backends.native is not part of this build" in choice.reason


def test_native_without_hook_is_explicit_only(monkeypatch):
    install(monkeypatch)
    monkeypatch.delattr(dispatch.load(Backend.NATIVE), "auto_accepts")
    report = gpu_report(monkeypatch, "h100")
    choice = select("e4m3", LARGE_M, "cuda:0", report=report)
    assert choice.backend is Backend.TRITON and "no auto_accepts hook" in choice.reason
    assert select("e4m3", 1, "cuda:0", report=report, backend="native").backend is Backend.NATIVE


def test_forbidden_activation_quantization(monkeypatch):
    install(monkeypatch)
    report = gpu_report(monkeypatch, "h100")
    assert select("e4m3", LARGE_M, "cuda:0", report=report).backend is Backend.NATIVE
    choice = select("e4m3", LARGE_M, "cuda:0", report=report, activation_quant="forbid")
    assert choice.backend is Backend.TRITON and "quantizes activations" in choice.reason
    with pytest.raises(BackendUnavailable, match="quantizes activations.*forbid"):
        select("e4m3", LARGE_M, "cuda:0", report=report, backend="native",
               activation_quant=ActivationQuant.FORBID)
    monkeypatch.setenv(dispatch.ACTIVATION_QUANT_ENV, "forbid")
    _settings.reload_environment()  # read once: a change after the first call needs this
    assert select("e4m3", LARGE_M, "cuda:0", report=report).backend is Backend.TRITON
    with pytest.raises(BackendUnavailable, match="SOFTFP8_ACTIVATION_QUANT=forbid"):
        select("e4m3", LARGE_M, "cuda:0", report=report, backend="native")
    # The keyword beats the environment, per call.
    assert select("e4m3", LARGE_M, "cuda:0", report=report,
                  activation_quant="allow").backend is Backend.NATIVE


def test_linear_threads_activation_quant(monkeypatch):
    install(monkeypatch)
    packed = softfp8.quantize(torch.randn(4, 32), "e4m3")
    with pytest.raises(BackendUnavailable, match="quantizes activations"):
        softfp8.linear(torch.randn(1, 32), packed, backend="native", activation_quant="forbid")
    with pytest.raises(ValueError, match="activation_quant='sometimes'.*'allow', 'forbid'"):
        softfp8.linear(torch.randn(1, 32), packed, activation_quant="sometimes")


def test_cpu_routes_to_numba_when_it_runs(monkeypatch):
    install(monkeypatch)
    report = capability.collect(facts=CPU_FACTS)
    for fmt in Format:
        choice = select(fmt, 1, "cpu", report=report)
        assert choice.backend is Backend.NUMBA, choice.reason
        assert choice.e2m1 is E2M1Decode.INJECT and "measured exact in Numba" in choice.e2m1_reason
        assert "not triton: auto never picks Triton for CPU tensors" in choice.reason


def test_cpu_without_numba_routes_to_torch(monkeypatch):
    install(monkeypatch)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "numba" else real(name, *a))
    report = capability.collect(facts={k: v for k, v in CPU_FACTS.items() if "numba" not in k[1]})
    assert report.device("cpu").numba.is_no
    choice = select("nvfp4", 1, "cpu", report=report)
    assert choice.backend is Backend.TORCH and choice.e2m1 is E2M1Decode.SELECT
    assert "the package 'numba' is not installed" in choice.reason
    with pytest.raises(BackendUnavailable, match="numba.*not installed"):
        select("nvfp4", 1, "cpu", report=report, backend="numba")


def test_cpu_numba_that_failed_its_probe_is_skipped(monkeypatch):
    install(monkeypatch)
    report = capability.collect(facts={**CPU_FACTS, ("cpu", "numba"): Check.no("mocked: broken")})
    choice = select("e5m2", 1, "cpu", report=report)
    assert choice.backend is Backend.TORCH and "Numba can't run on cpu" in choice.reason


def test_this_machine_with_the_real_registry():
    report = capability.probe()
    choice = select("e5m2", 1, "cpu", report=report)
    numba_runs = dispatch.module_exists(Backend.NUMBA) and report.device("cpu").numba.is_yes
    assert choice.backend is (Backend.NUMBA if numba_runs else Backend.TORCH), choice.reason


def test_triton_on_cpu_only_when_forced_under_the_interpreter(monkeypatch):
    install(monkeypatch)
    cpu = DeviceReport("cpu", Runtime.CPU, triton=Check.yes("interpreter"),
                       ftz_triton=Check.no("survive"), numba=Check.no("mocked: missing"))
    report = CapabilityReport(devices=(cpu,), triton_interpret=True)
    assert select("mxfp4", 1, "cpu", report=report).backend is Backend.TORCH
    forced = select("mxfp4", 1, "cpu", report=report, backend="triton")
    assert (forced.backend, forced.e2m1) == (Backend.TRITON, E2M1Decode.INJECT)
    plain = CapabilityReport(devices=(DeviceReport("cpu", Runtime.CPU, triton=Check.no(
        "no GPU for it")),))
    with pytest.raises(BackendUnavailable, match="triton.*Triton can't run on cpu.*no GPU"):
        select("mxfp4", 1, "cpu", report=plain, backend="triton")


def test_explicit_backend_missing_from_the_build(monkeypatch):
    remove(monkeypatch, Backend.NUMBA)
    with pytest.raises(BackendUnavailable, match="softfp8.backends.numba is not part of this build"):
        select("e5m2", 1, "cpu", backend="numba")


def test_overrides_from_env_and_keywords(monkeypatch):
    install(monkeypatch)
    report = capability.collect(facts=CPU_FACTS)
    monkeypatch.setenv(dispatch.BACKEND_ENV, "torch")
    choice = select("nvfp4", 1, "cpu", report=report)
    assert choice.backend is Backend.TORCH and choice.reason == "requested by SOFTFP8_BACKEND=torch"
    assert select("nvfp4", 1, "cpu", report=report, backend="numba").backend is Backend.NUMBA
    monkeypatch.delenv(dispatch.BACKEND_ENV)
    monkeypatch.setenv(dispatch.E2M1_DECODE_ENV, "select")
    _settings.reload_environment()  # read once: a change after the first call needs this
    choice = select("nvfp4", 1, "cpu", report=report)
    assert (choice.backend, choice.e2m1) == (Backend.NUMBA, E2M1Decode.SELECT)
    assert choice.e2m1_reason == "requested by SOFTFP8_E2M1_DECODE=select"


@pytest.mark.parametrize("env, value, valid", [
    (dispatch.BACKEND_ENV, "gpu", "'auto', 'native', 'triton', 'cuda', 'numba', 'torch'"),
    (dispatch.E2M1_DECODE_ENV, "fast", "'auto', 'inject', 'select'"),
    (dispatch.ACTIVATION_QUANT_ENV, "maybe", "'allow', 'forbid'"),
])
def test_unknown_values_list_the_valid_ones(monkeypatch, env, value, valid):
    monkeypatch.setenv(env, value)
    with pytest.raises(ValueError, match=f"{env}='{value}' is not valid; expected one of {valid}"):
        select("e5m2", 1, "cpu")


@pytest.mark.parametrize("env, value", [(dispatch.BACKEND_ENV, "gpu"),
                                        (dispatch.E2M1_DECODE_ENV, "fast"),
                                        (dispatch.ACTIVATION_QUANT_ENV, "maybe")])
def test_an_invalid_setting_raises_where_an_argument_overrides_it(monkeypatch, env, value):
    """An explicit argument wins over a valid setting (test_overrides_from_env_and_keywords);
    an invalid one is an error all the same (`_env.check_environment`): a typo that nothing
    reads today would mislead whoever relies on it tomorrow."""
    monkeypatch.setenv(env, value)
    dispatch.clear_cache()
    with pytest.raises(ValueError, match=f"{env}='{value}' is not valid; expected one of"):
        select("e5m2", 1, "cpu", backend="torch", e2m1="select", activation_quant="allow")


def test_bad_arguments():
    with pytest.raises(ValueError, match="backend='gpu'"):
        select("e5m2", 1, "cpu", backend="gpu")
    with pytest.raises(ValueError, match="fmt='int8'"):
        select("int8", 1, "cpu")
    with pytest.raises(ValueError, match="m: expected a positive int"):
        select("e5m2", 0, "cpu")


def test_select_is_cached_and_cheap(monkeypatch):
    install(monkeypatch)
    report = capability.collect(facts=CPU_FACTS)
    first = select("nvfp4", 3, "cpu", report=report)
    assert select("nvfp4", 3, torch.device("cpu"), report=report) is first
    other = capability.collect(facts={**CPU_FACTS, ("cpu", "ftz_numba"): Check.yes("flush")})
    assert select("nvfp4", 3, "cpu", report=other).e2m1 is E2M1Decode.SELECT  # not the cached one
    with softfp8.launch_settings(backend="torch"):  # the settings are part of the key
        assert select("nvfp4", 3, "cpu", report=report).backend is Backend.TORCH
    device = torch.device("cpu")
    start = time.perf_counter()
    for _ in range(1000):
        select("nvfp4", 3, device, report=report)
    assert (time.perf_counter() - start) / 1000 < 1e-4  # measured ~7 us; linear() calls it always


def test_select_cache_serves_no_bad_argument(monkeypatch):
    # select() looks an eager call's key up before checking its arguments: a cached m = 1 must
    # not answer m = True, and an m past the buckets must get its bucket's choice.
    install(monkeypatch)
    report = capability.collect(facts=CPU_FACTS)
    cpu = torch.device("cpu")
    select("e5m2", 1, cpu, report=report)
    with pytest.raises(TypeError, match="m: expected an int"):
        select("e5m2", True, cpu, report=report)
    assert select("e5m2", 100, cpu, report=report) is select("e5m2", 128, cpu, report=report)
    with pytest.raises(ValueError, match="m: expected a non-negative number of rows"):
        select("e5m2", -1, cpu, report=report)
    # a cached bucket answers an m past 16 at the early look-up too (not after the checks)
    monkeypatch.setattr(dispatch, "_check_select_args", lambda m, d: pytest.fail("checked"))
    assert select("e5m2", 100, cpu, report=report) is select("e5m2", 128, cpu, report=report)


def test_m_buckets():
    assert [dispatch.m_bucket(m) for m in (1, 2, 16, 17, 33, 4096, 4097)] == \
        [1, 2, 16, 32, 64, 4096, 8192]


def _weights_with_halves(fmt, n=24, k=64):
    g = torch.Generator().manual_seed(5)
    w = torch.randint(-6, 7, (n, k), generator=g).float() / 2  # E2M1 values and +-0.5 among them
    w[:, 0], w[:, 1], w[:, 2] = 6.0, 0.5, -0.5  # every 16/32-block keeps scale 1: put 6 in each
    w[:, ::16] = 6.0
    packed = softfp8.quantize(w, fmt)
    codes = unpack_codes(packed.words, fmt, k)
    assert (codes == 1).any() and (codes == 9).any(), "the test needs codes for +0.5 and -0.5"
    return packed


@pytest.mark.parametrize("fmt", FP4)
def test_ftz_end_to_end_select_stays_exact(monkeypatch, flush_denormals, fmt):
    # A backend that really decodes as told, on this thread, where FTZ/DAZ is on.
    install(monkeypatch)
    packed = _weights_with_halves(fmt)
    x = torch.randn(1, 64, generator=torch.Generator().manual_seed(1))
    ref = x.double() @ softfp8.dequantize(packed).double().T
    choice = select(fmt, 1, "cpu")  # probe() measured in this thread's mode
    assert (choice.backend, choice.e2m1) == (Backend.NUMBA, E2M1Decode.SELECT), choice
    assert rel_err(softfp8.linear(x, packed), ref) <= 1e-6
    # The control: injection here really does lose +-0.5, so the test above can fail.
    assert rel_err(softfp8.linear(x, packed, e2m1="inject"), ref) > 1e-3


@pytest.mark.parametrize("fmt", FP4)
def test_ftz_end_to_end_real_registry(flush_denormals, fmt):
    packed = _weights_with_halves(fmt)
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(2))
    ref = x.double() @ softfp8.dequantize(packed).double().T
    assert select(fmt, 2, "cpu").e2m1 is E2M1Decode.SELECT
    assert rel_err(softfp8.linear(x, packed), ref) <= 1e-6


def test_package_check_remembers_a_found_package_per_finder():
    """Needs.why_not runs on every triton matmul: a package found once is not looked up again
    by the same finder; a missing one is asked again each time; another finder asks afresh."""
    from softfp8._needs import _installed

    asked = []

    def finder(name):
        asked.append(name)
        return object() if name == "here" else None

    assert _installed("here", finder) and _installed("here", finder)
    assert asked == ["here"]
    assert not _installed("gone", finder) and not _installed("gone", finder)
    assert asked == ["here", "gone", "gone"]

    def other(name):
        asked.append(("other", name))
        return None
    assert not _installed("here", other)
    assert asked[-1] == ("other", "here")


def test_select_follows_the_settings_between_calls(monkeypatch):
    """The cache key holds the settings in force: a launch_settings block reaches the next call
    and its end the one after; SOFTFP8_BACKEND is read once, so a change of it reaches select()
    only through reload_environment()."""
    monkeypatch.delenv("SOFTFP8_BACKEND", raising=False)
    cpu = torch.device("cpu")
    auto = select(Format.E5M2, 1, cpu).backend
    with softfp8.launch_settings(backend="torch"):
        choice = select(Format.E5M2, 1, cpu)
        assert choice.backend is Backend.TORCH
        assert choice.reason == "requested by launch_settings(backend='torch')"
        with softfp8.launch_settings(backend="native"):  # no FP8 units on a CPU
            with pytest.raises(BackendUnavailable, match=r"launch_settings\(backend='native'\)"):
                select(Format.E5M2, 1, cpu)
        assert select(Format.E5M2, 1, cpu) is choice
    assert select(Format.E5M2, 1, cpu).backend is auto
    monkeypatch.setenv("SOFTFP8_BACKEND", "torch")
    assert select(Format.E5M2, 1, cpu).backend is auto  # not read again
    _settings.reload_environment()
    choice = select(Format.E5M2, 1, cpu)
    assert choice.backend is Backend.TORCH and choice.reason == "requested by SOFTFP8_BACKEND=torch"
    with softfp8.launch_settings(backend="auto"):  # the API over the environment
        assert select(Format.E5M2, 1, cpu).backend is auto
