"""What gets timed: torch baselines and softfp8 (format, backend) variants on one shape and M.

Every variant rotates over enough copies of its weight that one pass touches `rotate` x the L2
(so a GEMV reads device memory, not the cache), times a pass (`timing.measure`), and reports
bytes moved = weight bytes + x + y. softfp8 outputs are checked against the torch reference
before timing, on the first and last rows (a row slice of a packed weight is a packed weight,
so the check costs little even at 128256 rows).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import dispatch, linear, quantize
from ..dispatch import Backend, BackendUnavailable
from ..formats import SPECS, Format, PackedWeight, ScaleKind
from ..quantize import dequantize_rows
from .model import bytes_moved
from .presets import Shape
from .timing import measure

ASSUMED_L2 = 64 * 2**20
MAX_COPIES = 64
CHECK_ROWS = 512  # rows checked at each end of the weight


def l2_bytes(device: torch.device) -> tuple[int, str]:
    """The device's L2 size in bytes and where the number came from."""
    if device.type == "cuda":
        size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
        if size:
            return int(size), "torch.cuda.get_device_properties(...).L2_cache_size"
    return ASSUMED_L2, "assumed (64 MiB): the device does not report its L2"


@dataclass(frozen=True)
class Settings:
    device: torch.device
    act_dtype: torch.dtype
    warmup: int
    reps: int
    graph: bool
    l2: int
    rotate: float  # one pass touches this many times the L2
    tile_rows: int  # > 0: quantize a tile of this many rows and repeat it (fast on the CPU)
    check_tol: float
    seed: int
    log: Path | None = None  # each row is appended here as a JSON line the moment it is measured
    echo: bool = False  # and printed as a line (the CPU, where a table takes minutes)


def log_row(s: Settings, row: dict) -> dict:
    """Append `row` to the progress log (rows survive a run cut short by a timeout), and print
    it where `s.echo`."""
    if s.log is not None:
        with s.log.open("a") as f:
            f.write(json.dumps(row, default=str) + "\n")
    if s.echo and "impl" in row:
        where = " ".join(str(row[k]) for k in ("shape", "m") if k in row)
        what = (f"{row['ms']:.3f} ms" if "ms" in row else row.get("error", "")) + (
            f" ({row['check']})" if "check" in row else "")
        print(f"  {where} {row['impl']}: {what}", flush=True)
    return row


def copies_for(nbytes: int, s: Settings) -> int:
    return max(1, min(MAX_COPIES, math.ceil(s.rotate * s.l2 / max(nbytes, 1))))


def random_weight(shape: Shape, s: Settings) -> torch.Tensor:
    g = torch.Generator(device=s.device).manual_seed(s.seed + 7919 * shape.n + shape.k)
    return torch.randn(shape.n, shape.k, generator=g, device=s.device) * 0.02  # an LLM's scale


def random_x(m: int, k: int, dtype: torch.dtype, s: Settings) -> torch.Tensor:
    g = torch.Generator(device=s.device).manual_seed(s.seed + 31 * m + k)
    return torch.randn(m, k, generator=g, device=s.device).to(dtype)


