"""Acceptance (lean): the distillation recipes' defaults on the embedded tiny model, offline, with
the shipped arithmetic teacher. The full-length figures are in docs/tutorials/distillation.md and the closing note."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.engine.runs.metrics import read_metrics
from tests.helpers import run_cli


@pytest.mark.slow
def test_on_policy_distillation_halves_the_teacher_kl_and_closes_the_reward_gap(tmp_path: Path) -> None:
    """On the defaults (fewer evaluations, to save time): the KL to the teacher halves, and the
    held-out reward closes at least 40% of the gap to the teacher's. Measured (2026-11-25): reward
    0.59 -> 0.79 against the teacher's 1.0 (49% of the gap), still rising at the last step."""
    result = run_cli("run", "distill_on_policy", "eval.every=20", f"log_path={tmp_path}")
    assert result.returncode == 0, result.stderr
    rows = read_metrics(tmp_path / "metrics.jsonl")
    kl = [row["teacher_kl"] for row in rows]
    assert len(kl) == 40 and sum(kl[-5:]) / 5 <= 0.5 * sum(kl[:5]) / 5, kl
    rewards = [row["eval/all/reward/total"] for row in rows if "eval/all/reward/total" in row]
    teacher = rows[0]["teacher_eval/all/reward/total"]
    assert teacher > rewards[0] + 0.3, (teacher, rewards)  # the teacher really is better
    assert rewards[-1] - rewards[0] >= 0.4 * (teacher - rewards[0]), (teacher, rewards)
    assert "eval/teacher_kl/held_out" in rows[0]


@pytest.mark.slow
def test_prompt_distillation_cuts_the_held_out_nll_of_the_teachers_answers(tmp_path: Path) -> None:
    result = run_cli("run", "distill_prompt", "data.num_epochs=1", f"log_path={tmp_path}")
    assert result.returncode == 0, result.stderr
    rows = read_metrics(tmp_path / "metrics.jsonl")
    before, after = rows[0]["eval/nll_initial"], rows[-1]["eval/nll"]
    assert after <= 0.7 * before, (before, after)
    assert (tmp_path / "distill" / "train.done").exists() and (tmp_path / "distill" / "eval.jsonl").exists()
