"""CPU baselines beside torch's dense dtypes: torch's int8 weight-only kernel and onnxruntime's
MatMulNBits (8- and 4-bit), timed on the same weights as softfp8.

How their formats differ from softfp8's: `torch.ops.aten._weight_int8pack_mm` reads int8 codes
with one scale per output row (symmetric, round to nearest), x and y in x's dtype.
MatMulNBits (onnxruntime's com.microsoft contrib op) reads unsigned 8- or 4-bit integers with a
float32 scale per block of `BLOCK` along K and an implicit zero point (128 / 8), x and y float32;
`accuracy_level` 4 lets it quantize x to int8 per block and run integer dot products (its
fastest CPU path, less exact than float x). Both are integer grids, not the FP8 / FP4 minifloats
softfp8 decodes; their errors against the float32 weight are printed beside their times.
"""
from __future__ import annotations

import torch

from .model import bytes_moved
from .presets import Shape
from .timing import measure
from .workload import _rate_fields, copies_for, log_row, random_x

BLOCK = 32
"""MatMulNBits' block along K (MXFP4's, and onnxruntime's usual 32)."""
ORT_ACCURACY = 4
"""MatMulNBits' accuracy_level: 4 = int8 activations per block (its fastest on x86)."""


def int8pack_weight(w: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 codes [N, K], scales [N] in `dtype`): symmetric per output row."""
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q.contiguous(), scale.to(dtype)


def time_int8pack(shape: Shape, m: int, dtype: torch.dtype, s, read_bw,
                  w: torch.Tensor) -> dict | None:
    """The int8pack row, or None where K is not a multiple of 16 (the kernel crashed there)."""
    name = str(dtype).removeprefix("torch.")
    row = {"shape": shape.label, "n": shape.n, "k": shape.k, "m": m, "kind": "torch",
           "impl": f"torch int8pack {name}", "dtype": name, "op": "_weight_int8pack_mm"}
    if shape.k % 16:  # torch's kernel crashed the process (segfault) at K = 72, M = 4 (2.13)
        return None
    try:
        q, scale = int8pack_weight(w.float(), dtype)
        x = random_x(m, shape.k, dtype, s)
        row["weight_rel_err"] = _rel(q.float() * scale.float()[:, None], w)
        qs = [q] + [q.clone() for _ in range(copies_for(q.nbytes, s) - 1)]
        t = measure([lambda q=q: torch.ops.aten._weight_int8pack_mm(x, q, scale) for q in qs],
                    s.device, warmup=s.warmup, reps=s.reps, graph=False)
        nbytes = bytes_moved(q.nbytes + scale.nbytes, m, shape.n, shape.k, x.element_size())
        row.update(copies=len(qs), **t.as_dict(), **_rate_fields(nbytes, t.seconds, read_bw))
    except Exception as exc:  # noqa: BLE001 - one failed variant must not end the run
        row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return log_row(s, row)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def _nbits_weight(w: torch.Tensor, bits: int):
    """(packed uint8 [N, K / BLOCK, BLOCK * bits / 8], scales float32 [N * K / BLOCK], the
    decoded weight) for MatMulNBits: q = round(w / scale) + zero point, low nibble first."""
    n, k = w.shape
    kb = -(-k // BLOCK)
    wp = torch.zeros(n, kb * BLOCK)
    wp[:, :k] = w
    blocks = wp.view(n, kb, BLOCK)
    top = (1 << (bits - 1)) - 1
    zero = 1 << (bits - 1)
    scale = (blocks.abs().amax(dim=2).clamp(min=1e-12) / top)
    q = (torch.round(blocks / scale[..., None]).clamp(-top - 1, top) + zero).to(torch.uint8)
    decoded = ((q.float() - zero) * scale[..., None]).view(n, kb * BLOCK)[:, :k]
    if bits == 4:
        q = q[..., 0::2] | (q[..., 1::2] << 4)
    return q.contiguous().numpy(), scale.reshape(-1).contiguous().numpy(), decoded


def ort_session(w: torch.Tensor, bits: int, threads: int):
    """An onnxruntime session of one MatMulNBits node on `w` [N, K] and the decoded weight."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    n, k = w.shape
    packed, scales, decoded = _nbits_weight(w.float(), bits)
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft",
                            K=k, N=n, bits=bits, block_size=BLOCK, accuracy_level=ORT_ACCURACY)
    graph = helper.make_graph(
        [node], "nbits", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])],
        initializer=[numpy_helper.from_array(packed, "B"),
                     numpy_helper.from_array(scales, "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    # Its pool's threads spin after each run by default, taking the cores from whatever the
    # bench times next in the same process (docs/decisions.md, CPU: prompts and small batches).
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess, decoded, packed.nbytes + scales.nbytes


def time_ort(shape: Shape, m: int, bits: int, s, read_bw, w: torch.Tensor) -> dict:
    row = {"shape": shape.label, "n": shape.n, "k": shape.k, "m": m, "kind": "anchor",
           "impl": f"onnxruntime MatMulNBits {bits}-bit", "op": "MatMulNBits"}
    try:
        sess, decoded, wbytes = ort_session(w, bits, torch.get_num_threads())
        x = random_x(m, shape.k, torch.float32, s)
        xn = x.numpy()
        y = torch.from_numpy(sess.run(None, {"A": xn})[0])
        row["weight_rel_err"] = _rel(decoded, w)
        row["rel_err_vs_decoded"] = _rel(y, x @ decoded.T)
        sessions = [sess] + [ort_session(w, bits, torch.get_num_threads())[0]
                             for _ in range(copies_for(wbytes, s) - 1)]
        t = measure([lambda o=o: o.run(None, {"A": xn}) for o in sessions], s.device,
                    warmup=s.warmup, reps=s.reps, graph=False)
        nbytes = bytes_moved(wbytes, m, shape.n, shape.k, 4)
        row.update(copies=len(sessions), **t.as_dict(), **_rate_fields(nbytes, t.seconds, read_bw))
    except Exception as exc:  # noqa: BLE001 - one failed variant must not end the run
        row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return log_row(s, row)
