"""The local backend satisfies the ports (checked by mypy through the annotations, and at runtime)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from adapters.local import LocalBackend
from kitchen.engine.ports import SamplingClient, ServiceBackend, TrainingClient


def test_local_backend_and_clients_implement_the_ports(tmp_path: Path) -> None:
    async def run() -> tuple[TrainingClient, SamplingClient, SamplingClient]:
        backend: ServiceBackend = LocalBackend(checkpoint_dir=tmp_path)
        training: TrainingClient = await backend.create_training_client("tiny")
        snapshot: SamplingClient = await training.save_weights_and_get_sampling_client()
        base: SamplingClient = await backend.create_sampling_client(base_model="tiny")
        await backend.close()
        return training, snapshot, base

    training, snapshot, base = asyncio.run(run())
    assert isinstance(LocalBackend(checkpoint_dir=tmp_path), ServiceBackend)
    assert isinstance(training, TrainingClient)
    assert isinstance(snapshot, SamplingClient) and isinstance(base, SamplingClient)
    assert LocalBackend.name == "local"
