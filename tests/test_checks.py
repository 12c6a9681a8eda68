"""softfp8/_checks.py: the argument checks run once per call. A backend's `matmul` called
directly checks its own arguments and names what is wrong; the paths through `ops` check once
and call the backend with checked=True."""
import importlib
import importlib.util
import sys

import pytest
import torch

import softfp8
from softfp8 import _checks, ops
from softfp8.dispatch import Backend, E2M1Decode
from softfp8.formats import Format

BACKEND_MODULES = ["softfp8.backends.reference", "softfp8.backends.native",
                   "softfp8.backends.numba", "softfp8.backends.triton",
                   "softfp8.backends.cuda"]


def _module(name):
    try:
        return importlib.import_module(name)
    except ImportError as e:  # an optional package missing: that backend isn't in this build
        pytest.skip(f"{name}: {e}")


def _weight():
    return softfp8.quantize(torch.randn(24, 32), Format.E4M3)


BAD = [
    (lambda p: ("x", p, None), TypeError, "x: expected a torch.Tensor, got str"),
    (lambda p: (torch.randn(2, 31), p, None), ValueError,
     r"x: expected a last dimension of 32 \(the weight's in_features\), got shape \(2, 31\)"),
    (lambda p: (torch.randn(2, 32, dtype=torch.float64), p, None), TypeError,
     "x: expected float32, float16 or bfloat16 activations, got torch.float64"),
    (lambda p: (torch.randn(2, 32), "p", None), TypeError, "packed: expected a PackedWeight"),
    (lambda p: (torch.randn(2, 32), p, torch.randn(5)), ValueError,
     r"bias: expected shape \(24,\), got \(5,\)"),
]


@pytest.mark.parametrize("name", BACKEND_MODULES)
@pytest.mark.parametrize("make, error, message", BAD, ids=["x-str", "x-k", "x-f64", "packed",
                                                           "bias"])
def test_a_direct_backend_call_checks_its_arguments(name, make, error, message):
    module = _module(name)
    args = make(_weight())
    with pytest.raises(error, match=message):
        module.matmul(*args)


@pytest.mark.parametrize("name", BACKEND_MODULES)
def test_a_direct_backend_call_takes_x_as_a_matrix(name):
    module = _module(name)
    with pytest.raises(ValueError, match=r"x: expected a 2-D \[M, K\] tensor, got shape "
                                         r"\(1, 2, 32\)"):
        module.matmul(torch.randn(1, 2, 32), _weight())


@pytest.fixture
def counted(monkeypatch):
    """Every softfp8 module's check_linear_args replaced by one that counts its calls (the
    backends' check_matrix_args call it too)."""
    calls = []
    real = _checks.check_linear_args

    def counting(*args):
        calls.append(args)
        return real(*args)
    for name, module in list(sys.modules.items()):
        if name.startswith("softfp8") and getattr(module, "check_linear_args", None) is real:
            monkeypatch.setattr(module, "check_linear_args", counting)
    return calls


def _cpu_backends():
    """The backends that run CPU tensors here (Triton: in its interpreter)."""
    out = [Backend.TORCH]
    if importlib.util.find_spec("numba") is not None:
        out.append(Backend.NUMBA)
    try:
        triton = importlib.import_module("softfp8.backends.triton")
    except ImportError:
        return out
    return out + [Backend.TRITON] if triton.INTERPRET else out


@pytest.mark.parametrize("backend", _cpu_backends(), ids=str)
def test_each_ops_path_checks_once(counted, backend):
    packed = _weight()
    x, bias = torch.randn(3, 32), torch.randn(24)
    want = softfp8.backends.reference.matmul(x, packed, bias) if backend is Backend.TORCH else None
    counted.clear()
    y = softfp8.linear(x, packed, bias, backend=backend)  # linear() checks, passes checked=True
    assert len(counted) == 1 and y.shape == (3, 24)
    if want is not None:
        assert torch.equal(y, want)
    counted.clear()
    ops.run_linear(x, packed.words, packed.scales, packed.global_scale, "e4m3", 24, 32, bias,
                   backend.value, "auto")  # the op's implementation, unchecked: checks once
    assert len(counted) == 1
    counted.clear()
    softfp8.Linear.from_packed(packed, bias, backend=backend)(x)  # a layer's call
    assert len(counted) == 1
    counted.clear()
    recorded = ops.record_eager(x, packed, bias, backend.value, "auto")
    assert len(counted) == 1
    if recorded is not None:
        assert recorded[0].shape == (3, 24)


def test_the_op_path_still_refuses_bad_input(counted):
    with pytest.raises(ValueError, match="x: expected a last dimension of 32"):
        softfp8.linear(torch.randn(2, 31), _weight(), backend="torch")
    with pytest.raises(ValueError, match="x: expected a last dimension of 32"):
        ops.packed_linear(torch.randn(2, 31), _weight().words, _weight().scales, None, "e4m3",
                          24, 32, None, "torch", "auto")
    assert len(counted) == 2


def test_triton_takes_a_resolved_decode_without_parsing_it():
    triton = _module("softfp8.backends.triton")
    x, packed = torch.randn(1, 32), _weight()
    assert triton._check(x, packed, None, E2M1Decode.INJECT, checked=True) is E2M1Decode.INJECT
    assert triton._check(x, packed, None, "auto", checked=True) is E2M1Decode.SELECT
    with pytest.raises(ValueError, match="e2m1"):
        triton._check(x, packed, None, "fast", checked=True)
