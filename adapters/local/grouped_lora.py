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
`base(x)` once, on every client's tokens, and each client's delta on its own tokens (a view of
them when they are contiguous, as in a pass's rows grouped by client) by peft's own operations.

Every kernel a client's tokens see is then the one its own pass would run (row-wise in the base
matmuls, which give a row the same result for any number of rows past a few, and the same small
matmuls for the adapters and their weights' gradients), so a client's logprobs and gradients in a
grouped pass are bit for bit those of its own pass where the layout is the same (equal-length rows,
as tested), and within float rounding otherwise (the rows padded to another width). Stacking the
clients' adapters into batched matmuls (two per layer however many clients) would round the
weights' gradients differently (~1e-7), and Adam on a noisy loss amplifies that tenfold every step
or two: within 20 steps the client's training is no longer its solo run. Only plain LoRA on linear
layers groups (`groupable`); DoRA and other variants, LoRA biases, and LoRA on embeddings run alone.
"""

from __future__ import annotations

import copy
import itertools
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
    """Where each client's tokens are among a pass's P flattened positions: one slice each when
    the positions are grouped by client (a view of the layer's input, no copy), else one index
    tensor each."""

    spans_G: list[slice] | None
    places_G: list[torch.Tensor] | None

    @classmethod
    def of(cls, groups_P: torch.Tensor, clients: int) -> Routing:
        counts = torch.bincount(groups_P, minlength=clients).tolist()
        if bool((groups_P[1:] >= groups_P[:-1]).all()):
            ends = list(itertools.accumulate(counts))
            return cls([slice(end - count, end) for count, end in zip(counts, ends, strict=True)], None)
        return cls(None, [(groups_P == g).nonzero().flatten() for g in range(clients)])

    def take(self, x_PI: torch.Tensor, g: int) -> torch.Tensor:
        """Client g's rows of `x_PI`, in position order."""
        if self.spans_G is not None:
            return x_PI[self.spans_G[g]]
        assert self.places_G is not None
        return x_PI.index_select(0, self.places_G[g])

    def add(self, out_PO: torch.Tensor, deltas_G: Sequence[torch.Tensor | None]) -> torch.Tensor:
        """`out_PO` with each client's delta (a row per token; None: nothing) added at its tokens."""
        if self.spans_G is not None:
            parts = [
                out_PO[span] if delta is None else out_PO[span] + delta
                for span, delta in zip(self.spans_G, deltas_G, strict=True)
            ]
            return torch.cat(parts)
        assert self.places_G is not None
        for places, delta in zip(self.places_G, deltas_G, strict=True):
            if delta is not None:
                out_PO = out_PO.index_add(0, places, delta)
        return out_PO


class GroupedLora(torch.nn.Module):
    """A base linear layer plus, during a bound pass, each client's LoRA delta at its tokens."""

    def __init__(self, base_layer: torch.nn.Linear) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.bound: tuple[Routing, list[AdapterLayer | None]] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base_layer(x)
        if self.bound is None:
            return out
        routing, layers_G = self.bound
        x_PI = x.reshape(-1, x.shape[-1])
        deltas_G: list[torch.Tensor | None] = []
        for g, layer in enumerate(layers_G):
            if layer is None:  # a client without an adapter here adds nothing
                deltas_G.append(None)
                continue
            x_MI = routing.take(x_PI, g).to(layer.weight_A.dtype)
            # peft's own operations (`lora_B(lora_A(x)) * scaling`): the same kernels, so the same
            # rounding in the forward and in the weights' gradients as the client's own pass
            deltas_G.append((F.linear(F.linear(x_MI, layer.weight_A), layer.weight_B) * layer.scaling).to(out.dtype))
        return routing.add(out.reshape(-1, out.shape[-1]), deltas_G).reshape(out.shape)


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
            wrapper.bound = routing, [adapters.get(name) for adapters in adapters_G]
        yield
    finally:
        for wrapper in wrappers:
            wrapper.bound = None
