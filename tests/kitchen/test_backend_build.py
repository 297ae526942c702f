"""A backend is built by its spec's factory with the run's config, its settings section, the
checkpoint folder and the loss table (plugins' losses included), so an adapter computes built-in
losses without importing kitchen's loss registry; a factory written for kitchen 0.2 (no table)
still builds, with a DeprecationWarning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from adapters.noop import NoopBackend
from kitchen.engine.backends import BackendSpec, get_backend_spec
from kitchen.engine.config.loading import load_config
from kitchen.engine.config.run import RunConfig
from kitchen.engine.losses import LOSSES
from train_core.losses import LOSS_SPECS, LossTable

CONFIG = load_config(RunConfig, None, ["backend=noop"])


def test_the_factory_gets_the_loss_table_with_every_registered_loss(tmp_path: Path) -> None:
    given: list[LossTable] = []
    noop = get_backend_spec("noop")

    def create(config: Any, settings: Any, checkpoint_dir: Path, losses: LossTable) -> NoopBackend:
        given.append(losses)
        return NoopBackend(seed=config.seed, checkpoint_dir=checkpoint_dir, losses=losses)

    spec = BackendSpec("noop", "the noop backend, watched", noop.settings, create)
    backend = spec.build(CONFIG, tmp_path)
    assert isinstance(backend, NoopBackend)
    (losses,) = given
    assert set(LOSSES.load()) <= set(losses) and dict(losses) == LOSS_SPECS


def test_a_factory_without_a_loss_table_still_builds_with_a_warning(tmp_path: Path) -> None:
    noop = get_backend_spec("noop")

    def create(config: Any, settings: Any, checkpoint_dir: Path) -> NoopBackend:
        return NoopBackend(seed=config.seed, checkpoint_dir=checkpoint_dir)

    spec = BackendSpec("noop", "a kitchen 0.2 factory", noop.settings, create)  # type: ignore[arg-type]
    with pytest.warns(DeprecationWarning, match="its factory takes no loss table"):
        assert isinstance(spec.build(CONFIG, tmp_path), NoopBackend)


def test_a_backend_computes_only_the_losses_of_its_table() -> None:
    """The table given is the one read: a backend given a table without `ppo` refuses it."""
    import asyncio

    from train_core.types import Datum, ModelInput, TensorData

    backend = NoopBackend(losses={"cross_entropy": LOSS_SPECS["cross_entropy"]})

    async def go() -> None:
        client = await backend.create_training_client("tiny")
        datum = Datum(
            ModelInput.from_ints([1, 2, 3]),
            {
                "target_tokens": TensorData.from_list([2, 3, 4], "int64"),
                "weights": TensorData.from_list([1.0] * 3, "float32"),
            },
        )
        await (await client.forward([datum], "cross_entropy"))
        with pytest.raises(ValueError, match=r"unknown loss_fn 'ppo'; known losses: \['cross_entropy'\]"):
            await client.forward([datum], "ppo")

    asyncio.run(go())
