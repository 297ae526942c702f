"""DPO on the local backend (the embedded tiny model): the first loss is exactly ln 2, because the
policy starts as the reference, and a resumed run measures against the original reference."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from tests.preference_workflow.dpo_runs import RunDpo

LOCAL = [
    "backend=local",
    "local.device=cpu",
    "data.batch_size=4",
    "data.max_length=64",
    "data.eval_dataset=null",
    "renderer=role_colon",
]


@pytest.mark.parametrize("lora", [[], ["lora_rank=4"]], ids=["full", "lora"])
def test_first_dpo_loss_is_ln2(run_dpo: RunDpo, lora: list[str]) -> None:
    rows = read_metrics(run_dpo(*LOCAL, *lora, "data.max_steps=2", "checkpoint.save_every=0").metrics)
    first = rows[0]
    assert abs(first["dpo_loss"] - math.log(2)) < 1e-6
    assert abs(first["margin"]) < 1e-5 and abs(first["chosen_reward"]) < 1e-5
    assert first["accuracy"] == 0.0  # c > r is strict; at step 0 c == r
    assert abs(rows[1]["dpo_loss"] - math.log(2)) > 1e-4, "the policy did not move after one step"


def test_resume_keeps_the_original_reference(run_dpo: RunDpo, tmp_path: Path) -> None:
    args = [*LOCAL, "data.max_steps=4", "checkpoint.save_every=2", "optimizer.learning_rate=1e-2"]
    whole = run_dpo(*args, log_path=tmp_path / "whole")
    # The same run cut off after its step-2 checkpoint: keep only that record, then rerun.
    cut = tmp_path / "cut"
    shutil.copytree(whole.path, cut)
    checkpoints = (cut / "checkpoints.jsonl").read_text().splitlines(keepends=True)
    (cut / "checkpoints.jsonl").write_text(checkpoints[0])
    assert read_records(cut / "checkpoints.jsonl")[0].step == 2
    resumed = run_dpo(*args, log_path=cut)

    expected, actual = read_metrics(whole.metrics), read_metrics(resumed.metrics)
    assert [row["step"] for row in actual] == [0, 1, 2, 3]
    assert [row["dpo_loss"] for row in actual] == pytest.approx([row["dpo_loss"] for row in expected], rel=1e-5)
    assert actual[2]["dpo_loss"] < math.log(2) - 1e-3, "step 2 measured against the resumed weights"
