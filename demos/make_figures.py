"""Regenerate the figures of docs/performance.md from the receipts it cites, and from live
computation.

    python demos/make_figures.py                  # writes figures/*.png
    python demos/make_figures.py --quick --out /tmp/figs

1. figures/error_per_format.png: the output error of one GEMV per format over 3,840 outputs
   (N = 3840), computed now on the backend auto picks, against the unquantized fp32 layer.
2. figures/bandwidth_model.png: the bandwidth model (predicted time = bytes moved / (read
   bandwidth x coefficient)) against the measured time of the llama2-7b token, per format.
3. figures/speedups.png: speedup over fp16 per shape and format, and for the token.

Figures 2 and 3 take GPU numbers from bench receipts, by default the two docs/performance.md
cites (RECEIPTS); --receipts names others (files, or folders searched for *.json). Each receipt
is searched for records (JSON objects, at any depth) holding numbers under keys that contain
"predicted" and "measured" (figure 2) or "speedup" (figure 3); the record's "format"/"shape"/
"name" label it and the nearest "gpu"/"device" above it names the device. The foot of each such
figure names the receipts' date, device, versions and command. Without a receipt the figures
plot only what can be measured on this machine, and say so.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

# Run from a checkout: import the softfp8 beside this script rather than another installed copy.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import softfp8  # noqa: E402
from softfp8.bench.timing import measure  # noqa: E402
from softfp8 import Format, dispatch  # noqa: E402

FORMAT_COLOURS = {"e5m2": "tab:blue", "e4m3": "tab:orange", "nvfp4": "tab:green",
                  "mxfp4": "tab:red", "e4m3_b128": "tab:purple"}


_COMMAND = "python demos/make_figures.py"  # main() adds its arguments

# The receipts docs/performance.md cites for figures 2 and 3, with the environment they ran
# under (a bench receipt records its command line, not the SOFTFP8_* variables around it).
RECEIPTS = {"receipts/final33/token.json": "SOFTFP8_FP8_DECODE=integer",
            "receipts/final32/shapes-1.json": "SOFTFP8_FP8_DECODE=integer"}


def stamp(fig, device: torch.device) -> None:
    """Date, machine, versions and command at the foot of a figure: every number on it was
    measured by that run."""
    import datetime
    import platform

    where = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"{platform.machine()} CPU, {torch.get_num_threads()} threads"
    fig.text(0.01, 0.005, f"{datetime.date.today()} | {where} | torch {torch.__version__} | "
             f"softfp8 {softfp8.__version__} | {_COMMAND}",
             fontsize=5, color="0.4")


# -- receipts -----------------------------------------------------------------------------

def _records(node, device=None):
    """(device, record) for every JSON object under `node`, with the nearest device above it."""
    if isinstance(node, dict):
        for key in ("gpu", "device", "device_name"):
            if isinstance(node.get(key), str):
                device = node[key]
                break
            if isinstance(node.get(key), dict) and isinstance(node[key].get("name"), str):
                device = node[key]["name"]  # softfp8-bench receipts: {"device": {"name": ...}}
                break
        yield device, node
        for value in node.values():
            yield from _records(value, device)
    elif isinstance(node, list):
        for value in node:
            yield from _records(value, device)


def _number(record: dict, word: str) -> float | None:
    for key, value in record.items():
        if word in key.lower() and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _label(record: dict) -> str:
    parts = [str(record[k]) for k in ("name", "shape", "format", "m") if k in record]
    if not parts and "impl" in record:  # bench rows name the baseline by its impl only
        parts = [str(record["impl"])]
    return " ".join(parts) or "?"


def _receipt_files(receipts) -> list[Path]:
    """The *.json files named by `receipts`: a path or a list of them, each a file or a folder."""
    paths = [receipts] if isinstance(receipts, (str, Path)) else list(receipts)
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            files += sorted(path.glob("**/*.json"))
        elif path.is_file():
            files.append(path)
    return files


def bench_points(receipts) -> tuple[list[tuple], list[tuple], list[str]]:
    """Model points (device, label, predicted, measured) and speedups (device, label, fmt, x)."""
    model, speed, files = [], [], []
    for path in _receipt_files(receipts):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("subcommand") in ("small-m", "prefill"):
            continue  # batch-1 figures; their M = 1 rows repeat the shapes receipt's
        before = len(model) + len(speed)
        for device, record in _records(data):
            if isinstance(record.get("m"), int) and record["m"] != 1:
                continue  # batch-1 figures: small-M and prefill rows answer other questions
            if "predicted_ms" in record and "ms" in record:  # softfp8-bench token rows
                predicted, measured = float(record["predicted_ms"]), float(record["ms"])
            else:  # ratios such as measured_over_predicted are not times: skip them
                predicted = _number(record, "predicted")
                measured = _number({k: v for k, v in record.items() if "over" not in k}, "measured")
            if predicted is not None and measured is not None:
                model.append((device or path.stem, _label(record), predicted, measured))
            speedup = _number(record, "speedup")
            if (speedup is not None and record.get("kind", "softfp8") == "softfp8"
                    and ("shape" in record or "linears" in record)):  # not the summaries
                # grouped by shape (a token row: by its linears), one bar per format
                group = record.get("shape") or (f"token ({record['linears']} linears)"
                                                if "linears" in record else _label(record))
                speed.append((device or path.stem, str(group),
                              str(record.get("format", record.get("impl", "?"))), speedup))
        if len(model) + len(speed) > before:
            files.append(str(path))
    return model, speed, files


# -- live measurement -----------------------------------------------------------------------

def median_seconds(fn, device: torch.device) -> float:
    """softfp8-bench's timer: median seconds of `fn()` after a warm-up call."""
    return measure([fn], device, warmup=1, reps=5, graph=False).seconds


