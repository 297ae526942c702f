"""The best checkpoint of a run: the step checkpoint whose weights scored best on a held-out
metric. With `best_checkpoint: {metric, mode}` in the config that metric decides and the run keeps
a pointer to it, `RUN_DIR/best_checkpoint.json`; without, the run family's headline eval metric
(`HEADLINES`) does. `keep_last` never deletes it; `kitchen eval RUN --checkpoint best` evaluates it.

A checkpoint saved at the end of step index `s` (record step `s + 1`) holds the weights that the
step's evaluations measured, logged in the metrics row of step `s`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from kitchen.engine.config.eval_schedule import BestCheckpoint
from kitchen.engine.errors import ConfigError
from kitchen.engine.runs.checkpoints import CheckpointRecord, read_records
from kitchen.engine.runs.metrics import HEADLINES, read_metrics

BEST_FILE = "best_checkpoint.json"


def _criteria(spec: BestCheckpoint | None) -> list[tuple[str, bool]]:
    if spec is not None:
        return [(spec.metric, spec.mode == "max")]
    return [(eval_key, higher_is_better) for _, _, eval_key, higher_is_better in HEADLINES]


def best_record(
    records: list[CheckpointRecord], rows: list[dict[str, Any]], spec: BestCheckpoint | None = None
) -> tuple[CheckpointRecord, str, float] | None:
    """(record, metric, value) of the step checkpoint saved at the end of the step whose `spec`
    metric (default: the first headline eval metric logged) was best; None when no saved step
    was evaluated. Ties go to the later step."""
    by_step = {int(row["step"]): row for row in rows}
    for metric, higher_is_better in _criteria(spec):
        scored = []
        for record in records:
            value = by_step.get(record.step - 1, {}).get(metric)
            if record.name == "final" or not record.state_path or isinstance(value, bool):
                continue
            if isinstance(value, (int, float)) and math.isfinite(value):
                scored.append((value if higher_is_better else -value, record.step, record))
        if scored:
            _, _, record = max(scored, key=lambda entry: entry[:2])
            return record, metric, float(by_step[record.step - 1][metric])
    return None


def best_checkpoint(
    records: list[CheckpointRecord], rows: list[dict[str, Any]], spec: BestCheckpoint | None = None
) -> str | None:
    """The name of `best_record`'s checkpoint."""
    found = best_record(records, rows, spec)
    return None if found is None else found[0].name


def refresh_best(run_dir: Path, spec: BestCheckpoint | None) -> str | None:
    """The run's best checkpoint from its records and metrics as written so far; with `spec`, the
    pointer file is rewritten (atomically) when the best one changed."""
    found = best_record(read_records(run_dir / "checkpoints.jsonl"), read_metrics(run_dir / "metrics.jsonl"), spec)
    if found is None:
        return None
    record, metric, value = found
    if spec is not None:
        pointer = {
            "name": record.name,
            "step": record.step,
            "metric": metric,
            "mode": spec.mode,
            "value": value,
            "sampler_path": record.sampler_path,
            "state_path": record.state_path,
        }
        path = run_dir / BEST_FILE
        if not path.is_file() or json.loads(path.read_text(encoding="utf-8")) != pointer:
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(pointer, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, path)
    return record.name


def best_name(run_dir: Path) -> str:
    """The checkpoint `--checkpoint best` means: the pointer's, else the headline metric's best;
    a ConfigError when no saved checkpoint was evaluated."""
    pointer = run_dir / BEST_FILE
    if pointer.is_file():
        try:
            return str(json.loads(pointer.read_text(encoding="utf-8"))["name"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"{pointer}: unreadable ({exc}); delete it to pick the best by the headline metric"
            ) from None
    name = refresh_best(run_dir, None)
    if name is None:
        raise ConfigError(
            f"{run_dir}: no best checkpoint: no saved step checkpoint was evaluated (set eval.best_checkpoint and "
            "eval.tasks, or eval.every to a multiple of checkpoint.save_every)"
        )
    return name
