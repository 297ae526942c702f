"""Several clients' LoRA adapters in one forward pass over a shared base: each token through its
own client's adapter.

LoRA clients of one base model differ only in their adapters: `y = W x + s * B (A x)`. A pass over
the rows of several clients therefore runs every base matmul once, on all their tokens, and adds
each client's `s * B (A x)` to its own tokens only: the Tinker service's multi-tenant batching
(and S-LoRA's and Punica's). Here that pass runs on a *host*: a module tree of the base model
whose parameters are the base's own tensors (shared, frozen) and whose LoRA-targeted linear layers
are `GroupedLora` wrappers. For a pass, `bind` gives every wrapper the clients' adapter layers and
the client of each flattened position the layers see (whatever the layout: right-padded rows,
packed rows, or the unpadded tokens of `adapters.local.unpadded_rows`). Each wrapper computes
`base(x)` once and the clients' deltas as one grouped matmul per adapter rank: the tokens gathered
into a [clients, tokens, in] stack (a view, when each client's tokens are contiguous and as many as
every other's), two batched matmuls against the clients' stacked A and B, scaled per client and
added at the tokens' places. That is a handful of operations per layer however many clients share
the pass; a loop over clients would be four per client and layer, and their backward as many again.

Each client's delta is the one peft's LoRA `Linear` computes for it alone (`lora_B(lora_A(x)) *
scaling`, in eval mode: no dropout), and on the CPU every kernel gives a client's tokens what its
own pass gives them: the base matmuls are row-wise (a row's result is the same for any number of
rows past a few), the batched matmuls run the same small matmul per client, and `_LoraProduct`'s
backward multiplies the weights' gradients as `F.linear`'s does. So where the layout is the same as
alone (equal-length rows, as in the serve benchmark) a client's logprobs and gradients are its own
pass's bit for bit (tested), else within float rounding (~1e-7: its rows padded to another width).
That matters: Adam on a noisy loss amplifies a 1e-7 difference about tenfold every step or two, so
autograd's own `bmm` backward (which rounds the weights' gradients differently) had a client's
training leave its solo run within 20 steps. Ranks are never padded to one (zeros change the
rounding): each rank is its own stack. Only plain LoRA on linear layers groups (`groupable`); DoRA
and other variants, LoRA biases, and LoRA on embeddings run alone. On a GPU a segmented kernel
(Punica's SGMV) would skip the stack's padding when the clients' token counts differ much.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

LORA_PREFIX = "base_model.model."
"""Where a peft model's wrapped base model sits among its module names."""


@dataclass(frozen=True)
class AdapterLayer:
    """One client's adapter on one linear layer: its A [r, in] and B [out, r] weights and scale."""

    weight_A: torch.Tensor
    weight_B: torch.Tensor
    scaling: float


def adapter_layers(model: torch.nn.Module) -> dict[str, AdapterLayer] | None:
    """A peft LoRA model's adapters by the name of the base layer they wrap (names within the base
    model); None when any of them is not plain LoRA on a linear layer (it cannot be grouped)."""
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.lora import LoraLayer

    layers: dict[str, AdapterLayer] = {}
    for name, module in model.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        if not isinstance(module, LoraLinear) or not name.startswith(LORA_PREFIX) or module.merged:
            return None
        active = list(module.active_adapters)
        if len(active) != 1 or active[0] in module.lora_variant or module.fan_in_fan_out:
            return None
        lora_A, lora_B = module.lora_A[active[0]], module.lora_B[active[0]]
        if lora_A.bias is not None or lora_B.bias is not None:
            return None
        scaling = float(module.scaling[active[0]])
        layers[name.removeprefix(LORA_PREFIX)] = AdapterLayer(lora_A.weight, lora_B.weight, scaling)
    return layers or None


def groupable(model: torch.nn.Module) -> bool:
    """Whether `model` is a peft LoRA model whose adapters a grouped pass can apply."""
    return adapter_layers(model) is not None


