"""`python -m softfp8.probe [--json] [--bandwidth]` (console script `softfp8-probe`).

Prints what the probe measured on this machine (each device, each check with its measured value)
and, for every format, which backend and E2M1 decoder `linear()` would use at M = 1 and at a large
M, and why. `--json` prints the same as one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import types


from . import _env, _settings, capability, dispatch
from .capability import CapabilityReport, Check, DeviceReport, Status
from .formats import SPECS, Format

LARGE_M = 4096
ENV_VARS = (*_env.SETTINGS, capability.TRITON_INTERPRET_ENV)
"""The variables the report shows, with any other SOFTFP8_* name that is set."""

# (DeviceReport field, label, whether YES means "FTZ on" rather than "works")
_CHECKS = (("float8", "float8 tensors", False), ("scaled_mm", "torch._scaled_mm", False),
           ("ftz_torch", "FTZ, torch ops", True), ("triton", "Triton launches", False),
           ("ftz_triton", "FTZ, Triton kernel", True),
           ("cuda_kernels", "CUDA kernels (CuPy)", False),
           ("ftz_cuda", "FTZ, CUDA kernel", True), ("numba", "Numba runs", False),
           ("ftz_numba", "FTZ, Numba", True), ("bandwidth", "memory bandwidth", False))


def routing(report: CapabilityReport, ms: tuple[int, ...] = (1, LARGE_M)) -> list[dict]:
    """For every device, format and M: the backend and decoder select() picks, and why."""
    rows = []
    for dev in report.devices:
        for fmt in Format:
            for m in ms:
                row = {"device": dev.device, "format": fmt.value, "m": m}
                try:
                    choice = dispatch.select(fmt, m, dev.device, report=report)
                except (dispatch.BackendUnavailable, ValueError) as exc:
                    row["error"] = str(exc)
                else:
                    fp4 = SPECS[fmt].bits == 4
                    row.update(backend=choice.backend.value, reason=choice.reason,
                               e2m1=choice.e2m1.value if fp4 else None,
                               e2m1_reason=choice.e2m1_reason if fp4 else None)
                rows.append(row)
    return rows


def environment() -> dict[str, str | None]:
    """Every variable of ENV_VARS (None where unset) and every other SOFTFP8_* name set."""
    names = [*ENV_VARS, *sorted(n for n in os.environ if n.startswith("SOFTFP8_")
                                and n not in ENV_VARS)]
    return {name: os.environ.get(name) for name in names}


def _override_text(name: str, value: str) -> str:
    """`name=value`, and why softfp8 won't take it where it won't."""
    setting = _env.SETTINGS.get(name)
    if setting is None and name.startswith("SOFTFP8_"):
        return f"{name}={value} (read by nothing: no such setting)"
    if setting is not None and value.strip():
        try:
            setting.check(value)
        except ValueError as exc:
            return f"{name}={value} (invalid: {str(exc).split('; ', 1)[-1]})"
    return f"{name}={value}"


def _launch_settings_text() -> str:
    """The settings a `launch_settings` block around this call put in force ("" if none, or
    if the environment's defaults can't be read: the overrides line names the bad variable)."""
    try:
        settings = _settings.current()
    except ValueError:
        return ""
    sources = (settings.source(name) for name in _settings._ENV_OF)
    return ", ".join(src for src in sources if src.startswith("launch_settings("))


def native_fp8(report: CapabilityReport, dev: DeviceReport) -> str | None:
    """None where backend='native' (torch's float8 and _scaled_mm) runs FP8 weights on `dev`,
    else why not: torch's FP8 ops working on a device (they do on CPUs) is not enough."""
    return dispatch.refusal(dispatch.Backend.NATIVE, Format.E4M3, dev.device, report)


def as_json(report: CapabilityReport) -> dict:
    return {"report": report.to_dict(), "environment": environment(), "routing": routing(report),
            "native_fp8": {dev.device: {"runs": (why := native_fp8(report, dev)) is None,
                                        "why_not": why} for dev in report.devices}}


def _answer(check: Check, ftz: bool) -> str:
    if ftz and check.status is not Status.UNKNOWN:
        return "ON" if check.is_yes else "off"
    return str(check.status)


def _device_lines(report: CapabilityReport, dev: DeviceReport) -> list[str]:
    facts = [dev.name or "?"]
    if dev.arch:
        facts.append(dev.arch)
    if dev.capability is not None:
        facts.append(f"compute capability {dev.capability[0]}.{dev.capability[1]}")
    if dev.memory_bytes:
        facts.append(f"{dev.memory_bytes / 2**30:.1f} GiB")
    lines = [f"{dev.device} ({dev.runtime}): " + ", ".join(facts)]
    for name, label, ftz in _CHECKS:
        check = getattr(dev, name)
        if check is not None:
            lines.append(f"  {label:<20} {_answer(check, ftz):<8} {check.detail}")
    why = native_fp8(report, dev)
    if why is None:
        lines.append(f"  {'native FP8':<20} {'yes':<8} backend='native' runs here (float8 "
                     f"tensors and _scaled_mm work)")
    else:
        lines.append(f"  {'native FP8':<20} {'no':<8} backend='native' can't run here: {why}")
    return lines


def _routing_lines(rows: list[dict]) -> list[str]:
    lines = []
    # One block per (device, format); M = 1 and the large M share it when they agree.
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["device"], row["format"]), []).append(row)
    for (device, fmt), group in groups.items():
        merged: list[tuple[list[int], dict]] = []
        for row in group:
            same = {k: v for k, v in row.items() if k != "m"}
            if merged and {k: v for k, v in merged[-1][1].items() if k != "m"} == same:
                merged[-1][0].append(row["m"])
            else:
                merged.append(([row["m"]], row))
        for ms, row in merged:
            head = f"  {device:<7} {fmt:<6} M={','.join(map(str, ms)):<7}"
            if "error" in row:
                lines.append(f"{head} -> error: {row['error']}")
                continue
            e2m1 = f", E2M1 {row['e2m1']}" if row["e2m1"] else ""
            lines.append(f"{head} -> {row['backend']}{e2m1}")
            lines.append(f"      why: {row['reason']}")
            if row["e2m1"]:
                lines.append(f"      E2M1: {row['e2m1_reason']}")
    return lines


