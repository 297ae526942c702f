"""Sampler models of one training client, reused instead of deep-copying the model every refresh.

A sampling client is a snapshot: it must keep sampling from the weights it was created with
however the training client moves on. Each client therefore holds a `ModelLease` on one sampler
model, and so does every job it has queued (the jobs reach the model through the lease). A model
whose lease nobody holds any more is free: the next snapshot copies the trainable parameters into
it in place (cheap: no allocation, and for LoRA only the adapters) instead of deep-copying the
whole model. Free models beyond `max_free` are released. A sampler model shares the source's
frozen parameters (a LoRA model's base weights: they never train, and the pool refreshes only the
trainable ones), so a snapshot of a LoRA client costs its adapters' memory, not a model's.
"""

from __future__ import annotations

import copy
import gc
import weakref
from dataclasses import dataclass

import torch

from adapters.local.checkpoint_io import trainable_parameters


class ModelLease:
    """A hold on one sampler model; the model is never changed while a lease on it is alive."""

    __slots__ = ("__weakref__", "model")

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy for sampling only: eval mode, no gradients, the frozen parameters shared."""
    shared = {id(p): p for p in model.parameters() if not p.requires_grad}
    frozen = copy.deepcopy(model, memo=shared).eval().requires_grad_(False)
    frozen.zero_grad(set_to_none=True)  # a copy of a training model may carry gradients
    return frozen


@dataclass
class _Entry:
    model: torch.nn.Module
    targets: list[torch.Tensor]
    """The sampler model's tensors that mirror the source's trainable parameters, in order."""
    lease: weakref.ref[ModelLease] | None = None

    def free(self) -> bool:
        return self.lease is None or self.lease() is None


class SamplerPool:
    """Snapshots of a training model for sampling clients (call `snapshot` on the training thread)."""

    def __init__(self, source: torch.nn.Module, max_free: int = 1) -> None:
        self._source = source
        self._names = list(trainable_parameters(source))
        self._max_free = max_free
        self._entries: list[_Entry] = []
        self.copies_made = 0  # how many deep copies the pool needed (tests and benchmarks look)
        self._collect_at = 2

    def snapshot(self) -> ModelLease:
        """A lease on a sampler model holding the source's current weights."""
        entry = self._free_entry()
        if entry is None and len(self._entries) >= self._collect_at:
            gc.collect()  # a dropped client caught in a reference cycle frees its model only here
            entry = self._free_entry()
            # Every model still in use (a server keeps its sampling clients): collecting costs a
            # full collection each time (~1 s in a server), so the next try waits for twice as many.
            self._collect_at = 2 if entry is not None else 2 * len(self._entries)
        sources = [p.detach() for p in trainable_parameters(self._source).values()]
        if entry is None:
            model = frozen_copy(self._source)
            named = dict(model.named_parameters())
            entry = _Entry(model, [named[name] for name in self._names])
            self._entries.append(entry)
            self.copies_made += 1
        else:
            with torch.no_grad():
                torch._foreach_copy_(entry.targets, sources)
        lease = ModelLease(entry.model)
        entry.lease = weakref.ref(lease)
        self._release_spare()
        return lease

    def _free_entry(self) -> _Entry | None:
        return next((entry for entry in self._entries if entry.free()), None)

    def _release_spare(self) -> None:
        free = [entry for entry in self._entries if entry.free()]
        for entry in free[self._max_free :]:
            self._entries.remove(entry)

    @property
    def size(self) -> int:
        return len(self._entries)
