"""Sub-runs: a recipe that runs other workflows (phases) one after another, each in its own
subdirectory of the run, on the run's one backend.

Checkpoint paths must stay valid from one phase to the next and across processes, and every
backend names saves after the name it is given (`final`, `000020`), so each phase sees the backend
through `PhaseBackend`, which prefixes its saves with the phase name (`sft-final`) and leaves
closing the backend to the enclosing run.
"""

from __future__ import annotations

from typing import Any


class _PrefixedTrainingClient:
    def __init__(self, client: Any, prefix: str) -> None:
        self._client = client
        self._prefix = prefix

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def save_state(self, name: str) -> Any:
        return await self._client.save_state(f"{self._prefix}-{name}")

    async def save_weights_for_sampler(self, name: str) -> Any:
        return await self._client.save_weights_for_sampler(f"{self._prefix}-{name}")

    async def save_weights_and_get_sampling_client(self, name: str | None = None) -> Any:
        return await self._client.save_weights_and_get_sampling_client(
            None if name is None else f"{self._prefix}-{name}"
        )


class PhaseBackend:
    """The enclosing run's backend as one phase sees it: saves named `<prefix>-<name>`, and
    `close` left to the enclosing run (the next phase still needs the backend)."""

    def __init__(self, backend: Any, prefix: str) -> None:
        self._backend = backend
        self._prefix = prefix

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    async def create_training_client(self, base_model: str, lora_rank: int | None = None, seed: int = 0) -> Any:
        client = await self._backend.create_training_client(base_model, lora_rank=lora_rank, seed=seed)
        return _PrefixedTrainingClient(client, self._prefix)

    async def create_training_client_from_state(self, path: str, with_optimizer: bool = True) -> Any:
        client = await self._backend.create_training_client_from_state(path, with_optimizer=with_optimizer)
        return _PrefixedTrainingClient(client, self._prefix)

    async def close(self) -> None:
        """The enclosing run closes the backend."""
