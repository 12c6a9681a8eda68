"""Recorded eager calls (`backends/triton/_fastcall`, `softfp8.Linear`'s `_eager_calls`): a
replay launches exactly what the ordinary path launches, and only while everything the
recording depended on holds. CPU: the replay machinery on a stand-in kernel; GPU: the real
kernels, every format, against the ordinary path bit for bit, and each invalidation."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import softfp8
from softfp8 import dispatch
from softfp8.backends.triton import _fastcall
from softfp8.formats import Format

# -- CPU: the replay machinery ------------------------------------------------------------------

class _Compiled:
    """Stands in for Triton's CompiledKernel: its launcher computes y = x @ w.T (+ ws) from the
    full argument list, so a replay with arguments in the wrong places gives wrong numbers."""

    packed_metadata = object()
    function = 1234

    def __init__(self):
        self.launches = []

    def run(self, g0, g1, g2, stream, function, metadata, launch_md, enter, exit_, *args):
        x, w, y, ws, scale, flag = args
        assert function == self.function and metadata is self.packed_metadata
        assert flag == "constexpr-default"
        self.launches.append((g0, g1, g2, stream))
        if ws is not None:
            ws.fill_(1.0)
            y.copy_(x @ w.T * scale + ws.sum())
        else:
            y.copy_(x @ w.T * scale)


def _kernel(x_ptr, w_ptr, y_ptr, ws_ptr, scale, FLAG="constexpr-default"):
    pass


class _Jit:
    fn = staticmethod(_kernel)

    def __init__(self):
        self.compiled = _Compiled()

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            full = _fastcall._full_args(self, args, kwargs)
            self.compiled.run(*grid, *(1,) * (3 - len(grid)), 0, 1234,
                              self.compiled.packed_metadata, None, None, None, *full)
            return self.compiled
        return launch


def _matmul_with(jit, ws_shape=None):
    def matmul(x, packed, bias=None, *, e2m1=None):
        w = packed
        y = torch.empty(x.shape[0], w.shape[0])
        ws = None
        if ws_shape is not None:
            ws = torch.empty(ws_shape)
            _fastcall.note_split(ws, last=False)
        _fastcall.start(jit, (3, 2), (x, w, y, ws, 2.0), {"num_warps": 4})
        return y
    return matmul


@pytest.fixture
def cuda_stand_in(monkeypatch):
    """record_call and LayerCall.launch as on a GPU: a CPU tensor passes for a CUDA one."""
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: None, raising=False)  # cpu: no index
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 77, raising=False)
    monkeypatch.setattr(_fastcall, "_launch_hook_set", lambda: False)


def _x(m=2, k=16):
    x = torch.randn(m, k)
    return x if x.data_ptr() % 16 == 0 else pytest.skip("unaligned CPU allocation")


@pytest.mark.parametrize("ws_shape", [None, (2, 2, 5)], ids=["one-launch", "split"])
def test_a_replay_puts_x_y_and_the_workspace_where_the_recording_had_them(cuda_stand_in,
                                                                           ws_shape):
    jit, w = _Jit(), torch.randn(5, 16)
    setting = ["a"]
    x = _x()
    y, call = _fastcall.record_call(_matmul_with(jit, ws_shape), x, w, None, None,
                                    (lambda: setting[0],))
    assert call is not None
    assert call.replays[0].grid == (3, 2, 1)
    x2 = _x()
    y2 = call.launch(x2)
    expected = x2 @ w.T * 2.0 + (0 if ws_shape is None else torch.ones(ws_shape).sum())
    torch.testing.assert_close(y2, expected)
    assert y2 is not y and y2.data_ptr() != y.data_ptr()
    assert jit.compiled.launches[-1] == (3, 2, 1, 77)


def test_a_replay_refuses_a_changed_setting_or_an_unaligned_or_strided_x(cuda_stand_in):
    jit, w = _Jit(), torch.randn(5, 16)
    setting = ["a"]
    _, call = _fastcall.record_call(_matmul_with(jit), _x(), w, None, None,
                                    (lambda: setting[0],))
    assert call.launch(_x()) is not None
    setting[0] = "b"
    assert call.launch(_x()) is None
    setting[0] = "a"
    assert call.launch(torch.randn(16, 2).T) is None  # not contiguous
    base = torch.randn(2 * 16 + 1)
    unaligned = base[1:].view(2, 16)
    if unaligned.data_ptr() % 16:
        assert call.launch(unaligned) is None


@pytest.mark.parametrize("last", [False, True], ids=["reduce-kernel", "last-program"])
def test_a_replay_keeps_one_workspace_a_stream_and_none_under_capture(cuda_stand_in,
                                                                     monkeypatch, last):
    """Replays on one stream share one kept workspace (launches there run in order); another
    stream gets its own; under capture a graph gets a fresh one, and a split whose last program
    reduces on the recording stream's counters is not replayed at all."""
    monkeypatch.setattr(_fastcall, "_WORKSPACES", {})
    jit, w = _Jit(), torch.randn(5, 16)
    seen = []
    run = jit.compiled.run

    def run_seeing(*a):
        seen.append(a[-3])  # ws
        run(*a)
    monkeypatch.setattr(jit.compiled, "run", run_seeing)

    def matmul(x, packed, bias=None, *, e2m1=None):
        y, ws = torch.empty(x.shape[0], 5), torch.empty(2, 2, 5)
        _fastcall.note_split(ws, last=last)
        _fastcall.start(jit, (3, 2), (x, w, y, ws, 2.0), {})
        return y
    _, call = _fastcall.record_call(matmul, _x(), w, None, None, ())
    assert call is not None and (call.stream == 77) is last
    first = call.launch(_x())
    second = call.launch(_x())
    assert first is not None and second is not None
    assert seen[-1] is seen[-2] and seen[-1].shape == (2, 2, 5)
    kept = seen[-1]
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 78, raising=False)
    if last:
        assert call.launch(_x()) is None  # its counters are the recording stream's
    else:
        assert call.launch(_x()) is not None and seen[-1] is not kept
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 77, raising=False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    n = len(seen)
    y = call.launch(_x())
    if last:
        assert y is None and len(seen) == n
    else:
        assert y is not None
        assert all(seen[-1] is not ws for ws in _fastcall._WORKSPACES.values())