def read_bandwidth(device: torch.device, nbytes: int) -> float:
    """Bytes per second of a full read (a sum over a buffer larger than the caches)."""
    buf = torch.ones(nbytes // 4, device=device)
    return nbytes / median_seconds(lambda: buf.sum(), device)


def figure_error(out: Path, device: torch.device, n: int, k: int) -> dict:
    g = torch.Generator().manual_seed(0)
    weight = (torch.randn(n, k, generator=g) * 0.02).to(device)
    x = torch.randn(1, k, generator=g).to(device)
    exact = (x.double() @ weight.double().T)[0]
    rms = exact.square().mean().sqrt()
    fig, ax = plt.subplots(figsize=(8.5, 4))
    summary = {}
    for fmt in Format:
        y = softfp8.linear(x, softfp8.quantize(weight, fmt))[0].double()
        err = ((y - exact).abs() / rms).cpu()
        summary[fmt.value] = {"outputs": n, "median": err.median().item(),
                              "p99": err.quantile(0.99).item(),
                              "relative_l2": ((y - exact).norm() / exact.norm()).item()}
        ax.hist(err.clamp_min(1e-6).log10().numpy(), bins=60, histtype="step", linewidth=1.5,
                color=FORMAT_COLOURS[fmt.value],
                label=f"{fmt.value}: L2 {summary[fmt.value]['relative_l2']:.2%}")
    ax.set_xlabel("log10 |y - y_fp32| / rms(y_fp32), per output")
    ax.set_ylabel("outputs")
    ax.set_title(f"GEMV output error over {n} outputs (K={k}), {device}, auto backend",
                 fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    stamp(fig, device)
    fig.savefig(out / "error_per_format.png", dpi=120, bbox_inches="tight")  # keeps the outside legend
    plt.close(fig)
    return summary


def local_gemv_times(device: torch.device, shapes: list[tuple[int, int]]) -> list[dict]:
    rows = []
    g = torch.Generator().manual_seed(1)
    for n, k in shapes:
        weight = torch.randn(n, k, generator=g).to(device) * 0.02
        dtype = torch.float16 if device.type == "cuda" else torch.float32
        x = torch.randn(1, k, generator=g).to(device=device, dtype=dtype)
        w = weight.to(dtype)
        base = median_seconds(lambda: torch.nn.functional.linear(x, w), device)
        rows.append({"shape": f"{n}x{k}", "format": str(dtype).replace("torch.", ""),
                     "bytes": w.numel() * w.element_size(), "seconds": base, "speedup": 1.0})
        for fmt in Format:
            packed = softfp8.quantize(weight, fmt)
            t = median_seconds(lambda: softfp8.linear(x, packed), device)
            rows.append({"shape": f"{n}x{k}", "format": fmt.value, "bytes": packed.nbytes,
                         "seconds": t, "speedup": base / t,
                         "backend": dispatch.select(fmt, 1, device).backend.value})
    return rows


def receipt_note(files: list[str]) -> str:
    """Date, device, versions and command of each receipt a figure was drawn from."""
    lines = []
    for f in files:
        try:
            data = json.loads(Path(f).read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        device = data.get("device")
        name = device.get("name") if isinstance(device, dict) else device
        versions = data.get("versions") if isinstance(data.get("versions"), dict) else {}
        stack = ", ".join(f"{k} {versions[k]}" for k in ("torch", "triton") if versions.get(k))
        command = str(data.get("command", "?")).split(" --out ")[0]
        env = next((e for r, e in RECEIPTS.items() if Path(f).as_posix().endswith(r)), "")
        command = f"{env} {command}".strip()
        lines.append(f"{Path(f).parent.name}/{Path(f).name}: {str(data.get('date', '?'))[:10]}, "
                     f"{name or '?'}, {stack}: {command}")
    return "\n".join(lines)


def _foot(fig, text: str) -> None:
    fig.text(0.01, 0.005, text, fontsize=6, color="0.3", va="bottom")


def figure_model(out: Path, points: list[tuple], local: list[dict], bandwidth: float,
                 device: torch.device, files: list[str]) -> None:
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    if points:
        markers = {"e5m2": "o", "e4m3": "s", "nvfp4": "^", "mxfp4": "v"}
        for dev, label, pred, meas in sorted(points, key=lambda p: -p[3]):
            fmt = label.split()[0]
            ax.scatter([pred], [meas], s=44, color=FORMAT_COLOURS.get(fmt, "0.3"),
                       marker=markers.get(fmt, "D"), zorder=3,
                       label=f"{label.replace('torch float16 ', 'fp16 ')}: {meas:.3f} ms, "
                             f"model {pred:.3f}")
        devices = sorted({p[0] for p in points})
        ax.set_title(f"Bandwidth model vs measurement, llama2-7b token ({', '.join(devices)})",
                     fontsize=9)
        ax.set_xlabel("predicted ms (bytes / (read bandwidth x coefficient))")
        ax.set_ylabel("measured ms")
        hi = max(max(p[2], p[3]) for p in points) * 1.12
        ax.set_xlim(0, hi)
        ax.set_ylim(0, hi)
        ax.set_aspect("equal")
        ax.plot([0, hi], [0, hi], "k--", linewidth=0.8, label="measured = predicted")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
        foot = receipt_note([f for f in files if '"predicted' in Path(f).read_text()])
    else:
        pred = [r["bytes"] / bandwidth * 1e3 for r in local]
        meas = [r["seconds"] * 1e3 for r in local]
        ax.scatter(pred, meas, s=18, color="tab:blue")
        for r, p, m in zip(local, pred, meas):
            ax.annotate(f"{r['format']} {r.get('backend', '')}", (p, m), fontsize=6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        lo, hi = ax.get_xlim()
        ax.plot([lo, hi], [lo, hi], "k--", linewidth=0.8)
        ax.set_xlabel("predicted ms (bytes / read bandwidth)")
        ax.set_ylabel("measured ms")
        ax.set_title(f"Bandwidth model vs measurement, {device} "
                     f"(read {bandwidth / 1e9:.1f} GB/s; no bench receipt: this machine only)",
                     fontsize=9)
        foot = None
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    if foot:
        _foot(fig, f"{foot}\ndrawn by {_COMMAND}")
    else:
        stamp(fig, device)
    fig.savefig(out / "bandwidth_model.png", dpi=120, bbox_inches="tight")  # keeps the outside legend
    plt.close(fig)


def figure_speedups(out: Path, speed: list[tuple], local: list[dict], device: torch.device,
                    files: list[str]) -> None:
    if speed:
        devices = sorted({dev for dev, _, _, _ in speed})
        entries = [(label if len(devices) == 1 else f"{dev}: {label}", fmt, x)
                   for dev, label, fmt, x in speed]
        title = f"Speedup over fp16 F.linear at M = 1 ({', '.join(devices)})"
    else:
        base = "float16" if device.type == "cuda" else "float32"
        entries = [(r["shape"], r["format"], r["speedup"]) for r in local if r["format"] != base]
        title = (f"Speedup over {base} F.linear at M = 1, {device} "
                 "(no bench receipt: this machine only, backends as auto picks them)")
    groups = list(dict.fromkeys(e[0] for e in entries))
    formats = list(dict.fromkeys(e[1] for e in entries))
    width = 0.8 / max(len(formats), 1)
    fig, ax = plt.subplots(figsize=(max(7.5, 1.3 * len(groups) + 1.5), 4.8))
    for i, fmt in enumerate(formats):
        xs = [groups.index(g) + i * width for g, f, _ in entries if f == fmt]
        ys = [x for _, f, x in entries if f == fmt]
        bars = ax.bar(xs, ys, width, label=fmt, color=FORMAT_COLOURS.get(fmt))
        ax.bar_label(bars, labels=[f"{y:.2f}" for y in ys], fontsize=6, padding=1)
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(groups))], groups, rotation=15,
                  fontsize=8)
    ax.set_ylabel("x fp16 (higher is faster)")
    ax.set_ylim(0, max(e[2] for e in entries) * 1.15)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    if speed:
        _foot(fig, f"{receipt_note(files)}\ndrawn by {_COMMAND}")
    else:
        stamp(fig, device)
    fig.savefig(out / "speedups.png", dpi=120, bbox_inches="tight")  # keeps the outside legend
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate figures/*.png")
    parser.add_argument("--out", default="figures")
    parser.add_argument("--receipts", nargs="+", default=list(RECEIPTS),
                        help="bench receipts (files, or folders searched for *.json)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="small shapes (tests, slow CPUs)")
    args = parser.parse_args(argv)
    global _COMMAND
    _COMMAND = " ".join(["python demos/make_figures.py", *(sys.argv[1:] if argv is None else argv)])
    out, device = Path(args.out), torch.device(args.device)
    out.mkdir(parents=True, exist_ok=True)
    k = 256 if args.quick else 4096
    errors = figure_error(out, device, 3840, k)
    for fmt, e in errors.items():
        print(f"{fmt:6s} over {e['outputs']} outputs: relative L2 {e['relative_l2']:.2%}, "
              f"median {e['median']:.2%}, p99 {e['p99']:.2%} of rms")
    root = Path(__file__).resolve().parents[1]  # the receipts' paths are the repository's
    model, speed, files = bench_points([p if Path(p).is_absolute() or Path(p).exists()
                                        else root / p for p in args.receipts])
    local, bandwidth = [], float("nan")
    if not model or not speed:
        shapes = [(256, 256), (512, 256)] if args.quick else [(4096, 4096), (11008, 4096),
                                                              (4096, 11008)]
        local = local_gemv_times(device, shapes)
        bandwidth = read_bandwidth(device, (16 if args.quick else 512) << 20)
    figure_model(out, model, local, bandwidth, device, files)
    figure_speedups(out, speed, local, device, files)
    print("bench receipts used: " + (", ".join(files) if files else "none (local measurement)"))
    print(f"wrote {', '.join(str(p) for p in sorted(out.glob('*.png')))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
