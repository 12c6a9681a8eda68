"""Every Triton kernel variant cross-compiles for GPUs this machine doesn't have.

tests/triton_compile_worker.py compiles each variant (GEMV, small-M, tiled x every decode, with
the tile settings launch_config picks for that target) with triton.compile(ASTSource,
target=GPUTarget) in a subprocess without TRITON_INTERPRET (interpreted @triton.jit functions
can't be compiled). The software-decode PTX must hold no FP8/FP4 `cvt`; the sm_89+ hardware
variants must (so the check can fail); registers and spills are printed; sm_75 must not spill.
"""
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("triton")
# Seven cross-compilations of every variant in subprocesses: minutes of CPU, so CI's `-m slow` run
# has them; a plain run checks the same kernels in the interpreter (tests/test_triton*.py).
pytestmark = pytest.mark.slow

TARGETS = [("cuda", "75", 32), ("cuda", "80", 32), ("cuda", "86", 32), ("cuda", "89", 32),
           ("cuda", "90", 32), ("hip", "gfx90a", 64), ("hip", "gfx942", 64)]
WORKER = os.path.join(os.path.dirname(__file__), "triton_compile_worker.py")


def _compile(target):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # triton 3.9 warns when unset; 3.6 default
    proc = subprocess.run([sys.executable, WORKER, *map(str, target)], env=env,
                          capture_output=True, text=True, timeout=600)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, proc.stderr[-2000:], records


@pytest.fixture(scope="module")
def compiled():
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(zip(TARGETS, pool.map(_compile, TARGETS)))


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: f"{t[0]}-{t[1]}")
def test_every_variant_compiles(compiled, target):
    rc, stderr, records = compiled[target]
    assert rc == 0, stderr
    assert len(records) >= 18, f"expected 3 kernels x 6 decodes, got {len(records)}"
    errors = [r for r in records if "error" in r]
    if target[0] == "hip" and errors and len(errors) == len(records):
        # every variant failing the same way is the toolchain, not our code (say why)
        pytest.skip(f"{target[1]}: this Triton wheel can't build AMD code here: {errors[0]['error']}")
    print(f"\n{target[0]}:{target[1]}  variant: registers / spill bytes")
    for r in records:
        print(f"  {r['variant']:28s} {r.get('regs')} / {r.get('spills')}  ({r['seconds']} s)")
    assert not errors, "\n".join(f"{r['variant']}: {r['error']}" for r in errors)
    if target[0] == "cuda":
        sw = [r for r in records if not r["hw"]]
        assert all(r["fp8_cvt"] == [] for r in sw), [(r["variant"], r["fp8_cvt"]) for r in sw]
        assert all(r["ld128"] for r in sw if r["variant"].startswith("gemv")), \
            "GEMV weight loads are not 16-byte vectors"
        hw = [r for r in records if r["hw"]]
        assert len(hw) == (6 if int(target[1]) >= 89 else 0)
        assert all(r["fp8_cvt"] for r in hw), "hardware variants must use the FP8 cvt"
    if target[:2] == ("cuda", "75"):
        assert all(r["spills"] == 0 for r in records), [(r["variant"], r["spills"]) for r in records]


def test_mma_gemv_early_pdl_loads_weights_before_the_wait(compiled):
    """Under an early PDL launch the MMA GEMV's first weight loads must come before
    griddepcontrol.wait in the SASS (ptxas hoists a plain wait above every load: `_mma`); under a
    late launch the plain wait stays first (x's loads must not wait for the weights). The ring
    (`_mma_ring`) copies its first steps' weights before the wait under either launch, and x's
    only after it (x is the previous kernel's output)."""
    rc, stderr, records = compiled[("cuda", "90", 32)]
    assert rc == 0, stderr
    pdl = [r for r in records if "loads_before_wait" in r]
    if pdl and all(r["loads_before_wait"] is None for r in pdl):
        pytest.skip("this Triton wheel bundles no nvdisasm to read the SASS with")
    ring = [r for r in pdl if "-ring" in r["variant"]]
    early = [r for r in pdl if r["pdl"] == 1 and r not in ring]
    late = [r for r in pdl if r["pdl"] == 2 and r not in ring]
    assert early and late and ring, [r["variant"] for r in pdl]
    for r in ring:  # the ring's weight copies of its first RING - 1 steps, x's after the wait
        stages = int(r["variant"].split("-ring")[1].split("-")[0])
        per_step = 8 if "fp4-" in r["variant"] else 4  # 4 rows' codes (FP4: and scale words)
        assert r["loads_before_wait"] == 0, (r["variant"], r["loads_before_wait"])
        assert r["copies_before_wait"] == (stages - 1) * per_step, (
            r["variant"], r["copies_before_wait"])
    for r in early:  # a thread's rows at the first step (depth 2: two steps): 4 or 8 loads
        want = 8 if "d2" in r["variant"] else 4
        assert r["loads_before_wait"] >= want, (r["variant"], r["loads_before_wait"])
    for r in late:
        assert r["loads_before_wait"] == 0, (r["variant"], r["loads_before_wait"])


