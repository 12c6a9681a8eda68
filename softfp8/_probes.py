"""The sub-probes behind `capability.collect()`: each measures one fact on one device.

Every FTZ sub-probe runs the same decisive test: the exponent-injection decode of the E2M1 codes
1 and 9 (bits ``e1 e0 m0`` at float32 bits 22..24, sign at bit 31, then x 2^126), as
`softfp8.decode.decode_e2m1_to_f32_inject` does. The intermediate is the denormal +-2^-127: where
denormals survive the result is +0.5, -0.5; where they flush it is +0, -0. Each path is measured
in its own language (torch ops, a Triton kernel, a Numba function) because each has its own
denormal mode: CUDA kernels compiled with or without ftz, the CPU's per-thread MXCSR for torch
and Numba (so the CPU probes run on the calling thread, and in Numba's parallel workers too).
Kernels are defined lazily inside functions: importing softfp8 compiles nothing.
"""
from __future__ import annotations

import os
import platform
import statistics
import struct
import time

import torch

from ._report import Check, DeviceReport, Runtime

_INJECT_SCALE = 2.0 ** 126
_EXPECTED_BITS = (0x3F000000, 0xBF000000)  # +0.5, -0.5


def describe(exc: BaseException) -> str:
    """An exception in one line, for a report."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first[:240]}" if first else type(exc).__name__


def guarded(run) -> Check:
    """run() -> Check, with any exception turned into UNKNOWN and its reason."""
    try:
        return run()
    except Exception as exc:
        return Check.unknown(f"the sub-probe failed: {describe(exc)}")


def _f32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def judge_inject(values, path: str) -> Check:
    """The FTZ verdict from inject-decode(1, 9) on `path`: YES = flushes, NO = denormals survive."""
    values = tuple(float(v) for v in values)
    shown = ", ".join(f"{v:+g}" for v in values)
    if tuple(_f32_bits(v) for v in values) == _EXPECTED_BITS:
        return Check.no(f"inject(1, 9) = {shown} in {path}: denormals survive", values)
    if all(v == 0.0 for v in values):
        return Check.yes(f"inject(1, 9) = {shown} in {path}: denormals flushed to zero", values)
    return Check.unknown(f"inject(1, 9) = {shown} in {path}: expected +-0.5 or +-0")


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


_TRITON_KERNEL = None
_NUMBA_FUNCS = None


def _triton_inject_kernel():
    """The Triton FTZ kernel, defined (not compiled) on first use."""
    global _TRITON_KERNEL
    if _TRITON_KERNEL is None:
        import triton
        import triton.language as tl

        @triton.jit
        def e2m1_inject_kernel(codes_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            mask = offs < n
            c = tl.load(codes_ptr + offs, mask=mask, other=0)
            bits = ((c & 7) << 22) | ((c >> 3) << 31)
            # 2^126 as a literal: the denormal 2^-127 times it is 0.5 unless the kernel flushes.
            value = bits.to(tl.float32, bitcast=True) * 8.507059173023462e37
            tl.store(out_ptr + offs, value, mask=mask)

        _TRITON_KERNEL = e2m1_inject_kernel
    return _TRITON_KERNEL


def _numba_inject_funcs():
    """(serial, parallel) Numba inject-decoders, compiled on first call."""
    global _NUMBA_FUNCS
    if _NUMBA_FUNCS is None:
        import numba
        import numpy as np

        @numba.njit(cache=True)  # on disk: the next process starts fast
        def serial(codes):
            bits = ((codes & 7) << 22) | ((codes >> 3) << 31)
            return bits.astype(np.int32).view(np.float32) * np.float32(_INJECT_SCALE)

        @numba.njit(parallel=True, cache=True)
        def parallel(codes):
            # One element per prange iteration, so the work lands on the worker threads, whose
            # MXCSR can differ from the calling thread's.
            bits = ((codes & 7) << 22) | ((codes >> 3) << 31)
            values = bits.astype(np.int32).view(np.float32)
            out = np.empty(values.shape[0], np.float32)
            for i in numba.prange(values.shape[0]):
                out[i] = values[i] * np.float32(_INJECT_SCALE)
            return out

        _NUMBA_FUNCS = (serial, parallel)
    return _NUMBA_FUNCS


class SubProbes:
    """One probing pass: remembers each kernel run so the launch and FTZ checks share it."""

    def __init__(self, *, triton_installed: bool, numba_installed: bool, interpret: bool,
                 cupy_installed: bool = False):
        self.triton_installed = triton_installed
        self.cupy_installed = cupy_installed
        self._cuda_runs: dict[str, tuple[Check, tuple | None]] = {}
        self.numba_installed = numba_installed
        self.interpret = interpret
        self._triton_runs: dict[str, tuple[Check, tuple | None]] = {}
        self._numba_run: tuple[Check, tuple | None, tuple | None] | None = None

    # torch ----------------------------------------------------------------------------------
    def float8(self, dev: DeviceReport) -> Check:
        dtypes = [getattr(torch, n, None) for n in ("float8_e4m3fn", "float8_e5m2")]
        if None in dtypes:
            return Check.no(f"torch {torch.__version__} has no float8 dtypes")
        values = torch.tensor([0.5, -448.0, 2.0 ** -9, 3.0], device=dev.device)
        for dt in dtypes:
            try:
                back = values.to(dt).to(torch.float32).cpu()
            except Exception as exc:
                return Check.no(f"torch can't cast to {dt} on {dev.device}: {describe(exc)}")
            if not torch.equal(back, values.cpu()):
                return Check.no(f"{dt} round trip on {dev.device} gave {back.tolist()}")
        return Check.yes(f"float8_e4m3fn and float8_e5m2 round-trip exactly on {dev.device}")

    def scaled_mm(self, dev: DeviceReport) -> Check:
        if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
            return Check.no(f"torch {torch.__version__} has no torch._scaled_mm")
        g = torch.Generator().manual_seed(0)
        a = torch.randn(16, 32, generator=g).to(torch.float8_e4m3fn)
        b = torch.randn(16, 32, generator=g).to(torch.float8_e4m3fn)  # [N, K]; passed as b.t()
        ref = a.double() @ b.double().t()
        da, db = a.to(dev.device), b.to(dev.device)
        one = torch.tensor(1.0, device=dev.device)
        try:
            out = torch._scaled_mm(da, db.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        except Exception as exc:  # torch's own "not supported here" is the answer we want
            return Check.no(f"torch._scaled_mm raised {describe(exc)}")
        if isinstance(out, tuple):  # torch 2.4 returned (out, amax)
            out = out[0]
        err = ((out.double().cpu() - ref).norm() / ref.norm()).item()
        if err <= 1e-2:  # bf16 output: ~4e-3 expected
            return Check.yes(f"a 16x32x16 E4M3 torch._scaled_mm ran on {dev.device}, "
                             f"relative error {err:.1e} (bf16 out)", round(err, 6))
        return Check.no(f"torch._scaled_mm ran on {dev.device} but its relative error is "
                        f"{err:.1e}", round(err, 6))

    def ftz_torch(self, dev: DeviceReport) -> Check:
        from .decode import decode_e2m1_to_f32_inject
        codes = torch.tensor([1, 9], dtype=torch.int32, device=dev.device)
        out = decode_e2m1_to_f32_inject(codes).cpu()
        return judge_inject(out.tolist(), f"torch ops on {dev.device}")

    # triton ---------------------------------------------------------------------------------
    def _triton_refusal(self, dev: DeviceReport) -> str | None:
        if not self.triton_installed:
            return "the package 'triton' is not installed (pip install triton)"
        if dev.runtime is Runtime.CPU and not self.interpret:
            return ("no GPU for it: Triton compiles for CUDA and ROCm GPUs (TRITON_INTERPRET=1 "
                    "runs kernels on the CPU in its interpreter, for debugging)")
        if dev.runtime is Runtime.MPS:
            return "Triton has no Metal backend"
        if dev.capability is not None and dev.capability < (7, 0):
            return (f"compute capability {dev.capability[0]}.{dev.capability[1]} is below 7.0, "
                    "the oldest Triton targets")
        return None

    def _triton_run(self, dev: DeviceReport) -> tuple[Check, tuple | None]:
        if dev.device not in self._triton_runs:
            refusal = self._triton_refusal(dev)
            if refusal is not None:
                self._triton_runs[dev.device] = (Check.no(refusal), None)
            else:
                try:
                    values = self._launch(dev)
                    how = " in the interpreter (TRITON_INTERPRET=1)" if self.interpret else ""
                    self._triton_runs[dev.device] = (
                        Check.yes(f"compiled and launched a kernel on {dev.device}{how}"), values)
                except Exception as exc:
                    self._triton_runs[dev.device] = (
                        Check.no(f"compiling or launching failed: {describe(exc)}"), None)
        return self._triton_runs[dev.device]

    def _launch(self, dev: DeviceReport) -> tuple:
        kernel = _triton_inject_kernel()
        codes = torch.tensor([1, 9], dtype=torch.int32, device=dev.device)
        out = torch.full((2,), float("nan"), device=dev.device)
        if dev.runtime is Runtime.CPU:
            kernel[(1,)](codes, out, 2, BLOCK=16)
        else:
            with torch.cuda.device(codes.device):
                kernel[(1,)](codes, out, 2, BLOCK=16)
                torch.cuda.synchronize()
        return tuple(out.cpu().tolist())

    def triton(self, dev: DeviceReport) -> Check:
        return self._triton_run(dev)[0]

    def ftz_triton(self, dev: DeviceReport) -> Check:
        launch, values = self._triton_run(dev)
        if values is None:
            return Check.unknown(f"no Triton kernel ran on {dev.device}: {launch.detail}")
        return judge_inject(values, f"a Triton kernel on {dev.device}")

    # the CUDA backend (CuPy + NVRTC) --------------------------------------------------------
    def _cuda_run(self, dev: DeviceReport) -> tuple[Check, tuple | None]:
        if dev.device not in self._cuda_runs:
            if not self.cupy_installed:
                run = (Check.no("the package 'cupy' is not installed (pip install "
                                "cupy-cuda12x, or cupy-cuda13x where torch's CUDA is 13; "
                                "Pascal and Volta need 12)"), None)
            else:
                try:
                    from .backends.cuda._runtime import probe_values, versions
                    values = probe_values(torch.device(dev.device))
                    ftz = judge_inject(values[:2], f"the CUDA backend's kernel on {dev.device}")
                    tiny = _f32_bits(values[2]) == 0x3B000000  # E4M3 code 1: 2^-9
                    if ftz.is_no and tiny:
                        run = (Check.yes(f"compiled ({versions()}) and launched a kernel on "
                                         f"{dev.device}; denormals kept"), values)
                    else:
                        run = (Check.no(f"a kernel ran on {dev.device} but flushed denormals "
                                        f"({ftz.detail}; E4M3 code 1 gave {values[2]!r}), and "
                                        "the backend's decodes need them"), values)
                except Exception as exc:
                    run = (Check.no(f"compiling or launching failed: {describe(exc)}"), None)
            self._cuda_runs[dev.device] = run
        return self._cuda_runs[dev.device]

    def cuda_kernels(self, dev: DeviceReport) -> Check:
        return self._cuda_run(dev)[0]

    def ftz_cuda(self, dev: DeviceReport) -> Check:
        launch, values = self._cuda_run(dev)
        if values is None:
            return Check.unknown(f"no CUDA backend kernel ran on {dev.device}: {launch.detail}")
        return judge_inject(values[:2], f"the CUDA backend's kernel on {dev.device}")

    # numba ----------------------------------------------------------------------------------
    def _numba(self) -> tuple[Check, tuple | None, tuple | None]:
        if self._numba_run is None:
            if not self.numba_installed:
                self._numba_run = (Check.no("the package 'numba' is not installed "
                                            "(pip install numba)"), None, None)
            else:
                try:
                    import numpy as np
                    serial, parallel = _numba_inject_funcs()
                    codes = np.array([1, 9], dtype=np.int32)
                    mine = tuple(serial(codes).tolist())
                    # 64 copies so prange spreads them over the workers; all must agree.
                    workers = parallel(np.tile(codes, 64)).reshape(64, 2)
                    import numba
                    self._numba_run = (Check.yes(
                        f"compiled and ran nopython functions (serial and parallel, "
                        f"{numba.get_num_threads()} threads)"), mine,
                        tuple(workers.min(axis=0).tolist()) if (workers == workers[0]).all()
                        else ("mixed",))
                except Exception as exc:
                    self._numba_run = (Check.no(f"compiling or running failed: {describe(exc)}"),
                                       None, None)
        return self._numba_run

    def numba(self) -> Check:
        return self._numba()[0]

    def ftz_numba(self) -> Check:
        check, mine, workers = self._numba()
        if mine is None:
            return Check.unknown(f"no Numba function ran: {check.detail}")
        here = judge_inject(mine, "Numba on the calling thread")
        if workers == ("mixed",):
            return Check.yes(f"{here.detail}; Numba's parallel workers disagree among "
                             "themselves (some flush)", mine)
        there = judge_inject(workers, "Numba's parallel workers")
        if here.status is there.status:
            return Check(here.status, f"{here.detail}; {there.detail}", mine)
        # One of them flushes: injection is unsafe somewhere, so the verdict is "flushes".
        flushing = here if here.is_yes else there
        return Check.yes(f"{here.detail}; {there.detail}", flushing.value)

    # bandwidth ------------------------------------------------------------------------------
    def bandwidth(self, dev: DeviceReport) -> Check:
        if dev.runtime is Runtime.MPS:
            return Check.unknown("not measured on mps")
        gpu = dev.runtime is not Runtime.CPU
        nbytes = 1 << 30 if gpu else 1 << 28
        if gpu and dev.memory_bytes:
            nbytes = min(nbytes * 2, dev.memory_bytes // 8)
        src = torch.ones(nbytes // 4, dtype=torch.float32, device=dev.device)
        dst = torch.empty_like(src)
        copy = _median_seconds(lambda: dst.copy_(src), gpu)
        read = _median_seconds(lambda: torch.sum(src), gpu)
        copy_gbs, read_gbs = 2 * nbytes / copy / 1e9, nbytes / read / 1e9
        del src, dst
        return Check.yes(f"read {read_gbs:.0f} GB/s (sum), copy {copy_gbs:.0f} GB/s "
                         f"(read+write) over {nbytes / 2**20:.0f} MiB, median of 10",
                         round(read_gbs, 1))


def _median_seconds(op, gpu: bool, repeats: int = 10) -> float:
    op()  # warm up (allocation, kernel load)
    times = []
    for _ in range(repeats):
        if gpu:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            op()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / 1e3)
        else:
            t = time.perf_counter()
            op()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def triton_summary(devices: list[DeviceReport], version: str | None, interpret: bool) -> Check:
    """Can Triton compile and launch here at all, and if not, why (one line)."""
    if version is None:
        return Check.no("the package 'triton' is not installed (pip install triton)")
    ran = [d for d in devices if d.triton is not None and d.triton.is_yes]
    gpus = [d for d in ran if d.runtime is not Runtime.CPU]
    if gpus:
        return Check.yes("compiles and launches on " + ", ".join(d.device for d in gpus))
    if ran and interpret:
        return Check.yes("no GPU; kernels run on the CPU in the interpreter (TRITON_INTERPRET=1)")
    others = [d for d in devices if d.runtime is not Runtime.CPU and d.triton is not None]
    if not others:
        return Check.no("no GPU: torch sees no CUDA or ROCm device, and Triton compiles for "
                        "those only")
    return Check.no("; ".join(f"{d.device}: {d.triton.detail}" for d in others))
