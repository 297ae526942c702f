"""The thinking budget (`thinking_budget`, s1's budget forcing): the forced continuation's exact
prompt on Qwen3's format, the budget and the answer through `kitchen eval` and evaluation during
training on the noop backend, and bad values as config errors naming the key."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from adapters.common.tokenizer import load_tokenizer
from kitchen.apps.cli import main
from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.engine.eval_tasks import EvalModel, EvalSettings
from kitchen.families.evaluation.generation import Grade, Item, evaluate_generation
from recipes.math_rl import Config as MathConfig
from train_core.renderers.registry import get_renderer
from train_core.types import ModelInput, SampleResult, SamplingParams, TokensWithLogprobs

THOUGHT = "<think>\nFirst I add the units, then I carry the one and add the tens.\n</think>\n\n"
ANSWER = "The answer is 42.<|im_end|>"


class ThinkingModel:
    """A model that always writes `THOUGHT` then `ANSWER` (in Qwen3's format) after `prompt`,
    sampled as a server does: cut at `max_tokens` ("length"), and going on from wherever the
    request leaves off; after a forced `</think>`, it answers. Every request's tokens are kept."""

    def __init__(self, tokenizer: Any, prompt: list[int]) -> None:
        self.tokenizer, self.prompt = tokenizer, prompt
        self.reply = tokenizer.encode(THOUGHT + ANSWER, add_special_tokens=False)
        self.answer = tokenizer.encode("\n\n" + ANSWER, add_special_tokens=False)
        self.prompts: list[list[int]] = []

    async def sample(self, prompt: ModelInput, num_samples: int, params: SamplingParams) -> SampleResult:
        tokens = prompt.to_ints()
        self.prompts.append(tokens)
        assert tokens[: len(self.prompt)] == self.prompt and params.max_tokens is not None
        written = tokens[len(self.prompt) :]
        if written == self.reply[: len(written)]:
            rest = self.reply[len(written) :]
        else:
            assert self.tokenizer.decode(written[-1:]) == "</think>", self.tokenizer.decode(written)
            rest = self.answer
        cut = rest[: params.max_tokens]
        return SampleResult([TokensWithLogprobs(cut, None, "length" if len(cut) < len(rest) else "stop")] * num_samples)


def run_item(budget: int | None, max_tokens: int = 64) -> tuple[Any, ThinkingModel, list[int]]:
    tokenizer = load_tokenizer("tiny")
    renderer = get_renderer("qwen3", tokenizer)
    item = Item([{"role": "user", "content": "What is 20 + 22?"}])
    prompt = renderer.build_generation_prompt(item.prompt).to_ints()
    sampler = ThinkingModel(tokenizer, prompt)

    async def no_other(name: str) -> Any:
        raise AssertionError(name)

    model = EvalModel(sampler, renderer, tokenizer, "thinking", no_other)  # type: ignore[arg-type]

    async def grade(item: Item, reply: str) -> Grade:
        found = re.findall(r"\d+", reply)
        return Grade(found[-1:] == ["42"], float(found[-1:] == ["42"]), answer=(found or [None])[-1])

    settings = EvalSettings(max_tokens=max_tokens, thinking_budget=budget)
    result = asyncio.run(evaluate_generation(model, [item], grade, settings))
    return result, sampler, prompt


def test_the_forced_continuation_is_the_prompt_the_cut_thinking_and_the_end_of_thinking_token() -> None:
    result, sampler, prompt = run_item(budget=8)
    tokenizer = sampler.tokenizer
    first, second = sampler.prompts
    assert first == prompt
    cut = sampler.reply[:8]
    assert second == prompt + cut + [tokenizer.convert_tokens_to_ids("</think>")]
    assert tokenizer.decode(second) == tokenizer.decode(prompt) + tokenizer.decode(cut) + "</think>"
    (sample,) = result.samples
    assert sample.response == "The answer is 42."  # the thinking is not graded
    assert sample.grade == 1.0
    tokens = 8 + 1 + len(sampler.answer)
    assert {k: sample.extra[k] for k in ("tokens", "thinking_tokens", "budget_forced")} == {
        "tokens": tokens,
        "thinking_tokens": 8,
        "budget_forced": True,
    }
    assert result.metrics["budget_forced"].value == 1.0 and result.metrics["thinking_tokens"].value == 8


def test_thinking_within_the_budget_is_not_forced() -> None:
    whole = len(load_tokenizer("tiny").encode(THOUGHT + ANSWER, add_special_tokens=False))
    thought = len(load_tokenizer("tiny").encode(THOUGHT.split("</think>")[0], add_special_tokens=False))
    # the first request ends with the reply: one request, nothing inserted
    result, sampler, _ = run_item(budget=whole)
    (sample,) = result.samples
    assert len(sampler.prompts) == 1 and sample.extra["budget_forced"] is False
    assert sample.extra["thinking_tokens"] == thought and sample.extra["tokens"] == whole
    # cut after its thinking closed: the reply goes on from there, nothing inserted
    result, sampler, prompt = run_item(budget=thought + 3)
    (sample,) = result.samples
    assert sampler.prompts[1] == prompt + sampler.reply[: thought + 3]
    assert sample.response == "The answer is 42." and sample.extra["budget_forced"] is False
    assert sample.extra["thinking_tokens"] == thought and sample.extra["tokens"] == whole


def test_without_a_budget_nothing_is_counted_or_forced() -> None:
    result, sampler, _ = run_item(budget=None)
    (sample,) = result.samples
    assert len(sampler.prompts) == 1 and "thinking_tokens" not in sample.extra
    assert set(result.metrics) == {"accuracy", "mean_reward"}


def run_eval(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["eval", "tiny", "--base", "--backend", "noop", "--tasks", "arithmetic", *args])
    return code, capsys.readouterr().err


def test_on_the_noop_model_a_budget_of_n_never_thinks_more_and_still_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """deepseekv3_thinking's prompt opens the think block, so the noop model's reply is thinking
    until its budget closes it."""
    budget, max_tokens = 5, 40
    args = ["--renderer", "deepseekv3_thinking", "--limit", "6", "--samples", "2", "--max-tokens", str(max_tokens)]
    code, err = run_eval([*args, "--thinking-budget", str(budget), "--out", str(tmp_path / "out")], capsys)
    assert code == 0, err
    lines = [json.loads(line) for line in (tmp_path / "out/samples/arithmetic.jsonl").read_text().splitlines()]
    assert len(lines) == 12
    assert all(0 < line["thinking_tokens"] <= budget and line["tokens"] <= max_tokens for line in lines)
    forced = [line for line in lines if line["budget_forced"]]
    assert forced and all(line["thinking_tokens"] == budget and line["tokens"] > budget + 1 for line in forced)
    assert all(line["reason"] and line["grade"] == 0.0 for line in lines)  # graded (the noop model is wrong)
    results = {row["metric"]: row for row in json.loads((tmp_path / "out/results.json").read_text())["results"]}
    assert results["thinking_tokens"]["value"] <= budget
    assert results["budget_forced"]["value"] == pytest.approx(len(forced) / len(lines))
    assert json.loads((tmp_path / "out/plan.json").read_text())["tasks"]["arithmetic"]["thinking_budget"] == budget

    # interrupted after three items, resumed: the journal's counts are the same run's
    cut = tmp_path / "cut"
    (cut / "samples").mkdir(parents=True)
    (cut / "plan.json").write_text((tmp_path / "out/plan.json").read_text())
    (cut / "samples/arithmetic.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines[:6]))
    code, err = run_eval([*args, "--thinking-budget", str(budget), "--out", str(cut), "--resume"], capsys)
    assert code == 0, err
    again = {row["metric"]: row for row in json.loads((cut / "results.json").read_text())["results"]}
    assert again["thinking_tokens"] == results["thinking_tokens"] and again["tokens"] == results["tokens"]


THINKING = ["--renderer", "deepseekv3_thinking", "--limit", "1"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([*THINKING, "--thinking-budget", "-3"], "thinking_budget"),
        (
            [*THINKING, "--thinking-budget", "64", "--max-tokens", "64"],
            "thinking_budget (64) must be below max_tokens (64)",
        ),
        (["--renderer", "role_colon", "--thinking-budget", "8"], "renderer RoleColonRenderer has no thinking format"),
    ],
)
def test_bad_budgets_are_config_errors_naming_the_key(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_eval([*args, "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("{task: arithmetic, every: 2, thinking_budget: 0, max_tokens: 32}", "thinking_budget"),
        ("{task: arithmetic, every: 2, thinking_budget: 32, max_tokens: 32}", "thinking_budget (32) must be below"),
        ("{task: arithmetic, every: 2, thinking_budget: 8}", "set max_tokens beside it"),
        ("{task: arithmetic, every: 2, settings: {thinking_budget: 8}}", "set max_tokens beside it"),
    ],
)
def test_bad_budgets_of_evals_during_training_name_the_key(entry: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(MathConfig, None, [f"eval.tasks=[{entry}]"])


def test_evals_during_training_log_the_thinking_counts(kitchen_run: Any) -> None:
    run = kitchen_run(
        "math_rl",
        "warm_start.steps=0",
        "rl.groups_per_batch=2",
        "rl.group_size=2",
        "eval.every=0",
        "env.max_operand=3",
        "rl.num_batches=2",
        "renderer=deepseekv3_thinking",
        "eval.tasks=[{task: arithmetic, every: 2, limit: 4, max_tokens: 24, thinking_budget: 3}]",
    )
    rows = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    (last,) = [row for row in rows if "eval/arithmetic/thinking_tokens" in row]
    assert 0 < last["eval/arithmetic/thinking_tokens"] <= 3 and "eval/arithmetic/budget_forced" in last
    samples = (run.path / "evals/training/arithmetic/000002.jsonl").read_text().splitlines()
    assert all(json.loads(line)["thinking_tokens"] <= 3 for line in samples)
