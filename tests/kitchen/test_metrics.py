from __future__ import annotations

import json
from pathlib import Path

from kitchen.engine.runs.metrics import MetricsRecorder, read_metrics, truncate_metrics


def test_rows_written_in_step_order_and_held_steps_wait(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    recorder = MetricsRecorder(path)
    recorder.record(0, {"a": 1})
    recorder.hold(1)
    recorder.record(1, {"a": 2})
    recorder.record(2, {"a": 3})
    recorder.flush(through=2)
    assert [row["step"] for row in recorder.rows] == [0]
    recorder.release(1)
    recorder.flush(through=2)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(row["step"], row["a"]) for row in lines] == [(0, 1.0), (1, 2.0), (2, 3.0)]


def test_a_step_held_twice_waits_for_both_releases_and_what_follows_its_row_waits_too(tmp_path: Path) -> None:
    """A pending train step and a background evaluation may hold the same step; a checkpoint
    record registered for the step is written after the row."""
    recorder = MetricsRecorder(tmp_path / "m.jsonl")
    order: list[str] = []
    recorder.hold(0)
    recorder.hold(0)
    recorder.record(0, {"loss": 1.0})
    recorder.release(0)
    recorder.flush(through=0)
    recorder.when_written(0, lambda: order.append(f"record after {len(recorder.rows)} rows"))
    assert recorder.rows == [] and order == []
    recorder.record(0, {"eval/x/accuracy": 0.5})
    recorder.release(0)
    recorder.flush(through=0)
    assert recorder.rows == [{"step": 0, "eval/x/accuracy": 0.5, "loss": 1.0}]
    assert order == ["record after 1 rows"]
    recorder.when_written(0, lambda: order.append("at once"))
    assert order[-1] == "at once"


def test_timing_accumulates_and_final_flush_writes_everything(tmp_path: Path) -> None:
    recorder = MetricsRecorder(tmp_path / "m.jsonl")
    recorder.add_time(0, "time/x", 0.5)
    recorder.add_time(0, "time/x", 0.25)
    recorder.hold(0)
    recorder.flush()
    assert recorder.rows == [{"step": 0, "time/x": 0.75}]


def test_read_merges_rows_and_truncate_drops_later_steps(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 0, "a": 1}\n{"step": 1, "a": 2}\n{"step": 1, "b": 3}\n{"step": 2, "a": 4}\n')
    assert read_metrics(path)[1] == {"step": 1, "a": 2, "b": 3}
    truncate_metrics(path, before_step=2)
    assert [row["step"] for row in read_metrics(path)] == [0, 1]
