"""Sampler models of one training client, reused instead of deep-copying the model every refresh.

A sampling client is a snapshot: it must keep sampling from the weights it was created with
however the training client moves on. Each client therefore holds a `ModelLease` on one sampler
model, and so does every job it has queued (the jobs reach the model through the lease). A model
whose lease nobody holds any more is free: the next snapshot copies the trainable parameters into
it in place (cheap: no allocation, and for LoRA only the adapters) instead of deep-copying the
whole model. Free models beyond `max_free` are released. A sampler model shares the source's
frozen parameters (a LoRA model's base weights: they never train, and the pool refreshes only the
trainable ones), so a snapshot of a LoRA client costs its adapters' memory, not a model's.

A LoRA client whose sampling clients sample on its group's host (`adapters.local.lora_group`)
needs no model for that: its snapshot (`adapter_snapshot`) copies the adapters alone, and the
lease makes (or reuses) a sampler model only when something asks for one (a sample decoded
alone, prompt scoring). With several clients sampling together that copy is never made: it is
the snapshot's cost that does not batch (a deep copy of the module tree, ~60 ms for the tiny
model), which ran one client at a time on the group's training worker.

A dropped client caught in a reference cycle frees its model only in a full garbage collection,
which holds the GIL for as long as the whole heap takes to walk (~1 s in a server): every thread
of the process stops meanwhile. Where nothing is ever dropped (a server keeps its sessions'
sampling clients) each collection is wasted, and several training clients' pools would each run
their own: so the pools of a process share one `CollectionBudget`, which spends at most about a
twentieth of the wall time on collections that free nothing.
"""

from __future__ import annotations

import copy
import gc
import threading
import time
import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from adapters.local.checkpoint_io import trainable_parameters
from adapters.local.grouped_lora import AdapterLayer

_T = TypeVar("_T")


class ModelLease:
    """A hold on one sampler model; the model is never changed while a lease on it is alive. A
    lazy lease (`make`) gets its model on first use: until then it holds only `adapters`."""

    __slots__ = ("__weakref__", "_lock", "_make", "_model", "_template", "adapters")

    def __init__(
        self,
        model: torch.nn.Module | None = None,
        make: Callable[[ModelLease], torch.nn.Module] | None = None,
        adapters: dict[str, AdapterLayer] | None = None,
        template: torch.nn.Module | None = None,
    ) -> None:
        if (model is None) == (make is None):
            raise ValueError("a lease holds a model or makes one, not both")
        self._model = None if model is None else _for_sampling(model)
        self._make = make
        self._lock = threading.Lock()
        self.adapters = adapters
        """The snapshot's adapters (copies), for a grouped decode; None: read them off the model."""
        self._template = template

    @property
    def template(self) -> torch.nn.Module:
        """A model of the same architecture and config: what a client reads without the weights."""
        return self._template if self._template is not None else self.model

    @property
    def model(self) -> torch.nn.Module:
        return self.take()

    def take(self) -> torch.nn.Module:
        """The model, made now if it is not yet."""
        with self._lock:
            if self._model is None:
                assert self._make is not None
                self._model = _for_sampling(self._make(self))
            return self._model


def _for_sampling(model: torch.nn.Module) -> torch.nn.Module:
    """`model` in eval mode, without gradients (a copy of a training model may carry them)."""
    model.eval().requires_grad_(False)
    model.zero_grad(set_to_none=True)
    return model


def frozen_copy(model: torch.nn.Module, copied: Collection[str] | None = None) -> torch.nn.Module:
    """A deep copy for sampling only: eval mode, no gradients, the frozen parameters shared (with
    `copied`, every parameter but those named there: a frozen model's trainable ones)."""
    named = model.named_parameters()
    shared = {id(p): p for name, p in named if (not p.requires_grad if copied is None else name not in copied)}
    frozen = copy.deepcopy(model, memo=shared).eval().requires_grad_(False)
    frozen.zero_grad(set_to_none=True)  # a copy of a training model may carry gradients
    return frozen


