"""CUDA graphs on the GPU: a chain of softfp8 linears (each one's x written by the torch op
before it, as in a model) replayed as one graph must give the eager chain's bits, under every
PDL mode. A kernel that reads x, or writes, before its PDL wait races with the kernel before it;
eager launches hide that (the host is slower than the GPU), a graph's back-to-back launches
expose it."""
from __future__ import annotations

import pytest
import torch

import softfp8
from softfp8.formats import Format

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# transformers' Llama-2-7B linears that run different launch settings on the H200 (split-K at
# K = 11008, a wider block at the vocabulary head); a smaller head keeps the test quick
SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (8192, 4096)]


def _chain(weights, x0):
    h = x0
    for w in weights:  # the shapes chain: each one's N is the next one's K
        # the next x: a torch kernel reads this linear's output and writes the next one's input
        h = torch.nn.functional.silu(softfp8.linear(h, w))
    return h


@pytest.mark.parametrize("pdl", ["off", "late", "early"])
@pytest.mark.parametrize("fmt", list(Format))
def test_graph_replay_gives_the_eager_bits(fmt, pdl, monkeypatch):
    monkeypatch.setenv("SOFTFP8_BACKEND", "triton")
    monkeypatch.setenv("SOFTFP8_PDL", pdl)
    g = torch.Generator(device="cuda").manual_seed(7)
    shapes = SHAPES[:3] * 3 + SHAPES[3:]
    weights = [softfp8.quantize(torch.randn(n, k, device="cuda", generator=g) * k ** -0.5, fmt)
               for n, k in shapes]
    x0 = torch.randn(1, 4096, device="cuda", generator=g).half()
    eager = _chain(weights, x0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _chain(weights, x0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _chain(weights, x0)
    for replay in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.isfinite(eager).all()
        assert torch.equal(out, eager), (
            f"replay {replay}: {(out != eager).sum().item()} of {out.numel()} outputs differ, "
            f"largest by {(out.float() - eager.float()).abs().max().item():.3g}")
