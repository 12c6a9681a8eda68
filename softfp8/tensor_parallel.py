"""Tensor parallelism for packed weights: one shard of a weight per process (rank).

A column-parallel linear splits its output features N: each rank holds whole rows of words, their
row scales or block-scale rows, and computes its slice of y. A row-parallel linear splits its input
features K: each rank holds a run of whole words per row and the block scales of whole blocks,
computes a partial y from its slice of x, and the ranks sum them (all-reduce); the bias is added
once, after the sum. Row scales (E5M2, E4M3) and NVFP4's per-tensor scale apply to every K and go
to every rank whole.

Splits follow `torch.chunk` (and DTensor's `Shard`, which transformers' tensor-parallel styles
use): ceil(size / world) per rank, the last rank takes the rest. So a column-parallel layer's
output slice is exactly the input slice a row-parallel layer after it expects. Along K every
shard but the last must be a whole number of the format's aligned rows (`k_align` codes: whole
words and whole FP4 blocks), so no block straddles two ranks and the K padding stays in the last
shard; shapes that can't split that way are an error that names them.

`parallelize(model)` applies a transformers `tp_plan` ("colwise", "rowwise",
"colwise_gather_output") to a model whose linears are softfp8 (or plain `nn.Linear`) layers, with
one process per rank in a `torch.distributed` group. Why not transformers' own
`from_pretrained(tp_plan="auto")`: its styles shard a module's *parameters* as DTensors before
the weights load, while softfp8 keeps its packed words as buffers of a layer that exists only
after conversion, and its style registry is keyed by name, not by module type, so no custom
shard function can be given for softfp8 layers alone.
"""
from __future__ import annotations

import enum
import fnmatch
from dataclasses import dataclass

import torch
from torch import nn

from .formats import SPECS, PackedWeight, ScaleKind, padded_k
from .modules import Linear


class ShardDim(int, enum.Enum):
    """Which dimension of the logical weight [N, K] a shard splits."""

    OUT = 0
    """N, the output features: column-parallel (y's last dimension is split)."""
    IN = 1
    """K, the input features: row-parallel (x's last dimension is split; partial sums add up)."""


