"""The preference workflow end to end on the noop backend: wiring, metrics, eval, checkpoints."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kitchen.engine.launch import RunDir
from kitchen.engine.runner import StageFailure
from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from tests.preference_workflow.dpo_runs import RunDpo, run_dpo_recipe

SMALL = [
    "backend=noop",
    "data.max_steps=5",
    "data.batch_size=4",
    "checkpoint.save_every=2",
    "eval.every=2",
    "data.max_length=64",
]
TRAIN_KEYS = (
    "dpo_loss",
    "accuracy",
    "margin",
    "chosen_reward",
    "rejected_reward",
    "num_pairs",
    "num_tokens",
    "learning_rate",
)
EVAL_KEYS = ("eval/accuracy", "eval/margin", "eval/dpo_loss", "eval/nll", "eval/bits_per_byte", "eval/num_pairs")


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    return run_dpo_recipe(tmp_path_factory.mktemp("dpo") / "run", SMALL)


def test_every_step_logs_the_dpo_metrics(small_run: RunDir) -> None:
    rows = read_metrics(small_run.metrics)
    assert [row["step"] for row in rows] == [0, 1, 2, 3, 4]
    for row in rows:
        missing = [key for key in TRAIN_KEYS if key not in row]
        assert not missing, f"step {row['step']} lacks {missing}"
        assert row["num_pairs"] == 4 and row["num_tokens"] > 0
        assert math.isclose(row["margin"], row["chosen_reward"] - row["rejected_reward"], rel_tol=1e-5, abs_tol=1e-6)
        assert 0.0 <= row["accuracy"] <= 1.0
    rates = [row["learning_rate"] for row in rows]
    assert rates == sorted(rates, reverse=True) and rates[0] == pytest.approx(1e-3)  # linear decay


def test_evaluates_every_eval_every_and_at_the_last_step(small_run: RunDir) -> None:
    rows = read_metrics(small_run.metrics)
    assert [row["step"] for row in rows if "eval/accuracy" in row] == [1, 3, 4]
    for row in rows:
        if "eval/accuracy" in row:
            assert all(key in row for key in EVAL_KEYS)
            assert row["eval/num_pairs"] == 100  # the shipped held-out split
            assert row["eval/nll"] > 0 and row["eval/bits_per_byte"] > 0


def test_checkpoints_keep_the_reference_path(small_run: RunDir) -> None:
    records = read_records(small_run.checkpoints)
    assert [record.name for record in records] == ["000002", "000004", "final"]
    assert len({record.state["reference_path"] for record in records}) == 1


def test_no_eval_dataset_means_no_eval_metrics(run_dpo: RunDpo) -> None:
    rows = read_metrics(run_dpo(*SMALL, "data.eval_dataset=null").metrics)
    assert rows and not any(key.startswith("eval/") for row in rows for key in row)


def test_win_rate_evaluator_is_opt_in(run_dpo: RunDpo) -> None:
    rows = read_metrics(run_dpo(*SMALL, "win_rate.judge=polite_arithmetic", "win_rate.prompts=3").metrics)
    evals = [row for row in rows if "eval/win_rate" in row]
    assert [row["step"] for row in evals] == [1, 3, 4]
    for row in evals:
        assert row["eval/win_rate_prompts"] == 3
        assert 0.0 <= row["eval/win_rate"] <= 1.0 and row["eval/win_rate_stderr"] >= 0.0


def test_resume_without_a_recorded_reference_is_refused(run_dpo: RunDpo, tmp_path: Path) -> None:
    log_path = tmp_path / "run"
    run_dpo(*SMALL, log_path=log_path)
    first = json.loads((log_path / "checkpoints.jsonl").read_text().splitlines()[0])
    del first["state"]["reference_path"]
    (log_path / "checkpoints.jsonl").write_text(json.dumps(first) + "\n")
    with pytest.raises(StageFailure) as failure:
        run_dpo(*SMALL, log_path=log_path)
    assert failure.value.is_user_error and failure.value.stage == "create_reference_client"
    assert "does not record 'reference_path', so the run cannot resume against the model" in str(failure.value)


def test_each_evaluation_writes_held_out_examples_for_the_report(run_dpo: RunDpo, tmp_path: Path) -> None:
    import time

    from kitchen.apps.report.build import write_report

    run_dir = run_dpo("data.max_steps=4", "eval.every=2")
    files = sorted((run_dir.path / "preference_examples").glob("step_*.jsonl"))
    assert [f.name for f in files] == ["step_000001.jsonl", "step_000003.jsonl"]
    records = [json.loads(line) for line in files[-1].read_text().splitlines()]
    assert 0 < len(records) <= 32
    for record in records:
        assert record["prompt"].startswith("user: ") and record["chosen"] != record["rejected"]
        assert record["margin"] == pytest.approx(record["chosen_reward"] - record["rejected_reward"])
    page = write_report(run_dir.path, tmp_path / "report.html", time.time()).read_text(encoding="utf-8")
    assert "step_NNNNNN" not in page  # the page shows the examples, not the "none written yet" hint
    assert records[0]["chosen"].split(": ", 1)[1] in page
