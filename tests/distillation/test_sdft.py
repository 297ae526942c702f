"""Self-distillation (SDFT): the teacher's top-K as [T, K] targets (positions, renormalisation,
multi-turn offsets), the workflow on the noop backend (sync and async, the loss it reports equal to
the targets' cross-entropy), bad settings refused, and the recipe's learning on the tiny model over
three seeds (slow)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from kitchen.engine.errors import ConfigError
from kitchen.engine.runs.metrics import read_metrics
from kitchen.testing import RunResult
from tests.helpers import run_cli
from train_core.self_distillation import teacher_view, topk_forward_kl, topk_target_datum
from train_core.types import Datum, ModelInput, TensorData

SHORT = ["rl.num_batches=3", "warm_start.steps=2", "eval.every=2", "rl.groups_per_batch=4"]


def student_datum(tokens: list[int], mask: list[float]) -> Datum:
    """A datum as RL assembles it: inputs tokens[:-1], targets tokens[1:], the action mask."""
    return Datum(
        ModelInput.from_ints(tokens[:-1]),
        {
            "target_tokens": TensorData.from_list(tokens[1:], "int64"),
            "mask": TensorData.from_list(mask, "float32"),
        },
    )


def test_each_action_position_reads_the_teacher_row_that_predicts_its_token() -> None:
    # student: prompt 1 2 3, reply 7 8, an observation 9, reply 10; targets are tokens[1:]
    datum = student_datum([1, 2, 3, 7, 8, 9, 10], [0, 0, 1, 1, 0, 1])
    view = teacher_view(datum, [50, 51, 52, 53])
    assert view is not None and view.tokens == [50, 51, 52, 53, 7, 8, 9, 10]
    for index in (2, 3, 5):  # each action target index
        predicted = datum.loss_fn_inputs["target_tokens"].tolist()[index]
        # PromptScores row r predicts teacher token r + 1
        assert view.tokens[index + view.offset + 1] == predicted
    assert teacher_view(student_datum([1, 2, 3], [0, 0]), [50]) is None


def test_targets_are_the_renormalised_top_k_at_action_positions_only() -> None:
    datum = student_datum([1, 2, 3, 7, 8], [0, 0, 1, 1])
    view = teacher_view(datum, [50, 51])
    assert view is not None
    rows = [[(i, -1.0)] for i in range(len(view.tokens) - 1)]
    rows[2 + view.offset] = [(7, math.log(0.5)), (4, math.log(0.3))]
    rows[3 + view.offset] = [(8, math.log(0.9))]
    targets = topk_target_datum(datum, view, rows, k=3)
    grid = targets.datum.loss_fn_inputs["target_tokens"].to_torch()
    weights = targets.datum.loss_fn_inputs["weights"].to_torch()
    assert grid.shape == (4, 3) and weights.shape == (4, 3)
    assert grid[2].tolist() == [7, 4, -1] and weights[2].tolist() == pytest.approx([0.625, 0.375, 0.0])
    assert grid[3].tolist() == [8, -1, -1] and weights[3].tolist() == pytest.approx([1.0, 0.0, 0.0])
    assert (weights[:2] == 0).all() and (grid[:2] == -1).all()
    expected_entropy = -(0.625 * math.log(0.625) + 0.375 * math.log(0.375))
    assert targets.positions == 2 and targets.teacher_entropy == pytest.approx(expected_entropy)
    skipped = topk_target_datum(datum, view, rows, k=3, skip_first=1)
    assert skipped.positions == 1 and (skipped.datum.loss_fn_inputs["weights"].to_torch()[2] == 0).all()


def test_the_reported_kl_is_zero_when_the_student_matches_the_teacher() -> None:
    datum = student_datum([1, 2, 3, 7], [0, 0, 1])
    view = teacher_view(datum, [50])
    assert view is not None
    rows = [[(7, math.log(0.75)), (4, math.log(0.25))] for _ in range(len(view.tokens) - 1)]
    targets = topk_target_datum(datum, view, rows, k=2)
    matching = torch.full((3, 2), float("nan"))
    matching[2] = torch.tensor([math.log(0.75), math.log(0.25)])
    assert topk_forward_kl([targets], [matching]) == pytest.approx(0.0, abs=1e-6)
    worse = matching.clone()
    worse[2] = torch.tensor([math.log(0.25), math.log(0.75)])
    assert topk_forward_kl([targets], [worse]) == pytest.approx(0.5 * math.log(3), rel=1e-6)


@pytest.mark.parametrize("mode", [[], ["rl.async_config.max_steps_off_policy=1"]], ids=["sync", "async"])
def test_sdft_trains_on_the_teachers_top_k(kitchen_run: Callable[..., RunResult], mode: list[str]) -> None:
    run = kitchen_run("sdft", *SHORT, "sdft.topk=4", *mode)
    rows = run.metrics
    assert [row["step"] for row in rows] == [0, 1, 2]
    for row in rows:
        assert row["sdft/positions"] > 0 and row["sdft/topk_kl"] >= -1e-6
        # the loss the backend summed over the K columns is the targets' cross-entropy
        cross_entropy = row["sdft/positions"] * (row["sdft/topk_kl"] + row["sdft/teacher_entropy"])
        assert row["optim/loss:sum"] == pytest.approx(cross_entropy, rel=1e-3)
    assert "eval/all/reward/total" in rows[0]
    assert (run.path / "checkpoints.jsonl").exists()


def test_stream_minibatch_and_bad_templates_are_refused(kitchen_run: Callable[..., RunResult]) -> None:
    with pytest.raises(ConfigError, match="sync or async"):
        kitchen_run("sdft", *SHORT, "rl.stream_minibatch.num_minibatches=2")
    with pytest.raises(ConfigError, match="golden_answer"):
        kitchen_run("sdft", *SHORT, "sdft.demo_template=just {question}")


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recipe's warm start, once: the habits a pretrained model brings (see recipes/sdft.py)."""
    path = tmp_path_factory.mktemp("sdft_warm")
    result = run_cli("run", "sdft", "rl.num_batches=1", "eval.every=0", f"log_path={path}")
    assert result.returncode == 0, result.stderr
    return path / "checkpoints" / "weights" / "warm_start"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sdft_raises_the_reward_without_the_demonstration(warm_start: Path, tmp_path: Path, seed: int) -> None:
    """From the recipe's warm start, 10 SDFT steps raise the held-out reward on plain questions by
    at least 0.1 for every seed, and the KL to the teacher's top-K falls. Measured (2026-11-28,
    2 cores, these commands): 0.47 -> 0.78, 0.41 -> 0.68, 0.43 -> 0.71; KL (first 3 -> last 3
    steps) 0.094 -> 0.020, 0.088 -> 0.044, 0.108 -> 0.065."""
    overrides: list[Any] = [f"seed={seed}", f"load_checkpoint_path={warm_start}", "warm_start.steps=0"]
    result = run_cli("run", "sdft", *overrides, "rl.num_batches=10", "eval.every=10", f"log_path={tmp_path}")
    assert result.returncode == 0, result.stderr
    rows = read_metrics(tmp_path / "metrics.jsonl")
    rewards = [row["eval/all/reward/total"] for row in rows if "eval/all/reward/total" in row]
    assert len(rewards) == 2 and rewards[1] - rewards[0] >= 0.1, rewards
    kl = [row["sdft/topk_kl"] for row in rows]
    assert sum(kl[-3:]) / 3 < sum(kl[:3]) / 3, kl
