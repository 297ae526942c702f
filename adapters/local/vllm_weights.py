"""Full weights on their way into the vLLM engine: in shared memory, never in a file.

The trainer copies a snapshot's parameters (by their Hugging Face names, a tied head once, cast to
the engine's dtype) into a POSIX shared-memory segment (`/dev/shm`, RAM) and tells the engine its
name and layout (`SharedWeights`); the engine maps the segment and loads the tensors it views
(`load_shared`) through vLLM's in-place reload. The copy is the only one: from a CUDA trainer
it is one device-to-host copy, and the trainer's GPU holds no sampler copy of the model.

A segment stays as long as a sampling client of its version lives (`WeightBuffers`): an older
snapshot used again, or an engine restarted after a death, reloads from it. A segment no client
holds is reused by the next snapshot of the same layout (one spare is kept), so synchronous RL
alternates between two.

An engine on another node of a Ray cluster cannot map the segment: its bytes go there through
Ray's object store instead (`ship`: one copy into the driver node's store, which Ray moves to the
engine's node and maps there uncopied), still never through a file.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Any, TypeVar

import torch

from adapters.local.vllm_protocol import SharedWeights, ShippedWeights, TensorSlot

ALIGNMENT = 64
"""Each tensor starts at a multiple of this many bytes (a cache line; any dtype's alignment)."""

SHM_DIR = Path("/dev/shm")
"""Where Linux keeps POSIX shared-memory segments (a RAM file system)."""

T = TypeVar("T")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def layout(named: Sequence[tuple[str, torch.Tensor]], dtype: torch.dtype) -> tuple[tuple[TensorSlot, ...], int]:
    """Where each tensor goes in a segment (in `dtype`), and the segment's size in bytes."""
    slots, offset = [], 0
    itemsize = torch.empty((), dtype=dtype).element_size()
    for name, tensor in named:
        slots.append(TensorSlot(name, dtype_name(dtype), tuple(tensor.shape), offset))
        offset += -(-tensor.numel() * itemsize // ALIGNMENT) * ALIGNMENT
    return tuple(slots), max(offset, ALIGNMENT)


def _views(buffer: Any, slots: Sequence[TensorSlot]) -> list[torch.Tensor]:
    """The tensors of `slots`, viewing `buffer` (anything with the buffer protocol; no copy)."""
    with warnings.catch_warnings():  # shipped weights arrive read-only; the engine only copies from them
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        flat = torch.frombuffer(buffer, dtype=torch.uint8)
    views = []
    for slot in slots:
        dtype = getattr(torch, slot.dtype)
        count = 1
        for size in slot.shape:
            count *= size
        nbytes = count * torch.empty((), dtype=dtype).element_size()
        views.append(flat[slot.offset : slot.offset + nbytes].view(dtype).view(slot.shape))
    return views


class WeightBuffer:
    """One shared-memory segment holding a model's full weights, owned (and unlinked) here."""

    def __init__(self, slots: tuple[TensorSlot, ...], size: int) -> None:
        self._memory = SharedMemory(create=True, size=size)
        self.shared = SharedWeights(self._memory.name, size, slots)
        memory = self._memory.buf
        assert memory is not None  # open until close()
        self._views = dict(zip((s.name for s in slots), _views(memory, slots), strict=True))

    @torch.no_grad()
    def write(self, named: Sequence[tuple[str, torch.Tensor]]) -> None:
        """Copy (and cast) the tensors in; on CUDA one device-to-host copy each."""
        torch._foreach_copy_([self._views[name] for name, _ in named], [t.detach() for _, t in named])

    def close(self) -> None:
        """Release and unlink the segment (the engine maps it only while it loads)."""
        self._views.clear()
        self._memory.close()
        self._memory.unlink()


class WeightBuffers:
    """The segments of the snapshots sampling clients hold, and spares to reuse."""

    def __init__(self, dtype: torch.dtype, spare: int = 1) -> None:
        self.dtype = dtype
        self._spare = spare
        self._free: list[WeightBuffer] = []
        self._used: set[WeightBuffer] = set()
        self._lock = threading.Lock()  # buffers come back from garbage collection, on any thread
        self.made = 0
        """Segments created so far (tests and benchmarks look)."""

    def take(self, named: Sequence[tuple[str, torch.Tensor]]) -> WeightBuffer:
        """A segment holding these tensors now (a spare of the same layout, or a new one)."""
        slots, size = layout(named, self.dtype)
        with self._lock:
            buffer = next((b for b in self._free if b.shared.slots == slots), None)
            if buffer is not None:
                self._free.remove(buffer)
        if buffer is None:
            buffer = WeightBuffer(slots, size)
            self.made += 1
        with self._lock:
            self._used.add(buffer)
        buffer.write(named)
        return buffer

    def give_back(self, buffer: WeightBuffer) -> None:
        """No client holds `buffer`'s version any more: keep it as a spare or release it."""
        with self._lock:
            if buffer not in self._used:
                return  # closed with the others already
            self._used.discard(buffer)
            keep = len(self._free) < self._spare
            if keep:
                self._free.append(buffer)
        if not keep:
            buffer.close()

    @property
    def in_use(self) -> int:
        return len(self._used)

    def close(self) -> None:
        """Release every segment, held or spare."""
        with self._lock:
            buffers = [*self._free, *self._used]
            self._free.clear()
            self._used.clear()
        for buffer in buffers:
            buffer.close()


@contextlib.contextmanager
def mapped(shared: SharedWeights) -> Iterator[mmap.mmap]:
    """A segment, mapped from its file under /dev/shm for the block's length.

    Not opened as a `SharedMemory`, which in this Python would register it with a resource tracker
    that unlinks it when this process exits: the trainer owns it."""
    fd = os.open(SHM_DIR / shared.segment.lstrip("/"), os.O_RDWR)
    try:
        memory = mmap.mmap(fd, shared.size)
    finally:
        os.close(fd)
    try:
        yield memory
    finally:
        with contextlib.suppress(BufferError):  # a view was kept: the mapping goes when that view does
            memory.close()


def ship(shared: SharedWeights, send: Callable[[ShippedWeights], T]) -> T:
    """What `send` returns, given the segment's weights as a `ShippedWeights` viewing it: `send`
    passes them to a Ray call, which copies them into the object store once."""
    import numpy  # a dependency of torch: Ray carries its arrays out of band, uncopied

    with mapped(shared) as memory:
        return send(ShippedWeights(shared.slots, numpy.frombuffer(memory, dtype=numpy.uint8)))


def load_shared(
    weights: SharedWeights | ShippedWeights, load: Callable[[Iterator[tuple[str, torch.Tensor]]], None]
) -> None:
    """In the engine's process: `load` the named tensors of a segment (or of shipped weights),
    viewed in place (no copy)."""

    def tensors(buffer: Any) -> Iterator[tuple[str, torch.Tensor]]:
        yield from zip((slot.name for slot in weights.slots), _views(buffer, weights.slots), strict=True)

    if isinstance(weights, ShippedWeights):
        load(tensors(weights.data))
        return
    with mapped(weights) as memory:
        load(tensors(memory))
