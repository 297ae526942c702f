"""The RL workflow on the local backend (embedded tiny model): on-policy, the trainer's logprobs
of the sampled tokens equal the sampler's, so `optim/kl_sample_train_v2` is ~0 at the first step."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.hooks import Hooks
from kitchen.engine.launch import run_recipe
from kitchen.engine.runs.metrics import read_metrics
from tests.rl_workflow.runs import CrashAfterStep, without_times
from tests.rl_workflow.toy_task import TOY_RECIPE, ToyConfig


def run_local(log_path: Path, *overrides: str, hooks: Sequence[Hooks] = ()) -> list[dict[str, Any]]:
    args = [
        "backend=local",
        f"log_path={log_path}",
        "eval.every=0",
        "checkpoint.save_every=0",
        "rl.transcript_groups=0",
    ]
    config = load_config(ToyConfig, None, [*args, *overrides])
    return read_metrics(run_recipe(TOY_RECIPE, config, hooks=hooks, progress=False).metrics)


@pytest.mark.parametrize("turns", [1, 3])
def test_first_step_is_on_policy(tmp_path: Path, turns: int) -> None:
    rows = run_local(tmp_path, "rl.num_batches=1", f"turns={turns}", "sampling.max_tokens=6")
    first = rows[0]
    assert first["env/all/turns_per_episode"] == turns
    assert first["optim/kl_sample_train_v2"] < 1e-3
    assert abs(first["optim/kl_sample_train_v1"]) < 1e-3
    assert first["optim/entropy"] > 0.1  # a random-init model samples with real uncertainty
    assert first["optim/token_entropy"] > 0.1  # the full distribution's entropy, from the training pass
    assert abs(first["mismatch/kl"]) < 1e-3 and first["mismatch/ratio_max"] < 1.01


def test_entropy_bonus_and_kl_in_the_loss_take_the_custom_route(tmp_path: Path) -> None:
    """The local backend hands the objective per-token entropies; the reference is the policy
    as RL starts, so the first step's KL in the loss is ~0."""
    rows = run_local(
        tmp_path,
        "rl.num_batches=1",
        "algorithm.entropy_coeff=0.01",
        "algorithm.kl_loss_coef=0.1",
        "algorithm.loss_aggregation=token_mean",
    )
    assert rows[0]["loss/entropy"] > 0.1
    assert abs(rows[0]["loss/kl"]) < 1e-4


def test_second_substep_trains_off_policy(tmp_path: Path) -> None:
    """With two substeps the second chunk is scored after the first update: the agreement metric
    sees that drift, so it measures something."""
    rows = run_local(
        tmp_path, "rl.num_batches=1", "rl.num_substeps=2", "optimizer.learning_rate=0.05", "rl.groups_per_batch=4"
    )
    assert rows[0]["optim/kl_sample_train_v2"] > 1e-3


@pytest.mark.slow
def test_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    """Sampling seeds derive from (seed, step, group, prompt), so after a crash the resumed run
    samples, trains and logs exactly what the uninterrupted run did."""
    args = [
        "rl.num_batches=4",
        "checkpoint.save_every=2",
        "turns=2",
        "algorithm.kl_penalty_coef=0.1",
        "optimizer.learning_rate=0.01",
    ]
    expected = run_local(tmp_path / "whole", *args)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_local(tmp_path / "crashed", *args, hooks=[CrashAfterStep(2)])
    resumed = run_local(tmp_path / "crashed", *args)
    assert [row["step"] for row in resumed] == [0, 1, 2, 3]
    for got, want in zip(without_times(resumed), without_times(expected), strict=True):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize(
    "mode",
    [
        ["rl.async_config.max_steps_off_policy=1"],
        ["rl.stream_minibatch.num_minibatches=2"],
    ],
)
def test_other_modes_run_on_the_local_backend(tmp_path: Path, mode: list[str]) -> None:
    rows = run_local(tmp_path, "rl.num_batches=3", "turns=2", *mode)
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert all(row["env/all/total_episodes"] == 16 and "optim/kl_sample_train_v2" in row for row in rows)
    assert all(row.get("async/steps_off_policy_max", 0) <= 1 for row in rows)


@pytest.mark.parametrize("loss_fn", ["gspo", "ppo"])
def test_sequence_level_gspo_trains_on_the_local_backend(tmp_path: Path, loss_fn: str) -> None:
    """gspo reads the action mask as its `sequence_ratio_mask` and runs per datum; on policy at the
    first step every sequence ratio is 1, so it trains like ppo."""
    rows = run_local(tmp_path, "rl.num_batches=2", "turns=2", f"algorithm.loss_fn={loss_fn}")
    assert [row["step"] for row in rows] == [0, 1]
    assert rows[0]["optim/kl_sample_train_v2"] < 1e-3


def test_top_entropy_quantile_trains_the_high_entropy_share_of_tokens(tmp_path: Path) -> None:
    """TRL's `top_entropy_quantile` as `algorithm.top_entropy_quantile`: the custom route, with
    the share of action tokens kept (`loss/high_entropy_tokens`) about rho."""
    rows = run_local(tmp_path, "rl.num_batches=2", "algorithm.top_entropy_quantile=0.2")
    assert [row["step"] for row in rows] == [0, 1]
    for row in rows:
        assert 0.2 <= row["loss/high_entropy_tokens"] < 0.5, row["loss/high_entropy_tokens"]