@dataclass
class CollectionBudget:
    """Full collections for the pools, the futile ones rationed: after a collection that freed no
    model, the next runs only once `ratio` times its duration has passed (shared by every pool:
    one collection frees any pool's dropped models). A collection that freed one rations nothing."""

    ratio: float = 20.0
    clock: Callable[[], float] = time.monotonic
    _wait_until: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    collections: int = 0
    """How many ran (tests and benchmarks look)."""

    def collect(self, find: Callable[[], _T | None]) -> _T | None:
        """`find()` after a full collection (what the collection freed), or None without one (the
        last futile one was too recent)."""
        with self._lock:
            start = self.clock()
            if self._wait_until is not None and start < self._wait_until:
                return None
            gc.collect()
            self.collections += 1
            found = find()
            end = self.clock()
            self._wait_until = None if found is not None else end + self.ratio * (end - start)
            return found


COLLECTIONS = CollectionBudget()
"""The process's budget (the sampling clients of all training clients)."""


@dataclass
class _Entry:
    model: torch.nn.Module
    targets: list[torch.Tensor]
    """The sampler model's tensors that mirror the source's trainable parameters, in order."""
    lease: weakref.ref[ModelLease] | None = None

    def free(self) -> bool:
        return self.lease is None or self.lease() is None


class SamplerPool:
    """Snapshots of a training model for sampling clients (call `snapshot` and `adapter_snapshot`
    on the training thread; a lazy lease takes its model on whatever thread first asks)."""

    def __init__(self, source: torch.nn.Module, max_free: int = 1, collections: CollectionBudget = COLLECTIONS) -> None:
        self._source = source
        self._collections = collections
        self._names = list(trainable_parameters(source))
        self._max_free = max_free
        self._entries: list[_Entry] = []
        self._lock = threading.Lock()  # lazy leases take their models on other threads
        self._template: torch.nn.Module | None = None
        """A frozen copy of the source that nothing samples with: lazy leases' models are copied
        from it, not from the source (which trains meanwhile, on another thread)."""
        self.copies_made = 0  # how many deep copies the pool needed (tests and benchmarks look)
        self._collect_at = 2

    def snapshot(self) -> ModelLease:
        """A lease on a sampler model holding the source's current weights."""
        sources = [p.detach() for p in trainable_parameters(self._source).values()]
        lease = ModelLease(make=lambda lease: self._take(sources, lambda: frozen_copy(self._source), lease))
        lease.take()  # now: the source moves on after this
        return lease

    def adapter_snapshot(self, adapters: dict[str, AdapterLayer]) -> ModelLease:
        """A lazy lease holding copies of the source's trainable tensors alone, `adapters` (the
        source's, by layer) made to read them; its model is taken from the pool on first use."""
        if self._template is None:
            self._template = frozen_copy(self._source)
        current = trainable_parameters(self._source)
        copies = {name: param.detach().clone() for name, param in current.items()}
        by_id = {id(param): copies[name] for name, param in current.items()}
        layers = {
            name: AdapterLayer(by_id[id(layer.weight_A)], by_id[id(layer.weight_B)], layer.scaling)
            for name, layer in adapters.items()
        }
        template, values = self._template, [copies[name] for name in self._names]

        def make(lease: ModelLease) -> torch.nn.Module:
            return self._take(values, lambda: frozen_copy(template, copied=self._names), lease)

        return ModelLease(make=make, adapters=layers, template=template)

    def _take(
        self, sources: list[torch.Tensor], copy_model: Callable[[], torch.nn.Module], lease: ModelLease
    ) -> torch.nn.Module:
        """A sampler model holding `sources` (a free one refreshed in place, else a new copy
        `copy_model` makes), leased to `lease`."""
        with self._lock:
            entry = self._free_entry()
            if entry is None and len(self._entries) >= self._collect_at:
                entry = self._collections.collect(self._free_entry)
                # Every model still in use (a server keeps its sampling clients): collecting costs a
                # full collection each time (~1 s in a server), so the next try waits for twice as many.
                self._collect_at = 2 if entry is not None else 2 * len(self._entries)
            if entry is None:
                model = copy_model()
                named = dict(model.named_parameters())
                entry = _Entry(model, [named[name] for name in self._names])
                self.copies_made += 1
            else:
                self._entries.remove(entry)
            with torch.no_grad():
                torch._foreach_copy_(entry.targets, sources)
            entry.lease = weakref.ref(lease)
            self._entries.append(entry)
            self._release_spare()
            return entry.model

    def _free_entry(self) -> _Entry | None:
        return next((entry for entry in self._entries if entry.free()), None)

    def _release_spare(self) -> None:
        free = [entry for entry in self._entries if entry.free()]
        for entry in free[self._max_free :]:
            self._entries.remove(entry)

    @property
    def size(self) -> int:
        return len(self._entries)
