"""Tensor parallelism on CPU: the sharding arithmetic of every format (bit-exact round trips, a
column/row-parallel pair summed over simulated ranks), and a real gloo group of two processes
running a sharded pair and a sharded tiny Llama's generate()."""
import copy
import os
import socket

import pytest
import torch
from conftest import rel_err

import softfp8
from softfp8 import Format
from softfp8.formats import SPECS
from softfp8.quantize import dequantize
from softfp8.tensor_parallel import (ParallelLinear, ShardDim, TPStyle, parallelize, shard,
                                     shard_bounds, unshard)

GEN = torch.Generator().manual_seed(0)


def weight(n, k, fmt, **kw):
    w = torch.randn(n, k, generator=GEN) * torch.rand(n, 1, generator=GEN).add(0.1)
    return softfp8.quantize(w, fmt, **kw)


def same(a, b):
    return a is None and b is None or (a is not None and b is not None and a.dtype == b.dtype
                                       and torch.equal(a, b))


# (N, K, world): K padded in the last shard (127, 125), uneven N (7, 13), one rank
SHAPES = [(24, 256, 2), (7, 127, 2), (13, 125, 4), (5, 70, 1), (9, 3 * 64, 3)]
FORMATS = [(Format.E5M2, {}), (Format.E5M2, {"row_scale": True}), (Format.E4M3, {}),
           (Format.NVFP4, {}), (Format.MXFP4, {})]
FMT_IDS = ["e5m2", "e5m2-rowscale", "e4m3", "nvfp4", "mxfp4"]


@pytest.mark.parametrize("fmt,kw", FORMATS, ids=FMT_IDS)
@pytest.mark.parametrize("n,k,world", SHAPES)
@pytest.mark.parametrize("dim", list(ShardDim), ids=["colwise", "rowwise"])
def test_shards_round_trip_bit_exact(fmt, kw, n, k, world, dim):
    packed = weight(n, k, fmt, **kw)
    align = SPECS[fmt].k_align if dim is ShardDim.IN else 1
    shards = [shard(packed, dim, r, world) for r in range(world)]
    back = unshard(shards, dim)
    assert back.shape == packed.shape
    for name in ("words", "scales", "global_scale"):
        assert same(getattr(back, name), getattr(packed, name)), name
    # each shard decodes to exactly its slice of the whole weight
    full = dequantize(packed)
    for (a, b), s in zip(shard_bounds(packed.shape[dim], world, align=align), shards):
        want = full[a:b] if dim is ShardDim.OUT else full[:, a:b]
        assert torch.equal(dequantize(s), want)
        # K padding only ever in the last shard
        if dim is ShardDim.IN and s is not shards[-1]:
            assert s.padded_k == s.in_features


@pytest.mark.parametrize("fmt,kw", FORMATS, ids=FMT_IDS)
@pytest.mark.parametrize("world", [2, 4])
def test_column_then_row_parallel_pair_matches_unsharded(fmt, kw, world):
    # an MLP-shaped pair: up [H, D] column-parallel, down [D, H] row-parallel; the ranks' partial
    # outputs summed stand for the all-reduce
    d, h, m = 96, 256, 3
    up, down = weight(h, d, fmt, **kw), weight(d, h, fmt, **kw)
    bias = torch.randn(d, generator=GEN)
    x = torch.randn(m, d, generator=GEN)
    ref = softfp8.linear(softfp8.linear(x, up, backend="torch"), down, bias, backend="torch")
    total = torch.zeros(m, d)
    for r in range(world):
        mid = softfp8.linear(x, shard(up, ShardDim.OUT, r, world), backend="torch")
        total += softfp8.linear(mid, shard(down, ShardDim.IN, r, world), backend="torch")
    assert rel_err(total + bias, ref) < 1e-5


@pytest.mark.parametrize("fmt", [Format.E4M3, Format.NVFP4, Format.MXFP4])
def test_k_split_that_would_straddle_a_block_is_an_error(fmt):
    align = SPECS[fmt].k_align  # 16 codes for fp8, 32 for fp4 (whole words, whole blocks)
    packed = weight(8, 3 * align, fmt)
    chunk = 3 * align // 2
    with pytest.raises(ValueError, match=rf"in_features={3 * align} over 2 ranks gives slices "
                                         rf"of {chunk}, not a multiple of {align}"):
        shard(packed, ShardDim.IN, 0, 2)


