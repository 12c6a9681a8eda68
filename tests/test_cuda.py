"""The CUDA backend (softfp8/backends/cuda) without a GPU: its decoders and its kernels, compiled
on the host from their own text, over every code and against the reference, through the real
launcher; dispatch to it with torch.cuda mocked as a cc 6.1 device. tests/test_cuda_compile.py
compiles the kernels for the GPUs; benchmarks/gpu_cuda_backend.py runs them on one."""
import ctypes
import importlib.machinery
import importlib.util
import shutil
import subprocess

import numpy as np
import pytest
import torch
from conftest import same_bits
from fake_backends import install, mock_gpus

from softfp8 import Backend, E2M1Decode, Format, _settings, capability, dispatch
from softfp8.backends.cuda import _text
from softfp8.backends.cuda._source import source
from softfp8.capability import Check
from softfp8.decode import (decode_e2m1_to_f32, decode_e2m1_to_f32_inject, decode_e4m3_to_f32,
                            decode_e5m2_to_f32, decode_e8m0)
from softfp8.dispatch import BackendUnavailable, select

from softfp8.backends.cuda import FORMATS as _CUDA_FORMATS  # noqa: E402

CUDA_FORMATS = sorted(_CUDA_FORMATS, key=list(Format).index)  # the backend's formats

