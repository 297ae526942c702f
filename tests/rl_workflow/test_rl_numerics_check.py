"""rl_numerics_check: the page_count env's turns extend each other, and the trainer's logprobs
equal the sampler's turn by turn (noop exactly, local in float32 within 1e-4), one datum per episode."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.metrics import read_metrics
from kitchen.families.rl.numerics import FP32_LOGPROB_TOLERANCE
from recipes.envs.page_count import Document, PageCountEnv, closeness_reward, make_document, read_answer
from tests.rl_workflow.envs_common import renderer, reply_tokens
from train_core.rl.types import StepResult

R = renderer()


def play(env: PageCountEnv, replies: list[str]) -> list[StepResult]:
    async def run() -> list[StepResult]:
        results = []
        ob, _ = await env.initial_observation()
        for reply in replies:
            action = reply_tokens(R, reply)
            result = await env.step(action)
            results.append(result)
            if result.episode_done:
                break
            assert result.next_observation.to_ints()[: ob.length + len(action)] == ob.to_ints() + action
            ob = result.next_observation
        return results

    return asyncio.run(run())


def test_an_episode_reads_every_page_then_scores_the_count() -> None:
    document = make_document(random.Random(0), num_pages=3, page_words=40, target_rate=0.2)
    assert document.true_count == sum(page.split().count(document.word) for page in document.pages) > 0
    results = play(PageCountEnv(document, R, 0.2), ["next", "next", "next", f"Answer: {document.true_count}"])
    assert [r.episode_done for r in results] == [False, False, False, True]
    assert results[-1].reward == 1.0
    assert results[-1].metrics["exact_match"] == 1.0
    off_by_one = play(PageCountEnv(document, R, 0.2), ["a", "b", "c", f"Answer: {document.true_count + 1}"])[-1]
    assert off_by_one.reward == pytest.approx(closeness_reward(document.true_count + 1, document.true_count, 0.2))
    assert off_by_one.reward < 1.0
    assert play(PageCountEnv(document, R, 0.2), ["a", "b", "c", "no idea"])[-1].reward == 0.0


def test_every_page_is_shown_in_order() -> None:
    document = Document("until", ("alpha one", "beta two", "gamma three"))
    env = PageCountEnv(document, R, 0.2)
    results = play(env, ["x", "y", "z", "Answer: 0"])
    final_prompt = R.tokenizer.decode(env.prompt)
    positions = [final_prompt.index(f"[Page {i}]\n{page}") for i, page in enumerate(document.pages, start=1)]
    assert positions == sorted(positions)
    assert "That was the last page" in final_prompt
    assert results[-1].reward == 1.0  # true count 0, answered 0


def test_read_answer_takes_the_last_answer() -> None:
    assert read_answer("Answer: 3 ... answer: 1,204") == 1204
    assert read_answer("twelve") is None
    assert closeness_reward(None, 5, 0.2) == 0.0
    assert closeness_reward(5, 5, 0.2) == 1.0
    assert closeness_reward(6, 5, 0.2) == 0.0  # 20% off at tolerance 0.2


def run(log_path: Path, *overrides: str) -> list[dict[str, Any]]:
    recipe = get_recipe("rl_numerics_check")
    config = load_config(recipe.config_cls, None, [f"log_path={log_path}", "checkpoint.save_every=0", *overrides])
    return read_metrics(run_recipe(recipe, config, progress=False).metrics)


def assert_agreement(rows: list[dict[str, Any]], pages: int, tolerance: float) -> None:
    for row in rows:
        assert row["numerics/turns"] == pages + 1
        assert row["num_datums"] == row["env/all/total_episodes"]  # one datum per episode: turns extend
        assert row["numerics/max_abs_diff"] <= tolerance, row["numerics/max_abs_diff"]
        assert row["numerics/within_tolerance"] == 1.0
        assert row["numerics/last_turn_depth"] > row["env/all/episode_tokens"] - 64  # the deepest turn was checked


def test_noop_agrees_exactly_on_every_turn(tmp_path: Path) -> None:
    rows = run(tmp_path, "backend=noop", "env.num_pages=5", "env.page_words=60")
    assert len(rows) == 2
    assert_agreement(rows, pages=5, tolerance=0.0)


def test_local_float32_agrees_within_its_tolerance_over_a_few_thousand_tokens(tmp_path: Path) -> None:
    rows = run(
        tmp_path,
        "backend=local",
        "model_name=tiny64k",
        "env.num_pages=3",
        "env.page_words=420",
        "rl.group_size=1",
        "rl.num_batches=1",
    )
    assert rows[0]["env/all/episode_tokens"] > 2048  # past tiny's positions
    assert_agreement(rows, pages=3, tolerance=FP32_LOGPROB_TOLERANCE)
    events = (tmp_path / "events.jsonl").read_text()
    assert events.count('"event": "numerics.turn"') == 4


@pytest.mark.slow
def test_local_agrees_over_a_long_episode(tmp_path: Path) -> None:
    """About 12k tokens over 7 turns, six times tiny's context (the shipped config's 62k-token
    episode takes far longer on 2 cores: benchmarks/long_episode.py)."""
    rows = run(
        tmp_path,
        "backend=local",
        "model_name=tiny64k",
        "env.num_pages=6",
        "env.page_words=1170",
        "rl.group_size=1",
        "rl.num_batches=1",
    )
    assert rows[0]["env/all/episode_tokens"] > 11_000
    assert_agreement(rows, pages=6, tolerance=FP32_LOGPROB_TOLERANCE)
