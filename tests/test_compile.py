"""The softfp8::linear custom op under torch.library.opcheck and torch.compile(fullgraph=True)."""
import pytest
import torch
from torch import nn

import softfp8
from softfp8 import Backend, Format
from softfp8.dispatch import BackendUnavailable, select
from softfp8.ops import packed_linear

CPU_BACKENDS = []
for _b in (Backend.NUMBA, Backend.TORCH):
    try:
        select(Format.E5M2, 1, "cpu", backend=_b)
        CPU_BACKENDS.append(_b)
    except BackendUnavailable:
        pass


def op_args(packed, x, bias=None, backend="torch"):
    n, k = packed.shape
    return (x, packed.words, packed.scales, packed.global_scale, packed.fmt.value, n, k, bias,
            backend, "auto")


@pytest.mark.parametrize("fmt", list(Format))
def test_opcheck(fmt):
    # Schema, fake (meta) implementation, autograd registration and aot_dispatch, by torch itself.
    g = torch.Generator().manual_seed(1)
    packed = softfp8.quantize(torch.randn(24, 40, generator=g), fmt)
    x = torch.randn(2, 3, 40, generator=g, requires_grad=True)
    bias = torch.randn(24, generator=g)
    torch.library.opcheck(packed_linear, op_args(packed, x, bias))


def test_fake_impl_gives_shape_dtype_device_without_running():
    from torch._subclasses.fake_tensor import FakeTensorMode

    packed = softfp8.quantize(torch.randn(24, 40), "nvfp4")
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        x = mode.from_tensor(torch.randn(5, 7, 40, dtype=torch.bfloat16))
        y = packed_linear(*op_args(packed, x))
    assert y.shape == (5, 7, 24) and y.dtype == torch.bfloat16 and y.device.type == "cpu"


class Chain(nn.Module):
    """One softfp8.Linear per format, so a single compile covers all of them."""

    def __init__(self, backend):
        super().__init__()
        torch.manual_seed(0)
        dims = [48, 72, 40, 56, 32, 64]  # one more than there are formats
        self.layers = nn.ModuleList(
            softfp8.Linear.from_linear(nn.Linear(dims[i], dims[i + 1]), fmt, backend=backend)
            for i, fmt in enumerate(Format))

    def forward(self, x):
        # No elementwise op between the layers: each would be one more C++ kernel for Inductor
        # to compile (seconds apiece on a 2-core CI machine); one at the end shows fusion around.
        for layer in self.layers:
            x = layer(x)
        return torch.nn.functional.silu(x)


@pytest.mark.parametrize("backend", CPU_BACKENDS, ids=str)
def test_compile_fullgraph_matches_eager_for_any_m(backend):
    torch._dynamo.reset()
    model = Chain(backend)
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for m in (1, 5, 16):
        x = torch.randn(m, 48)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-6, atol=1e-6)


def test_compile_functional_linear_with_packed_weight_in_closure():
    torch._dynamo.reset()
    packed = softfp8.quantize(torch.randn(24, 40), "e4m3")
    bias = torch.randn(24)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def f(x):
        return softfp8.linear(x, packed, bias, backend="torch") * 2

    x = torch.randn(3, 40)
    torch.testing.assert_close(f(x), softfp8.linear(x, packed, bias) * 2)


def test_compiled_code_still_rejects_a_wrong_k():
    torch._dynamo.reset()
    layer = softfp8.Linear.from_linear(nn.Linear(40, 8), "e5m2", backend="torch")
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="last dimension of 40"):
        compiled(torch.randn(2, 41))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("fmt", list(Format))
