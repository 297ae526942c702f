"""Decisions: each choice's reply tokens, replies read as choices, the reward `log target - log p`
from the sampler's logprobs (and the floor for other replies), bad records, and the recipe on the
noop backend with a scripted chooser."""

from __future__ import annotations

import asyncio
import json
import math
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from kitchen import DataError
from kitchen.testing import RunResult
from recipes.envs.decisions import (
    DEFAULT_DATA,
    Decision,
    DecisionGroup,
    TeacherChoices,
    choice_replies,
    load_decisions,
    read_choice,
)
from tests.rl_workflow.envs_common import renderer, reply_tokens
from train_core.rl.types import Trajectory, Transition
from train_core.types import ModelInput, TokensWithLogprobs

R = renderer()
ITEM = Decision("Bring what?", ("sunglasses", "an umbrella", "a coat"), (0.7, 0.1, 0.2))


def test_each_choice_has_its_own_reply_and_a_reply_is_read_back_as_its_choice() -> None:
    replies = choice_replies(R, ITEM.labels)
    assert len({tuple(r) for r in replies}) == 3 and all(replies)
    for index, label in enumerate(ITEM.labels):
        assert read_choice(reply_tokens(R, label), replies) == index
    assert read_choice(reply_tokens(R, "umbrella"), replies) is None
    assert read_choice(replies[1][:-1] or [0], replies) is None  # a reply cut inside a letter names nothing


def rewarded(texts: list[str], logprob: float) -> list[tuple[float, dict[str, float]]]:
    """Group rewards for replies `texts`, each token sampled with `logprob`."""
    group = DecisionGroup(ITEM, R, len(texts), floor=0.01)

    async def run() -> list[tuple[float, dict[str, float]]]:
        envs = await group.make_envs()
        trajectories = []
        for env, text in zip(envs, texts, strict=True):
            await env.initial_observation()
            tokens = reply_tokens(R, text)
            result = await env.step(tokens)
            action = TokensWithLogprobs(tokens, [logprob] * len(tokens))
            transition = Transition(ModelInput.empty(), action, result.reward, True, result.metrics, result.parse_ok)
            trajectories.append(Trajectory([transition], ModelInput.empty()))
        return await group.compute_group_rewards(trajectories, envs)

    return asyncio.run(run())


def test_a_choice_is_rewarded_log_target_minus_its_logprob_and_other_replies_the_floor() -> None:
    replies = choice_replies(R, ITEM.labels)
    out = rewarded(["A", "C", "maybe"], logprob=-0.5)
    log_p = [-0.5 * len(replies[0]), -0.5 * len(replies[2])]
    assert out[0][0] == pytest.approx(math.log(0.7) - log_p[0])
    assert out[1][0] == pytest.approx(math.log(0.2) - log_p[1])
    assert out[2][0] == pytest.approx(math.log(0.01))
    metrics = out[0][1]
    assert metrics["kl_to_target"] == pytest.approx(-((math.log(0.7) - log_p[0]) + (math.log(0.2) - log_p[1])) / 2)
    # Frequencies A 1/3, B 0, C 1/3 against the target 0.7, 0.1, 0.2.
    assert metrics["tv_to_target"] == pytest.approx(0.5 * (abs(1 / 3 - 0.7) + 0.1 + abs(1 / 3 - 0.2)))
    assert all(m == metrics for _, m in out)


def test_the_reward_is_highest_on_average_at_the_target() -> None:
    """Expected reward under p, sum p * (log t - log p), is -KL(p || t): largest (zero) at p = t."""
    target = ITEM.target

    def expected(p: tuple[float, ...]) -> float:
        return sum(pi * (math.log(ti) - math.log(pi)) for pi, ti in zip(p, target, strict=True) if pi > 0)

    assert expected(target) == pytest.approx(0.0)
    for other in [(1 / 3, 1 / 3, 1 / 3), (0.9, 0.05, 0.05), (0.6, 0.2, 0.2)]:
        assert expected(other) < expected(target)


def test_the_shipped_records_load_and_a_bad_target_is_named_by_file_and_line(tmp_path: Path) -> None:
    assert len(load_decisions(DEFAULT_DATA)) >= 2
    path = tmp_path / "choices.jsonl"
    good = {"prompt": "p", "choices": ["a", "b"], "target": [0.5, 0.5]}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "target": [0.5, 0.6]}) + "\n")
    with pytest.raises(DataError, match=r"choices.jsonl.*2.*sum to 1"):
        load_decisions(str(path))


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_the_teacher_answers_from_the_target_at_its_share_else_uniformly(share: float) -> None:
    demos = TeacherChoices([ITEM], share)(random.Random(0), 3000)
    counts = Counter(reply["content"] for _, reply in demos)
    for label, target in zip(ITEM.labels, ITEM.target, strict=True):
        assert counts[label] / len(demos) == pytest.approx(share * target + (1 - share) / 3, abs=0.03)


SHORT = ("rl.num_batches=2", "warm_start.steps=2", "eval.every=1", "rl.groups_per_batch=2", "rl.group_size=4")


def test_the_recipe_runs_on_noop_and_logs_the_distance_to_the_target(kitchen_run: Callable[..., RunResult]) -> None:
    items = load_decisions(DEFAULT_DATA)
    always_a = kitchen_run("decisions", *SHORT, replies=lambda prompt: " A")  # the role_colon renderer writes " A"
    garbage = kitchen_run("decisions", *SHORT, replies=lambda prompt: "none of these")
    assert [row["step"] for row in always_a.metrics] == [0, 1]
    for row in always_a.metrics:
        assert row["eval/all/valid_choice"] == 1.0
        # Every reply is A: each prompt's TV distance is 1 - target[A]; the eval averages all prompts.
        assert row["eval/all/tv_to_target"] == pytest.approx(sum(1 - d.target[0] for d in items) / len(items))
        assert "eval/all/kl_to_target" in row
    for row in garbage.metrics:
        assert row["eval/all/valid_choice"] == 0.0 and "eval/all/kl_to_target" not in row
        assert row["eval/all/reward/total"] == pytest.approx(math.log(0.01))
