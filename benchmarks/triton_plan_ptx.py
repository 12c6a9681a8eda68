"""The Triton backend's launch plans and the PTX of every launch, for GPUs this machine lacks.

A refactor of the launch plan or the kernels must leave every launch as it was: the same kernel,
grid, constexprs and launch options, and the same instructions. This script asks the backend
itself (`softfp8.backends.triton.matmul` on CPU tensors, with the device facts of each target
in place of the CPU's and Triton's launch caught before it runs) what it would launch for a
fixed list of targets, formats, shapes, M, activation dtypes, FP8 decodes, weight facts and
biases; compiles each distinct launch with `triton.compile(ASTSource(...), target=GPUTarget)`
exactly as Triton's launcher specialises it; and writes JSON {launch key: {plan, ptx, ptx_norm}}
(`ptx`: sha256 of the PTX text; `ptx_norm`: of the PTX with the kernel's name, `.loc`/`.file`
lines and the debug sections taken out, for kernels renamed or moved between files).

    python benchmarks/triton_plan_ptx.py --out /tmp/before.json
    python benchmarks/triton_plan_ptx.py --out /tmp/after.json --like /tmp/before.json \\
        --compare /tmp/before.json
    python benchmarks/triton_plan_ptx.py diff /tmp/before.json /tmp/after.json [--ptx-only]

Compiled results are cached by the kernel's source hash (Triton's `cache_key`, which covers the
jit functions it calls) and its specialisation, in --cache (default /tmp/softfp8-plan-ptx.json),
on top of Triton's own cache: a rerun compiles only what changed. No GPU needed; not under
TRITON_INTERPRET (interpreted kernels can't be compiled).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.pop("TRITON_INTERPRET", None)
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # triton 3.9 warns when unset

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.compiler.compiler import make_backend  # noqa: E402
from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: E402

from softfp8.formats import Format, PackedWeight  # noqa: E402

TARGETS = {75: 40, 80: 108, 89: 128, 90: 132}
"""Compute capability (x10) -> SM count: what the rules tell apart (sm_75: no tensor-core
tl.dot, no MMA GEMV; sm_80: the MMA GEMV; sm_89: the FP8 cvt; sm_90: PDL and the ring), each
with a real GPU's SM count (T4, A100, RTX 4090, H100/H200)."""
SHAPES = ((12288, 4096), (4096, 4096), (22016, 4096), (4096, 11008),   # llama2-7b
          (6144, 4096), (28672, 4096), (4096, 14336), (128256, 4096),  # llama3-8b
          (1000, 1032), (96, 200), (4096, 4104))                       # odd ones
MS = (1, 2, 3, 4, 5, 8, 9, 16, 17, 64, 256, 512)
"""M at and around every bucket edge of the rules (1, 2, 4, 8, 16, DEQUANT's 256 / 512)."""
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
FP8_DECODES = ("auto", "integer", "hardware")  # SOFTFP8_FP8_DECODE; hardware from sm_89


