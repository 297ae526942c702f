"""The learned judge on a model whose answer-token logprobs are known: it scores each label once
(one compute_logprobs call per label, no sampling) and answers P(B) - P(A) over the labels."""

from __future__ import annotations

import asyncio
import math

from adapters.noop import NoopBackend
from kitchen.completers import MessageCompleter, PreferenceModelJudge
from train_core.renderers.registry import get_renderer
from train_core.types import ModelInput, SamplingParams

P_LABEL = {"A": 0.7, "B": 0.2, "Tie": 0.1}


class KnownLabelModel:
    """Logprob 0 for every token but the answer label's, which gets log P_LABEL[label]."""

    def __init__(self, label_ids: dict[int, str], answer_position: int) -> None:
        self.label_ids, self.answer_position = label_ids, answer_position
        self.calls = 0

    async def compute_logprobs(self, prompt: ModelInput) -> list[float | None]:
        self.calls += 1
        tokens = prompt.to_ints()
        out: list[float | None] = [None] + [0.0] * (len(tokens) - 1)
        label = self.label_ids[tokens[self.answer_position]]
        out[self.answer_position] = math.log(P_LABEL[label])
        return out

    async def sample(self, *args: object) -> object:
        raise AssertionError("the judge must not sample")


def _setup(allow_tie: bool) -> tuple[PreferenceModelJudge, KnownLabelModel]:
    tokenizer = NoopBackend(seed=0).get_tokenizer("tiny")
    renderer = get_renderer("role_colon", tokenizer)
    question = [{"role": "user", "content": "q"}]
    prompt_length = renderer.build_generation_prompt(question).length  # type: ignore[arg-type]
    # role_colon renders the reply as " <label>": the label's token follows the space token
    label_ids = {tokenizer.encode(f" {label}", add_special_tokens=False)[1]: label for label in P_LABEL}
    model = KnownLabelModel(label_ids, prompt_length + 1)
    return PreferenceModelJudge(model, renderer, allow_tie), model  # type: ignore[arg-type]


def _question_length_independent_judge(allow_tie: bool) -> tuple[PreferenceModelJudge, KnownLabelModel]:
    judge, model = _setup(allow_tie)

    async def compute(prompt: ModelInput) -> list[float | None]:
        model.calls += 1
        tokens = prompt.to_ints()
        # the label is the token before the renderer's end-of-turn text; find it from the end
        tail = judge.renderer.build_supervised_example(
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "A"}]
        )[0].to_ints()
        end_length = len(tail) - (judge.renderer.build_generation_prompt([{"role": "user", "content": "q"}]).length + 2)
        position = len(tokens) - end_length - 1
        out: list[float | None] = [None] + [0.0] * (len(tokens) - 1)
        text = judge.renderer.tokenizer.decode(tokens)  # type: ignore[attr-defined]
        label = text.rsplit("Assistant: ", 1)[1].split("\n")[0]
        out[position] = math.log(P_LABEL[label])
        return out

    model.compute_logprobs = compute  # type: ignore[method-assign]
    return judge, model


def test_judge_answers_from_label_probabilities() -> None:
    judge, model = _question_length_independent_judge(allow_tie=False)
    prompt = [{"role": "user", "content": "What is 2 + 3?"}]
    a, b = {"role": "assistant", "content": "5"}, {"role": "assistant", "content": "6"}
    score = asyncio.run(judge(prompt, a, b))  # type: ignore[arg-type]
    assert math.isclose(score, (0.2 - 0.7) / 0.9)
    assert model.calls == 2
    logprobs = asyncio.run(judge.label_logprobs(prompt, a, b))  # type: ignore[arg-type]
    assert math.isclose(logprobs["A"], math.log(0.7)) and math.isclose(logprobs["B"], math.log(0.2))


def test_judge_with_tie_label() -> None:
    judge, model = _question_length_independent_judge(allow_tie=True)
    prompt = [{"role": "user", "content": "hi"}]
    score = asyncio.run(judge(prompt, {"role": "assistant", "content": "x"}, {"role": "assistant", "content": "y"}))  # type: ignore[arg-type]
    assert math.isclose(score, 0.2 - 0.7)
    assert model.calls == 3


def test_message_completer_on_noop() -> None:
    backend = NoopBackend(seed=0)
    renderer = get_renderer("role_colon", backend.get_tokenizer("tiny"))

    async def go() -> dict[str, str]:
        client = await backend.create_sampling_client(base_model="tiny")
        completer = MessageCompleter(client, renderer, SamplingParams(max_tokens=8, seed=1))
        return dict(await completer([{"role": "user", "content": "What is 2 + 3?"}]))  # type: ignore[list-item]

    message = asyncio.run(go())
    assert message["role"] == "assistant"
    assert isinstance(message["content"], str)
