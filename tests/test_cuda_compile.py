"""The CUDA backend's kernels (softfp8/backends/cuda) compiled by NVRTC for sm_60, sm_61 and sm_70
on a machine without a GPU or driver (tests/nvrtc_ptx.py), their PTX and ptxas's report checked:
no FP8/FP4 conversions, no fp16 arithmetic, no local memory or spills, no flush-to-zero, 16-byte
weight loads. Skipped where NVRTC isn't installed (pip install nvidia-cuda-nvrtc-cu12)."""
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from softfp8 import Format
from softfp8.backends.cuda import _source
from softfp8.backends.cuda._source import COMPILE_OPTIONS, Variant, XKind, source

import nvrtc_ptx

from softfp8.backends.cuda import FORMATS as _CUDA_FORMATS  # noqa: E402

CUDA_FORMATS = sorted(_CUDA_FORMATS, key=list(Format).index)  # the backend's formats

# --- the kernels through NVRTC, checked in PTX and ptxas's report ----------------------------
needs_nvrtc = pytest.mark.skipif(
    nvrtc_ptx.load() is None,
    reason=f"NVRTC not installed: pip install {nvrtc_ptx.PIP_PACKAGE} to compile the CUDA kernels")

ARCHS = ("sm_60", "sm_61", "sm_70")
FP8_CVT = re.compile(r"\bcvt\.[\w.]*(e4m3|e5m2|e2m1|e3m2|e2m3|ue8m0)")
F16_MATH = re.compile(r"(?:^|[;{])\s*(@!?%\w+\s+)?(add|sub|mul|fma|neg|abs|min|max|setp|set|ex2"
                      r"|rcp|sqrt|div|tanh|lg2|sin|cos)[\w.]*\.(f16|f16x2|bf16|bf16x2)\b", re.M)
SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def ptx_problems(ptx: str, log: str) -> list[str]:
    """What the checks object to in one kernel's PTX and ptxas log (empty: it passes)."""
    found = []
    if FP8_CVT.search(ptx):
        found.append(f"FP8/FP4 conversion: {FP8_CVT.search(ptx).group(0)}")
    if F16_MATH.search(ptx):
        found.append(f"fp16 arithmetic: {F16_MATH.search(ptx).group(0).strip()}")
    if ".local" in ptx:
        found.append("local memory in the PTX")
    if ".ftz" in ptx:
        found.append("flush-to-zero arithmetic (the decodes need denormals)")
    frames = SPILLS.findall(log)
    if not frames:
        found.append("no ptxas report in the log")
    found += [f"stack {s} / spills {a}+{b} bytes" for s, a, b in frames if (s, a, b) != ("0",) * 3]
    return found


def fast_variants() -> list[Variant]:
    """Every format in each kernel and x dtype, both settings of each decode flag, M = 1 and the
    largest; the CI set (the full M x dtype x flag matrix is the slow test)."""
    out = []
    for fmt in CUDA_FORMATS:
        fp4 = fmt in (Format.NVFP4, Format.MXFP4)
        out += [Variant("gemv", fmt, 1, XKind.F32, None, specials=True),
                Variant("gemv", fmt, 1, XKind.F16, XKind.F32, specials=False, inject=fp4),
                Variant("gemv", fmt, 3, XKind.BF16, XKind.BF16, row_scale=fmt is not Format.E5M2),
                Variant("dequant", fmt, specials=True, inject=False),
                Variant("dequant", fmt, specials=False, inject=fp4,
                        row_scale=fmt is not Format.E5M2)]
    return out


def _compile_all(pairs):
    def one(pair):
        variant, arch = pair
        try:
            c = nvrtc_ptx.compile_for(source(variant), arch, COMPILE_OPTIONS)
        except RuntimeError as exc:
            return variant, arch, [str(exc)[-1500:]], ""
        return variant, arch, ptx_problems(c.ptx, c.log), c.ptx
    with ThreadPoolExecutor(max_workers=2) as pool:  # ctypes drops the GIL while NVRTC works
        return list(pool.map(one, pairs))


@needs_nvrtc
def test_every_kernel_compiles_clean_for_pascal_and_volta():
    results = _compile_all([(v, a) for v in fast_variants() for a in ARCHS])
    bad = [(v.name, a, p) for v, a, p, _ in results if p]
    assert not bad, bad
    for v, a, _, ptx in results:
        assert f".target {a}" in ptx
        assert re.search(r"ld\.global\.nc\.v4\.u32", ptx), f"{v.name} {a}: no 16-byte loads"


@needs_nvrtc
def test_the_largest_gemv_fits_in_registers_on_a_p40():
    """M = 16 holds 2 x 16 accumulators and 2 x 16 decoded weights a lane: no spills on sm_61."""
    variants = [Variant("gemv", fmt, 16, x, XKind.F32, specials=True, inject=inj)
                for fmt in CUDA_FORMATS for x, inj in ((XKind.F16, False), (XKind.F32, True))]
    results = _compile_all([(v, "sm_61") for v in variants])
    assert not [(v.name, p) for v, _, p, _ in results if p]


@pytest.mark.slow
@needs_nvrtc
def test_every_m_compiles_clean_for_a_p40():
    """Every M of the GEMV for sm_61 with the dtypes that take the most registers."""
    variants = [Variant("gemv", fmt, m, x, XKind.F32, specials=True, inject=inj)
                for fmt in CUDA_FORMATS for m in range(1, _source.GEMV_MAX_M + 1)
                for x in (XKind.F32, XKind.F16)
                for inj in ((False, True) if fmt in (Format.NVFP4, Format.MXFP4) else (False,))]
    results = _compile_all([(v, "sm_61") for v in dict.fromkeys(variants)])
    assert not [(v.name, p) for v, _, p, _ in results if p]


@needs_nvrtc
@pytest.mark.parametrize("snippet, options, expected", [
    ("out[0] = __uint_as_float(c[0]) * 3.0f;", ("--use_fast_math",), "flush-to-zero"),
    ("float t[64]; for (int i = 0; i < 64; ++i) t[i] = i * c[i]; out[0] = t[c[0] & 63];", (),
     "local memory"),
    ("unsigned short h; asm(\"{.reg .f16 a; mov.b16 a, %1; add.f16 a, a, a; mov.b16 %0, a;}\""
     " : \"=h\"(h) : \"h\"((unsigned short)c[0])); out[0] = h;", (), "fp16 arithmetic"),
])
def test_the_checks_can_fail(snippet, options, expected):
    code = ('extern "C" __global__ void k(const unsigned* c, float* out) {' + snippet + "}")
    compiled = nvrtc_ptx.compile_for(code, "sm_61", options)
    assert any(expected in p for p in ptx_problems(compiled.ptx, compiled.log))


def test_variant_names_are_unique_and_checked():
    names = [v.name for v in fast_variants()]
    assert len(names) == len(set(names))
    with pytest.raises(ValueError, match="m: expected 1..16"):
        Variant("gemv", Format.E4M3, 17)
    with pytest.raises(ValueError, match="kernel: expected"):
        Variant("gemm", Format.E4M3)
