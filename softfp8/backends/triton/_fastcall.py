"""Eager layer calls that go straight to the compiled kernels' launchers.

`JITFunction.run` (what `kernel[grid](...)` calls) binds every argument, computes the
specialisation key, looks the kernel up and compares the globals it used, on every launch: about
half of the host time of an eager batch-1 call (docs/performance.md, host time). For one layer
and one input shape all of that is fixed, so the first eager call of a layer records what it
launched (`recording`): for each launch the compiled kernel and its full argument list, with the
places where x, y and the split-K workspace go. `Replay.launch` then calls the compiled kernel's
launcher directly with the new tensors in those places.

A recorded call is replayed only where every input to its recording still holds: the same
weight tensors (identity and version: an in-place write may change the weight's facts, such as
"no NaN code"), the same settings (the SOFTFP8_* variables dispatch and the launch plan read),
the same device current, x contiguous and 16-byte aligned (Triton specialises pointers on
that), no launch hook set (a profiler's), and for a split launch whose last program reduces,
the same stream and no capture. The layer (`softfp8.Linear`) checks its own tensors; everything
else is checked here (`LayerCall.launch`). Before a recording is kept, it is replayed once and
its output compared bit for bit with the recorded call's (a Triton whose launcher takes its
arguments otherwise fails that check and keeps the ordinary launch).
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
from dataclasses import dataclass
from typing import ClassVar

import torch

_RECORDING = threading.local()


def start(fn, grid, args: tuple, kwargs: dict):
    """`fn[grid](*args, **kwargs)`, kept for a replay while this thread records."""
    compiled = fn[grid](*args, **kwargs)
    launches = getattr(_RECORDING, "launches", None)
    if launches is not None:
        launches.append((fn, compiled, tuple(grid), args, kwargs))
    return compiled


def note_split(ws: torch.Tensor, last: bool) -> None:
    """The split-K workspace of the launch being recorded (a replay allocates a new one), and
    whether its last programs reduce on the current stream's counters."""
    if getattr(_RECORDING, "launches", None) is not None:
        _RECORDING.workspace, _RECORDING.last = ws, last


class _Recording:
    def __init__(self):
        self.launches: list = []
        self.workspace: torch.Tensor | None = None
        self.last = False

    def __enter__(self):
        self._prev = (getattr(_RECORDING, "launches", None),
                      getattr(_RECORDING, "workspace", None), getattr(_RECORDING, "last", False))
        _RECORDING.launches, _RECORDING.workspace, _RECORDING.last = self.launches, None, False
        return self

    def __exit__(self, *exc):
        self.workspace, self.last = _RECORDING.workspace, _RECORDING.last
        _RECORDING.launches, _RECORDING.workspace, _RECORDING.last = self._prev
        return False


def recording() -> _Recording:
    """A context in which `start` keeps each launch of this thread (and `note_split` the
    split-K workspace)."""
    return _Recording()


@functools.lru_cache(maxsize=None)
def _signature(fn) -> inspect.Signature:
    return inspect.signature(fn.fn)


def _full_args(fn, args: tuple, kwargs: dict) -> tuple:
    """Every parameter of the kernel in order, constexprs and defaults included: what Triton's
    own launch hands the compiled kernel's launcher (launch options such as num_warps are not
    parameters; they are in the compiled kernel)."""
    sig = _signature(fn)
    params = sig.parameters
    bound = sig.bind(*args, **{k: v for k, v in kwargs.items() if k in params})
    bound.apply_defaults()
    return tuple(bound.arguments.values())


@functools.lru_cache(maxsize=None)
def _runtime_knobs():
    try:
        from triton import knobs
    except ImportError:  # a Triton without knobs: no hooks to honour
        return None
    return knobs.runtime


def _hook_set(hook) -> bool:
    # Triton >= 3.5 keeps a HookChain there, set but empty unless something added a hook
    return hook is not None and len(getattr(hook, "calls", (hook,))) > 0


def _launch_hook_set() -> bool:
    """Whether a launch hook (a profiler's, e.g. proton) is set: Triton's own launch calls it,
    so a replay must not skip it."""
    runtime = _runtime_knobs()
    return runtime is not None and (_hook_set(runtime.launch_enter_hook)
                                    or _hook_set(runtime.launch_exit_hook))


@dataclass(frozen=True)
class Replay:
    """One recorded launch: the compiled kernel's launcher and its arguments, with the places
    of x, y and the workspace."""

    runner: object
    function: int
    metadata: object
    grid: tuple[int, int, int]
    template: tuple
    x_at: tuple[int, ...]
    y_at: tuple[int, ...]
    ws_at: tuple[int, ...]

    def launch(self, stream: int, x, y, ws) -> None:
        a = list(self.template)
        for i in self.x_at:
            a[i] = x
        for i in self.y_at:
            a[i] = y
        for i in self.ws_at:
            a[i] = ws
        g0, g1, g2 = self.grid
        self.runner(g0, g1, g2, stream, self.function, self.metadata, None, None, None, *a)