def test_a_replay_gives_y_the_shape_of_the_callers_x(cuda_stand_in):
    jit, w = _Jit(), torch.randn(5, 16)
    x = _x()
    _, call = _fastcall.record_call(_matmul_with(jit), x, w, None, None, (), y_shape=(1, 2, 5))
    y = call.launch(_x().view(1, 2, 16))
    assert y.shape == (1, 2, 5)


def test_no_recording_when_the_replay_would_differ(cuda_stand_in, monkeypatch):
    """The recording is replayed once and compared bit for bit: a launcher that treats its
    arguments differently (here: it ignores the scale on the second launch) keeps nothing."""
    jit, w = _Jit(), torch.randn(5, 16)
    run = jit.compiled.run
    count = [0]

    def second_differs(*a):
        count[0] += 1
        run(*a)
        if count[0] > 1:
            a[-4].mul_(3.0)  # y
    monkeypatch.setattr(jit.compiled, "run", second_differs)
    y, call = _fastcall.record_call(_matmul_with(jit), _x(), w, None, None, ())
    assert call is _fastcall.UNREPLAYABLE and y.shape == (2, 5)
    assert call.launch(_x()) is None and not call.records_again


def test_no_recording_of_an_argument_made_for_one_call(cuda_stand_in):
    """A launch that does not get the caller's x itself (e.g. an aligned copy) can't be
    replayed with a new x."""
    jit, w = _Jit(), torch.randn(5, 16)

    def matmul(x, packed, bias=None, *, e2m1=None):
        y = torch.empty(x.shape[0], packed.shape[0])
        _fastcall.start(jit, (1,), (x.clone(), packed, y, None, 1.0), {})
        return y
    _, call = _fastcall.record_call(matmul, _x(), w, None, None, ())
    assert call is _fastcall.UNREPLAYABLE