def test_mma_gemv_loads_no_row_terms_after_its_stores(compiled):
    """The MMA GEMV's epilogue loads every row's scale, NVFP4's tensor scale and the bias before
    its first store (`_mma_store`): in the SASS no global load follows a global store. ptxas
    keeps a load behind a store it can't prove apart from it, so loads beside the stores ran one
    after another at every program's end (E4M3 token 1.726 -> 1.621 ms on the H200 when they
    moved; docs/decisions.md). K-split parts (PARTIAL) are left out: their last
    program reads the other parts after storing its own, by design."""
    rc, stderr, records = compiled[("cuda", "90", 32)]
    assert rc == 0, stderr
    unsplit = [r for r in records if "loads_after_store" in r and not r["partial"]]
    if unsplit and all(r["loads_after_store"] is None for r in unsplit):
        pytest.skip("this Triton wheel bundles no nvdisasm to read the SASS with")
    every = ("e5m2", "e4m3", "nvfp4", "mxfp4")
    fmts = {f for r in unsplit for f in every if f"-{f}-" in r["variant"]}
    assert fmts == set(every), [r["variant"] for r in unsplit]
    assert any("-ring" in r["variant"] for r in unsplit), [r["variant"] for r in unsplit]
    late = {r["variant"]: r["loads_after_store"] for r in unsplit if r["loads_after_store"]}
    assert not late, late


@pytest.mark.parametrize("fmt", ["e5m2", "e4m3"])
def test_whole_ring_copies_shorten_the_loop(compiled, fmt):
    """The reason `_mma`'s WHOLE exists: where every row and step is inside, the ring's copies
    go without predicates and its K loop is shorter on sm_90 than the same build with them
    (the table's M = 1 ring, one warp, 4 stages, a bias, E4M3 with its NaN fix)."""
    plain, whole = _sm90_ring_pair(compiled, fmt, "whole")
    assert whole["spills"] == 0 and plain["loop_len"] > 0
    # measured (triton 3.9): 94 -> 78 (E5M2), 219 -> 205 (E4M3)
    assert whole["loop_len"] <= plain["loop_len"] - 10, (plain["loop_len"], whole["loop_len"])


def _sm90_pair(compiled, key, first, second):
    """The sm_90 records of variants `first` and `second`; skips where this Triton wheel
    bundles no nvdisasm (then no record carries `key`, a count the worker reads from the SASS)."""
    rc, stderr, records = compiled[("cuda", "90", 32)]
    assert rc == 0, stderr
    by_name = {r["variant"]: r for r in records}
    a, b = by_name[first], by_name[second]
    if key not in a or key not in b:
        pytest.skip("this Triton wheel bundles no nvdisasm to read the SASS with")
    return a, b


