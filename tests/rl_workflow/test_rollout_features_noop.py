"""Rollout limits and stop reasons, the failure policy, parse-error masking and the extra metrics
(post-update KL, token accounting, async staleness) through the RL workflow on the noop backend,
in every mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.engine.runner import StageFailure
from tests.rl_workflow.runs import noop_backend, run_toy
from tests.rl_workflow.toy_task import ToyConfig

QUICK = ["rl.num_batches=2", "eval.every=0", "checkpoint.save_every=0"]
MODES = {
    "sync": [],
    "stream_minibatch": ["rl.stream_minibatch.num_minibatches=2"],
    "async": ["rl.async_config.max_steps_off_policy=1"],
}


@pytest.mark.parametrize("mode", list(MODES))
def test_max_episode_turns_stops_episodes_and_termination_reward_zeroes_them(tmp_path: Path, mode: str) -> None:
    _, rows = run_toy(
        tmp_path, *MODES[mode], *QUICK, "turns=3", "episode.max_turns=2", "episode.termination_reward=zero"
    )
    for row in rows:
        assert row["env/all/stop/max_turns"] == 1.0 and row["env/all/stop/done"] == 0.0
        assert row["env/all/turns_per_episode"] == 2.0
        assert row["env/all/reward/total"] == 0.0


def test_a_fixed_termination_reward_is_added(tmp_path: Path) -> None:
    _, plain = run_toy(tmp_path / "a", *QUICK, "turns=3", "episode.max_turns=1")
    _, bonus = run_toy(tmp_path / "b", *QUICK, "turns=3", "episode.max_turns=1", "episode.termination_reward=-1.5")
    for p, b in zip(plain, bonus, strict=True):
        assert b["env/all/reward/total"] == pytest.approx(p["env/all/reward/total"] - 1.5)


def test_max_episode_tokens_and_overflow(tmp_path: Path) -> None:
    _, rows = run_toy(tmp_path / "t", *QUICK, "turns=3", "sampling.max_tokens=4", "episode.max_tokens=5")
    assert all(row["env/all/stop/max_tokens"] == 1.0 for row in rows)  # 4 + 4 >= 5: two turns
    _, rows = run_toy(tmp_path / "o", *QUICK, "episode.max_context_tokens=2")
    assert all(row["env/all/stop/overflow"] == 1.0 and row["env/all/total_turns"] == 0 for row in rows)
    assert all("optim/loss:sum" not in row for row in rows)  # nothing sampled, nothing trained


def test_an_episode_timeout_is_a_stop_reason(tmp_path: Path) -> None:
    backend = noop_backend(tmp_path, latency={"sample": 0.05})
    _, rows = run_toy(tmp_path, *QUICK, "turns=3", "episode.timeout_s=0.08", backend=backend)
    assert all(row["env/all/stop/timeout"] == 1.0 for row in rows)


def test_limit_settings_are_checked_at_config_time() -> None:
    with pytest.raises(ConfigError, match=r"episode\.max_turns"):
        load_config(ToyConfig, None, ["episode.max_turns=0"])
    with pytest.raises(ConfigError, match="termination_reward"):
        load_config(ToyConfig, None, ["episode.termination_reward=half"])
    with pytest.raises(ConfigError, match=r"episode\.failure"):
        load_config(ToyConfig, None, ["episode.failure.policy=ignore"])


def test_fail_fast_is_the_default(tmp_path: Path) -> None:
    with pytest.raises(StageFailure, match="flaky env broke"):
        run_toy(tmp_path, *QUICK, "failing_members=1")


@pytest.mark.parametrize("mode", list(MODES))
def test_retry_rolls_a_failed_group_out_again(tmp_path: Path, mode: str) -> None:
    _, rows = run_toy(
        tmp_path, *MODES[mode], *QUICK, "failing_members=1", "fail_attempts=1", "episode.failure.policy=retry"
    )
    assert [row["rollout/groups_retried"] for row in rows] == [4.0, 4.0]
    assert all(row["rollout/groups_dropped"] == 0.0 and row["env/all/total_episodes"] == 16 for row in rows)


@pytest.mark.parametrize("mode", list(MODES))
def test_min_viable_group_keeps_or_drops_groups(tmp_path: Path, mode: str) -> None:
    policy = "episode.failure.policy=min_viable_group"
    _, rows = run_toy(tmp_path / "keep", *MODES[mode], *QUICK, "failing_members=1", policy)
    for row in rows:
        assert row["rollout/episodes_failed"] == 4.0 and row["rollout/groups_dropped"] == 0.0
        assert row["env/all/total_episodes"] == 12 and row["env/all/stop/error"] == 0.25
    if mode == "async":  # the trainer would wait forever for a group: the run fails instead
        with pytest.raises(StageFailure, match="were all dropped"):
            run_toy(tmp_path / "drop", *MODES[mode], *QUICK, "failing_members=3", policy)
        return
    _, rows = run_toy(tmp_path / "drop", *MODES[mode], *QUICK, "failing_members=3", policy)
    assert all(row["rollout/groups_dropped"] == 4.0 and "env/all/total_episodes" not in row for row in rows)


@pytest.mark.parametrize("mode", list(MODES))
def test_parse_errors_are_counted_and_masked(tmp_path: Path, mode: str) -> None:
    _, trained = run_toy(tmp_path / "t", *MODES[mode], *QUICK, "parse_errors=true")
    _, masked = run_toy(tmp_path / "m", *MODES[mode], *QUICK, "parse_errors=true", "episode.parse_error_policy=mask")
    for t, m in zip(trained, masked, strict=True):
        assert 0.0 < t["env/all/frac_parse_errors"] < 1.0
        assert t["tokens/trained"] == t["tokens/sampled"]
        assert m["tokens/trained"] < m["tokens/sampled"]
        assert m["num_masked_parse_error_turns"] == pytest.approx(m["env/all/frac_parse_errors"] * 16)


@pytest.mark.parametrize("mode", list(MODES))
def test_post_update_kl_and_token_accounting(tmp_path: Path, mode: str) -> None:
    backend = noop_backend(tmp_path)
    _, rows = run_toy(tmp_path, *MODES[mode], *QUICK, "turns=2", "rl.post_update_kl=true", backend=backend)
    for row in rows:
        assert row["optim/kl_pre_post_v2"] >= 0.0 and "optim/kl_pre_post" in row
        assert row["tokens/prompt"] == row["env/all/total_ob_tokens"]
        assert row["tokens/sampled"] == row["env/all/total_ac_tokens"] == row["tokens/trained"]
        assert 0 < row["tokens/prompt_shared"] < row["tokens/prompt"]
    # one compute_logprobs per trained datum, after each update
    assert sum(c.method == "compute_logprobs" for c in backend.calls) == sum(row["num_datums"] for row in rows)
    _, plain = run_toy(tmp_path / "plain", *MODES[mode], *QUICK)
    assert all("optim/kl_pre_post" not in row for row in plain)


def test_async_mode_logs_staleness(tmp_path: Path) -> None:
    _, rows = run_toy(tmp_path, *MODES["async"], *QUICK)
    for row in rows:
        assert 0 <= row["async/steps_off_policy_mean"] <= row["async/steps_off_policy_max"] <= 1
