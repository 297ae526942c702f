"""The RL algorithm keys in the workflow, on the noop backend: every `algorithm:` preset in sync,
stream-minibatch and async mode, and each key's stage doing what it says (dynamic sampling's
rounds, overlong shaping and filtering, KL in the loss, corrections and the mismatch metrics)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kitchen.engine.errors import ConfigError
from kitchen.families.rl.presets import ALGORITHM_NAMES, ALGORITHM_PRESETS
from kitchen.testing import RunResult
from tests.rl_workflow.toy_task import TOY_RECIPE

Run = Callable[..., RunResult]

FAST = ("rl.num_batches=2", "eval.every=0", "checkpoint.save_every=0", "rl.transcript_groups=0")
MODES = {
    "sync": (),
    "stream": ("rl.stream_minibatch.num_minibatches=2",),
    "async": ("rl.async_config.max_steps_off_policy=1",),
}


def trained_calls(run: RunResult) -> list[tuple[str, dict[str, object]]]:
    methods = ("forward_backward", "forward_backward_custom")
    return [(call.method, call.summary) for call in run.calls if call.method in methods]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_every_preset_trains_in_every_mode(kitchen_run: Run, name: str, mode: str) -> None:
    run = kitchen_run(TOY_RECIPE, f"algorithm.preset={name}", *FAST, *MODES[mode])
    preset = ALGORITHM_PRESETS[name].settings
    assert [row["step"] for row in run.metrics] == [0, 1]
    calls = trained_calls(run)
    assert calls, "no update was submitted"
    if float(preset.get("kl_loss_coef", 0.0)) > 0:  # type: ignore[arg-type]
        # KL to the reference in the loss: the custom route, with the reference scored.
        assert {method for method, _ in calls} == {"forward_backward_custom"}
        assert all("loss/kl" in row for row in run.metrics)
    else:
        assert {summary["loss_fn"] for _, summary in calls} == {preset["loss_fn"]}
    for row in run.metrics:
        assert "mismatch/kl" in row and "mismatch/ratio_max" in row, row
        if "dynamic_sampling" in preset:
            assert row["dynamic_sampling/rounds"] >= 1.0
        if "overlong_buffer" in preset:
            assert "overlong/penalized_fraction" in row
        if preset["loss_fn"] in ("ppo", "gspo"):
            assert "loss/clipfrac_high" in row


def test_dynamic_sampling_samples_more_rounds_when_groups_are_constant(kitchen_run: Run) -> None:
    """Every group constant: each step spends its whole round budget and trains nothing."""
    run = kitchen_run(TOY_RECIPE, "constant_reward=true", "algorithm.dynamic_sampling.max_rounds=3", *FAST)
    assert run.column("dynamic_sampling/rounds") == [3.0, 3.0]
    assert run.column("dynamic_sampling/fill") == [0.0, 0.0]
    assert run.column("dynamic_sampling/groups_dropped") == [12.0, 12.0]
    assert trained_calls(run) == []
    # Rollout metrics are the first round's: one batch's worth of episodes.
    assert run.column("env/all/total_episodes") == [16, 16]


@pytest.mark.parametrize("mode", ["stream", "async"])
def test_dynamic_sampling_spends_the_budget_group_by_group_in_stream_and_async(kitchen_run: Run, mode: str) -> None:
    """Stream replaces each constant group as it finishes, async takes more groups: either way
    three batches' worth, none trained; stream logs its own batch, async every group it took."""
    run = kitchen_run(
        TOY_RECIPE, "constant_reward=true", "algorithm.dynamic_sampling.max_rounds=3", *FAST, *MODES[mode]
    )
    assert run.column("dynamic_sampling/rounds") == [3.0, 3.0]
    assert run.column("dynamic_sampling/groups_dropped") == [12.0, 12.0]
    assert trained_calls(run) == []
    assert run.column("env/all/total_episodes") == ([16, 16] if mode == "stream" else [48, 48])


def test_dynamic_sampling_stops_after_one_round_when_groups_differ(kitchen_run: Run) -> None:
    run = kitchen_run(TOY_RECIPE, "algorithm.dynamic_sampling.max_rounds=5", "rl.group_size=8", *FAST)
    for row in run.metrics:
        assert row["dynamic_sampling/fill"] == 1.0 or row["dynamic_sampling/rounds"] == 5.0
        assert row["dynamic_sampling/groups_sampled"] == 4 * row["dynamic_sampling/rounds"]