def as_text(report: CapabilityReport) -> str:
    v = report.versions
    versions = [f"{name} {getattr(v, name) or 'not installed'}"
                for name in ("python", "torch", "triton", "numba", "softfp8")]
    if v.cuda:
        versions.append(f"CUDA {v.cuda}")
    if v.hip:
        versions.append(f"HIP {v.hip}")
    env = ", ".join(_override_text(k, val) for k, val in environment().items() if val) or (
        "none set")
    blocks = _launch_settings_text()
    if blocks:
        env += f"; in force here: {blocks}"
    lines = [f"softfp8 capability report (probed in {report.probe_seconds:.2f} s; calling "
             f"thread: {report.thread_denormals})",
             "versions: " + ", ".join(versions),
             f"Triton here: {report.triton.status}: {report.triton.detail}",
             f"overrides: {env}", "", "devices"]
    for dev in report.devices:
        lines += ["  " + line for line in _device_lines(report, dev)]
    lines += ["", f"routing (linear() with backend='auto'; M=1 is batch-1 decoding, "
                  f"M={LARGE_M} a prefill; E2M1 matters for nvfp4/mxfp4 only)"]
    lines += _routing_lines(routing(report))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="softfp8-probe", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--bandwidth", action="store_true",
                        help="also measure each device's memory bandwidth (a few seconds)")
    args = parser.parse_args(argv)
    report = capability.probe(bandwidth=args.bandwidth)
    if args.json:
        print(json.dumps(as_json(report), indent=2))
    else:
        print(as_text(report))
    return 0


class _CallableModule(types.ModuleType):
    """`softfp8.probe` is both the function (softfp8/__init__.py) and this module (the CLI).
    Importing this module rebinds the package attribute to the module, so the module forwards
    calls to the function: `softfp8.probe()` keeps working after `import softfp8.probe`."""

    def __call__(self, refresh: bool = False, *, bandwidth: bool = False) -> CapabilityReport:
        return capability.probe(refresh, bandwidth=bandwidth)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(main())
