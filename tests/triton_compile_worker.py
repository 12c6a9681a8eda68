"""Cross-compile every Triton kernel variant for one GPU target; print one JSON line per variant.

Run by tests/test_triton_compile.py in a subprocess whose environment has no TRITON_INTERPRET
(under the interpreter @triton.jit objects are not compilable). Usage:
    python tests/triton_compile_worker.py cuda 90 32      # backend, arch, warp size
Needs no GPU: triton.compile(ASTSource(...), target=GPUTarget(...)) stops at PTX/cubin or AMDGCN.
"""
from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import torch  # noqa: E402

from softfp8.backends.triton import (DeviceInfo, Kernel, _fma, _kernels, _mma,  # noqa: E402
                                     launch_config, mma_x_in_step, pdl_settings)

MMA_GEMV = "mma_gemv"
"""Kernel.MMA_GEMV's variants below name their constexprs as across its family; `source` picks
the family's kernel (`_mma.mma_kernel`)."""
from softfp8.formats import Format  # noqa: E402

FP8 = ("e5m2", "e4m3", "e4m3_b128")
ROW_SCALED = ("e5m2", "e4m3")  # HAS_SCALE: fp32 row scales (E4M3_B128's are per tile)
DECODES = [("e5m2", False), ("e4m3", False), ("nvfp4", False), ("nvfp4", True),
           ("mxfp4", False), ("mxfp4", True), ("e4m3_b128", False)]  # (format, E2M1 injection)
PTR = {"fp32": "*fp32", "fp16": "*fp16", "bf16": "*bf16"}
INT_ARGS = ("M", "N", "K", "RB", "SB", "KB_SPLIT", "ROW0")
DIV16 = ("RB", "KB_SPLIT")  # what Triton's launcher specialises as multiples of 16 at run time


SHAPES = {"gemv": 1, "small_m": 8, "tiled": 128}  # M per kernel; N = K = 4096


def table_m1(fmt: str, info: DeviceInfo, **override):
    """(LaunchConfig, constexprs) of Kernel.MMA_GEMV as the table runs a 4096 x 4096 weight at
    M = 1 on `info` (the run mapping, 2 tiles; its warps, depth, ring and PDL mode), no bias,
    whole steps left to ZERO's default; `override` replaces any constexpr."""
    cfg = launch_config(4096, 4096, 1, Format(fmt), info, torch.float16)
    c = dict(FMT=fmt, HAS_BIAS=False, WARPS=cfg.num_warps, PARTIAL=False,
             PDL=pdl_settings(info, Format(fmt), cfg)[0], PREFETCH=0, AHEAD=0, RUNS=1, TILES=2,
             HAS_SCALE=fmt in ("e5m2", "e4m3"), DEPTH=cfg.depth, RING=cfg.ring,
             X_IN_STEP=mma_x_in_step(Format(fmt)) and cfg.depth == 1 and not cfg.ring)
    return cfg, dict(c, **override)


