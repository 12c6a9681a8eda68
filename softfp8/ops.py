"""The `softfp8::linear` custom op: what `torch.compile` and CUDA graphs see of a packed linear.

`torch.compile` can't trace into a Triton launcher, a Numba kernel or the dispatcher's Python,
so the whole of "pick a backend, run it" is one opaque op registered with `torch.library`, with a
fake (meta) implementation that gives the output's shape, dtype and device. Dynamo then keeps
`fullgraph=True` graphs whole, and Inductor/cudagraphs treat the op like any aten op.

The op takes the PackedWeight's tensors one by one (words, optional scales, optional global
scale) plus its format and logical shape as plain ints/strings, because an op signature can't
carry a Python dataclass.

CUDA graphs. The real implementation runs once while a graph is captured and never again (replay
runs the recorded kernels), so:
- the backend and the E2M1 decoder, including the settings they defer to
  (`softfp8.launch_settings`), are fixed at capture time; changing them afterwards does not
  change a captured graph;
- nothing on this path may synchronise the device: the argument checks only read shapes, dtypes
  and devices (metadata), `dispatch.select` reads the compute capability (cached by torch, no
  sync) and the settings in force (`softfp8.launch_settings`), and the backends allocate their outputs with `torch.empty`, which a
  capture serves from the graph's private pool. A backend that calls `.item()`, `.cpu()` or
  `torch.cuda.synchronize()`, or allocates pinned host memory, would break capture: keep them
  out of `matmul`.
"""
from __future__ import annotations

import torch
from torch.utils import _python_dispatch

from . import dispatch
from ._checks import check_linear_args
from .formats import PackedWeight

OP_NAME = "softfp8::linear"


def _linear_impl(x: torch.Tensor, words: torch.Tensor, scales: torch.Tensor | None,
                 global_scale: torch.Tensor | None, fmt: str, out_features: int,
                 in_features: int, bias: torch.Tensor | None, backend: str,
                 e2m1: str, activation_quant: str | None = None) -> torch.Tensor:
    """y = x @ W.T + bias with W the packed weight given by its tensors; x is [..., K]."""
    packed = PackedWeight(fmt, (out_features, in_features), words, scales, global_scale)
    return _packed_linear(x, packed, bias, backend, e2m1, activation_quant, checked=False)


def _packed_linear(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None,
                   backend: str, e2m1: str, activation_quant: str | None, *,
                   checked: bool) -> torch.Tensor:
    """`_linear_impl` on a PackedWeight; `checked`: the caller has run check_linear_args on
    these very arguments. Every line here runs on each eager layer call, where Python that
    follows a GEMV kernel runs 2-5x slower than alone (its caches evicted; measured on a 2-core
    Zen 3 host, docs/decisions.md), so it is kept short."""
    if not checked:
        check_linear_args(x, packed, bias)
    n, k = packed.shape
    lead = x.shape[:-1]
    x2 = x if x.dim() == 2 and x.is_contiguous() else x.reshape(-1, k).contiguous()
    if x2.shape[0] == 0:
        return x.new_empty((*lead, n))
    choice = dispatch.select(packed.fmt, x2.shape[0], x.device, backend=backend, e2m1=e2m1,
                             activation_quant=activation_quant)
    y = dispatch.load(choice.backend).matmul(x2, packed, bias, e2m1=choice.e2m1, checked=True)
    return y if x2 is x else y.reshape(*lead, n)


def record_eager(x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None,
                 backend: str, e2m1: str):
    """A plain eager layer call (`_plain_eager` holds) on a backend that records its launches
    for replays (its module has `eager_call`: the Triton backend, `_fastcall`): (y, the
    recorded call; one whose `launch` always refuses and whose `records_again` is False where
    its launches can't be replayed; None where nothing could be recorded now). None where the chosen backend records
    nothing: the caller runs the ordinary path."""
    check_linear_args(x, packed, bias)
    n, k = packed.shape
    x2 = x if x.dim() == 2 and x.is_contiguous() else x.reshape(-1, k).contiguous()
    if x2.shape[0] == 0:
        return None
    choice = dispatch.select(packed.fmt, x2.shape[0], x.device, backend=backend, e2m1=e2m1)
    record = getattr(dispatch.load(choice.backend), "eager_call", None)
    if record is None:
        return None
    y, call = record(x2, packed, bias, e2m1=choice.e2m1, readers=dispatch.SETTINGS_READERS,
                     y_shape=(*x.shape[:-1], n), checked=True)
    return (y if x2 is x else y.reshape(*x.shape[:-1], n)), call


packed_linear = torch.library.custom_op(OP_NAME, mutates_args=())(_linear_impl)


