"""The GPU's clocks while the bench times it: `nvidia-smi` sampled on a thread of its own.

Why: on the H200 a whole measurement (a median of 50 replays) sometimes lands 30-50% slow, the
same kernel, process and weight copy measuring at its usual speed a minute later
(docs/decisions.md). A row that carries the SM and memory clocks seen while it ran,
the board's power and the driver's clock-event reasons says whether the GPU slowed down or the
kernel did: those were dips of the SM clock to 780-1200 MHz under the board's 700 W power cap.

`nvidia-smi --query-gpu=... -lms PERIOD` ships with every NVIDIA driver and needs no Python
package; it prints one line per sample, stamped by nvidia-smi itself: its output may reach a
pipe in blocks, so the time a line is read says nothing, and a row's samples are complete only
once the sampler has stopped. So each measurement records the span it ran (`timing.Timing.window`)
and `annotate` fills the rows in after the run. Elsewhere (the CPU, ROCm, no nvidia-smi) the
sampler samples nothing and the rows carry no clocks.
"""
from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass

import torch

PERIOD_MS = 20
"""nvidia-smi's sampling period: a measurement's >= 200 ms warm-up (timing.WARM_GPU_S) holds ~10
samples; a slow stretch lasts longer than a measurement."""

QUERY = ("timestamp", "clocks.sm", "clocks.mem", "power.draw", "clocks_event_reasons.active")
"""The fields, in order. Older drivers call the last one `clocks_throttle_reasons`: where the
driver refuses the field the sampler runs without it (`reasons` None)."""

_STAMP = "%Y/%m/%d %H:%M:%S.%f"


@dataclass(frozen=True)
class ClockSample:
    """One nvidia-smi line: when (seconds since the epoch, as time.time()), the SM and memory
    clocks in MHz, the board's power in W (None where not reported) and the active clock-event
    reasons (a bit mask; 0: none; None: not queried)."""

    t: float
    sm_mhz: float
    mem_mhz: float
    power_w: float | None
    reasons: int | None


def parse_line(line: str, fields: int = len(QUERY)) -> ClockSample | None:
    """A sample from one line of `nvidia-smi --format=csv,noheader,nounits` output (`fields`:
    len(QUERY), or one less without the reasons), or None for anything else (a header, an
    error message, a field the GPU reports as [N/A] where a number is needed)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != fields:
        return None
    try:
        t = dt.datetime.strptime(parts[0], _STAMP).timestamp()  # local time, as nvidia-smi's
        sm, mem = float(parts[1]), float(parts[2])
    except ValueError:
        return None
    try:
        power = float(parts[3])
    except ValueError:
        power = None  # "[N/A]" on boards that don't report it
    reasons = None
    if fields > 4:
        try:
            reasons = int(parts[4], 16)
        except ValueError:
            pass
    return ClockSample(t, sm, mem, power, reasons)


def summarize(samples: list[ClockSample]) -> dict | None:
    """The row's `clocks` entry: how many samples, SM and memory MHz min / max, the most power
    seen, the clock-event reasons seen (OR of the masks, hex); None without samples."""
    if not samples:
        return None
    sm = [s.sm_mhz for s in samples]
    mem = [s.mem_mhz for s in samples]
    power = [s.power_w for s in samples if s.power_w is not None]
    masks = [s.reasons for s in samples if s.reasons is not None]
    out = {"samples": len(samples), "sm_mhz_min": min(sm), "sm_mhz_max": max(sm),
           "mem_mhz_min": min(mem), "mem_mhz_max": max(mem),
           "power_w_max": max(power) if power else None,
           "reasons": None}
    if masks:
        mask = 0
        for m in masks:
            mask |= m
        out["reasons"] = f"0x{mask:x}"
    return out


def sm_mhz_label(clocks: dict | None) -> str | None:
    """The table's "SM MHz" cell: "1980", or "1755-1980" where the clock moved."""
    if not clocks:
        return None
    lo, hi = round(clocks["sm_mhz_min"]), round(clocks["sm_mhz_max"])
    return str(hi) if lo == hi else f"{lo}-{hi}"


