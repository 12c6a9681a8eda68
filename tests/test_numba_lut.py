"""The table-lookup FP4 GEMVs -- AVX-512 (softfp8/backends/_lut.py) and AVX2
(_pshufb.py): every E2M1 code at every nibble and block position bit-exact through each
kernel, fp64 parity over odd shapes, and the bit-operation kernels they replace still right when
they are switched off. Each kernel's tests run where numba targets its instruction set."""
import pytest
import torch
from conftest import rel_err, same_bits

import softfp8
from softfp8.decode import E2M1_TO_FLOAT32
from softfp8.dispatch import E2M1Decode

numba = pytest.importorskip("numba")
L = pytest.importorskip("softfp8.backends.numba._lut")
from softfp8.backends.numba import _pshufb as P  # noqa: E402
from softfp8.backends.numba import _ir as I  # noqa: E402
from softfp8.backends import numba as cpu_backend  # noqa: E402
from softfp8.backends.numba import _gemv  # noqa: E402

np = pytest.importorskip("numpy")
needs_avx512 = pytest.mark.skipif(not L.available(), reason="numba does not target AVX-512 here")
needs_avx2 = pytest.mark.skipif(not P.available(), reason="numba does not target AVX2 here")
KERNELS = [pytest.param(L, 1, marks=needs_avx512, id="avx512-1row"),
           pytest.param(L, L.ROWS, marks=needs_avx512, id="avx512-4rows"),
           pytest.param(P, 1, marks=needs_avx2, id="avx2")]

BLOCK = {"nvfp4": 16, "mxfp4": 32}
ONE = {"nvfp4": 0x38, "mxfp4": 127}  # scale code of 1.0: E4M3 and E8M0


