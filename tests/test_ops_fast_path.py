"""ops.run_linear: plain eager calls skip the custom op's layers, everything else goes through it."""
import pytest
import torch
from torch import nn

import softfp8
from softfp8 import ops


@pytest.fixture
def op_calls(monkeypatch):
    """Counts the calls that reach the custom op (the fast path never does)."""
    calls = []
    real = ops.packed_linear

    def counting(*args):
        calls.append(args)
        return real(*args)
    monkeypatch.setattr(ops, "packed_linear", counting)
    return calls


def _case(fmt="e4m3"):
    g = torch.Generator().manual_seed(3)
    packed = softfp8.quantize(torch.randn(24, 40, generator=g), fmt)
    return packed, torch.randn(3, 40, generator=g), torch.randn(24, generator=g)


@pytest.mark.parametrize("fmt", ["e5m2", "nvfp4"])
def test_plain_eager_call_skips_the_op_with_the_same_bits(op_calls, fmt):
    packed, x, bias = _case(fmt)
    with torch.no_grad():
        fast = softfp8.linear(x, packed, bias, backend="torch")
    assert op_calls == []
    n, k = packed.shape
    via_op = ops.packed_linear(x, packed.words, packed.scales, packed.global_scale,
                               packed.fmt.value, n, k, bias, "torch", "auto")
    assert torch.equal(fast, via_op)


def test_module_with_a_parameter_bias_takes_the_fast_path_under_no_grad(op_calls):
    layer = softfp8.Linear.from_linear(nn.Linear(40, 24), fmt="e5m2")
    assert isinstance(layer.bias, nn.Parameter)
    with torch.inference_mode():
        layer(torch.randn(2, 40))
    assert op_calls == []


def test_autograd_goes_through_the_op(op_calls):
    packed, x, bias = _case()
    x.requires_grad_(True)
    y = softfp8.linear(x, packed, bias, backend="torch")
    assert len(op_calls) == 1
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


def test_fake_and_meta_tensors_go_through_the_op(op_calls):
    from torch._subclasses.fake_tensor import FakeTensorMode

    packed, x, _ = _case("nvfp4")
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        y = softfp8.linear(mode.from_tensor(x), packed)
    assert len(op_calls) == 1 and y.shape == (3, 24)


def test_a_torch_function_mode_goes_through_the_op(op_calls):
    packed, x, _ = _case()
    with torch.no_grad(), torch.device("cpu"):  # a TorchFunctionMode while active
        softfp8.linear(x, packed, backend="torch")
    assert len(op_calls) == 1


def test_jit_trace_records_the_op(op_calls):
    packed, x, _ = _case("e5m2")

    class Wrapper(nn.Module):
        def forward(self, x):
            return softfp8.linear(x, packed, backend="torch")
    with torch.no_grad():
        traced = torch.jit.trace(Wrapper(), x)
    assert "softfp8::linear" in str(traced.graph)
    assert torch.equal(traced(x), Wrapper()(x))


def test_a_module_called_with_a_non_tensor_names_x():
    layer = softfp8.Linear.from_linear(nn.Linear(8, 4), fmt="e5m2")
    with pytest.raises(TypeError, match="x: expected a torch.Tensor"):
        layer([1.0] * 8)
