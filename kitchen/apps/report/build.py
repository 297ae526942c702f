"""`kitchen report`: read a run directory, render its page, write it next to the run (or elsewhere)."""

from __future__ import annotations

from pathlib import Path

from kitchen.apps.report.charts import build_charts
from kitchen.apps.report.html import render_report
from kitchen.apps.report.rundata import load_run
from kitchen.apps.report.samples import Caps, read_preference_examples, read_transcripts
from kitchen.engine.secrets import redact
from kitchen.families.evaluation.results import read_run_evals


def write_report(run_path: Path, out: Path | None, now: float, caps: Caps | None = None) -> Path:
    """Write the report of `run_path` to `out` (default RUN_DIR/report.html) and return its path.
    The page is redacted as a whole: a run dir written by an older kitchen, or a transcript, may
    hold what the run's own files would now redact."""
    caps = caps or Caps()
    run = load_run(run_path, now)
    page = render_report(
        run,
        build_charts(run.rows, run.stage_names),
        read_transcripts(run_path, caps),
        read_preference_examples(run_path, caps),
        caps,
        now,
        read_run_evals(run_path),
    )
    page = redact(page)
    target = out if out is not None else run_path / "report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(target)
    return target