def words_of(codes):
    """codes [N, K] in 0..15 -> int32 words [N, K/8], code 8i+j at bits 4j..4j+3."""
    n, k = codes.shape
    c = codes.to(torch.int64).view(n, k // 8, 8) << (4 * torch.arange(8))
    w = c.sum(-1)
    return torch.where(w >= 2 ** 31, w - 2 ** 32, w).to(torch.int32)


def gemv(mod, fmt, words, scales, x, group, g=1.0, steps=None):
    """mod's parallel GEMV (chunks of 8 rows) on x, or on `steps` (xs, xp) where given (the bf16
    steps: test_dpbf16); NVFP4 tensor scale g; float32 y."""
    y = np.zeros(words.shape[0], np.float32)
    xs, xp = steps if steps is not None else mod.x_steps(x, BLOCK[fmt])
    rows = (group,) if mod is L else ()  # the AVX2 kernel runs one row a pass
    if fmt == "nvfp4":
        mod.gemv_nvfp4(words.numpy(), scales.numpy(), np.float32(g), xs, xp, y, 8, *rows)
    else:
        mod.gemv_mxfp4(words.numpy(), scales.numpy(), xs, xp, y, 8, *rows)
    return torch.from_numpy(y)


@pytest.mark.parametrize("mod, group", KERNELS)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_every_code_at_every_position_is_exact(fmt, mod, group):
    """Row r holding code (r + k) % 16 at position k: a one-hot x at k reads column k back, so
    each code is seen at every nibble and lane of a 16-word step, in each row slot of a 4-row
    pass and in the one-row kernel (group 1, and the 2 rows left over in the last chunk of 8),
    and in the tail blocks past the last whole step (the bit-operation select path)."""
    blk = BLOCK[fmt]
    n, k = 18, 256 + blk  # two whole steps of 128 codes and one tail block
    codes = (torch.arange(n)[:, None] + torch.arange(k)[None, :]) % 16
    words = words_of(codes)
    scales = torch.full((n, k // blk), ONE[fmt], dtype=torch.uint8)
    got = torch.empty(n, k)
    for col in range(k):
        x = torch.zeros(k)
        x[col] = 1.0
        got[:, col] = gemv(mod, fmt, words, scales, x, group)
    want = E2M1_TO_FLOAT32[codes]
    # exact values; code 8 (-0) reads back +0, as in any dot product: -0 + the +0 products
    bad = got != want
    assert same_bits(got[codes != 8], want[codes != 8]).all()
    assert not bad.any(), (codes[bad][:8].tolist(), got[bad][:8].tolist())


@pytest.mark.parametrize("mod, group", KERNELS)
def test_nvfp4_loop_decodes_every_scale_code(mod, group):
    """gemv_nvfp4_raw decodes the E4M3 block scales in its loop: row r's blocks hold scale codes
    r, r + 1, ... (every code below 0x7F at every block slot of a step and every row slot of a
    pass, subnormals included), and each row must come out bit for bit as gemv_nvfp4's, whose
    scales are decoded before the loop; tail blocks (past the last whole step) and leftover rows
    of a chunk too. Codes 0x7F and up are not its to take."""
    g = torch.Generator().manual_seed(7)
    n, k = 127, 128 * 3 + 32
    codes = torch.randint(0, 16, (n, k), generator=g)
    words = words_of(codes)
    scales = ((torch.arange(n)[:, None] + torch.arange(k // 16)[None, :]) % 0x7F).to(torch.uint8)
    assert mod.loop_decodes(scales) and not mod.loop_decodes(scales | 0x80)
    assert not mod.loop_decodes(torch.full((1, 2), 0x7F, dtype=torch.uint8))
    x = torch.randn(k, generator=g)
    xs, xp = mod.x_steps(x.numpy(), 16)
    rows = (group,) if mod is L else ()
    want = gemv(mod, "nvfp4", words, scales, x, group, g=0.75)
    y = np.zeros(n, np.float32)
    mod.gemv_nvfp4_raw(words.numpy(), scales.numpy(), np.float32(0.75), xs, xp, y, 8, *rows)
    got = torch.from_numpy(y)
    assert same_bits(got, want).all(), (got - want).abs().max()
    assert (want != 0).sum() > n - 2  # not an empty comparison (row 0's first scale is 0)


@pytest.mark.parametrize("group", [pytest.param(1, marks=needs_avx512, id="1row"),
                                   pytest.param(L.ROWS, marks=needs_avx512, id="4rows")])
def test_mxfp4_loop_decodes_every_scale_code(group, steps=None):
    """gemv_mxfp4_raw (AVX-512) decodes the E8M0 block scales in its loop: every code 1..254 at
    every block slot of a step and every row slot, tail blocks too, bit for bit as gemv_mxfp4;
    codes 0 and 255 are not its to take. `steps`: bf16 steps (test_dpbf16)."""
    g = torch.Generator().manual_seed(8)
    n, k = 127, 128 * 3 + 64
    codes = torch.randint(0, 16, (n, k), generator=g)
    words = words_of(codes)
    scales = (1 + (2 * torch.arange(n)[:, None] + torch.arange(k // 32)[None, :]) % 254).to(
        torch.uint8)
    assert L.loop_decodes_e8m0(scales) and scales.min() == 1 and scales.max() == 254
    assert not L.loop_decodes_e8m0(torch.tensor([[0, 3]], dtype=torch.uint8))
    assert not L.loop_decodes_e8m0(torch.tensor([[255, 3]], dtype=torch.uint8))
    x = torch.randn(k, generator=g) * 2.0 ** -20  # keeps 2^127 * x * 6 * 32 finite
    if steps is not None:
        x = x.to(torch.bfloat16)
    xs, xp = steps(x) if steps is not None else L.x_steps(x.numpy(), 32)
    want = gemv(L, "mxfp4", words, scales, x, group, steps=(xs, xp))
    y = np.zeros(n, np.float32)
    L.gemv_mxfp4_raw(words.numpy(), scales.numpy(), xs, xp, y, 8, group)
    got = torch.from_numpy(y)
    assert same_bits(got, want).all(), (got - want).abs().max()
    assert torch.isfinite(want).all() and (want != 0).sum() > n - 2


@pytest.mark.parametrize("table", [pytest.param("1", marks=needs_avx512, id="avx512"),
                                   pytest.param("avx2", marks=needs_avx2, id="avx2")])
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("n, k", [(1, 1), (17, 4097), (4097, 33), (5, 512), (3, 1000),
                                  (11, 6001)])
def test_gemv_matches_fp64(fmt, n, k, table, monkeypatch):
    """Odd shapes through cpu_backend.matmul, with each table kernel (SOFTFP8_NUMBA_FP4_LUT=avx2
    takes the AVX2 one on an AVX-512 CPU too); (11, 6001) is past MULTIROW_MIN_K_FP4 and MXFP4's
    K = 4097 past MULTIROW_MIN_K_MXFP4, so the AVX-512 kernel runs 4 rows a pass with leftover
    rows in its chunks, and one below; every kernel's prefetch runs past the last row (clamped
    to it)."""
    assert 4097 + 63 < _gemv.MULTIROW_MIN_K_FP4 <= 6001
    assert 1000 < _gemv.MULTIROW_MIN_K_MXFP4 <= 4097
    monkeypatch.setenv("SOFTFP8_NUMBA_FP4_LUT", table)
    assert _gemv._fp4_table_kernels() is (L if table == "1" else P)
    g = torch.Generator().manual_seed(n + k)
    packed = softfp8.quantize(torch.randn(n, k, generator=g), fmt)
    x = torch.randn(1, k, generator=g)
    want = x.double() @ softfp8.dequantize(packed).double().T
    for e2m1 in (E2M1Decode.SELECT, E2M1Decode.INJECT):
        assert rel_err(cpu_backend.matmul(x, packed, None, e2m1=e2m1), want) <= 1e-6


@pytest.mark.parametrize("e2m1", [E2M1Decode.SELECT, E2M1Decode.INJECT])
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_bit_operation_kernels_still_run_when_the_table_is_off(fmt, e2m1, monkeypatch):
    """SOFTFP8_NUMBA_FP4_LUT=0 (and any CPU without AVX2) takes the _kernels GEMVs."""
    monkeypatch.setenv("SOFTFP8_NUMBA_FP4_LUT", "0")
    assert _gemv._fp4_table_kernels() is None
    g = torch.Generator().manual_seed(7)
    packed = softfp8.quantize(torch.randn(37, 4097, generator=g), fmt)
    x = torch.randn(1, 4097, generator=g)
    want = x.double() @ softfp8.dequantize(packed).double().T
    assert rel_err(cpu_backend.matmul(x, packed, None, e2m1=e2m1), want) <= 1e-6


@pytest.mark.parametrize("mod, features", [(L, "+avx2,+avx512f"), (P, "+sse4.2,+avx,+avx2")],
                         ids=["avx512", "avx2"])
def test_available_follows_numba_target(mod, features, monkeypatch):
    from numba.core import config

    mod.available.cache_clear()
    try:
        monkeypatch.setattr(config, "CPU_NAME", "generic")
        monkeypatch.setattr(config, "CPU_FEATURES", None)
        assert mod.available() is False
        mod.available.cache_clear()
        monkeypatch.setattr(config, "CPU_FEATURES", features)
        assert mod.available() is True
        mod.available.cache_clear()
        monkeypatch.setattr(config, "CPU_FEATURES", "+sse4.2,+avx")
        assert mod.available() is False
    finally:
        mod.available.cache_clear()


def test_avx2_step_order_is_a_permutation_with_block_aligned_lane_groups():
    """Each fp32 vector of a step holds 8 distinct codes, all 64 codes appear once, and lanes
    0-3 and 4-7 each lie in one NVFP4 block (16 codes): the kernel scales them as groups."""
    order = P._step_order()
    assert sorted(order.reshape(-1).tolist()) == list(range(64))
    for v in range(8):
        for group in (order[v, :4], order[v, 4:]):
            assert len({int(c) // 16 for c in group}) == 1, (v, order[v])



@pytest.mark.parametrize("mod, step", [(P, 64), (L, 128)], ids=["avx2", "avx512"])
def test_x_steps_planes_only_for_a_tail(mod, step):
    """x_steps (pure numpy, any CPU): the select path's planes only where whole steps leave
    blocks over (else an empty array of the kernels' type); numpy and torch x alike."""
    for k, tail in ((512, False), (528, True)):
        x = np.arange(k, dtype=np.float32)
        xs, xp = mod.x_steps(x, 16)
        assert xs.shape[0] == k // step and xs.size == step * (k // step)
        assert xs.dtype == np.float32
        assert sorted(xs.reshape(-1).tolist()) == list(range(step * (k // step)))
        assert xp.shape == ((16, k // 16) if tail else (16, 0)) and xp.dtype == np.float32
        assert xp.flags["C_CONTIGUOUS"]
        if tail:
            assert (xp == x.reshape(-1, 16).T).all()
        xs_t, xp_t = mod.x_steps(torch.from_numpy(x), 16)
        assert np.array_equal(xs_t, xs) and np.array_equal(xp_t, xp)


@pytest.mark.parametrize("k, kp", [(512, 512), (500, 512), (1, 128), (129, 256), (4096, 4096)])
def test_row_steps_are_x_steps_of_the_padded_row(k, kp):
    """_lut.row_steps (compiled; any CPU numba runs on) gives x_steps' xs of x zero-padded
    to kp, bit for bit."""
    x = torch.randn(1, k, generator=torch.Generator().manual_seed(k))
    padded = torch.zeros(kp)
    padded[:k] = x[0]
    want, planes = L.x_steps(padded.numpy(), 16)
    got = L.row_steps(x.numpy(), kp)
    assert planes.shape == (16, 0)
    assert got.dtype == np.float32 and got.shape == want.shape and np.array_equal(got, want)


@needs_avx512
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_matmul_takes_row_steps_for_float32_x_only(fmt, monkeypatch):
    """cpu_backend's FP4 GEMV makes float32 x's steps by row_steps where whole steps cover the
    padded K (x's own K zero-padded; a strided x copied first), else by x_steps; every route
    within 1e-6 of fp64."""
    calls = []
    real = L.row_steps
    monkeypatch.setattr(L, "row_steps", lambda x, kp: calls.append(x.flags["C_CONTIGUOUS"])
                        or real(x, kp))
    monkeypatch.setenv("SOFTFP8_NUMBA_FP4_LUT", "1")
    g = torch.Generator().manual_seed(3)
    for k, covered in ((1024, True), (1000, True), (1040, False)):  # padded K 1024, 1024, 1056
        packed = softfp8.quantize(torch.randn(9, k, generator=g), fmt)
        wide = torch.randn(1, 2 * k, generator=g)
        want = wide[:, ::2].double() @ softfp8.dequantize(packed).double().T
        for x in (wide[:, ::2].contiguous(), wide[:, ::2], wide[:, ::2].half()):
            before = len(calls)
            y = cpu_backend.matmul(x, packed)
            taken = len(calls) - before
            assert taken == (1 if covered and x.dtype == torch.float32 else 0), (k, x.stride())
            tol = 1e-6 if x.dtype == torch.float32 else 1e-2  # fp16 x: x itself rounded
            assert rel_err(y.double(), want) <= tol
    assert calls == [True] * 4


_PREFETCH_INSTRUCTION = {3: "prefetcht0", 2: "prefetcht1", 1: "prefetcht2", 0: "prefetchnta"}


def _row_kernels():
    """(name, row intrinsic, argument types) of every vector row loop that prefetches, those this
    CPU compiles: the FP8 rows (any x86), the AVX-512 FP4 table rows (float32 and bf16 steps) and
    the AVX2 ones."""
    from numba import types

    from softfp8.backends.numba import _dpbf16, _fp8_rows

    i64, f32 = types.int64, types.float32
    fp8 = (types.uint16[:, ::1], i64, i64, f32[::1], f32[::1])
    fp4 = (types.int32[:, ::1], i64, i64, i64, f32[:, :, ::1], f32[:, ::1])
    out = [("fp8 one row", _fp8_rows._e5m2_1, fp8),
           ("fp8 four rows", _fp8_rows._e5m2_4, fp8)]
    if L.available():
        out += [("avx512 fp4 one row", L._nv_row_raw, fp4), ("avx512 fp4 rows", L._mx_rows, fp4)]
        if _dpbf16.available():
            bf = fp4[:4] + (types.uint16[:, :, ::1], fp4[5])
            out.append(("avx512 fp4 bf16 rows", L._nv_rows_raw, bf))
    if P.available():
        out.append(("avx2 fp4 row", P._nv_rows_raw, fp4))
    return out


@pytest.mark.skipif(not I.numba_targets("sse"), reason="x86 prefetch instructions")
@pytest.mark.parametrize("name", [name for name, _, _ in _row_kernels()])
def test_row_loops_prefetch_to_the_declared_cache_level(name):
    """Each row loop's prefetches compile to the instruction of `PREFETCH_LOCALITY` (prefetcht2,
    into the L2: measured 10-35% faster than prefetcht0 from memory), and there are some: a
    prefetch that LLVM dropped or an edit back to the L1 would pass every bit-exactness test.
    Compiled (not run, not cached, so numba shows the assembly) in a wrapper of the intrinsic."""
    import re

    _, rows, argtypes = next(k for k in _row_kernels() if k[0] == name)
    nargs = len(argtypes)
    args = ", ".join(f"a{i}" for i in range(nargs))
    scope = {"rows": rows}
    exec(f"def call({args}):\n    return rows({args})", scope)
    fn = numba.njit(cache=False)(scope["call"])
    fn.compile(argtypes)
    found = re.findall(r"\bprefetch\w*", fn.inspect_asm(argtypes))
    assert found, f"{name}: no prefetch in the compiled loop"
    assert set(found) == {_PREFETCH_INSTRUCTION[I.PREFETCH_LOCALITY]}, (name, sorted(set(found)))


@needs_avx512
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("k", [512, 4096, 6144])
def test_rows_a_pass_follow_k_format_and_the_steps_taken(k, fmt):
    """cpu_backend's FP4 plan runs the AVX-512 kernel four rows a pass from MULTIROW_MIN_K_FP4 on
    (MXFP4 with float32 x steps: from MULTIROW_MIN_K_MXFP4), one below: each call hands its
    kernel the rows a pass of the steps it made (recorded by a wrapper)."""
    import dataclasses

    from softfp8.backends.numba import _dpbf16

    packed = softfp8.quantize(torch.randn(8, k), fmt)
    first = 2 if fmt == "nvfp4" else 1  # the kernel's arguments before the x steps
    plan = _gemv._plan(packed)
    seen = []

    def kernel(*args):
        seen.append((args[first + 1].dtype, args[first + 5:]))
        return plan.kernel(*args)

    recording = dataclasses.replace(plan, kernel=kernel)
    x = torch.randn(1, k)
    y = np.empty(8, np.float32)
    recording.run(x, y, 8, False)
    if _dpbf16.available():
        recording.run(x.bfloat16(), y, 8, False)
    fp32_least = _gemv.MULTIROW_MIN_K_MXFP4 if fmt == "mxfp4" else _gemv.MULTIROW_MIN_K_FP4
    want = [(np.float32, (L.ROWS if k >= fp32_least else 1,)),
            (np.uint16, (L.ROWS if k >= _gemv.MULTIROW_MIN_K_FP4 else 1,))]
    assert seen == want[:len(seen)]
