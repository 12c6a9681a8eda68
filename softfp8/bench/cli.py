"""Argument parsing and the receipt for `python -m softfp8.bench` / `softfp8-bench`."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import shlex
import sys
import time
from pathlib import Path

import torch

from ..dispatch import Backend
from ..formats import Format
from . import clocks, commands, report
from ._device_arg import _device
from .model import __doc__ as MODEL_DOC
from .presets import CPU_PRESET, PRESETS, parse_shape, preset
from .workload import Settings, l2_bytes

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
_DEFAULT_PRESET = {"bandwidth": "llama2-7b", "shapes": "llama2-7b", "token": "llama2-7b",
                   "small-m": "llama3-8b", "prefill": "llama3-8b"}
_CPU = {"preset": {"small-m": CPU_PRESET, "prefill": CPU_PRESET, "token": CPU_PRESET},
        "prefill_m": [128, 512], "token_layers": 2}
"""CPU defaults where the GPU's would run for minutes or fill the memory: a 1B model's shapes,
prefill at M = 128 and 512, token over two layers and the lm_head."""

DESCRIPTION = """Measure softfp8 against torch on this machine; print a table and write a JSON
receipt (probe report, versions, device, date, command line, every number).

Every GEMV rotates over copies of its weight so one pass touches --rotate x the L2, and reports
bytes moved = weight bytes (packed words + scales) + x + y, GB/s, % of the read bandwidth measured
in the same run, and the speedup over fp16 torch.nn.functional.linear (time ratio). CUDA: each
pass is one CUDA graph, replays timed by CUDA events, median. CPU: perf_counter, median.
""" + "\nThe bandwidth model (subcommands bandwidth and token):\n" + MODEL_DOC.split("\n", 2)[2]


def _csv(parse, arg: str):
    def convert(text: str):
        try:
            return [parse(t, arg=arg) for t in text.split(",") if t.strip()]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert


def _ints(text: str) -> list[int]:
    try:
        values = [int(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers")
    return values


def _shape(text: str):
    try:
        return parse_shape(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--device", default="auto", help="cpu, cuda, cuda:N, or auto (default)")
    common.add_argument("--preset", choices=sorted(PRESETS), help="model preset (default per "
                        "subcommand: llama2-7b; small-m and prefill: llama3-8b; on a CPU "
                        f"small-m, prefill and token: {CPU_PRESET})")
    common.add_argument("--shape", type=_shape, action="append", metavar="N,K",
                        help="a custom (out_features, in_features) shape, repeatable; replaces "
                             "the preset")
    common.add_argument("--formats", type=_csv(Format.parse, "--formats"),
                        default=list(Format), help="comma list (default: all)")
    common.add_argument("--backends", type=_csv(Backend.parse, "--backends"),
                        help="comma list of softfp8 backends (auto included only if named). "
                             "Default: every backend dispatch can run on the device, plus auto; "
                             "the torch reference is left out where another backend runs the "
                             "format. Those that can't run are skipped with the reason")
    common.add_argument("--act-dtype", choices=sorted(_DTYPES),
                        help="softfp8 activation dtype (default fp16 on GPUs, fp32 on the CPU)")
    common.add_argument("--warmup", type=int, help="CUDA: passes (default 3); CPU: calls (1)")
    common.add_argument("--reps", type=int, help="timed samples (default CUDA 50; CPU 5, token 3)")
    common.add_argument("--no-graph", action="store_true", help="CUDA: time eager passes")
    common.add_argument("--no-clocks", action="store_true", help="NVIDIA: don't sample the "
                        "GPU's clocks while timing (default: nvidia-smi every "
                        f"{clocks.PERIOD_MS} ms; each row gets the SM / memory MHz, power and "
                        "clock-event reasons seen while it was measured)")
    common.add_argument("--rotate", type=float, default=4.0,
                        help="rotate weights so one pass touches this x L2 (default 4)")
    common.add_argument("--mbytes", type=int, help="buffer MiB for copy/read bandwidth "
                        "(default: CUDA max(1024, 16 x L2), CPU 256)")
    common.add_argument("--tile-rows", type=int, help="quantize this many rows and repeat them "
                        "(default: CUDA 0 = quantize the whole weight; CPU 256, for speed)")
    common.add_argument("--check-tol", type=float, default=0.05, help="flag a softfp8 output as "
                        "WRONG past this relative error vs the torch reference (default 0.05: "
                        "catches wrong results, not a precision test)")
    common.add_argument("--seed", type=int, default=0)
    common.add_argument("--out", type=Path, help="receipt path (default "
                        "receipts/bench-<subcommand>.json); the table is also written as "
                        "Markdown beside it (.md), headed by date, device, versions, command; each row is "
                        "also appended to .log.jsonl as it is measured, so a run cut short "
                        "keeps what it measured")
    parser = argparse.ArgumentParser(prog="softfp8-bench", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    help_ = {
        "bandwidth": "copy and read bandwidth, the model's coefficient (fp16 GEMV efficiency over "
                     "the preset's shapes) and its per-token predictions for fp16 and each format",
        "shapes": "GEMV (M=1) per shape: every format x backend vs torch fp16 and bf16 F.linear "
                  "(CPU: fp32/fp16/bf16 F.linear and mv; speedup vs fp16 and vs the fastest)",
        "token": "every linear of the preset at M=1 as one CUDA graph per variant (CPU: a plain "
                 "loop), vs fp16, with the bandwidth model's prediction beside it",
        "small-m": "M = 1, 2, 4, 8, 16 on the preset's shapes; bandwidth relative to M=1",
        "prefill": "M = 512, 2048: softfp8 vs fp16 and bf16 cuBLAS; TFLOP/s",
    }
    for name in USER_PATH:  # parsed by user_path; listed here for --help
        sub.add_parser(name, help=f"see softfp8-bench {name} --help (transformers generate() "
                       "tok/s; an eager call's host time)")
    for name, text in help_.items():
        p = sub.add_parser(name, parents=[common], help=text, description=text)
        if name == "token":
            p.add_argument("--layers", type=int, help="layers (default: the preset's; 1 with "
                           f"--shape; on a CPU {_CPU['token_layers']})")
            p.add_argument("--no-head", action="store_true", help="leave out the lm_head")
        if name in ("small-m", "prefill"):
            p.add_argument("--m", type=_ints, default=[1, 2, 4, 8, 16] if name == "small-m"
                           else None, help="comma list of M (prefill default 512,2048; on a "
                           "CPU 128,512)")
    return parser


USER_PATH = ("generate", "calls")
"""Subcommands of `user_path` (transformers generate(); an eager call's host time): their own
options, not the GEMV ones above."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in USER_PATH:
        from . import user_path

        return user_path.main(argv)
    args = build_parser().parse_args(argv)
    device = _device(args.device)
    cuda = device.type == "cuda"
    l2, l2_source = l2_bytes(device)
    token = args.command == "token"
    s = Settings(
        device=device,
        act_dtype=_DTYPES[args.act_dtype] if args.act_dtype else
        (torch.float16 if cuda else torch.float32),
        warmup=args.warmup if args.warmup is not None else (3 if cuda else 1),
        reps=args.reps if args.reps is not None else (50 if cuda else (3 if token else 5)),
        graph=not args.no_graph, l2=l2, rotate=args.rotate,
        tile_rows=args.tile_rows if args.tile_rows is not None else (0 if cuda else 256),
        check_tol=args.check_tol, seed=args.seed)
    if s.reps < 1 or s.warmup < 0 or s.rotate <= 0:
        raise SystemExit("--reps must be >= 1, --warmup >= 0, --rotate > 0")
    out = args.out or Path("receipts") / f"bench-{args.command}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    s = dataclasses.replace(s, log=out.with_suffix(".log.jsonl"), echo=not cuda)
    if args.command == "prefill" and args.m is None:
        args.m = _CPU["prefill_m"] if not cuda else [512, 2048]
    if token and not cuda and args.layers is None and not args.shape:
        args.layers = _CPU["token_layers"]
    s.log.write_text("")  # this run's rows only
    mbytes = args.mbytes or (max(1024, 16 * l2 // 2**20) if cuda else 256)
    default = _DEFAULT_PRESET[args.command] if cuda else _CPU["preset"].get(
        args.command, _DEFAULT_PRESET[args.command])
    pre = None if args.shape else preset(args.preset or default)
    shapes = tuple(dict.fromkeys(args.shape)) if args.shape else pre.shapes()
    if pre is not None:
        linears = pre.token_linears(head=not (token and args.no_head),
                                    layers=args.layers if token and args.layers else None)
    else:
        linears = tuple(shapes) * (args.layers if token and args.layers else 1)
    formats = list(dict.fromkeys(args.formats))
    sampler = clocks.ClockSampler.for_device(device) if cuda and not args.no_clocks else None
    t0 = time.perf_counter()
    with sampler or contextlib.nullcontext():
        rows, body, cols = _run(args, s, shapes, linears, formats, mbytes)
    if sampler is not None:  # stopped: every sample is in
        mem = body.get("memory")  # the read bandwidth every %read divides by: its clocks too
        clocks.annotate(rows + ([mem["copy"], *mem["reads"]] if mem else []), sampler)
        if any("sm_mhz" in r for r in rows):
            cols = cols + [("sm_mhz", "SM MHz")]
    elapsed = time.perf_counter() - t0
    receipt = {
        "subcommand": args.command,
        "command": shlex.join(["softfp8-bench", *argv]),
        **report.environment(device),
        "probe": report.probe_report(),
        "settings": {**{k: v for k, v in vars(s).items()}, "l2_source": l2_source,
                     "mbytes": mbytes, "preset": pre.name if pre else None,
                     "shapes": [sh.label for sh in shapes], "formats": formats,
                     "backends": args.backends or "default",
                     "clocks": sampler.source if sampler is not None else "off"},
        "seconds": elapsed,
        **body,
    }
    report.write_receipt(out, receipt)
    title = (f"softfp8-bench {args.command} on {receipt['device'].get('name')} ({device}), "
             f"torch {torch.__version__}, {receipt['date']}")
    if "memory" in body:
        m = body["memory"]
        title += (f"\nread bandwidth {m['read_bandwidth_GB_per_s']:.1f} GB/s ({m['read_method']}),"
                  f" copy {m['copy']['GB_per_s']:.1f} GB/s")
    if body.get("coefficient"):
        title += f"; model coefficient {report.fmt_num(body['coefficient']['value'])}"
    print(report.table(rows, cols, title))
    md = report.markdown(rows, cols, receipt)
    if body.get("summary"):
        keep = [c for c in _SUMMARY_COLS if any(a.get(c[0]) is not None for a in body["summary"])]
        print(report.table(body["summary"], keep, "\nover all shapes:"))
        md += "\nOver all shapes:\n\n" + report.markdown(body["summary"], keep)
    out.with_suffix(".md").write_text(md)
    if token and not cuda:
        print("CPU: no CUDA graphs here; each token is a plain Python loop over the linears")
    for k in body.get("skipped", [])[:20]:
        print(f"skipped {k['format']} {k['backend']}: {k['reason']}")
    print(f"receipt: {out} and {out.with_suffix('.md')} ({elapsed:.1f} s)")
    bad = [r for r in rows if "error" in r or r.get("check") == "WRONG"]
    if bad:
        print(f"{len(bad)} variant(s) failed or gave wrong results: see the receipt")
    return 1 if bad else 0


def _run(args, s: Settings, shapes, linears, formats, mbytes: int):
    """The subcommand's (rows, body) and its table's columns."""
    if args.command == "bandwidth":
        rows, body = commands.bandwidth(s, shapes, linears, formats, mbytes)
        cols = [("impl", "what"), ("ms", "ms"), ("GB_per_s", "GB/s"), ("pct_read_bw", "%read"),
                ("bytes", "bytes"), ("predicted_ms", "pred ms/token"),
                ("predicted_tok_per_s", "pred tok/s")]
    elif args.command == "shapes":
        rows, body = commands.shapes_cmd(s, shapes, formats, args.backends, mbytes)
        cols = _GEMV_COLS
    elif args.command == "small-m":
        rows, body = commands.small_m_cmd(s, shapes, formats, args.backends, mbytes, args.m)
        cols = _GEMV_COLS[:3] + [("bw_vs_m1", "bw/M=1")] + _GEMV_COLS[3:]
    elif args.command == "prefill":
        rows, body = commands.prefill_cmd(s, shapes, formats, args.backends, args.m)
        cols = [c for c in _GEMV_COLS if c[0] != "pct_read_bw"] + [("TFLOP_per_s", "TFLOP/s")]
    else:
        rows, body = commands.token_cmd(s, shapes, linears, formats, args.backends, mbytes)
        cols = [("impl", "impl"), ("linears", "linears"), ("ms", "ms/token"),
                ("predicted_ms", "model ms"), ("measured_over_predicted", "meas/model"),
                ("tok_per_s", "tok/s"), ("GB_per_s", "GB/s"), ("pct_read_bw", "%read"),
                ("speedup_vs_fp16", "x fp16")]
    return rows, body, cols


_GEMV_COLS = [("shape", "shape"), ("m", "M"), ("impl", "impl"), ("resolved_backend", "runs"),
              ("ms", "ms"), ("GB_per_s", "GB/s"), ("pct_read_bw", "%read"),
              ("speedup_vs_fp16", "x fp16"), ("speedup_vs_fastest_torch", "x fastest torch"),
              ("rel_err_vs_torch_ref", "rel err"), ("check", "check")]
_SUMMARY_COLS = [("impl", "impl"), ("m", "M"), ("shapes", "shapes"), ("ms", "total ms"),
                 ("GB_per_s", "GB/s"), ("pct_read_bw", "%read"), ("speedup_vs_fp16", "x fp16"),
                 ("bw_vs_m1", "bw/M=1")]
