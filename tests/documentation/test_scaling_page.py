"""docs/explanation/scaling.md shows the tables `benchmarks/sizing.py` computes, and that
arithmetic holds against facts checked by hand (published parameter counts, bytes per parameter)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import sizing

PAGE = Path(__file__).resolve().parents[2] / "docs" / "explanation" / "scaling.md"


@pytest.mark.parametrize("table", sizing.tables(), ids=["memory", "sync", "controller"])
def test_the_page_shows_each_table_the_code_computes(table: str) -> None:
    assert table in PAGE.read_text(encoding="utf-8"), "rerun: PYTHONPATH=. python benchmarks/sizing.py"


@pytest.mark.parametrize(("name", "published"), [("8B", 8.03e9), ("32B", 32.5e9), ("70B", 70.6e9)])
def test_the_model_shapes_give_the_published_parameter_counts(name: str, published: float) -> None:
    model = next(m for m in sizing.MODELS if m.name == name)
    assert model.params == pytest.approx(published, rel=0.01)


def test_full_fine_tuning_shards_sixteen_bytes_per_parameter_and_lora_four() -> None:
    model = sizing.MODELS[0]
    assert sizing.Memory(model, "full", 8).sharded == 16 * model.params / 8
    lora = sizing.Memory(model, "LoRA", 8).sharded
    assert lora == (4 * model.params + 16 * model.lora_params) / 8
    assert model.lora_params < 0.02 * model.params


def test_the_gpu_count_is_the_smallest_that_fits() -> None:
    for model in sizing.MODELS:
        gpus = sizing.training_gpus(model, "full", checkpointing=True)
        assert gpus is not None
        assert sizing.Memory(model, "full", gpus).total(True) <= sizing.USABLE_BYTES
        if gpus > 1:
            assert sizing.Memory(model, "full", gpus // 2).total(True) > sizing.USABLE_BYTES


def test_a_ring_broadcast_costs_the_same_at_any_node_count_and_the_driver_path_grows_linearly() -> None:
    model = sizing.MODELS[2]
    ring = {n: sizing.sync_seconds(model, "full", n, "ring") for n in (8, 64)}
    driver = {n: sizing.sync_seconds(model, "full", n, "driver") for n in (8, 64)}
    assert ring[8] == ring[64] == 2 * model.params / sizing.LINK_BYTES_PER_S
    assert driver[64] == pytest.approx(8 * driver[8])
