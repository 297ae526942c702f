"""The sync RL workflow end to end on the noop backend: metrics, transcripts, evals, checkpoints,
substeps, multi-turn episodes, the KL penalty and exact resume."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.engine.runs.checkpoints import read_records
from tests.rl_workflow.runs import CrashAfterStep, noop_backend, run_toy, without_times
from tests.rl_workflow.toy_task import ToyConfig

STEP_KEYS = (
    "env/all/reward/total",
    "env/parity/reward/total",
    "env/all/even",
    "by_group/frac_mixed",
    "by_group/frac_all_good",
    "by_group/frac_all_bad",
    "ac_tokens_per_turn",
    "optim/kl_sample_train_v1",
    "optim/kl_sample_train_v2",
    "optim/entropy",
    "optim/loss:sum",
    "num_datums",
    "time/do_rollouts",
    "time/rl_train_step",
    "time/refresh_sampler",
)


def test_each_step_logs_rollout_and_training_metrics(tmp_path: Path) -> None:
    _, rows = run_toy(tmp_path)
    assert [row["step"] for row in rows] == [0, 1, 2, 3]
    for row in rows:
        missing = [key for key in STEP_KEYS if key not in row]
        assert not missing, f"step {row['step']} lacks {missing}"
        fractions = row["by_group/frac_mixed"] + row["by_group/frac_all_good"] + row["by_group/frac_all_bad"]
        assert fractions == pytest.approx(1.0)
        assert 0.0 <= row["env/all/reward/total"] <= 1.0 + 0.01 * 3
        assert row["optim/kl_sample_train_v2"] >= 0.0


def test_eval_runs_before_the_update_every_eval_every_steps_and_at_the_last(tmp_path: Path) -> None:
    backend = noop_backend(tmp_path)
    _, rows = run_toy(tmp_path, backend=backend)
    assert [row["step"] for row in rows if "eval/all/reward/total" in row] == [0, 2, 3]
    # The eval at step 0 samples with the initial weights (version 0): before the first update.
    first_eval = next(c for c in backend.calls if c.method == "sample" and c.summary["prompt_tokens"] > 0)
    assert first_eval.summary["version"] == 0


def test_transcripts_are_written_per_step(tmp_path: Path) -> None:
    run_dir, _ = run_toy(tmp_path, "rl.transcript_groups=1", "turns=2")
    files = sorted((run_dir.path / "rollouts").glob("step_*.jsonl"))
    assert [f.name for f in files] == [f"step_{s:06d}.jsonl" for s in range(4)]
    records = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert len(records) == 4  # one group of group_size 4
    assert {r["group"] for r in records} == {0}
    first = records[0]
    assert first["tags"] == ["parity"] and len(first["turns"]) == 2
    assert first["turns"][0]["observation"].startswith("User: Say something about")
    assert first["turns"][1]["observation"].startswith(first["turns"][0]["observation"])
    assert first["total_reward"] == sum(t["reward"] for t in first["turns"])


def test_checkpoints_every_save_every_and_final(tmp_path: Path) -> None:
    run_dir, _ = run_toy(tmp_path)
    records = read_records(run_dir.checkpoints)
    assert [(r.name, r.step) for r in records] == [("000002", 2), ("000004", 4), ("final", 4)]
    assert all(r.state_path and r.sampler_path for r in records)


def test_loss_fn_and_substeps_follow_the_config(tmp_path: Path) -> None:
    backend = noop_backend(tmp_path)
    _, rows = run_toy(tmp_path, "algorithm.loss_fn=ppo", "rl.num_substeps=2", backend=backend)
    training = [c for c in backend.calls if c.method in ("forward_backward", "optim_step")]
    assert {c.summary["loss_fn"] for c in training if c.method == "forward_backward"} == {"ppo"}
    assert [c.method for c in training] == ["forward_backward", "optim_step"] * 2 * len(rows)
    assert all(row["optim/substeps"] == 2 for row in rows)


def test_gspo_gets_the_action_mask_as_its_sequence_ratio_mask(tmp_path: Path) -> None:
    """The noop backend checks inputs as the local one does: without the mask the run would fail."""
    backend = noop_backend(tmp_path)
    _, rows = run_toy(tmp_path, "algorithm.loss_fn=gspo", "turns=2", backend=backend)
    fbs = [c for c in backend.calls if c.method == "forward_backward"]
    assert len(fbs) == len(rows) and {c.summary["loss_fn"] for c in fbs} == {"gspo"}


def test_multi_turn_episodes_train_as_one_datum_each(tmp_path: Path) -> None:
    _, rows = run_toy(tmp_path, "turns=3")
    for row in rows:
        assert row["env/all/turns_per_episode"] == 3
        # Every observation extends the previous one, so each episode is one datum.
        assert row["num_datums"] == row["env/all/total_episodes"]


def test_kl_penalty_scores_against_the_saved_reference(tmp_path: Path) -> None:
    backend = noop_backend(tmp_path)
    run_dir, rows = run_toy(
        tmp_path, "algorithm.kl_penalty_coef=0.5", "algorithm.kl_discount_factor=0.5", backend=backend
    )
    saves = [c for c in backend.calls if c.method == "save_weights_for_sampler" and c.summary["name"] == "reference"]
    assert len(saves) == 1
    scored = [c for c in backend.calls if c.method == "compute_logprobs"]
    assert scored and all(c.summary["version"] == 0 for c in scored)  # the frozen initial weights
    assert all("kl_policy_base" in row for row in rows)
    assert read_records(run_dir.checkpoints)[0].state["reference_path"]


@pytest.mark.parametrize("extra", [[], ["algorithm.kl_penalty_coef=0.5"]])
def test_resume_after_a_crash_matches_an_uninterrupted_run(tmp_path: Path, extra: list[str]) -> None:
    args = ["rl.num_batches=6", "checkpoint.save_every=2", *extra]
    _, expected = run_toy(tmp_path / "whole", *args)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_toy(tmp_path / "crashed", *args, hooks=[CrashAfterStep(3)])
    assert [r.name for r in read_records(tmp_path / "crashed" / "checkpoints.jsonl")] == ["000002", "000004"]
    _, resumed = run_toy(tmp_path / "crashed", *args)
    assert without_times(resumed) == without_times(expected)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("sampling.max_tokens=0", "max_tokens"),
        ("rl.group_size=0", "group_size"),
        ("algorithm.loss_fn=reinforce", "unknown loss_fn 'reinforce'"),
        ("algorithm.loss_fn=cross_entropy", "RL needs one of importance_sampling, ppo, cispo, dro, gspo"),
        ("algorithm.loss_fn_config.clip_low=0.5", "does not accept loss_fn_config keys ['clip_low']"),
        ("rl.async_config.max_steps_off_policy=-1", "max_steps_off_policy"),
    ],
)
def test_bad_settings_fail_before_the_run_naming_the_key(tmp_path: Path, override: str, named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_config(ToyConfig, None, [override])


def test_a_step_with_only_constant_groups_trains_on_the_first_one(tmp_path: Path) -> None:
    """`remove_constant_reward_groups` keeps one group when all are constant, and its zero-advantage
    datums are trained on (as the reference does), not silently dropped at assembly."""
    backend = noop_backend(tmp_path)
    _, rows = run_toy(tmp_path, "constant_reward=true", "algorithm.remove_constant_reward_groups=true", backend=backend)
    assert [row["by_group/frac_all_bad"] for row in rows] == [1.0] * 4
    assert all(row["num_datums"] == 4 and "optim/kl_sample_train_v2" in row for row in rows)  # group_size 4
    assert len([c for c in backend.calls if c.method == "forward_backward"]) == len(rows)


def test_warm_start_trains_on_demonstrations_then_resets_the_optimizer(tmp_path: Path) -> None:
    backend = noop_backend(tmp_path)
    _, rows = run_toy(tmp_path, "warm_start.steps=3", "warm_start.batch_size=5", backend=backend)
    first_sample = next(i for i, c in enumerate(backend.calls) if c.method == "sample")
    before_rl = [c for c in backend.calls[:first_sample] if c.client_kind != "sampling"]
    warm = next(i for i, c in enumerate(before_rl) if c.summary.get("loss_fn") == "cross_entropy")
    assert [(c.method, c.summary.get("loss_fn"), c.summary.get("num_data")) for c in before_rl[warm : warm + 6]] == [
        ("forward_backward", "cross_entropy", 5),
        ("optim_step", None, None),
    ] * 3
    save, reload = before_rl[warm + 6 : warm + 8]
    assert (save.method, save.summary["name"]) == ("save_state", "warm_start")
    # RL starts on a new client made from the warm-started weights, without their optimizer state
    assert (reload.method, reload.summary["with_optimizer"]) == ("create_training_client_from_state", False)
    assert reload.summary["path"].endswith("warm_start")
    assert rows[0]["warm_start/nll_first"] > 0


def test_a_resumed_run_skips_the_warm_start(tmp_path: Path) -> None:
    args = ["warm_start.steps=2", "rl.num_batches=4", "checkpoint.save_every=2"]
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_toy(tmp_path, *args, hooks=[CrashAfterStep(2)])
    backend = noop_backend(tmp_path)
    _, rows = run_toy(tmp_path, *args, backend=backend)
    assert not [c for c in backend.calls if c.summary.get("loss_fn") == "cross_entropy"]
    assert [row["step"] for row in rows] == [0, 1, 2, 3] and "warm_start/nll_first" in rows[0]