def _replays(launches: list, x: torch.Tensor, y: torch.Tensor,
             ws: torch.Tensor | None) -> tuple[Replay, ...] | None:
    """The recorded launches as Replays, or None where one can't be replayed (no compiled
    kernel handle, or an argument made for this call alone, such as an aligned copy of x)."""
    out = []
    seen_x = False
    for fn, compiled, grid, args, kwargs in launches:
        if compiled is None or not hasattr(compiled, "packed_metadata"):
            return None
        full = _full_args(fn, args, kwargs)
        x_at = tuple(i for i, a in enumerate(full) if a is x)
        y_at = tuple(i for i, a in enumerate(full) if a is y)
        ws_at = tuple(i for i, a in enumerate(full) if ws is not None and a is ws)
        seen_x = seen_x or bool(x_at)
        template = tuple(None if i in x_at or i in y_at or i in ws_at else a
                         for i, a in enumerate(full))
        grid3 = tuple(grid) + (1,) * (3 - len(grid))
        out.append(Replay(compiled.run, compiled.function, compiled.packed_metadata,
                          grid3, template, x_at, y_at, ws_at))
    return tuple(out) if out and seen_x else None


_WORKSPACES: dict = {}
"""(device index, stream, shape) -> a split launch's float32 workspace, kept for replays on that
stream. Launches on one stream run in order, so one workspace serves every layer there, as the
caching allocator would hand the same block to each call's own; never under capture (a graph
gets its own, from its pool)."""


def _workspace(device: torch.device, stream: int, shape: tuple[int, ...]) -> torch.Tensor:
    key = (device.index, stream, shape)
    ws = _WORKSPACES.get(key)
    if ws is None:
        from .._facts import made_apart  # kept: made outside any CUDA-graph pool

        ws = _WORKSPACES[key] = made_apart(
            device, lambda: torch.empty(shape, dtype=torch.float32, device=device))
    return ws


class Unreplayable:
    """A layer's eager call whose launches can't be replayed (a launcher bound otherwise, no
    compiled kernel to read, a replay that differed from the call): `launch` hands every call to
    the ordinary path, and the layer does not record it again (each recording checks its replay
    against y, a device sync)."""

    __slots__ = ()
    records_again = False

    def launch(self, x: torch.Tensor) -> None:
        return None


UNREPLAYABLE = Unreplayable()


@dataclass(frozen=True)
class LayerCall:
    """A layer's recorded eager call for one input shape, dtype and device (see the module
    docstring for when it replays). `launch` returns y, or None where the ordinary path must
    run; the layer then records the call again (`records_again`)."""

    records_again: ClassVar[bool] = True
    replays: tuple[Replay, ...]
    device: torch.device
    y_shape: tuple[int, ...]
    dtype: torch.dtype
    readers: tuple  # zero-argument functions: the settings a replay must find unchanged
    settings: tuple  # their values at the recording
    ws_shape: tuple[int, ...] | None
    stream: int | None  # a split launch reduced by its last program: the stream it counts on

    def launch(self, x: torch.Tensor) -> torch.Tensor | None:
        if not x.is_contiguous() or x.data_ptr() % 16:
            return None
        for read, value in zip(self.readers, self.settings):
            if read() != value:
                return None
        index = self.device.index
        if torch._C._cuda_getDevice() != index or _launch_hook_set():
            return None
        stream = torch._C._cuda_getCurrentRawStream(index)
        ws = None
        if self.ws_shape is not None:
            if torch.cuda.is_current_stream_capturing():
                if self.stream is not None:
                    return None
                ws = torch.empty(self.ws_shape, dtype=torch.float32, device=self.device)
            elif self.stream is not None and stream != self.stream:
                return None
            else:
                ws = _workspace(self.device, stream, self.ws_shape)
        y = torch.empty(self.y_shape, dtype=self.dtype, device=self.device)
        for replay in self.replays:
            replay.launch(stream, x, y, ws)
        return y


def record_call(matmul, x2: torch.Tensor, packed, bias, e2m1, readers: tuple,
                y_shape: tuple[int, ...] | None = None
                ) -> tuple[torch.Tensor, LayerCall | Unreplayable | None]:
    """Run `matmul(x2, packed, bias, e2m1=e2m1)` once, recording its launches, and return (y,
    the LayerCall that replays it; UNREPLAYABLE where its launches can't be replayed; None where
    nothing could be recorded now: not CUDA, a capture, a launch hook, a misaligned x). The
    replay is checked against y bit for bit before it is returned. `y_shape`: the shape a
    replay's y takes (the caller's x may have more dimensions than x2; default y's)."""
    if not x2.is_cuda or torch.cuda.is_current_stream_capturing():
        return matmul(x2, packed, bias, e2m1=e2m1), None
    settings = tuple(read() for read in readers)
    with recording() as rec:
        y = matmul(x2, packed, bias, e2m1=e2m1)
    if _launch_hook_set():
        return y, None
    try:
        replays = _replays(rec.launches, x2, y, rec.workspace)
    except Exception:  # a Triton whose kernels bind or expose their launcher otherwise
        return y, UNREPLAYABLE
    if replays is None:
        return y, UNREPLAYABLE
    stream = torch._C._cuda_getCurrentRawStream(x2.device.index)
    y_shape = tuple(y.shape) if y_shape is None else tuple(y_shape)
    call = LayerCall(replays, x2.device, tuple(y.shape), y.dtype, readers, settings,
                     None if rec.workspace is None else tuple(rec.workspace.shape),
                     stream if rec.last else None)
    try:
        again = call.launch(x2)
    except Exception:  # a launcher that takes its arguments otherwise: keep Triton's launch
        return y, UNREPLAYABLE
    if again is None:  # this x (misaligned): a later one may replay
        return y, None
    if not torch.equal(again, y):
        return y, UNREPLAYABLE
    return y, dataclasses.replace(call, y_shape=y_shape)