def test_bad_splits_name_what_they_found():
    packed = weight(3, 64, Format.E5M2)
    with pytest.raises(ValueError, match="out_features=3 can't be split over 4 ranks"):
        shard(packed, ShardDim.OUT, 0, 4)
    with pytest.raises(ValueError, match="rank: expected 0 <= rank < world=2, got 2"):
        shard(packed, ShardDim.OUT, 2, 2)
    with pytest.raises(ValueError, match="2 is not a valid ShardDim"):
        shard(packed, 2, 0, 2)
    with pytest.raises(TypeError, match="expected a PackedWeight"):
        shard(torch.zeros(3, 64), ShardDim.OUT, 0, 2)
    nv = weight(4, 64, Format.NVFP4)
    s0, s1 = (shard(nv, ShardDim.IN, r, 2) for r in range(2))
    with pytest.raises(ValueError, match="global scales differ"):
        unshard([s0, shard(weight(4, 64, Format.NVFP4), ShardDim.IN, 1, 2)], ShardDim.IN)
    assert unshard([s0, s1], ShardDim.IN).shape == (4, 64)


def test_parallel_linear_single_rank_is_the_layer():
    layer = softfp8.Linear.from_linear(torch.nn.Linear(64, 32), Format.MXFP4, backend="torch")
    x = torch.randn(2, 64, generator=GEN)
    for style in TPStyle:
        tp = ParallelLinear(layer, style, rank=0, world=1)
        assert torch.equal(tp(x), layer(x)), style


def test_parallelize_follows_the_tp_plan_and_names_a_layer_that_cant_split():
    model = tiny_llama()
    softfp8.quantize_model(model, Format.NVFP4, backend="torch", skip="lm_head", progress=False)
    summary = parallelize(model, rank=1, world=2)  # the model's own tp_plan; no group needed
    assert len(summary.sharded) == 15 and ("model.embed_tokens", "embedding_rowwise") in \
        summary.replicated
    layer = model.model.layers[1]
    assert isinstance(layer.mlp.up_proj, ParallelLinear) and layer.mlp.up_proj.local.words.shape \
        == (64, 64 // 8)  # rows 64..127 of 128, all of K=64
    assert layer.self_attn.o_proj.local.in_features == 32  # heads 2 and 3 of 4, head_dim 16
    assert isinstance(model.lm_head.local, torch.nn.Linear)  # kept fp16: sliced as it is
    assert model.lm_head.local.weight.shape == (128, 64)

    odd = tiny_llama(intermediate_size=96)  # down_proj's K: 48 a rank, not whole FP4 rows
    softfp8.quantize_model(odd, Format.MXFP4, backend="torch", progress=False)
    with pytest.raises(ValueError, match=r"model.layers.0.mlp.down_proj \(rowwise\): "
                                         r"in_features=96 over 2 ranks gives slices of 48"):
        parallelize(odd, rank=0, world=2)
    with pytest.raises(RuntimeError, match="no torch.distributed process group"):
        parallelize(tiny_llama())


# -- a real process group: gloo, two processes ---------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_llama(intermediate_size=128):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=intermediate_size, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, max_position_embeddings=64,
        tie_word_embeddings=False)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


GREEDY = dict(do_sample=False, pad_token_id=0, max_new_tokens=5)


def _worker(rank, world, port, results):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        out = {}
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(3, 96, generator=gen)
        for (fmt, kw), fid in zip(FORMATS, FMT_IDS):
            torch.manual_seed(2)  # the same layers on every rank
            up = softfp8.Linear.from_linear(torch.nn.Linear(96, 256), fmt, backend="torch", **kw)
            down = softfp8.Linear.from_linear(torch.nn.Linear(256, 96), fmt, backend="torch", **kw)
            ref = down(up(x))
            y = ParallelLinear(down, "rowwise", rank=rank, world=world)(
                ParallelLinear(up, "colwise", rank=rank, world=world)(x))
            out[fid] = rel_err(y, ref)
        model = tiny_llama()
        softfp8.quantize_model(model, Format.NVFP4, backend="torch", progress=False)
        ids = torch.randint(0, 256, (1, 6), generator=gen)
        with torch.no_grad():
            ref_tokens = model.generate(ids, **GREEDY)
            ref_logits = model(ids).logits
            summary = parallelize(model)
            out["sharded"] = len(summary.sharded)
            out["local_words"] = tuple(model.model.layers[0].mlp.down_proj.local.words.shape)
            out["tokens"] = torch.equal(model.generate(ids, **GREEDY), ref_tokens)
            out["logits"] = rel_err(model(ids).logits, ref_logits)
        results.put((rank, out))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two fresh interpreters importing torch and transformers: 20-60 s wall here
def test_gloo_two_ranks_pair_and_llama_generate():
    pytest.importorskip("transformers")
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(2, _free_port(), results), nprocs=2, join=True,
                       start_method="spawn")
    got = dict(results.get() for _ in range(2))
    for rank, out in got.items():
        for fid in FMT_IDS:
            assert out[fid] < 1e-5, (rank, fid, out[fid])
        assert out["sharded"] == 2 * 7 + 1  # q k v o gate up down per layer, and the lm_head
        # down_proj [64, 128] in NVFP4: 128 / 2 = 64 codes of K per rank = 8 words a row
        assert out["local_words"] == (64, 8)
        assert out["tokens"], rank
        assert out["logits"] < 1e-5, (rank, out["logits"])