def shard_bounds(size: int, world: int, *, align: int = 1,
                 what: str = "size") -> tuple[tuple[int, int], ...]:
    """[start, stop) of each rank's slice of `size`, as `torch.chunk` splits it; every slice but
    the last must be a multiple of `align`. A split that leaves a rank empty, or a misaligned one,
    raises ValueError naming the sizes."""
    if world < 1:
        raise ValueError(f"world: expected a positive number of ranks, got {world}")
    chunk = -(-size // world)
    if chunk * (world - 1) >= size:
        raise ValueError(f"{what}={size} can't be split over {world} ranks: torch.chunk's "
                         f"slices of {chunk} leave the last rank(s) empty; expected {what} > "
                         f"{chunk * (world - 1)}")
    if world > 1 and chunk % align:
        raise ValueError(f"{what}={size} over {world} ranks gives slices of {chunk}, not a "
                         f"multiple of {align} (whole words and whole scale blocks of this "
                         f"format, padding only in the last slice); expected {what} with "
                         f"ceil({what} / {world}) divisible by {align}")
    return tuple((r * chunk, min(size, (r + 1) * chunk)) for r in range(world))


def _check_rank(rank: int, world: int) -> None:
    if not 0 <= rank < world:
        raise ValueError(f"rank: expected 0 <= rank < world={world}, got {rank}")


def shard(packed: PackedWeight, dim: ShardDim | int, rank: int, world: int) -> PackedWeight:
    """Rank `rank`'s shard (of `world`) of `packed`, split along `dim` (`ShardDim`); its tensors are
    copies, so the full weight can be freed."""
    if not isinstance(packed, PackedWeight):
        raise TypeError(f"packed: expected a PackedWeight, got {type(packed).__name__}")
    dim = ShardDim(dim)
    _check_rank(rank, world)
    n, k = packed.shape
    spec = SPECS[packed.fmt]
    scales, g = packed.scales, packed.global_scale
    if dim is ShardDim.OUT:
        a, b = shard_bounds(n, world, what="out_features")[rank]
        return PackedWeight(packed.fmt, (b - a, k), packed.words[a:b].clone(),
                            None if scales is None else scales[a:b].clone(),
                            None if g is None else g.clone())
    a, b = shard_bounds(k, world, align=spec.k_align, what="in_features")[rank]
    last = rank == world - 1
    stop = padded_k(k, packed.fmt) if last else b  # the last shard keeps the padding
    words = packed.words[:, a // spec.codes_per_word:stop // spec.codes_per_word].clone()
    if spec.scale is not ScaleKind.ROW:
        scales = scales[:, a // spec.block:stop // spec.block].clone()
    elif scales is not None:
        scales = scales.clone()  # a row scale applies to every K: each rank has all of it
    return PackedWeight(packed.fmt, (n, b - a), words, scales, None if g is None else g.clone())


def unshard(shards: list[PackedWeight] | tuple[PackedWeight, ...],
            dim: ShardDim | int) -> PackedWeight:
    """The weight that `shard` split into `shards` (rank order): its inverse."""
    dim = ShardDim(dim)
    if not shards:
        raise ValueError("shards: expected at least one PackedWeight, got none")
    first = shards[0]
    fmt, spec = first.fmt, first.spec
    if any(s.fmt is not fmt for s in shards):
        raise ValueError(f"shards: expected one format, got {sorted({str(s.fmt) for s in shards})}")
    g = first.global_scale
    if g is not None and any(not torch.equal(s.global_scale, g) for s in shards):
        raise ValueError("shards: their nvfp4 global scales differ; expected one per-tensor scale")
    if dim is ShardDim.OUT:
        k = first.shape[1]
        if any(s.shape[1] != k for s in shards):
            raise ValueError(f"shards: expected one in_features, got "
                             f"{[s.shape[1] for s in shards]}")
        scales = None if first.scales is None else torch.cat([s.scales for s in shards])
        return PackedWeight(fmt, (sum(s.shape[0] for s in shards), k),
                            torch.cat([s.words for s in shards]), scales, g)
    n = first.shape[0]
    if any(s.shape[0] != n for s in shards):
        raise ValueError(f"shards: expected one out_features, got {[s.shape[0] for s in shards]}")
    if any(s.padded_k != s.in_features for s in shards[:-1]):
        raise ValueError("shards: only the last may hold K padding; expected the others aligned "
                         f"to {spec.k_align} codes, got in_features "
                         f"{[s.in_features for s in shards]}")
    scales = first.scales
    if spec.scale is not ScaleKind.ROW:
        scales = torch.cat([s.scales for s in shards], dim=1)
    elif scales is not None and any(not torch.equal(s.scales, scales) for s in shards):
        raise ValueError("shards: their row scales differ; expected each rank to hold the same")
    return PackedWeight(fmt, (n, sum(s.in_features for s in shards)),
                        torch.cat([s.words for s in shards], dim=1), scales, g)


# -- layers ------------------------------------------------------------------------------------

class TPStyle(str, enum.Enum):
    """The transformers `tp_plan` styles that `parallelize` applies to linear layers."""

    COLWISE = "colwise"
    """x replicated, y sharded on its last dimension (the next layer's input)."""
    ROWWISE = "rowwise"
    """x sharded on its last dimension, y summed over the ranks (all-reduce), then the bias."""
    COLWISE_GATHER_OUTPUT = "colwise_gather_output"
    """x replicated, y gathered whole on every rank (an lm_head)."""


def _shard_layer(layer: nn.Module, dim: ShardDim, rank: int, world: int) -> nn.Module:
    """`layer` (softfp8.Linear or nn.Linear) holding its shard only; a row-parallel shard has no
    bias (the caller adds it once, after the sum)."""
    bias = layer.bias
    if dim is ShardDim.OUT and bias is not None:
        a, b = shard_bounds(layer.out_features, world, what="out_features")[rank]
        bias = bias.detach()[a:b].clone()
    else:
        bias = None
    if isinstance(layer, Linear):
        return Linear.from_packed(shard(layer.packed, dim, rank, world), bias,
                                  backend=layer.backend, e2m1=layer.e2m1)
    w = layer.weight.detach()
    size = w.shape[dim.value]
    a, b = shard_bounds(size, world, what=("out_features", "in_features")[dim.value])[rank]
    w = (w[a:b] if dim is ShardDim.OUT else w[:, a:b]).clone()
    out = nn.Linear(w.shape[1], w.shape[0], bias=bias is not None, device=w.device, dtype=w.dtype)
    out.weight = nn.Parameter(w, requires_grad=False)
    if bias is not None:
        out.bias = nn.Parameter(bias, requires_grad=False)
    return out


class ParallelLinear(nn.Module):
    """One rank's part of a tensor-parallel linear: `local` holds its shard; forward does the
    communication its `style` needs. `in_features`/`out_features` are the whole layer's."""

    def __init__(self, layer: nn.Module, style: TPStyle | str, *, rank: int, world: int,
                 group=None):
        super().__init__()
        self.style = TPStyle(style)
        self.rank, self.world, self.group = rank, world, group
        self.in_features, self.out_features = layer.in_features, layer.out_features
        dim = ShardDim.IN if self.style is TPStyle.ROWWISE else ShardDim.OUT
        self.local = _shard_layer(layer, dim, rank, world)
        bias = layer.bias if self.style is TPStyle.ROWWISE else None
        self.bias = (None if bias is None else
                     nn.Parameter(bias.detach().clone(), requires_grad=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        y = self.local(x)
        if self.style is TPStyle.ROWWISE:
            if self.world > 1:
                dist.all_reduce(y, group=self.group)
            return y if self.bias is None else y + self.bias.to(y.dtype)
        if self.style is TPStyle.COLWISE_GATHER_OUTPUT and self.world > 1:
            bounds = shard_bounds(self.out_features, self.world, what="out_features")
            chunk = bounds[0][1]
            if y.shape[-1] < chunk:  # all_gather needs equal sizes: pad the last, trim after
                y = torch.nn.functional.pad(y, (0, chunk - y.shape[-1]))
            parts = [torch.empty_like(y) for _ in range(self.world)]
            dist.all_gather(parts, y.contiguous(), group=self.group)
            y = torch.cat(parts, dim=-1)[..., :self.out_features]
        return y

    def extra_repr(self) -> str:
        return (f"style={self.style.value}, rank={self.rank}/{self.world}, "
                f"in_features={self.in_features}, out_features={self.out_features}")


@dataclass(frozen=True)
class ParallelSummary:
    """What `parallelize` did on this rank: (module name, style) sharded and left whole."""

    rank: int
    world: int
    sharded: tuple[tuple[str, str], ...]
    replicated: tuple[tuple[str, str], ...]

    def __str__(self) -> str:
        return (f"rank {self.rank}/{self.world}: {len(self.sharded)} linears sharded, "
                f"{len(self.replicated)} plan entries kept whole")


def parallelize(model: nn.Module, plan: dict[str, str] | None = None, *, rank: int | None = None,
                world: int | None = None, group=None) -> ParallelSummary:
    """Shard `model`'s linears in place by a transformers-style `plan` (default: `model.tp_plan`,
    names with `*` globs), keeping this rank's part of each.

    Run it on every rank of `group` (default: the default process group) on the same model: the
    same weights, already converted with `quantize_model` (plain `nn.Linear` layers shard too).
    Entries with other styles (an embedding's, say) keep their module whole on every rank: a
    replicated module is correct, only not smaller. A linear with a supported style whose shapes
    can't split over the ranks raises ValueError naming it."""
    import torch.distributed as dist

    if rank is None or world is None:
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("parallelize: no torch.distributed process group is initialised; "
                               "expected torchrun (init_process_group) or explicit rank and world")
        rank = dist.get_rank(group) if rank is None else rank
        world = dist.get_world_size(group) if world is None else world
    _check_rank(rank, world)
    if plan is None:
        plan = getattr(model, "tp_plan", None)
        if not plan:
            raise ValueError(f"plan: {type(model).__name__} has no tp_plan; expected a dict of "
                             "module name (globs allowed) -> style")
    styles = {s.value for s in TPStyle}
    sharded, replicated = [], []
    for name, module in list(model.named_modules()):
        style = next((s for p, s in plan.items() if fnmatch.fnmatchcase(name, p)), None)
        if style is None:
            continue
        if style not in styles or not isinstance(module, (Linear, nn.Linear)):
            replicated.append((name, style))
            continue
        try:
            new = ParallelLinear(module, style, rank=rank, world=world, group=group)
        except ValueError as err:
            raise ValueError(f"{name} ({style}): {err}") from None
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, new)
        sharded.append((name, style))
    return ParallelSummary(rank, world, tuple(sharded), tuple(replicated))


__all__ = ["ParallelLinear", "ParallelSummary", "ShardDim", "TPStyle", "parallelize", "shard",
           "shard_bounds", "unshard"]