def _weight(fmt: Format, n: int, k: int, nan: bool) -> PackedWeight:
    """A packed weight of zero codes (scales 1), with one NaN code where `nan` and the format
    has a NaN check (`_facts.codes_nan_free`)."""
    from softfp8.formats import SPECS, ScaleKind, padded_k

    spec = SPECS[fmt]
    words = torch.zeros((n, padded_k(k, fmt) // spec.codes_per_word), dtype=torch.int32)
    if spec.scale is ScaleKind.ROW:
        scales = torch.ones(n)
    else:
        scales = torch.ones(spec.scales_shape(n, k), dtype=spec.scales_dtype)
    packed = PackedWeight(fmt, (n, k), words, scales,
                          torch.ones(()) if fmt is Format.NVFP4 else None)
    if nan:
        if fmt in (Format.E4M3, Format.E4M3_B128):
            packed.words.view(torch.uint8)[0, 0] = 0x7F
        elif fmt is Format.NVFP4:
            packed.scales.view(torch.uint8)[0, 0] = 0x7F
        elif fmt is Format.MXFP4:
            packed.scales.view(torch.uint8)[0, 0] = 0xFF
    return packed


@contextlib.contextmanager
def _environ(**values):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _as_target(cc: int):
    """The backend sees a GPU of compute capability cc (SM count from TARGETS) behind CPU
    tensors; every Triton launch is recorded in the yielded list and not run; torch's GEMMs
    (DEQUANT's slabs) are skipped."""
    import softfp8.backends.triton as T

    info = T.DeviceInfo(sm_count=TARGETS[cc], capability=(cc // 10, cc % 10), interpreter=False)
    launches: list = []
    saved = []

    def patch(obj, name, value):
        saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    for mod in _modules():
        if hasattr(mod, "device_info"):
            patch(mod, "device_info", lambda device, _info=info: _info)
    patch(T, "NEEDS", dataclasses.replace(T.NEEDS, device_types=frozenset({"cpu"})))

    def run(self, *args, grid, warmup, **kwargs):
        launches.append((self, tuple(grid), args, kwargs))
        return None

    patch(JITFunction, "run", run)
    patch(torch, "mm", lambda a, b, out=None: out)
    patch(torch, "addmm", lambda c, a, b, out=None: out)
    try:
        yield launches
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)


@functools.lru_cache(maxsize=1)
def _modules() -> tuple:
    return tuple(m for k, m in sys.modules.items() if k.startswith("softfp8.backends.triton"))


_BACKENDS: dict = {}
_BINDERS: dict = {}


def _specialise(fn, cc: int, args: tuple, kwargs: dict):
    """(signature, constexprs, attrs, options) as Triton's launcher derives them for this target
    (`JITFunction.run` then `_pack_args`)."""
    from triton import knobs

    backend = _BACKENDS.get(cc) or _BACKENDS.setdefault(cc, make_backend(GPUTarget("cuda", cc, 32)))
    binder = _BINDERS.get((fn, cc)) or _BINDERS.setdefault(
        (fn, cc), create_function_from_signature(fn.signature, fn.params, backend))
    kwargs = dict(kwargs, debug=kwargs.get("debug", fn.debug) or knobs.runtime.debug,
                  instrumentation_mode=knobs.compilation.instrumentation_mode,
                  fpsan_homomorphic_casts=knobs.compilation.fpsan_homomorphic_casts)
    bound, spec, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, options)
    return signature, constexprs, attrs, options


def _plain(v):
    if isinstance(v, torch.dtype):
        return str(v)
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return repr(v)


def launches_for(cc: int, fmt: Format, n: int, k: int, m: int, dtype: str, decode: str,
                 nan: bool, bias: bool, e2m1: str, packed: PackedWeight):
    """[(plan, compile job)] of every launch `matmul` makes for this case."""
    import softfp8.backends.triton as T

    x = torch.empty((m, k), dtype=DTYPES[dtype])  # never read: nothing runs
    b = torch.empty(n, dtype=DTYPES[dtype]) if bias else None
    import softfp8

    if hasattr(softfp8, "launch_settings"):  # the settings API
        settings = softfp8.launch_settings(fp8_decode=decode)
    else:  # before it: the environment, read on every call
        settings = _environ(SOFTFP8_FP8_DECODE=decode)
    with settings, _as_target(cc) as caught:
        T.matmul(x, packed, b, e2m1=e2m1)
    out = []
    for fn, grid, args, kwargs in caught:
        signature, constexprs, attrs, options = _specialise(fn, cc, args, kwargs)
        scalars = {name: _plain(v) for name, v in zip(fn.arg_names, args)
                   if not isinstance(v, torch.Tensor)}
        scalars.update({name: _plain(v) for name, v in kwargs.items()})
        plan = dict(kernel=fn.fn.__name__, grid=list(grid), args=scalars,
                    signature={k: str(v) for k, v in signature.items()},
                    attrs={str(k): str(v) for k, v in attrs.items()})
        job = (fn.fn.__module__, fn.fn.__name__, cc, signature, constexprs, attrs,
               {f: getattr(options, f) for f in ("num_warps", "num_stages", "maxnreg",
                                                 "num_ctas", "launch_pdl")
                if hasattr(options, f)}, fn.cache_key)
        out.append((plan, job))
    return out


def cases(quick: bool):
    """(cc, fmt, n, k, m, dtype, decode, nan, bias, e2m1) of every case."""
    targets = (80, 90) if quick else tuple(TARGETS)
    for n, k in SHAPES:  # weights outermost: each is made (and its facts found) once
        for fmt in Format:
            fp8 = fmt in (Format.E5M2, Format.E4M3)
            nans = (False, True) if fmt is not Format.E5M2 else (False,)
            e2m1s = ("select", "inject") if fmt in (Format.NVFP4, Format.MXFP4) else ("select",)
            for nan in nans:
                for cc in targets:
                    decodes = FP8_DECODES if (fp8 and cc >= 89) else ("auto",)
                    for m in MS:
                        for dtype in ("fp16", "bf16", "fp32") if m in (1, 4, 17) else ("fp16",):
                            for decode in decodes:
                                for e2m1 in e2m1s:
                                    # a bias on the odd shapes only (HAS_BIAS: the epilogue)
                                    yield (cc, fmt, n, k, m, dtype, decode, nan,
                                           (n, k) == (1000, 1032), e2m1)


def _normalise(ptx: str, name: str) -> str:
    """The PTX without what a rename or a move between files changes: the kernel's name, the
    source locations (`.loc`, `.file`) and the debug sections."""
    ptx = re.sub(r"^\s*\.(loc|file)\b.*\n", "", ptx, flags=re.M)
    ptx = re.sub(r"^\$L__(func|tmp)\w*:.*\n", "", ptx, flags=re.M)  # debug-info labels
    ptx = re.sub(r"^\s*\.section\s+\.debug_\w+\s*\{.*?^\s*\}\s*\n", "", ptx, flags=re.M | re.S)
    ptx = re.sub(r"\$L__(func|info|tmp|pubNames|pubTypes)\w*", "", ptx)
    return ptx.replace(name, "KERNEL")


def compile_job(job):
    """(sha256 of the PTX, of the normalised PTX, registers or None) of one launch."""
    import importlib

    module, name, cc, signature, constexprs, attrs, options, _ = job
    fn = getattr(importlib.import_module(module), name)
    src = ASTSource(fn, signature, constexprs=constexprs, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", cc, 32), options=options)
    ptx = kernel.asm["ptx"]
    regs = getattr(kernel, "n_regs", None)
    return (hashlib.sha256(ptx.encode()).hexdigest(),
            hashlib.sha256(_normalise(ptx, name).encode()).hexdigest(), regs)


def _job_key(job) -> str:
    module, name, cc, signature, constexprs, attrs, options, source = job
    text = json.dumps([name, cc, sorted((str(k), str(v)) for k, v in signature.items()),
                       sorted((str(k), repr(v)) for k, v in constexprs.items()),
                       sorted((str(k), str(v)) for k, v in attrs.items()), sorted(options.items()),
                       source])
    return hashlib.sha256(text.encode()).hexdigest()


def _sample(records: dict, jobs: dict, size: int) -> set:
    """About `size` of the distinct compiles: walking the launches in the order of their keys'
    hashes (the same launches whatever the code), each launch's compile while its (target,
    kernel) has fewer than max(10, its share of `size`)."""
    groups: dict = {}
    for job in jobs.values():
        groups[(job[2], job[1])] = groups.get((job[2], job[1]), 0) + 1
    quota = {g: max(10, round(size * c / len(jobs))) for g, c in groups.items()}
    chosen: set = set()
    for key in sorted(records, key=lambda k: hashlib.sha256(k.encode()).hexdigest()):
        jk = records[key].get("job")
        if jk is None or jk in chosen:
            continue
        g = (jobs[jk][2], jobs[jk][1])
        if quota[g] > 0:
            quota[g] -= 1
            chosen.add(jk)
    return chosen


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON to write")
    p.add_argument("--compare", help="an earlier --out: report every launch whose plan or PTX differs")
    p.add_argument("--cache", default="/tmp/softfp8-plan-ptx.json")
    p.add_argument("--jobs", type=int, default=1, help="compiling processes")
    p.add_argument("--quick", action="store_true", help="sm_80 and sm_90 only")
    p.add_argument("--plan-only", action="store_true", help="count the launches, compile nothing")
    p.add_argument("--sample", type=int, default=300,
                   help="distinct compiles to run (every launch's plan is still written)")
    p.add_argument("--all", action="store_true", help="compile every distinct launch")
    p.add_argument("--like", help="an earlier --out: compile the launches it has the PTX of")
    p.add_argument("--ptx-only", action="store_true",
                   help="with --compare: kernels may be renamed or split (the PTX is compared "
                        "with their names taken out)")
    args = p.parse_args(argv)
    t0 = time.time()
    weights: dict = {}
    records: dict = {}
    jobs: dict = {}
    for case in cases(args.quick):
        cc, fmt, n, k, m, dtype, decode, nan, bias, e2m1 = case
        packed = weights.get((fmt, n, k, nan))
        if packed is None:
            weights.clear()
            packed = weights[(fmt, n, k, nan)] = _weight(fmt, n, k, nan)
        key = (f"sm{cc}/{fmt.value}/{n}x{k}/m{m}/{dtype}/fp8-{decode}/"
               f"{'nan' if nan else 'free'}/{'bias' if bias else 'nobias'}/{e2m1}")
        try:
            found = launches_for(cc, fmt, n, k, m, dtype, decode, nan, bias, e2m1, packed)
        except ValueError as e:  # a refusal (e.g. hardware FP8 decode where none) is a plan too
            records[key] = dict(error=str(e))
            continue
        for i, (plan, job) in enumerate(found):
            jk = _job_key(job)
            jobs[jk] = job
            records[f"{key}#{i}"] = dict(plan=plan, job=jk)
    t1 = time.time()
    try:
        with open(args.cache) as f:
            cache = json.load(f)
    except (OSError, ValueError):
        cache = {}
    if args.all:
        chosen = set(jobs)
    elif args.like:
        with open(args.like) as f:
            like = json.load(f)
        chosen = {r["job"] for key, r in records.items() if "ptx" in like.get(key, {})}
    else:
        chosen = _sample(records, jobs, args.sample)
    todo = [jk for jk in sorted(chosen) if jk not in cache]
    print(f"{len(records)} launches, {len(jobs)} distinct compiles, {len(chosen)} compiled "
          f"({len(todo)} not cached); planned in {t1 - t0:.0f} s", flush=True)
    if args.plan_only:
        return 0
    with ProcessPoolExecutor(args.jobs) if args.jobs > 1 else contextlib.nullcontext() as pool:
        mapper = pool.map if pool is not None else map
        for i, (jk, res) in enumerate(zip(todo, mapper(compile_job, [jobs[j] for j in todo]))):
            cache[jk] = res
            if i % 50 == 49:
                print(f"  compiled {i + 1} / {len(todo)} ({time.time() - t1:.0f} s)", flush=True)
                with open(args.cache, "w") as f:
                    json.dump(cache, f)
    with open(args.cache, "w") as f:
        json.dump(cache, f)
    out = {}
    for key, r in records.items():
        if "job" in r and r["job"] in chosen:
            ptx, norm, regs = cache[r["job"]]
            out[key] = dict(plan=r["plan"], ptx=ptx, ptx_norm=norm, regs=regs)
        elif "job" in r:
            out[key] = dict(plan=r["plan"])
        else:
            out[key] = r
    with open(args.out, "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)
    print(f"wrote {args.out}: {len(out)} launches in {time.time() - t0:.0f} s")
    if args.compare:
        return compare(args.compare, out, args.ptx_only)
    return 0


def compare(path: str, now: dict, ptx_only: bool = False) -> int:
    """Print every launch whose plan, PTX or normalised PTX differs from `path`'s; 1 if any.
    ptx_only: plans may differ in their kernel's name, signature and constexprs (kernels split
    or renamed), not in the grid; the normalised PTX must not."""
    with open(path) as f:
        before = json.load(f)
    keys = sorted(set(before) | set(now))
    counts = dict(identical=0, same_norm=0, plan_only=0, plan=0, ptx=0, missing=0)
    for key in keys:
        a, b = before.get(key), now.get(key)
        if a is None or b is None:
            counts["missing"] += 1
            print(f"{'only before' if b is None else 'only now'}: {key}")
            continue
        if a.get("error") or b.get("error"):
            if a.get("error") != b.get("error"):
                counts["plan"] += 1
                print(f"refusal differs: {key}: {a.get('error')!r} / {b.get('error')!r}")
            else:
                counts["identical"] += 1
            continue
        keep = ("grid",) if ptx_only else ("grid", "args", "signature", "attrs")
        pa = {k: a["plan"].get(k) for k in keep}
        pb = {k: b["plan"].get(k) for k in keep}
        if pa != pb:
            counts["plan"] += 1
            diff = {k: (pa.get(k), pb.get(k)) for k in keep if pa.get(k) != pb.get(k)}
            if "args" in diff:
                da, db = diff["args"]
                diff["args"] = {k: (da.get(k), db.get(k)) for k in set(da) | set(db)
                                if da.get(k) != db.get(k)}
            print(f"plan differs: {key}: {diff}")
        elif "ptx" not in a or "ptx" not in b:
            counts["plan_only"] += 1
        elif a["ptx"] == b["ptx"]:
            counts["identical"] += 1
        elif a["ptx_norm"] == b["ptx_norm"]:
            counts["same_norm"] += 1
        else:
            counts["ptx"] += 1
            print(f"PTX differs: {key}")
    print(f"{len(keys)} launches: {counts} (identical / same_norm: the PTX compared, byte for "
          f"byte / with names and source lines taken out; plan_only: the plan compared, the "
          f"PTX of neither compiled)")
    return 0 if counts["plan"] == counts["ptx"] == counts["missing"] == 0 else 1


def diff_main(argv) -> int:
    p = argparse.ArgumentParser(description="compare two --out files")
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--ptx-only", action="store_true")
    args = p.parse_args(argv)
    with open(args.after) as f:
        return compare(args.before, json.load(f), args.ptx_only)


if __name__ == "__main__":
    sys.exit(diff_main(sys.argv[2:]) if sys.argv[1:2] == ["diff"] else main())