def test_nothing_recorded_now_under_a_capture_or_a_launch_hook(cuda_stand_in, monkeypatch):
    """A capture or a profiler's launch hook is a passing state: the call runs, nothing is
    recorded (None, not UNREPLAYABLE), so the layer records at a later call."""
    jit, w = _Jit(), torch.randn(5, 16)
    monkeypatch.setattr(_fastcall, "_launch_hook_set", lambda: True)
    y, call = _fastcall.record_call(_matmul_with(jit), _x(), w, None, None, ())
    assert call is None and y.shape == (2, 5)
    monkeypatch.setattr(_fastcall, "_launch_hook_set", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    _, call = _fastcall.record_call(_matmul_with(jit), _x(), w, None, None, ())
    assert call is None
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    _, call = _fastcall.record_call(_matmul_with(jit), _x(), w, None, None, ())
    assert call is not None and call.records_again


def test_a_launch_hook_is_seen_only_when_one_is_set():
    """Triton keeps an empty HookChain where no hook is set (>= 3.5), None before: neither is a
    hook; a profiler's hook added to it is, and then nothing replays around Triton's launch."""
    knobs = pytest.importorskip("triton.knobs")
    assert not _fastcall._launch_hook_set()
    hook = knobs.runtime.launch_enter_hook
    if not hasattr(hook, "add"):
        pytest.skip("this Triton has no HookChain")
    seen = []
    hook.add(seen.append)
    try:
        assert _fastcall._launch_hook_set()
    finally:
        hook.remove(seen.append)
    assert not _fastcall._launch_hook_set()


def test_full_args_put_constexpr_defaults_and_keep_launch_options_out():
    full = _fastcall._full_args(_Jit(), (1, 2, 3, 4), {"scale": 5, "num_warps": 8})
    assert full == (1, 2, 3, 4, 5, "constexpr-default")


# -- GPU: the real kernels -----------------------------------------------------------------------

def _layer(fmt, n=4096, k=4096, bias=True):
    torch.manual_seed(0)
    dense = nn.Linear(k, n, bias=bias, device="cuda", dtype=torch.float16)
    return softfp8.Linear.from_linear(dense, fmt, backend="triton")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("fmt", list(Format), ids=str)
@pytest.mark.parametrize("shape", [(4096, 4096), (4096, 11008), (11008, 4096)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("m", [1, 3])
def test_gpu_replay_matches_the_ordinary_call_bit_for_bit(fmt, shape, m):
    layer = _layer(fmt, *shape)
    x = torch.randn(1, m, shape[1], device="cuda", dtype=torch.float16)
    with torch.no_grad():
        first = layer(x)  # recorded
        assert layer.__dict__.get("_eager_calls"), "the first eager call records"
        again = layer(torch.randn_like(x).copy_(x))  # replayed
        ordinary = softfp8.linear(x, layer.packed, layer.bias, backend="triton")
    assert torch.equal(first, again) and torch.equal(again, ordinary)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("fmt", [Format.E4M3, Format.MXFP4], ids=str)
def test_gpu_recorded_calls_follow_the_layers_tensors(fmt):
    """load_state_dict (new values: facts such as "no NaN code" may change), .half() (the bias
    changes dtype in place), .to() and back: each call gives what the ordinary path gives."""
    layer = _layer(fmt)
    other = _layer(fmt)
    with torch.no_grad():
        other.words.copy_(torch.randint_like(other.words, -2**31, 2**31 - 1))
    x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)

    def check():
        with torch.no_grad():
            got = layer(x)
            torch.testing.assert_close(got, softfp8.linear(x, layer.packed, layer.bias,
                                                           backend="triton"),
                                       rtol=0, atol=0, equal_nan=True)

    check(), check()
    layer.load_state_dict(other.state_dict())
    check()
    layer.half()
    assert layer.bias.dtype == torch.float16
    check()
    layer.cpu().cuda()
    check()
    with torch.no_grad():
        layer.words[0, 0] = 0x7F7F7F7F  # an in-place write: E4M3 NaN codes
    check()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_a_call_that_cant_replay_is_recorded_once(monkeypatch):
    """A layer whose launches can't be replayed runs the ordinary path from its second call on,
    without recording again (a recording checks its replay: a device sync a call); a new
    weight records again."""
    from softfp8 import modules

    layer = _layer(Format.E5M2)
    x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
    recorded = []
    record = modules.record_eager

    def counting(*a, **k):
        recorded.append(1)
        return record(*a, **k)
    monkeypatch.setattr(modules, "record_eager", counting)
    monkeypatch.setattr(_fastcall, "_replays", lambda *a: None)
    expected = softfp8.linear(x, layer.packed, layer.bias, backend="triton")
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(layer(x), expected)
        assert len(recorded) == 1
        (kept,) = layer.__dict__["_eager_calls"].values()
        assert kept.call is _fastcall.UNREPLAYABLE
        layer.load_state_dict(layer.state_dict())  # new tensors' values: recorded again
        layer(x)
    assert len(recorded) == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_a_changed_setting_is_not_replayed(monkeypatch):
    layer = _layer(Format.E5M2)
    x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        layer(x)
        (kept,) = layer.__dict__["_eager_calls"].values()
        with softfp8.launch_settings(backend="torch"):
            assert kept.call.launch(x) is None
            torch.testing.assert_close(layer(x), softfp8.linear(x, layer.packed, layer.bias,
                                                                backend="torch"))
        assert kept.call.launch(x) is not None  # the settings it was recorded under again
        dispatch.clear_cache()
        assert kept.call.launch(x) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_a_call_recorded_under_other_launch_settings_is_not_replayed():
    layer = _layer(Format.E5M2)
    x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        layer(x)
        (kept,) = layer.__dict__["_eager_calls"].values()
        with softfp8.launch_settings(pdl="off", fp8_decode="integer"):
            assert kept.call.launch(x) is None
            torch.testing.assert_close(layer(x), softfp8.linear(x, layer.packed, layer.bias,
                                                                backend="torch"))
        assert kept.call.launch(x) is not None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("fmt", list(Format), ids=str)
def test_gpu_a_recorded_call_captures_into_a_cuda_graph(fmt):
    layer = _layer(fmt, 4096, 11008)
    x = torch.randn(1, 11008, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        layer(x), layer(x)  # recorded, replayed
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            layer(x)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = layer(x)
        for _ in range(2):
            x.copy_(torch.randn_like(x))
            graph.replay()
            torch.testing.assert_close(y, softfp8.linear(x, layer.packed, layer.bias,
                                                         backend="triton"), rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_compile_reduce_overhead_of_a_fresh_mxfp4_layer_records_once():
    """The MXFP4 rows' exponents are computed outside the graph pool (`_facts.made_apart`):
    a compiled layer whose first call is the cudagraph-trees warm-up records and replays."""
    torch._dynamo.reset()
    layer = _layer(Format.MXFP4)
    from softfp8.backends import _facts
    _facts._FACTS.clear()  # as if nothing was computed when the layer was built
    compiled = torch.compile(layer, mode="reduce-overhead", fullgraph=True)
    x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        for _ in range(4):
            y = compiled(x).clone()
        torch.testing.assert_close(y, layer(x), rtol=0, atol=0)



def test_a_changed_setting_refuses_the_replay(cuda_stand_in):
    """A call recorded with dispatch's readers (the settings' token, `_settings.generation`):
    a launch_settings block of other values refuses the replay, the same settings again (the
    block's end, or a block of equal values) replay it, and dispatch.clear_cache refuses it
    for good."""
    jit, w = _Jit(), torch.randn(5, 16)
    _, call = _fastcall.record_call(_matmul_with(jit), _x(), w, None, None,
                                    dispatch.SETTINGS_READERS)
    assert call is not None and call.launch(_x()) is not None
    for other in (dict(backend="torch"), dict(e2m1="select"), dict(activation_quant="forbid"),
                  dict(pdl="off")):
        with softfp8.launch_settings(**other):
            assert call.launch(_x()) is None, other
    assert call.launch(_x()) is not None
    with softfp8.launch_settings():  # equal values: the same settings object, the same token
        assert call.launch(_x()) is not None
    dispatch.clear_cache()
    assert call.launch(_x()) is None
