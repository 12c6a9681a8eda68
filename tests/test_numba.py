"""The Numba CPU backend: its decoders over every code, GEMV / small-M / large-M parity with an
fp64 reference, NaN/inf propagation, threads, and the on-disk compilation cache."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import rel_err, same_bits
from numba_support import quantized

import softfp8
from softfp8.decode import E2M1_TO_FLOAT32

numba = pytest.importorskip("numba")
K = pytest.importorskip("softfp8.backends.numba._kernels")
D = pytest.importorskip("softfp8.backends.numba._decode")
from softfp8.backends import numba as cpu_backend  # noqa: E402
from softfp8.backends.numba import _gemv, _runtime  # noqa: E402

ALL_BYTES = torch.arange(256, dtype=torch.int32)
ALL_NIBBLES = torch.arange(16, dtype=torch.int32)
E2M1_MODES = ["inject", "select"]


def run_decoder(name, codes):
    return torch.from_numpy(D.DECODERS[name](codes.numpy()))


BYTE_DECODERS = [  # kernel decoder, torch dtype it must equal, factor the kernel divides by
    ("e5m2_bits", torch.float8_e5m2, 1.0), ("e5m2_fast", torch.float8_e5m2, 1.0),
    ("e4m3_bits", torch.float8_e4m3fn, 1.0), ("e4m3_fast_div256", torch.float8_e4m3fn, 256.0),
    ("e4m3_i32_div256", torch.float8_e4m3fn, 256.0),
    ("e8m0", torch.float8_e8m0fnu, 1.0),
]


@pytest.mark.parametrize("ftz", [False, True], ids=["denormals", "ftz"])
@pytest.mark.parametrize("name, dtype, factor", BYTE_DECODERS, ids=[d[0] for d in BYTE_DECODERS])
def test_byte_decoder_every_code(name, dtype, factor, ftz, request):
    if ftz:
        request.getfixturevalue("flush_denormals")
    want = ALL_BYTES.to(torch.uint8).view(dtype).to(torch.float32)
    with torch.no_grad():
        got = run_decoder(name, ALL_BYTES)
    if factor != 1.0:  # exact: a power of two, and every value stays a normal float32
        got = got * factor
    assert same_bits(got, want).all(), ALL_BYTES[~same_bits(got, want)].tolist()


@pytest.mark.parametrize("name", ["e2m1_select", "e2m1_inject"])
def test_e2m1_decoders_every_code(name):
    got = run_decoder(name, ALL_NIBBLES)
    assert same_bits(got, E2M1_TO_FLOAT32).all(), got.tolist()
    assert torch.equal(torch.signbit(got), torch.signbit(E2M1_TO_FLOAT32))


def test_e2m1_under_ftz_inject_fails_on_half_select_stays_exact(flush_denormals):
    inject = run_decoder("e2m1_inject", ALL_NIBBLES)
    select = run_decoder("e2m1_select", ALL_NIBBLES)
    assert same_bits(select, E2M1_TO_FLOAT32).all()
    wrong = ~same_bits(inject, E2M1_TO_FLOAT32)
    assert ALL_NIBBLES[wrong].tolist() == [1, 9]  # ±0.5: their 2^-127 intermediate flushed
    assert inject[[1, 9]].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("ftz", [False, True], ids=["denormals", "ftz"])
@pytest.mark.parametrize("name, dtype, factor", [("e5m2_pair", torch.float8_e5m2, 1.0),
                                                 ("e4m3_pair_div256", torch.float8_e4m3fn, 256.0)])
def test_pair_decoders_every_code_in_both_bytes(name, dtype, factor, ftz, request):
    """The GEMV reads FP8 rows as uint16: every code must decode in the low and the high byte."""
    if ftz:
        request.getfixturevalue("flush_denormals")
    lo, hi = torch.meshgrid(ALL_BYTES, ALL_BYTES, indexing="ij")
    u16 = (lo | (hi << 8)).reshape(-1).to(torch.int32).to(torch.uint16)  # every pair of codes
    got = torch.from_numpy(D.PACKED_DECODERS[name](u16.numpy())) * factor  # exact: power of 2
    want = torch.stack([lo, hi], -1).reshape(-1).to(torch.uint8).view(dtype).to(torch.float32)
    assert same_bits(got, want).all()


@pytest.mark.parametrize("name, factor", [("e2m1_word_select", 1.0),
                                          ("e2m1_word_inject_div2p126", 2.0 ** 126)])
def test_word_decoders_every_code_at_every_position(name, factor):
    """The FP4 GEMV decodes code j of an int32 word in place: all 16 codes at all 8 positions,
    next to neighbours of every value (word k has code (k + j) % 16 at position j)."""
    j = torch.arange(8)
    codes = (torch.arange(16)[:, None] + j[None, :]) % 16  # [16 words, 8 positions]
    words = (codes << (4 * j)).sum(1).to(torch.int64)
    words = torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)
    got = torch.from_numpy(D.PACKED_DECODERS[name](words.numpy())).double() * factor
    want = E2M1_TO_FLOAT32[codes.reshape(-1)]
    assert same_bits(got.float(), want).all(), got.tolist()


def test_e8m0_i32_every_code():
    codes = torch.arange(256, dtype=torch.int32)
    got = torch.from_numpy(D.DECODERS["e8m0_i32"](codes.numpy()))
    assert same_bits(got, codes.to(torch.uint8).view(torch.float8_e8m0fnu).float()).all()


def fp64_reference(x, packed, bias=None):
    y = x.double() @ softfp8.dequantize(packed).double().T
    return y if bias is None else y + bias.double()


def run(x, packed, bias=None, e2m1="select"):
    return cpu_backend.matmul(x, packed, bias, e2m1=softfp8.dispatch.E2M1Decode(e2m1))


FORMATS = ["e5m2", "e5m2_rowscale", "e4m3", "nvfp4", "mxfp4", "e4m3_b128"]
# (N, K, M): odd N and K, the 4097 that straddles every block, and each M path (1, small, sgemm)
CASES = [(3, 4097, 1), (4097, 17, 1), (17, 3, 2), (1, 1, 5), (4097, 3, 16), (17, 4097, 33),
         (33, 1, 1), (1, 17, 2), (3, 3, 33)]


FORMAT_DECODES = [(f, "select") for f in FORMATS] + [(f, "inject") for f in ("nvfp4", "mxfp4")]


@pytest.mark.parametrize("fmt, e2m1", FORMAT_DECODES, ids=lambda v: str(v))
@pytest.mark.parametrize("n, k, m", CASES, ids=lambda v: str(v))
def test_matmul_matches_fp64(fmt, n, k, m, e2m1):
    packed, g = quantized(fmt, n, k, seed=n * 31 + k * 7 + m)
    x = torch.randn(m, k, generator=g)
    bias = torch.randn(n, generator=g)
    y = run(x, packed, bias, e2m1)
    assert y.shape == (m, n) and y.dtype == torch.float32
    assert rel_err(y, fp64_reference(x, packed, bias)) <= 1e-6


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("m", [1, 5, 16])
@pytest.mark.parametrize("fmt", FORMATS)
def test_half_activations(fmt, m, dtype, tol):
    packed, g = quantized(fmt, 70, 333, seed=m)
    x = torch.randn(m, 333, generator=g).to(dtype)
    y = run(x, packed)
    assert y.dtype == dtype
    assert rel_err(y, fp64_reference(x, packed)) <= tol


@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("fmt", FORMATS)
def test_activations_that_require_grad(fmt, m):
    """The kernels read numpy views of x: a tensor that requires grad is read, not refused."""
    packed, g = quantized(fmt, 24, 256, seed=m)
    x = torch.randn(m, 256, generator=g)
    y = run(x.clone().requires_grad_(), packed)
    assert torch.equal(y, run(x, packed))
    assert rel_err(y, fp64_reference(x, packed)) <= 1e-6


def same_nonfinite(y, ref):
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    assert torch.equal(torch.isposinf(y), torch.isposinf(ref))
    assert torch.equal(torch.isneginf(y), torch.isneginf(ref))
    fin = torch.isfinite(ref)
    if fin.any():
        assert rel_err(y[fin], ref[fin]) <= 1e-6


@pytest.mark.parametrize("m", [1, 3, 20])
@pytest.mark.parametrize("fmt", ["e5m2", "e4m3", "nvfp4", "mxfp4", "e4m3_b128"])
def test_nan_and_inf_propagate_like_torch(fmt, m):
    g = torch.Generator().manual_seed(5)
    w = torch.randn(8, 70, generator=g)
    w[1, 5] = float("nan")
    if fmt == "e5m2":
        w[2, 9], w[3, 9] = float("inf"), float("-inf")  # only E5M2 can hold infinities
    packed = softfp8.quantize(w, fmt)
    x = torch.randn(m, 70, generator=g)
    x[0, 40] = float("inf")  # meets zero codes too: inf * 0 is NaN, as in torch
    x[-1, 60] = float("nan")
    ref = softfp8.linear(x, packed, backend="torch")
    assert torch.isnan(ref).any()  # the test would be empty without non-finite outputs
    for e2m1 in E2M1_MODES:
        same_nonfinite(run(x, packed, e2m1=e2m1), ref)


def test_threads_follow_torch_and_are_restored():
    packed, g = quantized("e4m3", 64, 256, seed=1)
    x = torch.randn(1, 256, generator=g)
    before_numba, before_torch = numba.get_num_threads(), torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert _runtime.threads_for(numba.get_num_threads()) == 1
        y1 = run(x, packed)
    finally:
        torch.set_num_threads(before_torch)
    assert numba.get_num_threads() == before_numba
    assert _runtime.threads_for(numba.get_num_threads()) == min(before_numba, before_torch)
    assert torch.equal(y1, run(x, packed))  # rows are independent: same bits on any thread count


def test_numba_thread_count_is_read_on_every_call():
    """matmul reads numba's thread count through the getter numba.get_num_threads wraps (cheaper
    right after a kernel): it must see a numba.set_num_threads made between calls, and leave
    numba's setting as it found it."""
    getter = _runtime.loaded()[3]
    packed, g = quantized("nvfp4", 64, 256, seed=2)
    x = torch.randn(1, 256, generator=g)
    before = numba.get_num_threads()
    y = run(x, packed)
    try:
        numba.set_num_threads(1)
        assert getter() == 1
        assert torch.equal(run(x, packed), y)
        assert numba.get_num_threads() == 1
    finally:
        numba.set_num_threads(before)
    assert getter() == before


