"""The subcommands: each returns (rows for the table, the receipt's body)."""
from __future__ import annotations

import os
from collections import defaultdict

import torch

from .. import linear
from ..dispatch import select
from ..formats import Format
from .anchors import time_int8pack, time_ort
from .memory import MemoryReport, measure_memory
from .model import (bytes_moved, efficiency_coefficient, packed_nbytes,
                    predicted_seconds_per_token)
from .presets import Shape
from .timing import measure
from .workload import (Settings, add_ratios, clone_packed, e2m1_fields, log_row, make_packed,
                       random_weight, random_x, runnable_backends, time_softfp8, time_torch)

FP16 = "torch float16 F.linear"


def memory(s: Settings, mbytes: int) -> MemoryReport:
    mem = measure_memory(s.device, mbytes * 2**20, warmup=s.warmup, reps=s.reps, graph=s.graph)
    log_row(s, {"memory": mem.as_dict()})
    return mem


def coefficient(shapes: tuple[Shape, ...], s: Settings, read_bw: float) -> dict:
    """The bandwidth model's coefficient (model.py) from fp16 F.linear GEMVs over `shapes`."""
    rows = [time_torch(sh, 1, torch.float16, s, read_bw, random_weight(sh, s)) for sh in shapes]
    timed = [r for r in rows if "ms" in r]
    value = None
    if len(timed) == len(rows):
        value = efficiency_coefficient([r["bytes"] for r in timed],
                                       [r["ms"] / 1e3 for r in timed], read_bw)
    return {"value": value, "rows": rows,
            "definition": "sum(fp16 bytes moved / read bandwidth) / sum(measured fp16 F.linear "
                          "GEMV time), M=1, over the shapes; predicted time per token = bytes per "
                          "token / (read bandwidth x coefficient)"}


def _token_bytes(linears: tuple[Shape, ...], fmt: Format | None, act_bytes: int) -> int:
    total = 0
    for sh in linears:
        w = 2 * sh.n * sh.k if fmt is None else packed_nbytes(sh.n, sh.k, fmt)
        total += bytes_moved(w, 1, sh.n, sh.k, act_bytes)
    return total


def _prediction(nbytes: int, read_bw: float, coef: float | None) -> dict:
    if not coef:
        return {"predicted_ms": None, "predicted_tok_per_s": None}
    t = predicted_seconds_per_token(nbytes, read_bw, coef)
    return {"predicted_ms": t * 1e3, "predicted_tok_per_s": 1 / t}


def bandwidth(s: Settings, shapes, linears, formats, mbytes: int):
    mem = memory(s, mbytes)
    coef = coefficient(shapes, s, mem.read_bandwidth)
    rows = [{"impl": f"{r.name} ({r.nbytes / 2**20:.0f} MiB moved)", "GB_per_s": r.bandwidth / 1e9,
             "ms": r.timing.seconds * 1e3, "bytes": r.nbytes} for r in (mem.copy, *mem.reads)]
    rows += [{**r, "impl": f"fp16 GEMV {r['shape']}"} for r in coef["rows"]]
    preds = []
    act_bytes = torch.empty((), dtype=s.act_dtype).element_size()
    for fmt in [None, *formats]:
        nbytes = _token_bytes(linears, fmt, 2 if fmt is None else act_bytes)
        preds.append({"impl": f"token model: {fmt or 'fp16'}", "bytes": nbytes,
                      **_prediction(nbytes, mem.read_bandwidth, coef["value"])})
    body = {"memory": mem.as_dict(), "coefficient": coef, "token_predictions": preds,
            "token_linears": len(linears)}
    return rows + preds, body


def _baselines(device: torch.device, m: int) -> list[tuple[torch.dtype, str]]:
    if device.type == "cuda":
        return [(torch.float16, "linear"), (torch.bfloat16, "linear")]
    dtypes = (torch.float32, torch.float16, torch.bfloat16)
    ops = ("linear", "mv") if m == 1 else ("linear",)  # CPU mv and F.linear differ in speed
    return [(d, op) for d in dtypes for op in ops]


def _fp16_and(device: torch.device, *baselines) -> list[tuple[torch.dtype, str]]:
    """The GPU's baselines; on the CPU fp32 and bf16 F.linear too (fp16 is the slowest there, and
    "x fastest torch" must mean torch's fastest dtype)."""
    extra = [] if device.type == "cuda" else [(torch.float32, "linear"), (torch.bfloat16, "linear")]
    return list(dict.fromkeys([*baselines, *extra]))