@dataclass(frozen=True)
class Routing:
    """Where the tokens of some of a pass's clients (`members`) are among its P flattened
    positions, as a [G, M] grid (G: the members, M: the most tokens any of them has; a member with
    fewer is padded with position 0, whose delta there is dropped)."""

    members: tuple[int, ...]
    tokens: int
    grid_GM: torch.Tensor | None
    """Each cell's position; None when the positions are the members' tokens in order, M each
    (the grid is then a view of the positions)."""
    cells_V: torch.Tensor | None
    """The cells that are tokens, and the positions they are at."""
    places_V: torch.Tensor | None

    @classmethod
    def of(cls, groups_P: torch.Tensor, members: tuple[int, ...]) -> Routing:
        local_C = groups_P.new_full((max(int(groups_P.max()), *members) + 1,), -1)
        local_C[list(members)] = torch.arange(len(members), device=groups_P.device)
        local_P = local_C[groups_P]  # each position's place among the members, -1 for others
        counts = torch.bincount(local_P[local_P >= 0], minlength=len(members))
        tokens = int(counts.max())
        ordered = bool((local_P[1:] >= local_P[:-1]).all())
        if ordered and bool((local_P >= 0).all()) and bool((counts == tokens).all()):
            return cls(members, tokens, None, None, None)
        mine_V = (local_P >= 0).nonzero().flatten()
        order = torch.argsort(local_P[mine_V], stable=True)
        places_V, local_V = mine_V[order], local_P[mine_V[order]]
        starts = torch.cumsum(counts, 0) - counts
        cells_V = local_V * tokens + torch.arange(len(places_V), device=groups_P.device) - starts[local_V]
        grid = groups_P.new_zeros(len(members) * tokens)
        grid[cells_V] = places_V
        return cls(members, tokens, grid.view(len(members), tokens), cells_V, places_V)

    def gather(self, x_PI: torch.Tensor) -> torch.Tensor:
        """The members' tokens of `x_PI` as [G, M, I], each member's in position order."""
        if self.grid_GM is None:
            return x_PI.view(len(self.members), self.tokens, x_PI.shape[-1])
        return x_PI.index_select(0, self.grid_GM.flatten()).view(len(self.members), self.tokens, x_PI.shape[-1])

    def add(self, out_PO: torch.Tensor, delta_GMO: torch.Tensor) -> torch.Tensor:
        """`out_PO` with each member's delta added at its tokens."""
        delta_CO = delta_GMO.reshape(-1, delta_GMO.shape[-1])
        if self.grid_GM is None:
            return out_PO + delta_CO
        assert self.cells_V is not None and self.places_V is not None
        return out_PO.index_add(0, self.places_V, delta_CO.index_select(0, self.cells_V))