# --- the decoders, compiled on the host from _text.DECODERS ---------------------------------
_HOST_WRAPPERS = r"""
extern "C" void run(int which, const u32* c, u32* out, int n) {
  for (int i = 0; i < n; ++i) {
    float v = 0.0f;
    switch (which) {
      case 0: v = dec_e5m2<true>(c[i]); break;
      case 1: v = dec_e5m2<false>(c[i]); break;
      case 2: v = dec_e4m3<true>(c[i]); break;
      case 3: v = dec_e4m3<false>(c[i]); break;
      case 4: v = dec_e2m1_select(c[i]); break;
      case 5: v = dec_e2m1_inject(c[i]); break;
      case 6: v = dec_e8m0(c[i]); break;
      case 7: v = f16_f32(c[i]); break;
      case 8: v = bf16_f32(c[i]); break;
      case 9: out[i] = f32_bf16(bits_f32(c[i])); continue;
    }
    out[i] = f32_bits(v);
  }
}
"""
_WHICH = {"e5m2": 0, "e5m2_nofix": 1, "e4m3": 2, "e4m3_nofix": 3, "e2m1_select": 4,
          "e2m1_inject": 5, "e8m0": 6, "f16": 7, "bf16": 8, "to_bf16": 9}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """The decoders as a host library (g++, strict IEEE: no fast-math, denormals kept)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler to build the decoders on the host")
    d = tmp_path_factory.mktemp("cuda_decoders")
    (d / "dec.cpp").write_text(_text.DECODERS + _HOST_WRAPPERS)
    subprocess.run([cxx, "-O2", "-std=c++14", "-shared", "-fPIC", str(d / "dec.cpp"), "-o",
                    str(d / "dec.so")], check=True, capture_output=True)
    lib = ctypes.CDLL(str(d / "dec.so"))

    def run(name: str, codes) -> torch.Tensor:
        c = np.ascontiguousarray(np.asarray(codes, dtype=np.uint32))
        out = np.empty_like(c)
        lib.run(_WHICH[name], c.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(
            ctypes.c_void_p), len(c))
        return torch.from_numpy(out.view(np.int32).copy()).view(torch.float32)

    return run


def _bits(t: torch.Tensor) -> list[int]:
    return (t.contiguous().view(torch.int32) & 0xFFFFFFFF).tolist()


ALL8 = torch.arange(256)


@pytest.mark.parametrize("name, ref", [("e5m2", decode_e5m2_to_f32), ("e4m3", decode_e4m3_to_f32),
                                       ("e8m0", decode_e8m0)])
def test_8bit_decoders_bit_exact_over_every_code(host, name, ref):
    # bit for bit, NaNs included (the reference's quiet NaN with the code's sign)
    assert _bits(host(name, ALL8)) == _bits(ref(ALL8))


@pytest.mark.parametrize("name, ref, special", [
    ("e5m2", decode_e5m2_to_f32, lambda c: (c & 0x7C) == 0x7C),
    ("e4m3", decode_e4m3_to_f32, lambda c: (c & 0x7F) == 0x7F)])
def test_8bit_decoders_without_the_fix(host, name, ref, special):
    """The variant for weights without special codes: exact on every other code, and it does
    differ on the special ones (so `specials` must be set where they occur)."""
    out, want, sp = host(f"{name}_nofix", ALL8), ref(ALL8), special(ALL8)
    assert same_bits(out[~sp], want[~sp]).all()
    assert torch.isfinite(out[sp]).all() and not torch.isfinite(want[sp]).any()


@pytest.mark.parametrize("name, ref", [("e2m1_select", decode_e2m1_to_f32),
                                       ("e2m1_inject", decode_e2m1_to_f32_inject)])
def test_e2m1_decoders_bit_exact(host, name, ref):
    # every nibble, with garbage in the bits above it (the kernels pass whole shifted words)
    codes = torch.arange(256)
    assert _bits(host(name, codes)) == _bits(ref(codes & 0xF))
    assert _bits(host(name, codes[:16])) == _bits(torch.tensor(
        [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]))


def test_x_conversions_bit_exact(host):
    """fp16 and bf16 x to float32 over all 65536 patterns, and float32 to bf16 (y) against torch."""
    h = torch.arange(65536, dtype=torch.int32)
    f16 = h.to(torch.int16).view(torch.float16).float()
    assert same_bits(host("f16", h), f16).all()
    assert _bits(host("f16", h)[~torch.isnan(f16)]) == _bits(f16[~torch.isnan(f16)])
    assert _bits(host("bf16", h)) == _bits(h.to(torch.int16).view(torch.bfloat16).float())
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-2**31, 2**31 - 1, (1 << 16,), generator=g, dtype=torch.int64)
    x = torch.cat([x, torch.tensor([0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x7F800000, 0xFF800000,
                                    0x00000001, 0x80008000, 0x7FC00001])]).to(torch.int32)
    f = x.view(torch.float32)
    mine = host("to_bf16", x).view(torch.int32)
    want = f.to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF
    nan = torch.isnan(f)
    assert torch.equal(mine[~nan], want[~nan])
    assert torch.isnan((mine[nan] << 16).view(torch.float32)).all()


# --- the kernels themselves, run on the host -------------------------------------------------
# The kernels' text compiles as C++ too (DECODERS' host branch); a driver runs each warp's 32
# lanes in turn, then the shuffles' butterfly, then the stores, exactly as the device orders
# them. The real launcher (`matmul`) runs with its launch pointed here, so its padding, flags
# and slabs are tested too. What only the GPU has (the 16-bit cvt, __ldg) is the GPU script's.
_HOST_DRIVER = r"""
extern "C" void host_launch(const uint4* words, const float* row_scale, const u8* scales,
                            const float* gscale, void* x_or_out, const void* bias, void* y,
                            int n, int vecs, int ldx) {
#ifdef SF8_GEMV
  for (int row0 = 0; row0 < n; row0 += SF8_ROWS) {
    float acc[32][SF8_ROWS][SF8_M];
    for (int lane = 0; lane < 32; ++lane)
      gemv_lane(words, scales, gscale, (const x_t*)x_or_out, n, vecs, ldx, row0, lane, acc[lane]);
    for (int o = 16; o > 0; o >>= 1) {  /* acc += __shfl_xor_sync(acc, o), all lanes at once */
      float t[32][SF8_ROWS][SF8_M];
      memcpy(t, acc, sizeof t);
      for (int l = 0; l < 32; ++l)
        for (int r = 0; r < SF8_ROWS; ++r)
          for (int m = 0; m < SF8_M; ++m) acc[l][r][m] = t[l][r][m] + t[l ^ o][r][m];
    }
    for (int lane = 0; lane < 32; ++lane)
      gemv_store(row_scale, bias, (x_t*)y, n, row0, lane, acc[lane]);
  }
#else  /* dequant: n = start, vecs = stop, ldx = vecs (the kernel's own argument order) */
  for (size_t t = 0; t < (size_t)(vecs - n) * ldx; ++t)
    dequant_thread(words, row_scale, scales, gscale, (float*)x_or_out, n, vecs, ldx, t);
#endif
}
"""


@pytest.fixture
def on_the_host(monkeypatch, tmp_path_factory):
    """`softfp8.backends.cuda.matmul` for CPU tensors, its kernels compiled with g++ (-O0: fast
    to build; IEEE float32 either way) and run by `_HOST_DRIVER`."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler to build the kernels on the host")
    from softfp8.backends import cuda
    from softfp8.backends.cuda import _runtime
    d = tmp_path_factory.mktemp("cuda_kernels")
    libs = {}

    def lib(variant):
        if variant not in libs:
            src = d / f"{variant.name}.cpp"
            head = "#define SF8_GEMV 1\n" if variant.kernel == "gemv" else ""
            src.write_text(head + source(variant) + _HOST_DRIVER)
            subprocess.run([cxx, "-O0", "-std=c++14", "-Wno-unknown-pragmas", "-shared", "-fPIC",
                            str(src), "-o", str(src.with_suffix(".so"))], check=True,
                           capture_output=True)
            libs[variant] = ctypes.CDLL(str(src.with_suffix(".so")))
        return libs[variant]

    def launch(device, variant, grid, block, args):
        c = [ctypes.c_void_p(int(a)) if a.dtype == np.uint64 else ctypes.c_int(int(a))
             for a in args]
        if variant.kernel == "dequant":  # words, row_scale, scales, gscale, out, start, stop, vecs
            c = c[:5] + [ctypes.c_void_p(0), ctypes.c_void_p(0)] + c[5:]
        lib(variant).host_launch(*c)

    monkeypatch.setattr(_runtime, "launch", launch)
    monkeypatch.setattr(cuda, "_check", lambda x, packed, bias: None)
    return cuda.matmul, libs