def _sm90_ring_pair(compiled, fmt, kind):
    """`_sm90_pair` of the table's M = 1 ring build in one warp (its stage count in the name)
    and its `kind` (whole) variant, both with their loops read from the SASS."""
    rc, stderr, records = compiled[("cuda", "90", 32)]
    assert rc == 0, stderr
    plain = next(r["variant"] for r in records
                 if "-ring" in r["variant"] and r["variant"].endswith(f"-w1-{fmt}-fp16"))
    return _sm90_pair(compiled, "loop_lens", plain,
                      plain.replace(f"-{fmt}-fp16", f"-{kind}-{fmt}-fp16"))


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_fp4_injection_decode_issues_fewer_integer_alu_instructions(compiled, fmt):
    """The reason `_mma_ptx._decode_word_inject` exists: on sm_90 its K loop issues fewer
    integer-ALU instructions than the table decode's, same settings (the worker counts them the
    way benchmarks/sass_mma_loop.py does)."""
    table, inject = _sm90_pair(compiled, "loop_alu", f"mma_gemv-r1t2-keep-{fmt}-fp16",
                               f"mma_gemv-r1t2-inject-{fmt}-fp16")
    assert inject["spills"] == 0 and table["loop_alu"] > 0
    # measured: 246 -> 198 (NVFP4), 282 -> 234 (MXFP4)
    assert inject["loop_alu"] <= 0.85 * table["loop_alu"], (table["loop_alu"], inject["loop_alu"])


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_fp4_register_loop_with_x_in_step_carries_only_the_weights(compiled, fmt):
    """X_IN_STEP (`_mma_flags.mma_x_in_step`): FP4 M = 1 from registers loads each step's x in
    that step, so only the next step's weight words are carried into it, one register copy
    each (4 rows x 4 words); x one step ahead, as the weights are, takes 16 copies a step more
    (SASS, sm_90: NVFP4 401 -> 384 instructions a step)."""
    ahead, in_step = _sm90_pair(compiled, "loop_moves", f"mma_gemv-r1t2-inject-{fmt}-fp16",
                                f"mma_gemv-r1t2-inject-xstep-{fmt}-fp16")
    # measured (triton 3.9, these builds): NVFP4 16 copies a step, x ahead 34; MXFP4 20 / 29
    assert in_step["spills"] == 0 and in_step["loop_moves"] <= 20, in_step["loop_moves"]
    assert ahead["loop_moves"] >= in_step["loop_moves"] + 8, (ahead["loop_moves"],
                                                               in_step["loop_moves"])


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_fp4_tile_without_nan_checks_shortens_the_loop(compiled, fmt):
    """The reason the FP4 tiles have a NaN-free variant (`_mma_ptx._tile_asm` nan=False, taken
    where `codes_nan_free`): NVFP4's scale pairs leave out the E4M3 NaN fix, MXFP4 its E8M0 255
    checks, and the sm_90 K loop is shorter than the same build with them."""
    plain, finite = _sm90_pair(compiled, "loop_len", f"mma_gemv-r1t2-inject-{fmt}-fp16",
                               f"mma_gemv-r1t2-inject-finite-{fmt}-fp16")
    # measured (triton 3.9, these builds): NVFP4 401 -> 396, MXFP4 445 -> 432
    fewer = 4 if fmt == "nvfp4" else 8
    assert finite["spills"] == 0
    assert finite["loop_len"] <= plain["loop_len"] - fewer, (plain["loop_len"],
                                                             finite["loop_len"])


def test_mxfp4_row_exponents_shorten_the_loop(compiled):
    """The reason `_mma`'s ROW_E exists: each block scaled against its row's exponent, not a
    shared exponent of four blocks found by shuffles every step, and the sums scaled once in
    the epilogue: the sm_90 K loop is much shorter than the same build without it."""
    shared, row_e = _sm90_pair(compiled, "loop_len",
                               "mma_gemv-r1t2-inject-xstep-finite-mxfp4-fp16",
                               "mma_gemv-r1t2-inject-xstep-rowe-mxfp4-fp16")
    # measured (triton 3.9, these builds, x in its step): 424 -> 369
    assert row_e["spills"] == 0
    assert row_e["loop_len"] <= shared["loop_len"] - 40, (shared["loop_len"], row_e["loop_len"])


def test_mxfp4_row_exponents_load_before_the_loop_without_a_bias(compiled):
    """MXFP4 on its rows' exponents loads each row's 2^(E - 127) at the program's start, where
    the loop hides the load (`_mma` TERMS_FIRST), unless a bias would hold 4 more registers
    through it: the build without a bias loads nothing after its K loop, the one with a bias
    loads the rows' terms there."""
    biased, plain = _sm90_pair(compiled, "loads_after_loop",
                               "mma_gemv-r1t2-inject-rowe-mxfp4-fp16",
                               "mma_gemv-r1t2-inject-rowe-nobias-mxfp4-fp16")
    assert plain["spills"] == 0
    assert plain["loads_after_loop"] == 0 < biased["loads_after_loop"], (
        biased["loads_after_loop"], plain["loads_after_loop"])


def test_e4m3_b128_ring_loop_adds_only_its_tile_scales(compiled):
    """E4M3_B128 on the table's M = 1 ring (sm_90, every row and step inside) runs E4M3's loop
    plus each step's tile scale (`_mma_tile._tile_step`): one load and its address, 8 FFMA (2
    tiles x 4 sums), a register carried to the next step. A change that costs the loop more
    shows here before device time is spent (triton 3.9: 205 -> 222 instructions a step with the
    NaN fix and a bias; docs/decisions.md)."""
    rc, stderr, records = compiled[("cuda", "90", 32)]
    assert rc == 0, stderr
    e4m3 = next(r["variant"] for r in records
                if r["variant"].startswith("mma_gemv-r1t2-ring") and
                r["variant"].endswith("-whole-e4m3-fp16"))
    plain, b128 = _sm90_pair(compiled, "loop_len", e4m3,
                             e4m3.replace("-e4m3-fp16", "-e4m3_b128-fp16"))
    assert b128["spills"] == 0 and plain["loop_len"] > 0
    assert 8 < b128["loop_len"] - plain["loop_len"] <= 20, (plain["loop_len"], b128["loop_len"])