class ClockSampler:
    """nvidia-smi's samples of one GPU (`target`: an nvidia-smi --id, or None: sample nothing,
    `why` says why), kept from start() to stop(); `window(t0, t1)` summarizes those stamped in
    [t0, t1] (time.time() seconds). `source` says what samples, or why nothing does.
    `for_device` builds one for a torch device."""

    def __init__(self, target: str | None, period_ms: int = PERIOD_MS, exe: str = "nvidia-smi",
                 why: str = "no device"):
        if period_ms < 1:
            raise ValueError(f"period_ms={period_ms}: expected a positive number of milliseconds")
        self._samples: list[ClockSample] = []
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None
        self._cmd: list[str] | None = None
        self._fields = len(QUERY)
        self.period_s = period_ms / 1e3
        path = shutil.which(exe)
        if target is None:
            self.source = f"none ({why})"
        elif path is None:
            self.source = f"none ({exe} not found)"
        else:
            for fields in (len(QUERY), len(QUERY) - 1):  # without the reasons where refused
                cmd = [path, f"--id={target}", f"--query-gpu={','.join(QUERY[:fields])}",
                       "--format=csv,noheader,nounits"]
                try:
                    once = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
                except (OSError, subprocess.TimeoutExpired) as exc:
                    self.source = f"none ({exe}: {type(exc).__name__})"
                    break
                first = (once.stdout.strip().splitlines() or [""])[0]
                if once.returncode == 0 and parse_line(first, fields) is not None:
                    self._cmd, self._fields = cmd + [f"-lms={period_ms}"], fields
                    self.source = f"{exe} every {period_ms} ms ({', '.join(QUERY[1:fields])})"
                    break
                self.source = f"none ({exe} said: {(once.stderr or once.stdout).strip()[:120]})"

    @classmethod
    def for_device(cls, device: torch.device, **kw) -> ClockSampler:
        """For an NVIDIA CUDA device, named by its UUID (CUDA_VISIBLE_DEVICES renumbers the
        indices nvidia-smi knows); a sampler of nothing elsewhere."""
        if device.type != "cuda" or torch.version.hip:
            return cls(None, why="not an NVIDIA GPU", **kw)
        index = str(device.index or 0)
        uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
        if uuid is not None:
            text = str(uuid)
            by_uuid = cls(text if text.startswith("GPU-") else f"GPU-{text}", **kw)
            if by_uuid._cmd is not None or "CUDA_VISIBLE_DEVICES" in os.environ:
                return by_uuid
        return cls(index, **kw)  # torch's and nvidia-smi's indices agree without the variable

    def start(self) -> ClockSampler:
        if self._cmd is None or self._proc is not None:
            return self
        self._proc = subprocess.Popen(self._cmd, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self._thread = threading.Thread(target=self._read, name="softfp8-clocks", daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            sample = parse_line(line, self._fields)
            if sample is not None:
                with self._lock:
                    self._samples.append(sample)

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._thread.join(timeout=5)
        self._proc = None

    def window(self, t0: float, t1: float) -> dict | None:
        """`summarize` of the samples stamped in [t0, t1] (all of them once stopped)."""
        with self._lock:
            return summarize([s for s in self._samples if t0 <= s.t <= t1])

    def __enter__(self) -> ClockSampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ClockSampler({self.source})"


def annotate(rows: list[dict], sampler: ClockSampler) -> None:
    """After the run (the sampler stopped): each row that has a measurement span (`window_s`:
    warm-up start, timed start, end) gets `clocks` over the whole span (`summarize`),
    `clocks_timed` over the timed replays (a few ms: the samples within a sampling period of
    them) and `sm_mhz` (`sm_mhz_label`, of the timed replays where sampled, else the span's)."""
    pad = sampler.period_s
    for row in rows:
        span = row.get("window_s")
        if not span:
            continue
        t0, t_timed, t1 = span
        whole = sampler.window(t0, t1)
        timed = sampler.window(t_timed - pad, t1 + pad)
        if whole is not None:
            row["clocks"] = whole
        if timed is not None:
            row["clocks_timed"] = timed
        if whole is not None or timed is not None:
            row["sm_mhz"] = sm_mhz_label(timed or whole)