def every_code_weight(fmt, *, specials=True, row_scale=True, k=24):
    """Row n holds code c_n in column 0, zeros after: every code (FP4: x every block-scale
    code), or those that don't need the special-code fix."""
    from softfp8.formats import PackedWeight, padded_k
    from softfp8.quantize import pack_codes
    if fmt in (Format.NVFP4, Format.MXFP4):
        sc, codes = torch.arange(256).repeat_interleave(16), torch.arange(16).repeat(256)
        if not specials and fmt is Format.NVFP4:
            keep = (sc & 0x7F) != 0x7F
            sc, codes = sc[keep], codes[keep]
    else:
        codes = torch.arange(256)
        if not specials:
            bad = (codes & 0x7C) == 0x7C if fmt is Format.E5M2 else (codes & 0x7F) == 0x7F
            codes = codes[~bad]
    n = codes.numel()
    full = torch.zeros((n, k), dtype=torch.uint8)
    full[:, 0] = codes.to(torch.uint8)
    scales = gscale = None
    if fmt in (Format.NVFP4, Format.MXFP4):
        block = 16 if fmt is Format.NVFP4 else 32
        scales = torch.full((n, padded_k(k, fmt) // block), 0x38 if fmt is Format.NVFP4 else 127,
                            dtype=torch.uint8)
        scales[:, 0] = sc.to(torch.uint8)
        gscale = torch.tensor(1.3125) if fmt is Format.NVFP4 else None
    elif row_scale:
        scales = torch.rand(n, generator=torch.Generator().manual_seed(n)) + 0.5
    return PackedWeight(fmt, (n, k), pack_codes(full, fmt), scales, gscale)


def _exact_cases():
    for fmt in CUDA_FORMATS:
        for specials in (True, False):
            yield fmt, specials, True
        if fmt is Format.E5M2:
            yield fmt, True, False


@pytest.mark.parametrize("fmt, specials, row_scale", list(_exact_cases()),
                         ids=lambda v: str(v))
def test_every_code_through_the_kernels_on_the_host(on_the_host, fmt, specials, row_scale):
    """x = e_0 in every row of x, so y[m, n] is row n's one code, decoded and scaled: bit for
    bit the reference's, NaN as NaN, in the GEMV (M = 1: block sums, two rows a warp; M = 5:
    scaled weights, one row a warp; E2M1 injected and selected) and the dequant path."""
    from softfp8.quantize import dequantize
    matmul, libs = on_the_host
    p = every_code_weight(fmt, specials=specials, row_scale=row_scale)
    want = dequantize(p)[:, 0]
    fp4 = fmt in (Format.NVFP4, Format.MXFP4)
    for m in (1, 5, 17):
        for e2m1 in ((E2M1Decode.INJECT, E2M1Decode.SELECT) if fp4 else (E2M1Decode.SELECT,)):
            x = torch.zeros((m, p.shape[1]))
            x[:, 0] = 1.0
            y = matmul(x, p, None, e2m1=e2m1)
            hit = same_bits(y, want.expand(m, -1)) | ((y == 0) & (want == 0))  # zero's sign aside
            assert hit.all(), (m, e2m1, torch.nonzero(~hit)[:5].tolist())
    assert [v.specials for v in libs] == [specials and fmt is not Format.MXFP4] * len(libs)


@pytest.mark.parametrize("fmt", CUDA_FORMATS, ids=str)
def test_kernels_on_the_host_match_the_reference(on_the_host, fmt):
    """Odd N and K (K padded inside), bias, x of each dtype, M across the GEMV's settings and the
    dequant path; float32 within 1e-5 of the reference, 16-bit x within their rounding."""
    from softfp8 import quantize
    from softfp8.backends import reference
    matmul, libs = on_the_host
    g = torch.Generator().manual_seed(3)
    p = quantize(torch.randn(37, 70, generator=g), fmt)
    for m, dtype, bias_dtype, tol in ((1, torch.float32, None, 1e-5),
                                      (3, torch.bfloat16, torch.bfloat16, 8e-3),
                                      (16, torch.float16, torch.float32, 1e-3),
                                      (20, torch.float32, torch.float64, 1e-5)):
        x = torch.randn(m, 70, generator=g).to(dtype)
        bias = None if bias_dtype is None else torch.randn(37, generator=g).to(bias_dtype)
        y = matmul(x, p, bias, e2m1=E2M1Decode.INJECT)
        ref = reference.matmul(x, p, bias)
        assert y.dtype == dtype and y.shape == (m, 37)
        err = ((y.double() - ref.double()).norm() / ref.double().norm()).item()
        assert err <= tol, (m, dtype, err)
    kinds = sorted((v.kernel, v.m) for v in libs)
    assert kinds == [("dequant", 1), ("gemv", 1), ("gemv", 3), ("gemv", 16)]


# --- dispatch, with torch.cuda mocked --------------------------------------------------------
@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in (dispatch.BACKEND_ENV, dispatch.E2M1_DECODE_ENV, dispatch.ACTIVATION_QUANT_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(dispatch, "_CACHE", {})


def with_cupy(monkeypatch, present: bool) -> None:
    """importlib's find_spec as on a machine with (or without) CuPy, whatever is installed here."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name == "cupy":
            return importlib.machinery.ModuleSpec("cupy", None) if present else None
        return real(name, *args, **kwargs)
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def mocked(monkeypatch, cap, *, cuda_ok=True, triton=None, cupy=True):
    """The probe's report on one mocked NVIDIA GPU; the CUDA backend's checks given."""
    mock_gpus(monkeypatch, [cap], hip=None)
    with_cupy(monkeypatch, cupy)
    facts = {("cpu", "numba"): Check.no("given"), ("cpu", "ftz_numba"): Check.no("given"),
             ("*", "float8"): Check.yes("mocked"), ("*", "ftz_torch"): Check.no("mocked"),
             ("cuda:0", "scaled_mm"): Check.no("mocked: needs FP8 hardware")}
    if cuda_ok:
        facts[("cuda:0", "cuda_kernels")] = Check.yes("mocked: compiled and launched")
        facts[("cuda:0", "ftz_cuda")] = Check.no("mocked: inject(1, 9) = +0.5, -0.5")
    if triton is not None:
        facts[("cuda:0", "triton")] = triton
    return capability.collect(facts=facts)


def test_p40_auto_picks_the_cuda_backend(monkeypatch):
    report = mocked(monkeypatch, (6, 1))
    assert report.device("cuda:0").triton.is_no  # measured by the probe's own rule: 6.1 < 7.0
    for fmt in CUDA_FORMATS:
        for m in (1, 16, 4096):
            choice = select(fmt, m, "cuda:0", report=report)
            assert choice.backend is Backend.CUDA, (fmt, m, choice.reason)
            assert "auto: cuda is the first" in choice.reason
            assert "not triton" in choice.reason and "6.1" in choice.reason
            assert "7.0" in choice.reason
            if fmt in (Format.NVFP4, Format.MXFP4):
                assert choice.e2m1 is E2M1Decode.INJECT
                assert "measured exact in the CUDA backend's kernel" in choice.e2m1_reason


def test_cuda_backend_that_flushes_gets_select(monkeypatch):
    report = mocked(monkeypatch, (6, 0))
    dev = report.device("cuda:0")
    report = capability.CapabilityReport(devices=(report.devices[0], type(dev)(**{
        **{f: getattr(dev, f) for f in dev.__dataclass_fields__},
        "ftz_cuda": Check.yes("mocked: +0, -0")})))
    choice = select("nvfp4", 1, "cuda:0", report=report)
    assert (choice.backend, choice.e2m1) == (Backend.CUDA, E2M1Decode.SELECT)


def test_triton_failing_on_a_newer_gpu_falls_to_the_cuda_backend(monkeypatch):
    report = mocked(monkeypatch, (7, 5), triton=Check.no("mocked: compiling failed: ptxas died"))
    choice = select("e4m3", 1, "cuda:0", report=report)
    assert choice.backend is Backend.CUDA
    assert "Triton can't run on cuda:0 (no: mocked: compiling failed" in choice.reason


def test_triton_that_runs_comes_first(monkeypatch):
    install(monkeypatch, Backend.TRITON)
    report = mocked(monkeypatch, (8, 0), triton=Check.yes("mocked: launched"))
    assert select("mxfp4", 1, "cuda:0", report=report).backend is Backend.TRITON
    assert select("mxfp4", 1, "cuda:0", backend="cuda", report=report).backend is Backend.CUDA


def test_without_cupy_the_probe_and_an_explicit_request_name_it(monkeypatch):
    report = mocked(monkeypatch, (6, 1), cuda_ok=False, cupy=False)
    dev = report.device("cuda:0")
    assert dev.cuda_kernels.is_no and "'cupy' is not installed" in dev.cuda_kernels.detail
    assert dev.ftz_cuda.status is capability.Status.UNKNOWN
    with pytest.raises(BackendUnavailable, match=r"backend cuda \(backend='cuda'\) can't run e5m2 "
                       r"on cuda:0: the package 'cupy' is not installed \(pip install "
                       r"cupy-cuda12x, or cupy-cuda13x where torch's CUDA is 13; "
                       r"Pascal and Volta need 12"):
        select("e5m2", 1, "cuda:0", backend="cuda", report=report)
    monkeypatch.setenv(dispatch.BACKEND_ENV, "cuda")
    _settings.reload_environment()  # read once: a change after the first call needs this
    with pytest.raises(BackendUnavailable, match="SOFTFP8_BACKEND=cuda"):
        select("e5m2", 1, "cuda:0", report=report)
    monkeypatch.delenv(dispatch.BACKEND_ENV)
    _settings.reload_environment()
    choice = select("e5m2", 1, "cuda:0", report=report)
    assert choice.backend is Backend.TORCH and "not cuda: the package 'cupy'" in choice.reason


def test_probe_failure_is_a_refusal_with_its_reason(monkeypatch):
    report = mocked(monkeypatch, (6, 1), cuda_ok=False)
    report = capability.collect(facts={("cuda:0", "cuda_kernels"): Check.no(
        "compiling or launching failed: NVRTC_ERROR_INVALID_OPTION: sm_61"),
        ("cuda:0", "scaled_mm"): Check.no("mocked")})
    with pytest.raises(BackendUnavailable, match="the CUDA backend's kernels can't run on cuda:0 "
                       r"\(no: compiling or launching failed: NVRTC_ERROR_INVALID_OPTION"):
        select("nvfp4", 1, "cuda:0", backend="cuda", report=report)


def test_rocm_and_cpu_are_refused_in_words(monkeypatch):
    with pytest.raises(BackendUnavailable, match="it runs on cuda devices, not cpu"):
        select("e4m3", 1, "cpu", backend="cuda")
    mock_gpus(monkeypatch, [(9, 4)], hip="6.2")
    with_cupy(monkeypatch, True)
    report = capability.collect(facts={("*", "triton"): Check.no("mocked")})
    assert report.device("cuda:0").cuda_kernels is None  # not applicable on ROCm
    with pytest.raises(BackendUnavailable, match=r"can't run on cuda:0 \(not applicable\)"):
        select("e4m3", 1, "cuda:0", backend="cuda", report=report)


def test_matmul_refuses_cpu_tensors_in_words():
    from softfp8 import quantize
    from softfp8.backends import cuda
    p = quantize(torch.randn(8, 32), "e4m3")
    with pytest.raises(ValueError, match="one CUDA device for the cuda backend, got cpu and cpu"):
        cuda.matmul(torch.randn(1, 32), p)


@pytest.mark.parametrize("values, kernels, ftz", [
    ((0.5, -0.5, 2.0 ** -9), "yes", "no"),  # denormals kept: the backend runs, inject is exact
    ((0.0, -0.0, 0.0), "no", "yes"),  # flushed: its 8-bit decodes would be wrong, so it can't run
])
def test_the_sub_probe_judges_the_kernels_values(monkeypatch, values, kernels, ftz):
    from softfp8 import _probes
    from softfp8.backends.cuda import _runtime
    monkeypatch.setattr(_runtime, "probe_values", lambda device: values)
    monkeypatch.setattr(_runtime, "versions", lambda: "CuPy (mocked)")
    probes = _probes.SubProbes(triton_installed=False, numba_installed=False, interpret=False,
                               cupy_installed=True)
    dev = capability.DeviceReport("cuda:0", capability.Runtime.CUDA, capability=(6, 1))
    assert str(probes.cuda_kernels(dev).status) == kernels
    assert str(probes.ftz_cuda(dev).status) == ftz
    if kernels == "no":
        assert "flushed denormals" in probes.cuda_kernels(dev).detail
