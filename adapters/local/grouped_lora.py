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
`base(x)` once and the clients' deltas as one grouped matmul: the tokens gathered into a
[clients, tokens, in] stack (a view, when each client's tokens are contiguous and as many as every
other's), two batched matmuls against the clients' stacked A and B (ranks padded with zeros to
the largest), scaled per client and added at the tokens' places. That is a handful of operations
per layer however many clients share the pass; a loop over clients would be four per client and
layer, and their backward as many again. Gradients reach each client's own adapter tensors only
(through the stacks), so the clients' optimizers stay separate.

Each client's delta is the one peft's LoRA `Linear` computes for it alone (`lora_B(lora_A(x)) *
scaling`, in eval mode: no dropout), so a token's output differs from the client's own pass only
in float rounding (the base matmul over more rows, the batched matmul's kernels: ~1e-7
relative). Only plain LoRA on linear layers groups (`groupable`); DoRA and other variants, LoRA
biases, and LoRA on embeddings run alone. On a GPU a segmented kernel (Punica's SGMV) would skip
the stack's padding when the clients' token counts differ much.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

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
    """Where each client's tokens are among a pass's P flattened positions, as a [G, M] grid (M:
    the most tokens any client has; shorter clients are padded with position 0)."""

    clients: int
    tokens: int
    grid_GM: torch.Tensor | None
    """Each grid cell's position; None when the positions are the clients' tokens in order, M
    each (the grid is then a view of the positions)."""
    kept_V: torch.Tensor | None
    """The grid cells that are tokens (not padding), flattened, and the positions they are at."""
    places_V: torch.Tensor | None

    @classmethod
    def of(cls, groups_P: torch.Tensor, clients: int) -> Routing:
        counts = torch.bincount(groups_P, minlength=clients)
        tokens = int(counts.max())
        ordered = bool((groups_P[1:] >= groups_P[:-1]).all())
        if ordered and bool((counts == tokens).all()):
            return cls(clients, tokens, None, None, None)
        order_P = torch.argsort(groups_P, stable=True)
        starts = torch.cumsum(counts, 0) - counts
        rank_P = torch.arange(groups_P.numel(), device=groups_P.device) - starts[groups_P[order_P]]
        cells_P = groups_P[order_P] * tokens + rank_P  # each ordered position's cell
        grid = groups_P.new_zeros(clients * tokens)
        grid[cells_P] = order_P
        return cls(clients, tokens, grid.view(clients, tokens), cells_P, order_P)

    def gather(self, x_PI: torch.Tensor) -> torch.Tensor:
        if self.grid_GM is None:
            return x_PI.view(self.clients, self.tokens, x_PI.shape[-1])
        return x_PI.index_select(0, self.grid_GM.flatten()).view(self.clients, self.tokens, x_PI.shape[-1])

    def add(self, out_PO: torch.Tensor, delta_GMO: torch.Tensor) -> torch.Tensor:
        delta_CO = delta_GMO.reshape(-1, delta_GMO.shape[-1])
        if self.grid_GM is None:
            return out_PO + delta_CO
        assert self.kept_V is not None and self.places_V is not None
        return out_PO.index_add(0, self.places_V, delta_CO.index_select(0, self.kept_V))


@dataclass(frozen=True)
class _Bound:
    """What one wrapper adds in a pass: the routing and the clients' stacked adapters' parts."""

    routing: Routing
    layers_G: list[AdapterLayer | None]
    scale_G11: torch.Tensor
    """Each client's scale, float32."""


class GroupedLora(torch.nn.Module):
    """A base linear layer plus, during a bound pass, each client's LoRA delta at its tokens."""

    def __init__(self, base_layer: torch.nn.Linear) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.bound: _Bound | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base_layer(x)
        bound = self.bound
        if bound is None:
            return out
        rank = max(layer.weight_A.shape[0] for layer in bound.layers_G if layer is not None)
        weight = self.base_layer.weight
        a_G, b_G = [], []
        for layer in bound.layers_G:
            if layer is None:  # a client without an adapter here adds nothing
                a_G.append(weight.new_zeros((rank, weight.shape[1])))
                b_G.append(weight.new_zeros((weight.shape[0], rank)))
                continue
            short = rank - layer.weight_A.shape[0]
            a_G.append(F.pad(layer.weight_A, (0, 0, 0, short)) if short else layer.weight_A)
            b_G.append(F.pad(layer.weight_B, (0, short)) if short else layer.weight_B)
        a_GRI, b_GOR = torch.stack(a_G), torch.stack(b_G)
        x_GMI = bound.routing.gather(x.reshape(-1, x.shape[-1]).to(a_GRI.dtype))
        lora_GMO = torch.bmm(torch.bmm(x_GMI, a_GRI.mT), b_GOR.mT)
        # scaled in float32 and rounded once, as peft's `result * scaling` is
        delta_GMO = (lora_GMO.float() * bound.scale_G11).to(out.dtype)
        return bound.routing.add(out.reshape(-1, out.shape[-1]), delta_GMO).reshape(out.shape)


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
    routing = Routing.of(groups_P, len(adapters_G))
    names = sorted({name for adapters in adapters_G for name in adapters})
    wrappers = [_wrapper(host, name) for name in names]
    try:
        for name, wrapper in zip(names, wrappers, strict=True):
            layers_G = [adapters.get(name) for adapters in adapters_G]
            scales = [0.0 if layer is None else layer.scaling for layer in layers_G]
            device = wrapper.base_layer.weight.device
            scale_G11 = torch.tensor(scales, dtype=torch.float32, device=device).view(-1, 1, 1)
            wrapper.bound = _Bound(routing, layers_G, scale_G11)
        yield
    finally:
        for wrapper in wrappers:
            wrapper.bound = None
