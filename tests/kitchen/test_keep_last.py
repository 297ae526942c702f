"""keep_last / keep_every delete exactly the step checkpoints they say, and a resume still works."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.best_checkpoint import best_checkpoint
from kitchen.engine.runs.checkpoints import CheckpointRecord, last_resumable, read_records
from kitchen.engine.runs.metrics import read_metrics
from kitchen.families.common.checkpoint import checkpoints_to_delete


def _record(step: int, name: str | None = None) -> CheckpointRecord:
    return CheckpointRecord(name=name or f"{step:06d}", step=step, state_path=f"/x/{step}", sampler_path=f"/s/{step}")


def test_checkpoints_to_delete_keeps_the_newest_multiples_and_final() -> None:
    records = [_record(step) for step in range(1, 9)]
    assert [r.step for r in checkpoints_to_delete(records, 2, None)] == [1, 2, 3, 4, 5, 6]
    assert [r.step for r in checkpoints_to_delete(records, 2, 4)] == [1, 2, 3, 5, 6]
    assert [r.step for r in checkpoints_to_delete(records, 100, None)] == []
    with_final = [*records, _record(8, "final")]
    assert [r.step for r in checkpoints_to_delete(with_final, 1, None)] == [1, 2, 3, 4, 5, 6, 7]
    # A name saved again by a rerun counts once, at its newest place; the newest record is never deleted.
    rerun = [*records[:5], _record(3)]
    assert [r.name for r in checkpoints_to_delete(rerun, 1, None)] == ["000001", "000002", "000004", "000005"]


@pytest.mark.parametrize("backend", ["local"])  # noop's noop:// paths are not files kitchen may delete
def test_keep_last_on_disk_and_resume(tmp_path: Path, backend: str) -> None:
    recipe = get_recipe("sl_basic")
    common = [
        f"backend={backend}",
        f"log_path={tmp_path}",
        "checkpoint.save_every=1",
        "eval.every=0",
        "data.batch_size=4",
    ]
    config = load_config(
        recipe.config_cls, None, [*common, "data.max_steps=6", "checkpoint.keep_last=2", "checkpoint.keep_every=4"]
    )
    run_dir = run_recipe(recipe, config, progress=False)
    records = read_records(run_dir.checkpoints)
    assert [r.name for r in records] == ["000001", "000002", "000003", "000004", "000005", "000006", "final"]
    present = {r.name for r in records if r.state_path and Path(r.state_path).exists()}
    assert present == {"000004", "000005", "000006", "final"}
    samplers = {r.name for r in records if r.sampler_path and Path(r.sampler_path).exists()}
    assert samplers == present
    for record in records:  # sampler weights equal to the state's are one file on disk
        if record.name in present:
            state = Path(str(record.state_path)) / "weights.safetensors"
            sampler = Path(str(record.sampler_path)) / "weights.safetensors"
            assert state.stat().st_ino == sampler.stat().st_ino

    # As if the run had been killed during step 6: the rerun resumes from the newest step
    # checkpoint left (5), which pruning kept, and finishes.
    lines = run_dir.checkpoints.read_text(encoding="utf-8").splitlines(keepends=True)
    run_dir.checkpoints.write_text("".join(lines[:-2]), encoding="utf-8")
    assert last_resumable(run_dir.checkpoints).name == "000005"  # type: ignore[union-attr]
    run_recipe(recipe, config, progress=False)
    assert [row["step"] for row in read_metrics(run_dir.metrics)] == list(range(6))
    assert read_records(run_dir.checkpoints)[-1].name == "final"
    if backend == "local":
        import asyncio

        from adapters.local import LocalBackend

        service = LocalBackend(tmp_path / "scratch", device="cpu")
        for record in read_records(run_dir.checkpoints):
            if record.name in present:
                asyncio.run(service.create_training_client_from_state(str(record.state_path)))
        asyncio.run(service.close())


def test_best_evaluated_checkpoint_is_kept() -> None:
    records = [_record(step) for step in range(1, 9)]
    # checkpoint N is saved at the end of the step whose row is N - 1
    nll = [5, 4, 1.5, 3, 3, 3, 3, 3]
    rows = [{"step": step - 1, "eval/nll": value} for step, value in zip(range(1, 9), nll, strict=True)]
    assert best_checkpoint(records, rows) == "000003"
    assert "000003" not in [r.name for r in checkpoints_to_delete(records, 2, None, protect={"000003"})]
    assert "000003" in [r.name for r in checkpoints_to_delete(records, 2, None)]
    # Higher is better for a reward, and the family's headline (the reward) wins over an NLL.
    rows = [{"step": 1, "eval/all/reward/total": 0.9, "eval/nll": 9.0}, {"step": 4, "eval/all/reward/total": 0.2}]
    assert best_checkpoint(records, rows) == "000002"
    assert best_checkpoint([*records, _record(8, "final")], [{"step": 7, "eval/accuracy": 1.0}]) == "000008"
    assert best_checkpoint(records, [{"step": 0, "train_mean_nll": 1.0}]) is None  # nothing evaluated


@pytest.mark.slow
def test_default_keeps_five_step_checkpoints(tmp_path: Path) -> None:
    """Checkpoints used to be all kept (disk use growing with the run): the default is keep_last=5."""
    recipe = get_recipe("sl_basic")
    overrides = [
        f"log_path={tmp_path}",
        "checkpoint.save_every=1",
        "eval.every=0",
        "data.batch_size=4",
        "data.max_steps=8",
    ]
    run_dir = run_recipe(recipe, load_config(recipe.config_cls, None, overrides), progress=False)
    records = read_records(run_dir.checkpoints)
    present = {r.name for r in records if r.state_path and Path(r.state_path).exists()}
    assert present == {"000004", "000005", "000006", "000007", "000008", "final"}