_CACHE_PROBE = textwrap.dedent("""
    import json, time, torch, softfp8
    from softfp8.backends import numba as cpu_backend
    from softfp8.backends.numba import _fp8_rows as R
    packed = softfp8.quantize(torch.randn(8, 64), "e5m2")
    t = time.perf_counter()
    cpu_backend.matmul(torch.randn(1, 64), packed, None, e2m1=softfp8.dispatch.E2M1Decode.SELECT)
    s = [R.gemv_fp8.stats]
    print(json.dumps({"hits": sum(sum(v.cache_hits.values()) for v in s),
                      "misses": sum(sum(v.cache_misses.values()) for v in s),
                      "seconds": time.perf_counter() - t}))
""")


@pytest.mark.slow  # fresh interpreters compiling into an empty cache (CI's -m slow run)
def test_second_process_loads_kernels_from_the_disk_cache(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def child():
        out = subprocess.run([sys.executable, "-c", _CACHE_PROBE], env=env, cwd=root,
                             capture_output=True, text=True, timeout=300, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    first, second = child(), child()
    assert first["misses"] >= 1 and first["hits"] == 0  # empty cache: compiled
    assert second["hits"] >= 1 and second["misses"] == 0  # loaded, nothing compiled
    print(f"\ncold (compile) {first['seconds']:.2f} s, second process {second['seconds']:.3f} s")


_PAIR_PROBE = textwrap.dedent("""
    import json, numpy as np
    from softfp8.backends.numba import _fp8_rows as R
    pair = R._pair(np.uint16(0x3C3C), R.E5M2_KIND)  # two E5M2 codes of 1.0
    st = R._pair.stats
    print(json.dumps({"pair": [float(v) for v in pair], "hits": sum(st.cache_hits.values()),
                      "misses": sum(st.cache_misses.values())}))
""")


@pytest.mark.slow  # fresh interpreters compiling into an empty cache (CI's -m slow run)
def test_an_edit_to_another_kernel_module_recompiles_cached_kernels(tmp_path):
    """`_fp8_rows._pair` inlines `_decode.e5m2_pair`, from another file: numba alone
    would reload the old code from its disk cache after an edit there (it stamps the defining
    file only). Kernel caches carry a fingerprint of every kernel module (`_cache`), so
    the edit recompiles it, and the next process loads the new code from the cache. On a copy of
    the package, with its own cache folder."""
    import shutil

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shutil.copytree(os.path.join(root, "softfp8"), tmp_path / "softfp8",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(tmp_path))

    def child():
        out = subprocess.run([sys.executable, "-c", _PAIR_PROBE], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=300, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = child()
    assert first["pair"] == [1.0, 1.0] and first["misses"] == 1
    decode = tmp_path / "softfp8" / "backends" / "numba" / "_decode.py"
    old = "    return (_half_bits_to_f32(np.uint16(u << np.uint16(8))),"
    src = decode.read_text()
    assert old in src, "e5m2_pair changed: update this test"
    decode.write_text(src.replace(old, old.replace("return (", "return (np.float32(7.0) + ")))
    edited = child()
    assert edited["pair"] == [8.0, 1.0] and edited["misses"] == 1  # recompiled, not the old code
    again = child()
    assert again["pair"] == [8.0, 1.0] and again["hits"] == 1 and again["misses"] == 0


def test_kernel_files_are_recognised_through_a_symlinked_path(tmp_path):
    """The locator answers for a kernel module reached through a symlink too (numba hands it
    the path the module was imported by); not for other files."""
    import pathlib

    from softfp8.backends.numba import _cache, _fp8_rows

    link = tmp_path / "pkg"
    link.symlink_to(pathlib.Path(_fp8_rows.__file__).parent, target_is_directory=True)
    assert _cache._is_kernel_file(str(link / "_fp8_rows.py"))
    assert not _cache._is_kernel_file(str(link / "__init__.py"))
    assert not _cache._is_kernel_file(str(tmp_path / "_fp8_rows.py"))


def test_every_cached_kernel_carries_the_kernel_sources_fingerprint():
    """Every disk-cached function of every kernel module finds its cache through
    `_cache.KernelSourcesLocator` (a module that defined one before `_decode`'s
    import installed it would not): none is missed, and there are some."""
    import importlib
    import pathlib

    from numba.core.dispatcher import Dispatcher

    from softfp8.backends.numba import _cache

    folder = pathlib.Path(_cache.__file__).parent
    found = 0
    for path in sorted(folder.glob("_*.py")):
        if path.name == "__init__.py":
            continue
        mod = importlib.import_module(f"softfp8.backends.numba.{path.stem}")
        for name, obj in vars(mod).items():
            if isinstance(obj, Dispatcher) and obj.__module__ == mod.__name__ and obj._cache:
                locator = obj._cache._impl._locator
                assert isinstance(locator, _cache.KernelSourcesLocator), (path.name, name)
                found += 1
    assert found >= 20


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("magnitude", [1e-30, 1e-15, 1.0, 1e17, 1e30])
def test_fp4_inject_fold_holds_over_the_range_of_x(fmt, magnitude):
    """The inject GEMV folds 2^126 as 2^63 on x and on the row sum; where x is too large or too
    small for that, cpu_backend falls back to select. Either way the result stays within 1e-6."""
    packed, g = quantized(fmt, 37, 200, seed=3)
    x = torch.randn(1, 200, generator=g) * magnitude
    ref = fp64_reference(x, packed)
    y = run(x, packed, e2m1="inject")
    assert torch.isfinite(y).all()
    assert rel_err(y, ref) <= 1e-6


@pytest.mark.parametrize("e2m1", ["inject", "select"])
@pytest.mark.parametrize("m", [1, 2, 5])
def test_fp4_zero_codes_beside_a_large_block_scale_stay_zero(e2m1, m):
    """Found by hypothesis: a row whose only block scale is large (448) beside zero blocks. With
    fastmath reassoc, 2^126 (injection) * 448 * g overflowed to inf and inf * 0 gave NaN."""
    w = torch.zeros(4, 14)
    w[3, 13] = 32.0
    packed = softfp8.quantize(w, "nvfp4")
    x = torch.randn(m, 14, generator=torch.Generator().manual_seed(0))
    y = softfp8.linear(x, packed, backend="numba", e2m1=e2m1)
    want = x.double() @ softfp8.dequantize(packed).double().T
    assert torch.isfinite(y).all()
    assert rel_err(y, want) <= 1e-6


@pytest.mark.parametrize("fmt", FORMATS)
def test_gemv_follows_a_weight_written_in_place(fmt):
    """The M = 1 call keeps what it needs of a weight (numpy views, the tensor scale, the E4M3
    NaN check) between calls: a tensor of the weight written in place, or a weight that shares
    its words but not its scales, must be seen on the next call."""
    packed, g = quantized(fmt, 40, 256, seed=3)
    other, _ = quantized(fmt, 40, 256, seed=4)
    x = torch.randn(1, 256, generator=g)
    run(x, packed)  # what the call keeps is made here
    packed.words.copy_(other.words)
    if packed.scales is not None:
        packed.scales.copy_(other.scales)
    if packed.global_scale is not None:
        packed.global_scale.copy_(other.global_scale)
    assert torch.equal(run(x, packed), run(x, other))
    if fmt == "nvfp4":
        packed.global_scale.mul_(2)
        assert torch.equal(run(x, packed), run(x, other) * 2)
        # scale codes the AVX2 loop does not decode (sign, NaN), written in place: the kernel
        # that decodes them before its loop must take over
        packed.scales[2] |= 0x80
        packed.scales[3, 0] = 0x7F
        y = run(x, packed)
        assert y[0, 2] == -run(x, other)[0, 2] * 2 and torch.isnan(y[0, 3])
    if fmt == "mxfp4":
        # a scale code the AVX-512 loop does not decode (0: 2^-127, where code << 23 is 0.0),
        # written in place: the kernel that decodes it before its loop must take over
        packed.scales[2] = 127
        one = run(x, packed)[0, 2]
        packed.scales[2] = 0
        tiny = run(x, packed)[0, 2]
        assert one != 0 and abs(tiny / 2.0 ** -127 - one) <= 1e-4 * abs(one)
    if fmt == "e4m3":  # a NaN code written in place: the NaN-free decode must not stay
        packed.words.view(torch.uint8)[5, 17] = 0x7F
        y = run(x, packed)
        assert torch.isnan(y[0, 5]) and torch.isfinite(y[0, :5]).all()
    if packed.scales is not None:  # a new weight on the same words, other scales
        halved = packed.scales.clone()
        if fmt in ("nvfp4", "mxfp4"):
            halved[0] = 0  # row 0's block scales code 0: it sums to 0
        else:
            halved *= 0.5
        swapped = softfp8.PackedWeight(packed.fmt, packed.shape, packed.words, halved,
                                       packed.global_scale)
        y = run(x, swapped)
        fresh = softfp8.PackedWeight(packed.fmt, packed.shape, packed.words.clone(), halved,
                                     packed.global_scale)
        assert same_bits(y, run(x, fresh)).all()  # NaN: E4M3's row 5
        assert not same_bits(y, run(x, packed)).all()


def test_gemv_follows_the_fp4_table_setting():
    """The numba_fp4_lut setting in force at each call picks the FP4 kernels, though the
    kernel choice is kept per weight."""
    packed, g = quantized("nvfp4", 40, 256, seed=6)
    x = torch.randn(1, 256, generator=g)
    want = run(x, packed)
    from softfp8.backends._facts import facts_of

    with softfp8.launch_settings(numba_fp4_lut="0"):
        assert rel_err(run(x, packed), want) <= 1e-6
        assert type(facts_of(packed.words)[_gemv._PLAN][-1]) is _gemv._Fp4BitsGemv
    run(x, packed)  # the default again: a table kernel where this CPU has one
    if _gemv._fp4_table_kernels() is not None:
        assert type(facts_of(packed.words)[_gemv._PLAN][-1]) is not _gemv._Fp4BitsGemv


def test_an_fp4_table_setting_typo_raises(monkeypatch):
    """SOFTFP8_NUMBA_FP4_LUT takes 1, 0, avx2 or avx512; anything else raises on the layer call
    naming them (`_env.check_environment`), where it used to run as if 1."""
    packed, g = quantized("nvfp4", 40, 256, seed=6)
    monkeypatch.setenv("SOFTFP8_NUMBA_FP4_LUT", "avx3")
    softfp8.dispatch.clear_cache()
    with pytest.raises(ValueError, match="SOFTFP8_NUMBA_FP4_LUT='avx3' is not valid; expected "
                                         "one of '1', '0', 'avx2', 'avx512'"):
        softfp8.linear(torch.randn(1, 256, generator=g), packed, backend="numba")


def test_an_fp4_table_setting_set_after_the_first_call_waits_for_reload(monkeypatch):
    """SOFTFP8_NUMBA_FP4_LUT is read once, with the other settings: a value set after the first
    call changes nothing until `reload_environment()`, which raises on a typo naming the valid
    values (so a typo is never run as if 1)."""
    from softfp8 import _settings

    packed, g = quantized("nvfp4", 40, 256, seed=6)
    x = torch.randn(1, 256, generator=g)
    monkeypatch.delenv("SOFTFP8_NUMBA_FP4_LUT", raising=False)
    want = softfp8.linear(x, packed, backend="numba")
    monkeypatch.setenv("SOFTFP8_NUMBA_FP4_LUT", "avx3")
    assert torch.equal(softfp8.linear(x, packed, backend="numba"), want)
    with pytest.raises(ValueError, match="SOFTFP8_NUMBA_FP4_LUT='avx3' is not valid; expected "
                                         "one of '1', '0', 'avx2', 'avx512'"):
        _settings.reload_environment()