def run_linear(x, words, scales, global_scale, fmt, out_features, in_features, bias, backend,
               e2m1, activation_quant=None, *, packed: PackedWeight | None = None,
               checked: bool = False) -> torch.Tensor:
    """`packed_linear` (the op) where something must see an op: dynamo tracing, autograd that
    needs the backward, tensor subclasses or meta tensors, dispatch, torch-function and functorch
    modes. A plain eager call with none of these runs the op's implementation directly: the
    op's dispatcher and autograd layers cost more host time than a whole batch-1 GEMV (measured
    on the H200's host by benchmarks/gpu_host_overhead.py, docs/performance.md), and eager decoding
    pays that on every layer. Same arguments, same result.
    `packed`: the PackedWeight these tensors make, validated now (the op's implementation builds
    one, 6 us a call); `checked`: check_linear_args has passed on x, bias and a weight of this
    shape. Both only shorten the eager path."""
    if _plain_eager(x, words, scales, global_scale, bias):
        if packed is None:
            packed = PackedWeight(fmt, (out_features, in_features), words, scales, global_scale)
        return _packed_linear(x, packed, bias, backend, e2m1, activation_quant, checked=checked)
    return packed_linear(x, words, scales, global_scale, fmt, out_features, in_features, bias,
                         backend, e2m1, activation_quant)


_PLAIN = (torch.Tensor, torch.nn.Parameter)  # a module's bias is a Parameter


def _plain_eager(x, words, scales, global_scale, bias) -> bool:
    if not isinstance(x, torch.Tensor):
        return True  # the implementation's argument check names x and what it expects
    if torch.compiler.is_compiling() or torch.jit.is_tracing() or x.device.type == "meta":
        return False
    tensors = (x, words, scales, global_scale, bias)
    if any(t is not None and type(t) not in _PLAIN for t in tensors):
        return False  # FakeTensor, FunctionalTensor, DTensor, ...: the op knows how
    if torch.is_grad_enabled() and (x.requires_grad or (bias is not None and bias.requires_grad)):
        return False
    return not (torch._C._are_functorch_transforms_active()
                or torch._C._is_torch_function_mode_enabled()
                or _python_dispatch._get_current_dispatch_mode() is not None)


_tracing = torch._C._is_tracing
_functorch_active = torch._C._are_functorch_transforms_active
_torch_function_mode = torch._C._is_torch_function_mode_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack


def _replayable(x: torch.Tensor, bias) -> bool:
    """`_plain_eager` for a recorded call (`softfp8.Linear`'s `_eager_calls`), whose layer tensors
    are the plain ones it was recorded with and whose x is a torch.Tensor on that call's CUDA
    device: only what may have changed since (a trace, grad, a mode) is checked, in C calls."""
    if torch.is_grad_enabled() and (x.requires_grad or (bias is not None and bias.requires_grad)):
        return False
    return not (_tracing() or _functorch_active() or _torch_function_mode() or _dispatch_modes())


@packed_linear.register_fake
def _(x, words, scales, global_scale, fmt, out_features, in_features, bias, backend, e2m1,
      activation_quant=None):
    # Checks a trace can make from metadata alone, so compiled code fails as eager code does.
    # (A meta x beside a real weight lands here too, never in the real implementation.)
    if x.device != words.device:
        raise ValueError(f"x is on {x.device} but the packed weight is on {words.device}; "
                         "expected one device")
    torch._check(x.shape[-1] == in_features,
                 lambda: f"x: expected a last dimension of {in_features} (the weight's "
                         f"in_features), got shape {tuple(x.shape)}")
    torch._check(words.dtype == torch.int32, lambda: f"words: expected int32, got {words.dtype}")
    return x.new_empty((*x.shape[:-1], out_features))


def _setup_context(ctx, inputs, output):
    x, words, scales, global_scale, fmt, n, k, bias, *_ = inputs
    ctx.save_for_backward(words, scales, global_scale)
    ctx.fmt, ctx.shape, ctx.x_dtype = fmt, (n, k), x.dtype
    ctx.has_bias = bias is not None
    ctx.bias_dtype = None if bias is None else bias.dtype


def _backward(ctx, grad):
    # Gradients flow to the activations and the bias (adapters, activation attribution), never to
    # the packed weight. dx = dy @ W: the weight is dequantized here, which is fine for a backward
    # pass but is why no forward path does it.
    from .quantize import dequantize

    words, scales, global_scale = ctx.saved_tensors
    w = dequantize(PackedWeight(ctx.fmt, ctx.shape, words, scales, global_scale))
    grad_x = (grad.to(torch.float32) @ w).to(ctx.x_dtype) if ctx.needs_input_grad[0] else None
    grad_bias = None
    if ctx.has_bias and ctx.needs_input_grad[7]:
        grad_bias = grad.reshape(-1, ctx.shape[0]).sum(0).to(ctx.bias_dtype)
    return grad_x, None, None, None, None, None, None, grad_bias, None, None, None


packed_linear.register_autograd(_backward, setup_context=_setup_context)
