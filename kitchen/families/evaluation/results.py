"""Eval results on disk and on the console: `results.json` (one row per task and metric: value,
standard error, n, seed, model, plus the settings that produced them) and `samples/<task>.jsonl`
(one line per graded sample: prompt, response, grade, reason). `kitchen report` reads them back
from `RUN_DIR/evals/*/`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from kitchen.engine.eval_tasks import SampleRecord, TaskResult

RESULTS_FILE = "results.json"
SAMPLES_DIR = "samples"
EVALS_DIR = "evals"
"""Where a run keeps the evaluations of its checkpoints: `RUN_DIR/evals/<timestamp>/`."""


@dataclass(frozen=True)
class TaskOutcome:
    label: str
    """The task as asked for (`arithmetic`, `nll:data.jsonl`)."""
    settings: Mapping[str, Any]
    result: TaskResult


def samples_file(label: str) -> str:
    """A file name for a task label (paths and colons flattened)."""
    return re.sub(r"[^A-Za-z0-9_.@-]+", "_", label).strip("_") + ".jsonl"


def result_rows(outcomes: Sequence[TaskOutcome], model: str, seed: int) -> list[dict[str, Any]]:
    return [
        {
            "task": outcome.label,
            "metric": metric,
            "value": estimate.value,
            "stderr": estimate.stderr,
            "n": estimate.n,
            "seed": outcome.settings.get("seed", seed),
            "model": model,
        }
        for outcome in outcomes
        for metric, estimate in outcome.result.metrics.items()
    ]


def sample_line(label: str, record: SampleRecord) -> str:
    fields = {
        "task": label,
        "prompt": record.prompt,
        "response": record.response,
        "grade": record.grade,
        "reason": record.reason,
        **record.extra,
    }
    return json.dumps(fields, ensure_ascii=False) + "\n"


def write_results(out_dir: Path, outcomes: Sequence[TaskOutcome], header: Mapping[str, Any]) -> Path:
    """Write `results.json` (the `header` facts, each task's settings and the metric rows) and
    each task's samples; returns the results file."""
    (out_dir / SAMPLES_DIR).mkdir(parents=True, exist_ok=True)
    for outcome in outcomes:
        lines = "".join(sample_line(outcome.label, record) for record in outcome.result.samples)
        (out_dir / SAMPLES_DIR / samples_file(outcome.label)).write_text(lines, encoding="utf-8")
    document = {
        **header,
        "config": {**dict(header.get("config", {})), "tasks": {o.label: dict(o.settings) for o in outcomes}},
        "results": result_rows(outcomes, str(header.get("model", "")), int(header.get("seed", 0))),
    }
    path = out_dir / RESULTS_FILE
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def _stat(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The console summary: one line per task and metric, `value ± stderr` and n."""
    header = ("TASK", "METRIC", "VALUE", "± STDERR", "N")
    cells = [
        (str(r["task"]), str(r["metric"]), _stat(r["value"]), f"± {_stat(r['stderr'])}", str(r["n"])) for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [header, *cells]
    )


def read_run_evals(run_dir: Path) -> list[dict[str, Any]]:
    """Every readable `results.json` under `RUN_DIR/evals/`, oldest first (by folder name), each
    with its folder as `dir`; unreadable ones are left out."""
    found = []
    for path in sorted((run_dir / EVALS_DIR).glob(f"*/{RESULTS_FILE}")):
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(document, dict) and isinstance(document.get("results"), list):
            found.append({**document, "dir": path.parent.name})
    return found


def default_out_dir(run_dir: Path | None, model_name: str, now: float) -> Path:
    """A new folder for one evaluation: `RUN_DIR/evals/<timestamp>/` for a run's checkpoint,
    `evals/<model>-<timestamp>/` for a bare model (a suffix where it exists already)."""
    stamp = datetime.fromtimestamp(now).strftime("%Y%m%d-%H%M%S")
    if run_dir is not None:
        folder = run_dir / EVALS_DIR
    else:
        folder = Path(EVALS_DIR)
        stamp = f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', Path(model_name).name)}-{stamp}"
    out, n = folder / stamp, 1
    while out.exists():
        n += 1
        out = folder / f"{stamp}-{n}"
    return out
