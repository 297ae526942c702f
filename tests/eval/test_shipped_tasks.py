"""The shipped tasks grade replies as their RL environments reward them: right answers score,
wrong ones do not, and the code task runs solutions against their tests in the sandbox.

The model here is scripted (a sampling client that answers each prompt with chosen text),
because no model that runs here writes these answers on demand; everything after sampling is
the real task: rendering, parsing, grading, the sandbox, the metrics."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from adapters.common.tokenizer import load_tokenizer
from kitchen.engine.eval_tasks import EvalModel, TaskResult, get_task
from recipes.data import shipped_data
from train_core.renderers.registry import get_renderer
from train_core.types import ModelInput, SampleResult, SamplingParams, TokensWithLogprobs

Reply = Callable[[str, int], str]
"""(the user's question, sample index) -> the reply text."""


class ScriptedSampler:
    def __init__(self, tokenizer: Any, reply: Reply) -> None:
        self.tokenizer, self.reply = tokenizer, reply

    async def sample(self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams) -> SampleResult:
        text = self.tokenizer.decode(prompt.to_ints())
        question = text.split("User: ", 1)[1].rsplit("\n\nAssistant:", 1)[0]
        return SampleResult(
            [
                TokensWithLogprobs(self.tokenizer.encode(" " + self.reply(question, k), add_special_tokens=False), None)
                for k in range(num_samples)
            ]
        )

    async def compute_logprobs(self, prompt: ModelInput) -> list[float | None]:
        raise AssertionError("generative tasks do not score")


def evaluate(task: str, reply: Reply, **settings: Any) -> TaskResult:
    tokenizer = load_tokenizer("tiny")

    async def unused(model: str) -> Any:
        raise AssertionError("no other model is needed")

    model = EvalModel(ScriptedSampler(tokenizer, reply), get_renderer("role_colon", tokenizer), tokenizer, "s", unused)
    spec = get_task(task)
    return asyncio.run(spec.evaluate(model, spec.settings(**settings)))


def read(path: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def total(question: str) -> int:
    x, y = question.removeprefix("What is ").removesuffix("?").split(" + ")
    return int(x) + int(y)


def test_arithmetic_right_and_wrong_sums() -> None:
    right = evaluate("arithmetic", lambda q, k: f"{total(q)}", limit=6)
    assert right.metrics["accuracy"].value == 1.0 and right.metrics["accuracy"].n == 6
    wrong = evaluate("arithmetic", lambda q, k: f"It is {total(q) + 1}.", limit=6)
    assert wrong.metrics["accuracy"].value == 0.0
    assert wrong.samples[0].reason == "answer '1' != '0'" and wrong.samples[0].extra["answer"] == "1"


def test_arithmetic_pass_at_k_and_majority_over_scripted_samples() -> None:
    # samples 0 and 1 right, 2 and 3 the same wrong answer, so maj@4 ties and goes to the first
    result = evaluate("arithmetic", lambda q, k: str(total(q) + (k >= 2)), limit=5, samples=4)
    metrics = {name: estimate.value for name, estimate in result.metrics.items()}
    assert metrics == {"accuracy": 0.5, "pass@2": pytest.approx(5 / 6), "pass@4": 1.0, "maj@4": 1.0, "mean_reward": 0.5}
    assert len(result.samples) == 20


def test_code_runs_solutions_against_their_tests() -> None:
    problems = read(shipped_data("code/test.jsonl"))
    by_prompt = {p["problem"]: p for p in problems}

    def reply(which: str) -> Reply:
        def answer(question: str, k: int) -> str:
            problem = by_prompt[question.split("\n\nWrite your solution", 1)[0]]
            return f"```python\n{problem[which]}```"

        return answer

    right = evaluate("code", reply("solution"), sandbox="process", limit=3)
    wrong = evaluate("code", reply("wrong_solution"), sandbox="process", limit=3)
    assert right.metrics["accuracy"].value == 1.0, [s.reason for s in right.samples]
    assert wrong.metrics["accuracy"].value == 0.0
    assert all("tests passed" in s.reason for s in right.samples)
    unfenced = evaluate("code", lambda q, k: "def f(): pass", sandbox="process", limit=1)
    assert unfenced.samples[0].reason == "no fenced python block"


@pytest.mark.parametrize("replies", [["7"], ["7", "8"]])
def test_every_item_keeps_each_of_its_samples(replies: Sequence[str]) -> None:
    result = evaluate("arithmetic", lambda q, k: replies[k], limit=2, samples=len(replies))
    assert [(s.extra["item"], s.extra["sample"]) for s in result.samples] == [
        (i, k) for i in range(2) for k in range(len(replies))
    ]