class _LoraProduct(torch.autograd.Function):
    """`x A^T B^T` for a stack of clients ([G, M, I] by [G, R, I] and [G, O, R]), with the gradients
    that peft's two `F.linear` calls give each client alone, bit for bit: autograd's own `bmm`
    backward multiplies the weights' gradient the other way round (`x^T g`, transposed, where
    linear's is `g^T x`), which rounds differently."""

    @staticmethod
    def forward(x_GMI: torch.Tensor, a_GRI: torch.Tensor, b_GOR: torch.Tensor) -> torch.Tensor:
        return torch.bmm(torch.bmm(x_GMI, a_GRI.mT), b_GOR.mT)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        x_GMI, a_GRI, b_GOR = inputs
        ctx.save_for_backward(x_GMI, a_GRI, b_GOR)

    @staticmethod
    def backward(ctx: Any, grad_GMO: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x_GMI, a_GRI, b_GOR = ctx.saved_tensors
        h_GMR = torch.bmm(x_GMI, a_GRI.mT)  # recomputed: as small as the adapters' rank
        grad_h_GMR = torch.bmm(grad_GMO, b_GOR)
        return torch.bmm(grad_h_GMR, a_GRI), torch.bmm(grad_h_GMR.mT, x_GMI), torch.bmm(grad_GMO.mT, h_GMR)


class GroupedLora(torch.nn.Module):
    """A base linear layer plus, during a bound pass, each client's LoRA delta at its tokens."""

    def __init__(self, base_layer: torch.nn.Linear) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.bound: list[tuple[Routing, list[AdapterLayer]]] | None = None
        """The clients with an adapter here, by rank: each rank's routing and adapters."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base_layer(x)
        if self.bound is None:
            return out
        out_PO = out.reshape(-1, out.shape[-1])
        for routing, layers in self.bound:
            a_GRI = torch.stack([layer.weight_A for layer in layers])
            b_GOR = torch.stack([layer.weight_B for layer in layers])
            x_GMI = routing.gather(x.reshape(-1, x.shape[-1]).to(a_GRI.dtype))
            scale_G11 = torch.tensor([layer.scaling for layer in layers], device=x.device).view(-1, 1, 1)
            # scaled in float32 and rounded once, as peft's `lora_B(lora_A(x)) * scaling` is
            delta_GMO = (_LoraProduct.apply(x_GMI, a_GRI, b_GOR).float() * scale_G11).to(out.dtype)
            out_PO = routing.add(out_PO, delta_GMO)
        return out_PO.reshape(out.shape)


def shared_copy(base: torch.nn.Module) -> torch.nn.Module:
    """A module tree of `base` whose parameters (frozen) and buffers are `base`'s own tensors: what
    a LoRA client wraps its adapters around, so that its base weights are the group's, once in
    memory, and what a group's host is (its linear layers wrapped in `GroupedLora` as clients need
    them, by `bind`)."""
    base.requires_grad_(False)
    shared = {id(t): t for t in [*base.parameters(), *base.buffers()]}
    return copy.deepcopy(base, memo=shared)


@dataclass(frozen=True)
class AdapterGroups:
    """The clients of one grouped pass over `host`: each one's adapters and output head (the head
    scores its own tokens: with its LoRA, when the head has one), and which client each sequence
    of the pass is (`groups_D`, with each sequence's length `lengths_D`)."""

    host: torch.nn.Module
    adapters_G: list[dict[str, AdapterLayer]]
    heads_G: list[torch.nn.Module | None]
    groups_D: list[int]
    lengths_D: list[int]

    def tokens(self, device: torch.device) -> torch.Tensor:
        """Each scored token's client: the sequences' groups, repeated over their tokens [N]."""
        groups = torch.tensor(self.groups_D, dtype=torch.long)
        return groups.repeat_interleave(torch.tensor(self.lengths_D, dtype=torch.long)).to(device)


def _wrapper(host: torch.nn.Module, name: str) -> GroupedLora:
    """The host's `GroupedLora` at `name`, wrapping the linear layer there on first use."""
    module = host.get_submodule(name)
    if isinstance(module, GroupedLora):
        return module
    if not isinstance(module, torch.nn.Linear):
        raise TypeError(f"grouped LoRA: {name} is a {type(module).__name__}, not a linear layer")
    parent_name, _, child = name.rpartition(".")
    wrapper = GroupedLora(module)
    setattr(host.get_submodule(parent_name) if parent_name else host, child, wrapper)
    return wrapper


@contextmanager
def bind(
    host: torch.nn.Module, adapters_G: Sequence[dict[str, AdapterLayer]], groups_P: torch.Tensor
) -> Iterator[None]:
    """Within: the host's layers add client g's adapters (`adapters_G[g]`) at the positions where
    `groups_P` (one entry per flattened position of the layers' inputs) is g. The autograd graph
    built inside keeps what it needs, so the backward pass may run after."""
    names = sorted({name for adapters in adapters_G for name in adapters})
    wrappers = [_wrapper(host, name) for name in names]
    routings: dict[tuple[int, ...], Routing] = {}
    try:
        for name, wrapper in zip(names, wrappers, strict=True):
            by_rank: dict[int, list[int]] = {}  # ranks are not padded to one: zeros would round differently
            for g, adapters in enumerate(adapters_G):
                if name in adapters:
                    by_rank.setdefault(adapters[name].weight_A.shape[0], []).append(g)
            wrapper.bound = []
            for members in map(tuple, by_rank.values()):
                routing = routings.get(members) or routings.setdefault(members, Routing.of(groups_P, members))
                wrapper.bound.append((routing, [adapters_G[g][name] for g in members]))
        yield
    finally:
        for wrapper in wrappers:
            wrapper.bound = None