def test_cuda_graph_capture_and_replay(fmt):
    layer = softfp8.Linear.from_linear(nn.Linear(4096, 1024).half(), fmt).cuda()
    static_x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up (compiles kernels) outside the capture
        layer(static_x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = layer(static_x)
    for _ in range(3):
        static_x.copy_(torch.randn_like(static_x))
        graph.replay()
        torch.testing.assert_close(static_y, layer(static_x), rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_compile_reduce_overhead_on_gpu():
    torch._dynamo.reset()
    model = Chain("auto").cuda().half()
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    x = torch.randn(1, 48, device="cuda", dtype=torch.float16)
    for _ in range(3):
        y = compiled(x)
    torch.testing.assert_close(y, model(x), rtol=2e-3, atol=2e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("fmt", [Format.NVFP4, Format.E5M2])
def test_reduce_overhead_makes_the_split_counters_outside_the_graph_pool(fmt, monkeypatch):
    """A compiled model's first split launch runs in the warm-up of torch's CUDA-graph trees,
    whose allocations go to the graph's private pool; split-K's counters made there would
    outlive it, and recording then refuses (`rerec14d`). Nothing eager runs first."""
    from softfp8.backends.triton import _splitk

    monkeypatch.setenv("SOFTFP8_BACKEND", "triton")
    monkeypatch.setattr(_splitk, "_POOLS", {})
    torch._dynamo.reset()
    layer = softfp8.Linear.from_linear(nn.Linear(11008, 4096).half(), fmt).cuda()
    compiled = torch.compile(layer, mode="reduce-overhead", fullgraph=True)
    x = torch.randn(1, 11008, device="cuda", dtype=torch.float16)
    for _ in range(4):  # warm-up, recording, replays
        y = compiled(x).clone()
    if not _splitk._POOLS:
        pytest.skip("no split launch at 4096 x 11008 on this GPU")
    torch.testing.assert_close(y, layer(x), rtol=0, atol=0)


def _guards(fn_code) -> str:
    """The guards dynamo keeps for a compiled frame, as text (a private torch API: skip if gone)."""
    eval_frame = torch._dynamo.eval_frame
    if not hasattr(eval_frame, "_debug_get_cache_entry_list"):
        pytest.skip("this torch has no _debug_get_cache_entry_list")
    entries = eval_frame._debug_get_cache_entry_list(fn_code)
    assert len(entries) == 1, "one compiled entry, no recompiles"
    return str(entries[0].guard_manager)


class Stack(nn.Module):
    """`layers` softfp8.Linear of one format: every layer holds the same format, backend and
    decoder settings, as a converted model's do."""

    def __init__(self, layers, fmt):
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList(softfp8.Linear.from_linear(nn.Linear(32, 32), fmt,
                                                               backend="torch")
                                    for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.mark.parametrize("fmt", [Format.E5M2, Format.NVFP4], ids=str)
def test_compiled_guards_grow_by_value_checks_per_layer_not_python_ones(fmt):
    """Dynamo guards a layer's settings by value (C++), not its enum members by identity plus a
    Python `is` guard against the first layer holding them (three a layer: 672 at 32 layers made
    a converted Llama's guard check 1.5-2.7x fp32's, docs/decisions.md); nor the
    PackedWeight eager calls build and keep."""
    counts = []
    for layers in (2, 6):
        torch._dynamo.reset()
        model = Stack(layers, fmt)
        compiled = torch.compile(model, fullgraph=True, backend="eager")
        x = torch.randn(1, 32)
        torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)
        guards = _guards(type(model).forward.__code__)
        assert "_packed_kept" not in guards and "'packed'" not in guards
        counts.append(guards.count("LAMBDA_GUARD"))
    assert counts[0] == counts[1], counts


def test_settings_are_enums_outside_and_strings_to_the_op():
    layer = softfp8.Linear.from_linear(nn.Linear(40, 8), "nvfp4", backend="torch")
    assert layer.fmt is Format.NVFP4 and layer.backend is Backend.TORCH
    assert layer.e2m1 is softfp8.E2M1Decode.AUTO
    layer.backend = "auto"
    layer.e2m1 = softfp8.E2M1Decode.SELECT
    assert layer._op_names == ("nvfp4", "auto", "select")
    with pytest.raises(ValueError, match="backend='gpu' is not valid"):
        layer.backend = "gpu"
    with pytest.raises(ValueError, match="e2m1"):
        layer.e2m1 = "lut"
    assert layer._op_names == ("nvfp4", "auto", "select")  # a refused value changes nothing
    x = torch.randn(3, 40)
    torch.testing.assert_close(layer(x), softfp8.linear(x, layer.packed, layer.bias,
                                                        e2m1="select"), rtol=0, atol=0)