def cpu_anchors(sh, m, s: Settings, read_bw, w) -> list[dict]:
    """torch's int8 weight-only kernel (bf16 x: with float32 x it is many times slower, never
    torch's fastest; docs/decisions.md) and, where onnxruntime and onnx import, its MatMulNBits
    8- and 4-bit (anchors.py says how their formats differ)."""
    row = time_int8pack(sh, m, torch.bfloat16, s, read_bw, w)
    rows = [] if row is None else [row]
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return rows
    return rows + [time_ort(sh, m, bits, s, read_bw, w) for bits in (8, 4)]


def grid(s: Settings, shapes, ms, formats, backends, read_bw, *, baselines=None):
    """Every shape x M x (torch baselines, formats x backends): rows and skipped backends. The
    rows of one shape and M are timed one after another, so that a machine whose speed drifts
    (a shared host, a VM whose vCPUs move) moves a whole row of ratios alike, not one format."""
    rows, skipped = [], []
    for sh in shapes:
        w = random_weight(sh, s)
        packed = {fmt: make_packed(w, fmt, s.tile_rows) for fmt in formats}
        for m in ms:
            if s.device.type == "cpu" and s.echo:
                print(f"  load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}",
                      flush=True)
            for dtype, op in (baselines or _baselines(s.device, m)):
                rows.append(time_torch(sh, m, dtype, s, read_bw, w, op=op))
            if s.device.type == "cpu":
                rows += cpu_anchors(sh, m, s, read_bw, w)
            for fmt in formats:
                chosen, skip = runnable_backends(fmt, m, s.device, backends)
                skipped += [k for k in skip if k not in skipped]
                rows += time_softfp8(sh, m, fmt, chosen, s, read_bw, packed[fmt])
        del packed, w
    add_ratios(rows, fp16_key=FP16)
    return rows, skipped


def _aggregate(rows, read_bw) -> list[dict]:
    """Per (impl, m) over shapes: total time, bytes/total time, and total fp16 time / total time."""
    acc = defaultdict(lambda: {"ms": 0.0, "bytes": 0, "fp16_ms": 0.0, "shapes": 0})
    fp16 = {(r["shape"], r["m"]): r["ms"] for r in rows if r["impl"] == FP16 and "ms" in r}
    for r in rows:
        if "ms" in r:
            a = acc[(r["impl"], r["m"])]
            a["ms"] += r["ms"]
            a["bytes"] += r["bytes"]
            a["fp16_ms"] += fp16.get((r["shape"], r["m"]), float("nan"))
            a["shapes"] += 1
    out = []
    for (impl, m), a in acc.items():
        bw = a["bytes"] / (a["ms"] / 1e3)
        out.append({"impl": impl, "m": m, "shapes": a["shapes"], "ms": a["ms"],
                    "GB_per_s": bw / 1e9, "pct_read_bw": 100 * bw / read_bw if read_bw else None,
                    "speedup_vs_fp16": a["fp16_ms"] / a["ms"]})
    return out


def shapes_cmd(s, shapes, formats, backends, mbytes):
    mem = memory(s, mbytes)
    rows, skipped = grid(s, shapes, [1], formats, backends, mem.read_bandwidth)
    return rows, {"memory": mem.as_dict(), "rows": rows, "skipped": skipped,
                  "summary": _aggregate(rows, mem.read_bandwidth)}


def small_m_cmd(s, shapes, formats, backends, mbytes, ms):
    mem = memory(s, mbytes)
    rows, skipped = grid(s, shapes, ms, formats, backends, mem.read_bandwidth,
                         baselines=_fp16_and(s.device, (torch.float16, "linear")))
    base = {(r["impl"], r["shape"]): r["GB_per_s"] for r in rows if r["m"] == 1 and "ms" in r}
    for r in rows:
        if "ms" in r and (r["impl"], r["shape"]) in base:
            r["bw_vs_m1"] = r["GB_per_s"] / base[(r["impl"], r["shape"])]
    summary = _aggregate(rows, mem.read_bandwidth)
    base = {a["impl"]: a["GB_per_s"] for a in summary if a["m"] == 1}
    for a in summary:
        a["bw_vs_m1"] = a["GB_per_s"] / base[a["impl"]] if a["impl"] in base else None
    return rows, {"memory": mem.as_dict(), "rows": rows, "skipped": skipped, "summary": summary}