def long_reply(prompt: str) -> str:
    """A scripted reply longer than the toy's max_tokens (4): every reply is cut off there."""
    return "one two three four five six seven eight"


def test_overlong_filter_masks_truncated_replies(kitchen_run: Run) -> None:
    run = kitchen_run(TOY_RECIPE, "algorithm.overlong_filter=true", *FAST, replies=long_reply)
    assert run.column("overlong/filtered_fraction") == [1.0, 1.0]
    assert run.column("tokens/trained") == [0.0, 0.0]


def test_overlong_buffer_penalises_replies_in_the_buffer(kitchen_run: Run) -> None:
    """4 tokens of a budget of 4 with a buffer of 2: the full penalty, here 0.5."""
    run = kitchen_run(
        TOY_RECIPE,
        "algorithm.overlong_buffer.tokens=2",
        "algorithm.overlong_buffer.penalty_factor=0.5",
        *FAST,
        replies=long_reply,
    )
    assert run.column("overlong/penalized_fraction") == [1.0, 1.0]
    assert run.column("overlong/mean_penalty") == [-0.5, -0.5]


def test_mismatch_is_measured_and_mis_masks_what_leaves_the_band(kitchen_run: Run) -> None:
    """The sampler's logprobs shifted by -1 against the trainer's: every ratio is e^1, outside
    MIS's [1/2, 2] band, so every action token is masked and nothing is trained."""
    run = kitchen_run(TOY_RECIPE, "algorithm.rollout_correction.mis=token", *FAST, sampler_logprob_shift=-1.0)
    for row in run.metrics:
        assert row["mismatch/kl"] == pytest.approx(-1.0, abs=1e-5)
        assert row["mismatch/ratio_mean"] == pytest.approx(2.71828, rel=1e-4)
        assert row["mismatch/masked_fraction"] == 1.0
    forwards = [call for call in run.calls if call.method == "forward"]
    assert len(forwards) == 2  # one proximal-logprob pass per step


def test_tis_caps_the_weights(kitchen_run: Run) -> None:
    run = kitchen_run(
        TOY_RECIPE,
        "algorithm.rollout_correction.tis=token",
        "algorithm.rollout_correction.tis_cap=1.5",
        *FAST,
        sampler_logprob_shift=-1.0,
    )
    assert run.column("mismatch/truncated_fraction") == [1.0, 1.0]
    assert run.column("mismatch/masked_fraction") == [0.0, 0.0]


def test_clip_ratio_keys_reach_the_loss(kitchen_run: Run) -> None:
    run = kitchen_run(
        TOY_RECIPE,
        "algorithm.loss_fn=ppo",
        "algorithm.clip_ratio_low=0.1",
        "algorithm.clip_ratio_high=0.3",
        "algorithm.clip_ratio_c=3",
        *FAST,
    )
    configs = [summary.get("loss_fn_config") for _, summary in trained_calls(run)]
    assert configs and all(
        c == {"clip_low_threshold": 0.9, "clip_high_threshold": 1.3, "clip_ratio_c": 3.0} for c in configs
    ), configs


def test_an_entropy_bonus_is_refused_before_any_work_where_the_backend_cannot_run_it(kitchen_run: Run) -> None:
    with pytest.raises(ConfigError, match="entropy_coeff: backend 'noop' does not hand a custom loss"):
        kitchen_run(TOY_RECIPE, "algorithm.entropy_coeff=0.01", *FAST)


def test_decoupled_ppo_trains_async_around_the_proximal_policy(kitchen_run: Run) -> None:
    """AReaL's loss: one forward per step gives the proximal logprobs the update is kept near."""
    run = kitchen_run(TOY_RECIPE, "algorithm.loss_fn=decoupled_ppo", *FAST, *MODES["async"])
    assert {summary["loss_fn"] for _, summary in trained_calls(run)} == {"decoupled_ppo"}
    assert len([call for call in run.calls if call.method == "forward"]) == 2
    assert all("loss/clipfrac_high" in row for row in run.metrics)


def test_entropy_masking_is_refused_before_any_work_where_the_backend_cannot_run_it(kitchen_run: Run) -> None:
    refusal = r"algorithm\.top_entropy_quantile: backend 'noop' does not hand a custom loss"
    with pytest.raises(ConfigError, match=refusal):
        kitchen_run(TOY_RECIPE, "algorithm.top_entropy_quantile=0.2", *FAST)
