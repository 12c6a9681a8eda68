"""The receipt (JSON: environment, probe report, settings, every number) and the printed tables."""
from __future__ import annotations

import dataclasses
import datetime
import enum
import importlib.metadata
import json
import math
import os
import platform
import sys
from pathlib import Path

import torch


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: torch.device) -> dict:
    """Versions, machine and device: what a reader needs to reproduce or compare a number."""
    dev = {"type": device.type, "str": str(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        dev.update(name=props.name, total_memory=props.total_memory,
                   multi_processor_count=props.multi_processor_count,
                   l2_cache_size=getattr(props, "L2_cache_size", None),
                   capability=list(torch.cuda.get_device_capability(device)),
                   hip=torch.version.hip)
    else:
        dev.update(name=_cpu_name(), threads=torch.get_num_threads())
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "versions": {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                     "triton": _version("triton"), "numba": _version("numba"),
                     "softfp8": _version("softfp8")},
        "device": dev,
    }


def probe_report() -> dict:
    """The probe's report as plain JSON (softfp8.capability.probe never raises: a sub-probe that
    fails is in the report as unknown, with its reason)."""
    from ..capability import probe

    return probe().to_dict()


def _jsonable(obj: object) -> object:
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, (torch.dtype, torch.device, Path)):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    return str(obj)


def write_receipt(path: Path, receipt: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(receipt, indent=1, default=_jsonable, allow_nan=True) + "\n")


def fmt_num(v: object, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
            return f"{v:.{digits}g}"
        return f"{v:.{digits}f}" if abs(v) < 100 else f"{v:.1f}"
    return str(v)


def table(rows: list[dict], columns: list[tuple[str, str]], title: str = "") -> str:
    """A fixed-width text table of `rows`: (key, header) per column; missing values print '-'."""
    cells = [[fmt_num(r.get(key)) for key, _ in columns] for r in rows]
    headers = [h for _, h in columns]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]
    lines = [title] if title else []
    lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    lines.append("  ".join("-" * w for w in widths))
    for r, c in zip(rows, cells):
        line = "  ".join(v.ljust(w) for v, w in zip(c, widths))
        if "error" in r:
            line += f"  ERROR {r['error'][:100]}"
        lines.append(line)
    return "\n".join(lines)


def markdown(rows: list[dict], columns: list[tuple[str, str]], receipt: dict | None = None) -> str:
    """The table as Markdown; with `receipt`, headed by what docs/performance.md asks of every
    table: date, device, versions and the exact command."""
    lines = []
    if receipt is not None:
        v = receipt["versions"]
        lines += [f"**softfp8-bench {receipt['subcommand']}**: {receipt['date']}, "
                  f"{receipt['device'].get('name')} ({receipt['device']['str']}), "
                  f"torch {v['torch']}, triton {v['triton']}, numba {v['numba']}, "
                  f"host {receipt['host']}", "", f"`{receipt['command']}`", ""]
    lines += ["| " + " | ".join(h for _, h in columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        cells = [fmt_num(r.get(k)) for k, _ in columns]
        if "error" in r:
            cells[-1] += f" ERROR {r['error'][:80]}"
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"