def prefill_cmd(s, shapes, formats, backends, ms):
    rows, skipped = grid(s, shapes, ms, formats, backends, None,
                         baselines=_fp16_and(s.device, (torch.float16, "linear"),
                                             (torch.bfloat16, "linear")))
    for r in rows:
        if "ms" in r:
            r["TFLOP_per_s"] = 2 * r["m"] * r["n"] * r["k"] / (r["ms"] / 1e3) / 1e12
    return rows, {"rows": rows, "skipped": skipped, "summary": _aggregate(rows, None)}


def token_cmd(s, shapes, linears, formats, backends, mbytes):
    """Every linear of a model at M=1, one CUDA graph per variant (a plain loop on the CPU)."""
    mem = memory(s, mbytes)
    read_bw = mem.read_bandwidth
    coef = coefficient(shapes, s, read_bw)
    # keyed by N x K: `shapes` holds each once, `linears` repeats them under their own names
    bases = {(sh.n, sh.k): random_weight(sh, s) for sh in shapes}
    xs = {}
    rows, skipped = [], []

    def run(impl: str, extra: dict, weights: list, act: torch.dtype, call, nbytes: int) -> dict:
        row = {"impl": impl, "linears": len(linears), **extra}
        try:
            calls = [(lambda w=w, x=xs[(sh.k, act)]: call(x, w)) for sh, w in zip(linears, weights)]
            t = measure(calls, s.device, warmup=s.warmup, reps=s.reps, graph=s.graph,
                        host_pass=True)
            ms = t.seconds * len(calls) * 1e3
            row.update(t.as_dict(), ms=ms, ms_min=t.low * len(calls) * 1e3,
                       ms_max=t.high * len(calls) * 1e3, tok_per_s=1e3 / ms, bytes=nbytes,
                       GB_per_s=nbytes / ms / 1e6, pct_read_bw=100 * nbytes / (ms / 1e3) / read_bw,
                       **_prediction(nbytes, read_bw, coef["value"]))
            if row["predicted_ms"]:
                row["measured_over_predicted"] = ms / row["predicted_ms"]
        except Exception as exc:  # noqa: BLE001 - one failed variant must not end the sweep
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return log_row(s, row)

    for act in {torch.float16, s.act_dtype}:
        for sh in shapes:
            xs[(sh.k, act)] = random_x(1, sh.k, act, s)
    half = {sh: w.half() for sh, w in bases.items()}
    weights = [half[sh.n, sh.k].clone() for sh in linears]
    nbytes = sum(bytes_moved(w.nbytes, 1, sh.n, sh.k, 2) for sh, w in zip(linears, weights))
    rows.append(run(FP16, {"kind": "torch"}, weights, torch.float16,
                    torch.nn.functional.linear, nbytes))
    del weights, half
    act_bytes = torch.empty((), dtype=s.act_dtype).element_size()
    for fmt in formats:
        packed = {sh: make_packed(w, fmt, s.tile_rows) for sh, w in bases.items()}
        weights = [clone_packed(packed[sh.n, sh.k]) for sh in linears]
        nbytes = sum(bytes_moved(p.nbytes, 1, sh.n, sh.k, act_bytes)
                     for sh, p in zip(linears, weights))
        chosen, skip = runnable_backends(fmt, 1, s.device, backends)
        skipped += [k for k in skip if k not in skipped]
        done = {}
        for b in chosen:
            choice = select(fmt, 1, s.device, backend=b)
            resolved = choice.backend
            extra = {"kind": "softfp8", "format": str(fmt), "backend": str(b),
                     "resolved_backend": str(resolved), **e2m1_fields(fmt, choice)}
            if resolved in done:  # auto runs a backend timed just before: don't time it twice
                rows.append({**done[resolved], **extra, "impl": f"{fmt} {b}",
                             "note": f"auto runs {resolved}: its measurement, not timed twice"})
                continue
            rows.append(run(f"{fmt} {b}", extra, weights, s.act_dtype,
                            lambda x, p, b=b: linear(x, p, backend=b), nbytes))
            if "ms" in rows[-1]:
                done[resolved] = rows[-1]
        del weights, packed
    fp16 = next((r for r in rows if r["impl"] == FP16 and "ms" in r), None)
    for r in rows:
        if "ms" in r and fp16:
            r["speedup_vs_fp16"] = fp16["ms"] / r["ms"]
    return rows, {"memory": mem.as_dict(), "coefficient": coef, "rows": rows,
                  "skipped": skipped, "token_linears": len(linears),
                  "linears": [sh.label for sh in linears]}