def make_packed(w: torch.Tensor, fmt: Format, tile_rows: int) -> PackedWeight:
    """quantize(w, fmt), or with `tile_rows` the quantized first rows repeated down to N rows:
    bytes and layout are the same, and quantizing a 7B-sized weight on 2 CPU cores takes seconds."""
    n, k = w.shape
    spec = SPECS[fmt]
    tiled = spec.scale is ScaleKind.TILE_F32
    if tile_rows <= 0 or n <= tile_rows or (tiled and tile_rows % spec.block_n):
        return quantize(w, fmt)  # (a tile scale covers block_n rows: repeat whole tiles only)
    tile = quantize(w[:tile_rows].contiguous(), fmt)
    reps = -(-n // tile_rows)
    def grow(t, rows):
        return None if t is None else t.repeat(reps, *([1] * (t.dim() - 1)))[:rows].contiguous()
    scale_rows = spec.scales_shape(n, k)[0] if tiled else n
    return PackedWeight(fmt, (n, k), grow(tile.words, n), grow(tile.scales, scale_rows),
                        tile.global_scale)


def clone_packed(p: PackedWeight) -> PackedWeight:
    c = lambda t: None if t is None else t.clone()  # noqa: E731
    return replace(p, words=c(p.words), scales=c(p.scales), global_scale=c(p.global_scale))


def reference_rows(x: torch.Tensor, p: PackedWeight, rows: torch.Tensor) -> torch.Tensor:
    """x @ W[rows].T on the torch reference backend, as float64 [M, len(rows)]."""
    if p.spec.scale is not ScaleKind.TILE_F32:
        return linear(x, row_slice(p, rows), backend=Backend.TORCH).double()
    # Tile scales cover 128 rows, so a slice of scattered rows is no PackedWeight: decode them.
    w = torch.cat([dequantize_rows(p, r, r + 1) for r in rows.tolist()])
    return (x.float() @ w.T).to(x.dtype).double()


def row_slice(p: PackedWeight, rows: torch.Tensor) -> PackedWeight:
    pick = lambda t: None if t is None or t.dim() == 0 else t[rows].contiguous()  # noqa: E731
    return PackedWeight(p.fmt, (len(rows), p.shape[1]), pick(p.words), pick(p.scales),
                        p.global_scale)


def runnable_backends(fmt: Format, m: int, device: torch.device,
                      requested: list[Backend] | None) -> tuple[list[Backend], list[dict]]:
    """The backends to time for `fmt`, and the skipped ones with their reasons.

    Default (requested None): every backend dispatch can run here, plus auto; the torch
    reference is left out where another backend runs `fmt` (it materialises the weight: the
    oracle, not a contender; name it in --backends to time it)."""
    wanted = requested if requested is not None else [b for b in Backend if b is not Backend.AUTO]
    ok, skipped = [], []
    for b in wanted:
        if b is Backend.AUTO:
            continue
        try:
            dispatch.select(fmt, m, device, backend=b)
            ok.append(b)
        except BackendUnavailable as exc:  # select's refusal names the reason (import failures too)
            skipped.append({"format": str(fmt), "backend": str(b),
                            "reason": f"{type(exc).__name__}: {exc}"})
    if requested is None and len(ok) > 1 and Backend.TORCH in ok:
        ok.remove(Backend.TORCH)
        skipped.append({"format": str(fmt), "backend": "torch",
                        "reason": "left out by default where another backend runs this format "
                                  "(it materialises the weight); name it in --backends to time it"})
    if requested is None or Backend.AUTO in requested:
        ok.append(Backend.AUTO)
    return ok, skipped


def e2m1_fields(fmt: Format, choice: dispatch.Choice) -> dict:
    """The E2M1 decoder a row of an FP4 format ran with (receipts of select and inject runs
    must say which they are); nothing for the 8-bit formats."""
    if fmt not in (Format.NVFP4, Format.MXFP4):
        return {}
    return {"e2m1": str(choice.e2m1), "e2m1_reason": choice.e2m1_reason}


def _rate_fields(nbytes: int, seconds: float, read_bw: float | None) -> dict:
    gbps = nbytes / seconds / 1e9
    return {"bytes": nbytes, "GB_per_s": gbps,
            "pct_read_bw": None if not read_bw else 100 * nbytes / seconds / read_bw}


def time_torch(shape: Shape, m: int, dtype: torch.dtype, s: Settings, read_bw: float | None,
               w: torch.Tensor, *, op: str = "linear") -> dict:
    """A torch baseline: F.linear (or torch.mv, CPU M=1 only) on `dtype` weights and activations."""
    name = str(dtype).removeprefix("torch.")
    row = {"shape": shape.label, "n": shape.n, "k": shape.k, "m": m, "kind": "torch",
           "impl": f"torch {name} {'F.linear' if op == 'linear' else 'mv'}", "dtype": name,
           "op": op}
    try:
        base = w.to(dtype)
        weights = [base] + [base.clone() for _ in range(copies_for(base.nbytes, s) - 1)]
        x = random_x(m, shape.k, dtype, s)
        if op == "mv":
            xv = x[0]
            calls = [lambda W=W: torch.mv(W, xv) for W in weights]
        else:
            calls = [lambda W=W: F.linear(x, W) for W in weights]
        t = measure(calls, s.device, warmup=s.warmup, reps=s.reps, graph=s.graph)
        nbytes = bytes_moved(base.nbytes, m, shape.n, shape.k, x.element_size())
        row.update(copies=len(weights), **t.as_dict(), **_rate_fields(nbytes, t.seconds, read_bw))
    except Exception as exc:  # noqa: BLE001 - one failed variant must not end the run
        row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return log_row(s, row)


def time_softfp8(shape: Shape, m: int, fmt: Format, backends: list[Backend], s: Settings,
                 read_bw: float | None, packed: PackedWeight) -> list[dict]:
    """One row per backend in `backends` (auto included, resolved and not timed twice)."""
    x = random_x(m, shape.k, s.act_dtype, s)
    n = shape.n
    rows_idx = torch.arange(n, device=s.device)
    if n > 2 * CHECK_ROWS:
        rows_idx = torch.cat([rows_idx[:CHECK_ROWS], rows_idx[-CHECK_ROWS:]])
    ref = None
    done: dict[Backend, dict] = {}
    out = []
    for b in backends:
        row = {"shape": shape.label, "n": shape.n, "k": shape.k, "m": m, "kind": "softfp8",
               "format": str(fmt), "backend": str(b), "impl": f"{fmt} {b}"}
        try:
            choice = dispatch.select(fmt, m, s.device, backend=b)
            resolved = choice.backend
            row["resolved_backend"] = str(resolved)
            row.update(e2m1_fields(fmt, choice))
            if resolved in done:
                prev = done[resolved]
                row.update({k: v for k, v in prev.items() if k not in row or k == "error"})
                row["note"] = f"auto runs {resolved}: its measurement, not timed twice"
                out.append(log_row(s, row))
                continue
            if ref is None:
                ref = reference_rows(x, packed, rows_idx)
            y = linear(x, packed, backend=b)
            got = y[:, rows_idx].double()
            row["rel_err_vs_torch_ref"] = ((got - ref).norm() / ref.norm()).item()
            row["check"] = "ok" if row["rel_err_vs_torch_ref"] <= s.check_tol else "WRONG"
            weights = [packed] + [clone_packed(packed)
                                  for _ in range(copies_for(packed.nbytes, s) - 1)]
            calls = [lambda p=p: linear(x, p, backend=b) for p in weights]
            # On the CPU the check's call above was one warm-up call (it compiled whatever
            # compiles); each copy's first call is a warm-up too (warm_each).
            warmup = s.warmup if s.device.type == "cuda" else max(0, s.warmup - 1)
            t = measure(calls, s.device, warmup=warmup, reps=s.reps, graph=s.graph,
                        warm_each=True)
            nbytes = bytes_moved(packed.nbytes, m, n, shape.k, x.element_size())
            row.update(copies=len(weights), **t.as_dict(), **_rate_fields(nbytes, t.seconds, read_bw))
            done[resolved] = row
        except Exception as exc:  # noqa: BLE001 - one failed variant must not end the run
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        out.append(log_row(s, row))
    return out


def add_ratios(rows: list[dict], *, fp16_key: str = "torch float16 F.linear") -> None:
    """Per (shape, m): speedup vs fp16 F.linear, and vs the fastest torch baseline timed."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["shape"], r["m"]), []).append(r)
    for group in groups.values():
        timed = [r for r in group if "ms" in r]
        fp16 = next((r for r in timed if r["impl"] == fp16_key), None)
        torch_rows = [r for r in timed if r["kind"] == "torch"]
        fastest = min(torch_rows, key=lambda r: r["ms"], default=None)
        for r in timed:
            r["speedup_vs_fp16"] = fp16["ms"] / r["ms"] if fp16 else None
            if fastest is not None:
                r["speedup_vs_fastest_torch"] = fastest["ms"] / r["ms"]
                r["fastest_torch"] = fastest["impl"]
