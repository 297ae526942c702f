"""Forecasting: probabilities read from replies, the Brier reward, the held-out set's calibration,
the teacher's slips, bad records, and the recipe on the noop backend with a scripted forecaster."""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from kitchen import DataError
from kitchen.testing import RunResult
from recipes.envs.forecasting import (
    ForecastEnv,
    ForecastGroup,
    Question,
    TeacherForecasts,
    load_questions,
    marble_question,
    read_probability,
)
from tests.rl_workflow.envs_common import renderer, reply_tokens
from train_core.calibration import calibration
from train_core.rl.types import Trajectory

R = renderer()


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0.3", 0.3),
        (".25", 0.25),
        ("I say 30%", 0.3),
        ("1", 1.0),
        ("0", 0.0),
        ("1.5", None),
        ("maybe", None),
        ("2 of 4: 0.5", 0.5),
        ("150%", None),
    ],
)
def test_probabilities_are_read_from_the_last_number(text: str, value: float | None) -> None:
    assert read_probability(text) == value


def answer(env: ForecastEnv, text: str) -> tuple[float, dict[str, float]]:
    async def run() -> tuple[float, dict[str, float]]:
        await env.initial_observation()
        result = await env.step(reply_tokens(R, text))
        assert result.episode_done
        return result.reward, result.metrics

    return asyncio.run(run())


def test_the_reward_is_minus_the_brier_score_and_no_forecast_scores_the_worst() -> None:
    happened = Question("Will it rain?", 1.0)
    reward, metrics = answer(ForecastEnv(happened, R), "0.8")
    assert reward == pytest.approx(-0.04) and metrics == {"brier": pytest.approx(0.04), "valid_forecast": 1.0}
    assert answer(ForecastEnv(Question("q", 0.0), R), "0.8")[0] == pytest.approx(-0.64)
    assert answer(ForecastEnv(happened, R), "no idea") == (-1.0, {"brier": 1.0, "valid_forecast": 0.0})


def test_the_held_out_group_logs_the_sets_calibration() -> None:
    rng = random.Random(0)
    questions = [marble_question(rng, 4) for _ in range(40)]
    forecasts = [min(1.0, q.probability + 0.1) if q.probability is not None else 0.0 for q in questions]
    group = ForecastGroup(questions, R, "forecasting", num_bins=5, calibrate=True)

    async def run() -> list[tuple[float, dict[str, float]]]:
        envs = await group.make_envs()
        for env, forecast in zip(envs, forecasts, strict=True):
            await env.step(reply_tokens(R, f"{forecast:g}"))
        empty = [Trajectory([], final_ob=None) for _ in envs]  # type: ignore[arg-type]
        return await group.compute_group_rewards(empty, envs)

    out = asyncio.run(run())
    expected = calibration(forecasts, [q.outcome for q in questions], 5)
    assert out[0][1]["calibration/ece"] == pytest.approx(expected.ece)
    assert out[0][1]["calibration/reliability"] == pytest.approx(expected.reliability)
    assert all(reward == 0.0 and metrics == out[0][1] for reward, metrics in out)


def test_generated_outcomes_follow_the_stated_odds() -> None:
    rng = random.Random(1)
    questions = [marble_question(rng, 4) for _ in range(4000)]
    for k in range(5):
        drawn = [q.outcome for q in questions if q.probability == k / 4]
        assert abs(sum(drawn) / len(drawn) - k / 4) < 0.06
        assert all(f" {k} " in q.text for q in questions if q.probability == k / 4)


def test_the_teacher_is_right_except_at_its_error_rate() -> None:
    demos = TeacherForecasts(None, 4, 0.5)(random.Random(0), 400)
    right = 0
    for user, reply in demos:
        k = int(re.search(r"has (\d+)", user["content"]).group(1))  # type: ignore[union-attr]
        right += float(reply["content"]) == k / 4
    assert 0.5 < right / len(demos) < 0.75  # half right, plus random answers that happen to be right


def test_a_bad_record_is_named_by_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "questions.jsonl"
    path.write_text(
        json.dumps({"question": "Rain?", "outcome": 1}) + "\n" + json.dumps({"question": "Snow?", "outcome": 2}) + "\n"
    )
    with pytest.raises(DataError, match=r"questions.jsonl.*2.*outcome"):
        list(load_questions(str(path)))


def forecaster(answer: Callable[[int, int], str]) -> Callable[[str], str]:
    """A scripted model answering from the bag in the prompt's last question."""

    def reply(prompt: str) -> str:
        k, other = (int(n) for n in re.findall(r"has (\d+) \w+ and (\d+)", prompt)[-1])
        return answer(k, k + other)

    return reply


def test_the_recipe_runs_on_noop_and_an_honest_forecaster_is_calibrated(
    kitchen_run: Callable[..., RunResult],
) -> None:
    short = ("rl.num_batches=2", "warm_start.steps=2", "eval.every=1", "rl.groups_per_batch=4")
    honest = kitchen_run("forecasting", *short, replies=forecaster(lambda k, n: f"{k / n:g}"))
    hedger = kitchen_run("forecasting", *short, replies=forecaster(lambda k, n: "0.5"))
    for run in (honest, hedger):
        assert [row["step"] for row in run.metrics] == [0, 1]
        assert all(row["eval/all/valid_forecast"] == 1.0 for row in run.metrics)
    last, hedged = honest.metrics[-1], hedger.metrics[-1]
    assert last["eval/all/calibration/ece"] < 0.12
    assert last["eval/all/calibration/resolution"] > 0.1
    assert hedged["eval/all/calibration/resolution"] == 0.0
    assert hedged["eval/all/brier"] == pytest.approx(0.25)
    assert last["eval/all/brier"] < hedged["eval/all/brier"] - 0.05
