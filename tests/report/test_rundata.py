"""Reading run directories: torn lines, missing files, status from events."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kitchen.apps.report.rundata import (
    RUNNING_WITHIN_S,
    load_run,
    merge_metric_rows,
    metric_value,
    read_jsonl,
    run_status,
    run_timing,
)
from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import KitchenError
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runner import StageFailure


def test_read_jsonl_skips_blank_torn_and_non_object_lines(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n\n[1, 2]\n{"b": 2}\n{"c": ')
    result = read_jsonl(path)
    assert result.records == [{"a": 1}, {"b": 2}]
    assert result.bad_lines == 2


def test_read_jsonl_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_jsonl(tmp_path / "absent.jsonl").records == []


def test_metric_rows_merge_by_step_and_non_finite_values_are_not_plotted() -> None:
    rows = merge_metric_rows([{"step": 1, "a": 1.0}, {"step": 0, "a": 0.5}, {"step": 1, "b": "nan"}, {"a": 3}])
    assert rows == [{"step": 0, "a": 0.5}, {"step": 1, "a": 1.0, "b": "nan"}]
    assert metric_value("nan") is None and metric_value(True) is None and metric_value(2) == 2.0


def _events(*names: str, error: str = "") -> list[dict[str, object]]:
    return [{"event": name, **({"error": error} if name == "run.failed" else {})} for name in names]


def test_status_finished_and_failed_at_stage() -> None:
    assert run_status(_events("run.start", "stage.end", "run.end"), None).label == "finished"
    failed = run_status(_events("run.start", "run.failed", error="stage 'load_data' failed: DataError: bad line"), None)
    assert failed.state == "failed" and failed.failed_stage == "load_data"
    assert failed.error == "DataError: bad line" and failed.label == "failed at stage load_data"


def test_status_without_a_stage_name_or_message() -> None:
    assert run_status(_events("run.start", "run.failed", error="boom"), None).label == "failed"
    # Ctrl-C and cancellation reach the runner as exceptions without a message.
    assert run_status(_events("run.start", "run.failed"), None).state == "interrupted"


def test_status_without_end_event_depends_on_last_write() -> None:
    events = _events("run.start", "stage.end")
    assert run_status(events, 5.0).state == "running"
    assert run_status(events, RUNNING_WITHIN_S + 1).state == "interrupted"
    assert run_status(events, None).state == "interrupted"


def test_status_is_that_of_the_last_attempt() -> None:
    assert run_status(_events("run.start", "run.failed", "run.start", "run.end"), None).state == "finished"
    assert run_status(_events("run.start", "run.end", "run.start"), 1.0).state == "running"


def test_timing_measures_the_last_attempt() -> None:
    events = [
        {"event": "run.start", "timestamp": "2025-01-01T00:00:00Z"},
        {"event": "run.failed", "timestamp": "2025-01-01T00:10:00Z"},
        {"event": "run.start", "timestamp": "2025-01-01T01:00:00Z"},
        {"event": "run.end", "timestamp": "2025-01-01T01:00:42.5Z"},
    ]
    timing = run_timing(events)
    assert timing.wall_seconds == 42.5 and timing.attempts == 2


def test_not_a_run_dir(tmp_path: Path) -> None:
    with pytest.raises(KitchenError, match="is not a run directory"):
        load_run(tmp_path, time.time())
    with pytest.raises(KitchenError, match="is not a run directory"):
        load_run(tmp_path / "absent", time.time())


def test_finished_run(sl_run: Path) -> None:
    run = load_run(sl_run, time.time())
    assert run.recipe == "sl_basic" and run.status.state == "finished"
    assert run.steps_done == 6 and run.checkpoints[-1].name == "final"
    assert run.config["backend"] == "noop" and run.timing.wall_seconds is not None
    assert "train_step" not in run.stage_names and "evaluate_nll" in run.stage_names
    assert run.bad_lines == {}


def test_crashed_run_skips_the_torn_line(crashed_run: Path) -> None:
    later = max(p.stat().st_mtime for p in crashed_run.iterdir()) + RUNNING_WITHIN_S + 60
    run = load_run(crashed_run, later)
    assert run.status.state == "interrupted"
    assert run.bad_lines == {"metrics.jsonl": 1}
    assert [row["step"] for row in run.rows] == list(range(6))


def test_only_a_config_is_a_run_that_has_not_started(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("backend: noop\n")
    run = load_run(tmp_path, time.time())
    assert run.rows == [] and run.checkpoints == [] and run.steps_done == 0 and run.recipe is None
    assert run.status.state == "running"


def test_failed_run_names_the_stage(tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"  # valid records (preflight passes), but fewer than one batch
    data.write_text('{"prompt": "a", "completion": "b"}\n{"prompt": "c", "completion": "d"}\n')
    recipe = get_recipe("sl_basic")
    config = load_config(
        recipe.config_cls,
        None,
        ["backend=noop", f"data.dataset={data}", "data.eval_dataset=null", f"log_path={tmp_path / 'r'}"],
    )
    with pytest.raises(StageFailure):
        run_recipe(recipe, config, progress=False)
    status = load_run(tmp_path / "r", time.time()).status
    assert status.state == "failed" and status.failed_stage == "load_supervised_data"
    assert "fewer than one batch" in (status.error or "")