def variants(backend: str, arch):
    """(name, kernel, constexprs, x dtype, num_warps, num_stages): every kernel (GEMV, small-M,
    tiled) x every decode (format, select/inject, hardware FP8 where the target has it), with the
    tile settings launch_config picks for this target. The activation dtype cycles fp16 -> bf16
    -> fp32 across the decodes so each kernel is compiled with each dtype (the full cross product
    for 7 targets would cost minutes of CI for paths that differ only in a load's conversion)."""
    cap = (arch // 10, arch % 10) if backend == "cuda" else None
    info = DeviceInfo(sm_count=132, capability=cap, interpreter=False)
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    decodes = [(f, i, False) for f, i in DECODES]
    if cap is not None and cap >= (8, 9):
        decodes += [("e5m2", False, True), ("e4m3", False, True)]
    for j, (fmt, inject, hw) in enumerate(decodes):
        xd = list(dtypes)[j % 3]
        tag = f"{fmt}-{'inject' if inject else 'hw' if hw else 'sw' if fmt in FP8 else 'select'}"
        pdl, prefetch = pdl_settings(info, Format(fmt))  # sm_90: the PDL prologue compiles too
        base = dict(FMT=fmt, HAS_SCALE=fmt in ROW_SCALED, HAS_BIAS=True, INJECT=inject, HW=hw,
                    ASM=backend == "cuda" and not hw, PDL=pdl, PREFETCH=prefetch)
        for kname, m in SHAPES.items():
            cfg = launch_config(4096, 4096, m, Format(fmt), info, dtypes[xd])
            if cfg.kernel is Kernel.MMA_GEMV:  # FP4 with fp16 x: the FMA/dot kernels' tiles
                cfg = launch_config(4096, 4096, m, Format(fmt), info, torch.bfloat16)
            assert cfg.kernel.value == kname, (kname, cfg)
            partial = cfg.split_k > 1
            if cfg.kernel is Kernel.GEMV:
                c = dict(base, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, PARTIAL=partial,
                         BLOCK_KB=cfg.block_k * (8 if fmt in FP8 else 4) // 8)
                fn = _fma.gemv_kernel
            else:
                c = dict(base, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
                         PARTIAL=partial, PRECISION="ieee",
                         UPCAST=False)
                fn = _fma.dot_kernel
            yield f"{kname}-{tag}-{xd}", fn, c, xd, cfg.num_warps, cfg.num_stages
            if fmt == "e4m3" and c["ASM"] and kname == "small_m":  # E4M3 codes without NaN
                yield (f"{kname}-{tag}-finite-{xd}", fn, dict(c, NAN=False), xd, cfg.num_warps,
                       cfg.num_stages)
        if fmt in ("nvfp4", "mxfp4") and not inject and cap is not None and cap >= (8, 0):
            # the mma GEMV (fp16 x, inline PTX): its own decode, so once per FP4 format
            cfg = launch_config(4096, 4096, 1, Format(fmt), info, torch.float16)
            assert cfg.kernel is Kernel.MMA_GEMV, cfg
            # runs 1: the M = 1 run mapping (2 and 4 tiles a warp), runs 2: M = 2; 0: the tiles
            for runs, tiles in ((1, 2), (1, 4), (2, 2), (0, 2)):
                cfg = launch_config(4096, 4096, max(runs, 1) if runs else 8, Format(fmt), info,
                                    torch.float16)
                c = dict(FMT=fmt, HAS_BIAS=True, WARPS=4, PARTIAL=cfg.split_k > 1,
                         PDL=pdl, PREFETCH=prefetch, AHEAD=0 if runs else 2, RUNS=runs,
                         TILES=tiles)
                yield (f"mma_gemv-r{runs}t{tiles}-{fmt}-fp16", MMA_GEMV, c, "fp16",
                       4, 1)
            # whole steps (ZERO = 0): the loads leave switched-off registers unzeroed
            # M = 9..16: the tiles in two groups of 8 x rows
            yield (f"mma_gemv-r0t2-groups-{fmt}-fp16", MMA_GEMV, dict(c, GROUPS=2),
                   "fp16", 4, 1)
            # ... or in one program that decodes once for both (WIDE)
            yield (f"mma_gemv-r0t2-wide-{fmt}-fp16", MMA_GEMV, dict(c, WIDE=True),
                   "fp16", 4, 1)
            # (unsplit: the epilogue that finishes the rows, NVFP4's tensor scale and the bias)
            c = dict(c, RUNS=1, TILES=2, AHEAD=0, ZERO=False, PARTIAL=False)
            yield f"mma_gemv-r1t2-keep-{fmt}-fp16", MMA_GEMV, c, "fp16", 4, 1
            # the decode by exponent injection (e2m1=inject), the same settings as -keep-
            # (its WIDE form is checked by the PTX emulator and the GPU tests)
            yield (f"mma_gemv-r1t2-inject-{fmt}-fp16", MMA_GEMV,
                   dict(c, INJECT=True), "fp16", 4, 1)
            # ... with block scales known to hold no NaN code (`codes_nan_free`)
            yield (f"mma_gemv-r1t2-inject-finite-{fmt}-fp16", MMA_GEMV,
                   dict(c, INJECT=True, NAN=False), "fp16", 4, 1)
            # ... with each step's x loaded in that step (`mma_x_in_step`)
            yield (f"mma_gemv-r1t2-inject-xstep-{fmt}-fp16", MMA_GEMV,
                   dict(c, INJECT=True, X_IN_STEP=True), "fp16", 4, 1)
            if fmt == "mxfp4":  # ... no NaN scale, each block against its row's exponent
                yield (f"mma_gemv-r1t2-inject-xstep-finite-{fmt}-fp16", MMA_GEMV,
                       dict(c, INJECT=True, X_IN_STEP=True, NAN=False), "fp16", 4, 1)
                yield (f"mma_gemv-r1t2-inject-xstep-rowe-{fmt}-fp16", MMA_GEMV,
                       dict(c, INJECT=True, X_IN_STEP=True, NAN=False, ROW_E=True), "fp16", 4, 1)
                # ... with x one step ahead, as the launcher runs it (`mma_x_in_step`)
                yield (f"mma_gemv-r1t2-inject-rowe-{fmt}-fp16", MMA_GEMV,
                       dict(c, INJECT=True, NAN=False, ROW_E=True), "fp16", 4, 1)
                # ... without a bias: the rows' 2^(E - 127) loaded before the loop
                yield (f"mma_gemv-r1t2-inject-rowe-nobias-{fmt}-fp16", MMA_GEMV,
                       dict(c, INJECT=True, NAN=False, ROW_E=True, HAS_BIAS=False), "fp16", 4, 1)
            if fmt == "nvfp4":  # FP4 M = 1 in one warp of 4 tiles (the table where 11..12
                # programs an SM)
                c4 = dict(c, INJECT=True, NAN=False, TILES=4, WARPS=1)
                yield f"mma_gemv-r1t4-w1-{fmt}-fp16", MMA_GEMV, c4, "fp16", 1, 1
            # the shared-memory ring (cp.async; 2 stages x 4 warps, the most static smem)
            yield (f"mma_gemv-r1t2-ring2-{fmt}-fp16", MMA_GEMV,
                   dict(c, INJECT=True, RING=2, PARTIAL=True), "fp16", 4, 1)
        if fmt in FP8 and not hw and cap is not None and cap >= (8, 0):  # MMA_FORMATS
            # the mma GEMV for 8-bit codes: M = 1 (2 and 4 tiles a warp), and the run mapping
            # laid out for 4 and 8 x rows (split, so the partial store compiles too)
            # (E4M3's M = 1 also without the NaN fix: weights known to hold no NaN code)
            # (and two register buffers, depth 2: the table's M <= 4); E4M3_B128 (its tile
            # scale a step) the ones the table takes and a few more, the tiles (RUNS = 0) too
            settings = [(1, 2, False, True, 2), (1, 4, True, True, 1), (4, 2, True, True, 2),
                        (8, 2, False, True, 1), (8, 2, True, True, 2), (1, 2, False, True, 1)] + (
                [(1, 2, False, False, 2)] if fmt == "e4m3" else [])
            if fmt == "e4m3_b128":
                settings = [(1, 2, False, False, 2), (1, 4, True, True, 1), (8, 2, True, True, 2),
                            (0, 2, True, True, 1)]
            for runs, tiles, partial, nan, depth in settings:
                c = dict(FMT=fmt, HAS_BIAS=True, WARPS=4, PARTIAL=partial, PDL=pdl,
                         PREFETCH=prefetch, AHEAD=0, RUNS=runs, TILES=tiles,
                         HAS_SCALE=fmt in ROW_SCALED, NAN=nan, DEPTH=depth)
                name = (f"mma_gemv-r{runs}t{tiles}d{depth}{'' if nan else '-finite'}-{fmt}"
                        f"-fp16")
                yield name, MMA_GEMV, c, "fp16", 4, 1
            # M = 9..16 on small weights: the runs for 8 x rows in two groups
            yield (f"mma_gemv-r8t2d2-groups-{fmt}-fp16", MMA_GEMV,
                   dict(c, RUNS=8, TILES=2, PARTIAL=True, NAN=True, DEPTH=2, GROUPS=2), "fp16",
                   4, 1)
            yield (f"mma_gemv-r8t2d2-wide-{fmt}-fp16", MMA_GEMV,
                   dict(c, RUNS=8, TILES=2, PARTIAL=True, NAN=True, DEPTH=2, WIDE=True), "fp16",
                   4, 1)
            c = dict(c, RUNS=1, TILES=2, PARTIAL=False, NAN=True, DEPTH=2, ZERO=False)
            yield f"mma_gemv-r1t2d2-keep-{fmt}-fp16", MMA_GEMV, c, "fp16", 4, 1
            yield (f"mma_gemv-r2t2-ring2-{fmt}-fp16", MMA_GEMV,
                   dict(c, RUNS=2, DEPTH=1, RING=2), "fp16", 4, 1)
            if pdl:  # sm_90: the early launch's order (weights before the wait) at depth 2
                c = dict(FMT=fmt, HAS_BIAS=True, WARPS=2, PARTIAL=False, PDL=1, PREFETCH=0,
                         AHEAD=0, RUNS=1, TILES=2, HAS_SCALE=fmt in ROW_SCALED, DEPTH=2)
                yield f"mma_gemv-r1t2d2-pdl-early-{fmt}-fp16", MMA_GEMV, c, "fp16", 2, 1
            # the table's M = 1 ring from sm_90 (MMA_FP8_RING_M1: one warp, 4 stages, early)
            cfg, c = table_m1(fmt, info, HAS_BIAS=True)
            if cfg.ring:
                yield (f"mma_gemv-r1t2-ring{cfg.ring}-w{cfg.num_warps}-{fmt}-fp16",
                       MMA_GEMV, c, "fp16", cfg.num_warps, 1)
                # ... where every row and step is inside: copies without predicates
                yield (f"mma_gemv-r1t2-ring{cfg.ring}-w{cfg.num_warps}-whole-{fmt}-fp16",
                       MMA_GEMV, dict(c, WHOLE=True, ZERO=False), "fp16",
                       cfg.num_warps, 1)
        if not hw:  # the large-M slab decode (portable decoders only)
            c = dict(FMT=fmt, HAS_SCALE=fmt in ROW_SCALED, INJECT=inject, BLOCK_R=16,
                     BLOCK_KB=512 * (8 if fmt in FP8 else 4) // 8, CHECK=xd != "fp32",
                     ASM=backend == "cuda")
            yield f"dequant-{tag}-{xd}", _kernels.dequant_kernel, c, xd, 4, 1
            if xd != "fp32":  # and the exact pass after it (dot_kernel with FIX)
                cfg = launch_config(4096, 4096, 128, Format(fmt), info, dtypes[xd])
                c = dict(base, PDL=0, PREFETCH=0, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                         BLOCK_K=cfg.block_k, PARTIAL=False, PRECISION="ieee", UPCAST=False,
                         FIX=True, FIX_HI=0x477FE000, FIX_LO=0x38800000)
                yield f"fix-{tag}-{xd}", _fma.dot_kernel, c, xd, cfg.num_warps, cfg.num_stages


def source(fn, constexprs, xd):
    if fn is MMA_GEMV:
        fn, constexprs = _mma.mma_kernel(constexprs)
    names = fn.arg_names
    # a constexpr parameter left out takes its default (as a launch does), not a runtime i32:
    # otherwise every branch on it is compiled, e.g. the MMA GEMV's ring (RING)
    constexprs = dict(constexprs)
    if constexprs.get("PARTIAL"):  # split launches reduce in their last program, as launched
        constexprs.setdefault("LAST", True)
    for prm in fn.params:
        if (prm.is_constexpr and prm.name not in constexprs
                and prm.default is not inspect.Parameter.empty):
            constexprs[prm.name] = prm.default
    sig = {}
    for name in names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in ("x_ptr", "y_ptr", "out_ptr"):
            sig[name] = PTR[xd]
        elif name in ("info_ptr", "cnt_ptr") or (name == "ws_ptr" and constexprs.get("FIX")) or (
                name == "g_ptr" and constexprs.get("ROW_E")):  # MXFP4's rows' exponents
            sig[name] = "*i32"
        elif name in ("w_ptr", "s_ptr"):
            sig[name] = "*u8" if name == "w_ptr" or constexprs["FMT"] not in FP8 else "*fp32"
        elif name.endswith("_ptr"):
            sig[name] = "*fp32"
        else:
            sig[name] = "i32"
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names
             if n.endswith("_ptr") or n in DIV16}
    return ASTSource(fn, sig, constexprs=dict(constexprs), attrs=attrs)


def _ptxas(arch: int) -> str:
    """The ptxas Triton itself uses for `arch` (3.9: get_ptxas(arch); older: get_ptxas())."""
    from triton.backends.nvidia.compiler import get_ptxas
    try:
        tool = get_ptxas(arch)
    except TypeError:
        tool = get_ptxas()
    return tool.path if hasattr(tool, "path") else tool[0]


def resources(backend, arch, kernel):
    """(registers, spill bytes) from ptxas -v on the PTX (NVIDIA) or the AMDGCN metadata."""
    if backend == "cuda":
        ptxas = _ptxas(arch)
        with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
            f.write(kernel.asm["ptx"])
        out = subprocess.run([ptxas, "-v", f"--gpu-name=sm_{arch}a" if arch >= 90 else
                              f"--gpu-name=sm_{arch}", f.name, "-o", os.devnull],
                             capture_output=True, text=True).stderr
        os.unlink(f.name)
        regs = int(re.search(r"Used (\d+) registers", out).group(1))
        spills = sum(int(v) for v in re.findall(r"(\d+) bytes spill (?:stores|loads)", out))
        return regs, spills
    text = kernel.asm["amdgcn"]
    regs = int(re.search(r"\.vgpr_count:\s+(\d+)", text).group(1))
    spill = re.search(r"\.vgpr_spill_count:\s+(\d+)", text)
    sspill = re.search(r"\.sgpr_spill_count:\s+(\d+)", text)
    return regs, (int(spill.group(1)) if spill else 0) + (int(sspill.group(1)) if sspill else 0)


FP8_CVT = re.compile(r"^\s*cvt\.[^\n;]*(e4m3|e5m2|e2m1)", re.M)


def sass_text(cubin: bytes) -> str | None:
    """The cubin's SASS by the wheel's nvdisasm; None where this Triton bundles none."""
    from triton.backends.nvidia import compiler as nv
    tool = os.path.join(os.path.dirname(nv.__file__), "bin", "nvdisasm")
    if not os.path.exists(tool):
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    sass = subprocess.run([tool, "-c", f.name], capture_output=True, text=True).stdout
    os.unlink(f.name)
    return sass


def loads_before_pdl_wait(sass: str | None, op: str = "LDG.E.128") -> int | None:
    """`op` instructions (16-byte loads; LDGSTS: the ring's cp.async copies) before the first
    griddepcontrol.wait (SASS `ACQBULK`), -1 where there is no wait, None without SASS."""
    if sass is None:
        return None
    if "ACQBULK" not in sass:
        return -1
    return sass[:sass.index("ACQBULK")].count(op)


def loads_after_store(sass: str | None) -> int | None:
    """Global loads (`LDG`, not the ring's `LDGSTS`) after the kernel's first global store
    (`STG`), None without SASS or without a store. ptxas keeps a load behind a store it can't
    prove apart, so such a load waits for the store, and what needs it waits for the load."""
    if sass is None or "STG" not in sass:
        return None
    tail = sass[sass.index("STG"):]
    return len(re.findall(r"\bLDG\.", tail))


ALU_OPS = ("PRMT", "LOP3", "SHF", "ISETP", "IADD3", "SEL", "LEA", "VIADD", "VIMNMX")
"""SASS opcodes that issue to the integer ALU pipe of sm_80/sm_90 (modifiers dropped)."""
FMA_OPS = ("IMAD", "HMUL2", "HFMA2", "FFMA")
"""... and to the FMA pipe."""


def _loops(sass: str) -> tuple[list[str], list[tuple[int, int]]]:
    """(every instruction, (first, last) index of each backward branch's body in program
    order)."""
    labels, ins = {}, []
    for line in sass.splitlines():
        m = re.match(r"\s*(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(ins)
            continue
        m = re.search(r"/\*[0-9a-f]{4}\*/\s+(.*?);", line)
        if m:
            ins.append(m.group(1).strip())
    loops = [(labels[m.group(1)], i) for i, s in enumerate(ins)
             for m in [re.search(r"BRA\s+(?:`\()?(\.L_x_\d+)", s)]
             if m and labels.get(m.group(1), len(ins)) < i]
    return ins, loops


def _loop_span(sass: str) -> tuple[list[str], int, int] | None:
    """(every instruction, first and last index of the longest backward branch's body), None
    where there is no loop."""
    ins, loops = _loops(sass)
    if not loops:
        return None
    lo, hi = max(loops, key=lambda p: p[1] - p[0])
    return ins, lo, hi


def loop_lens(sass: str) -> list[int]:
    """Instructions in each backward branch's body, in program order."""
    return [hi - lo + 1 for lo, hi in _loops(sass)[1]]


def loop_ops(sass: str) -> list[str]:
    """The instructions of the longest backward branch's body (a kernel's K loop)."""
    span = _loop_span(sass)
    return [] if span is None else span[0][span[1]:span[2] + 1]


def loads_after_loop(sass: str) -> int | None:
    """Global loads (`LDG`) after the K loop (`loop_ops`), None without a loop: each waits out
    its latency at the program's end, where nothing else is left to hide it."""
    span = _loop_span(sass)
    if span is None:
        return None
    ins, _, hi = span
    return sum(bool(re.search(r"\bLDG\.", i)) for i in ins[hi + 1:])


def opcode(instruction: str) -> str:
    """`@!P0 IMAD.SHL.U32 R1, ...` -> IMAD."""
    return re.sub(r"^@!?U?P\w+\s+", "", instruction).split()[0].split(".")[0]


def main(backend: str, arch: str, warp: int) -> None:
    arch_v = int(arch) if backend == "cuda" else arch
    target = GPUTarget(backend, arch_v, warp)
    for name, fn, constexprs, xd, warps, stages in variants(backend, arch_v):
        t0 = time.time()
        rec = {"target": f"{backend}:{arch}", "variant": name, "hw": constexprs.get("HW", False)}
        options = {"num_warps": warps, "num_stages": stages}
        try:
            k = triton.compile(source(fn, constexprs, xd), target=target, options=options)
            rec["regs"], rec["spills"] = resources(backend, arch_v, k)
            if backend == "cuda":
                rec["fp8_cvt"] = sorted({m.group(0).strip() for m in FP8_CVT.finditer(k.asm["ptx"])})
                rec["ld128"] = "ld.global.v4" in k.asm["ptx"]
                if fn is MMA_GEMV and constexprs.get("PDL"):  # sm_90's builds
                    sass = sass_text(k.asm["cubin"])
                    rec["pdl"] = constexprs["PDL"]
                    rec["loads_before_wait"] = loads_before_pdl_wait(sass)
                    rec["copies_before_wait"] = loads_before_pdl_wait(sass, "LDGSTS")
                    rec["partial"] = bool(constexprs.get("PARTIAL"))
                    rec["loads_after_store"] = loads_after_store(sass)
                    if sass is not None:  # the K loop's instructions, its integer-ALU ones
                        loop = loop_ops(sass)
                        rec["loop_len"] = len(loop)
                        rec["loop_alu"] = sum(opcode(i) in ALU_OPS for i in loop)
                        # register copies (MOV, IMAD.MOV): a value carried to the next step
                        rec["loop_moves"] = sum("MOV" in i.split()[0] for i in loop)
                        rec["loads_after_loop"] = loads_after_loop(sass)
                        rec["loop_lens"] = loop_lens(sass)
        except Exception as e:  # reported, and the test decides whether it is acceptable
            rec["error"] = f"{type(e).__name__}: {str(e)[-600:]}"
        rec["seconds"] = round(time.time() - t0, 2)
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
