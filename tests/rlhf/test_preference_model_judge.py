"""The learned judge on a model whose answer-token logprobs are known: it scores each label once
(one compute_logprobs call per label, all at once, no sampling) and answers P(B) - P(A) over the
labels."""

from __future__ import annotations

import asyncio
import math

from adapters.noop import NoopBackend
from kitchen.families.common.completers import MessageCompleter, PreferenceModelJudge
from train_core.renderers.base import Message, Renderer
from train_core.renderers.registry import get_renderer
from train_core.types import ModelInput, SamplingParams

P_LABEL = {"A": 0.7, "B": 0.2, "Tie": 0.1}


class KnownLabelModel:
    """Logprob 0 for every token but the last token of the assistant's label, which gets
    log P_LABEL[label]; the label is read back from the decoded text."""

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer
        self.calls = 0
        tail = renderer.build_supervised_example(
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "A"}]
        )
        # tokens after the label: the renderer's end-of-turn text
        self.end_length = (
            tail[0].length - renderer.build_generation_prompt([{"role": "user", "content": "q"}]).length - 2
        )

    async def compute_logprobs(self, prompt: ModelInput) -> list[float | None]:
        self.calls += 1
        tokens = prompt.to_ints()
        text = str(self.renderer.tokenizer.decode(tokens))
        label = text.rsplit("Assistant: ", 1)[1].split("\n")[0]
        out: list[float | None] = [None] + [0.0] * (len(tokens) - 1)
        out[len(tokens) - self.end_length - 1] = math.log(P_LABEL[label])
        return out


def _judge(allow_tie: bool) -> tuple[PreferenceModelJudge, KnownLabelModel]:
    renderer = get_renderer("role_colon", NoopBackend(seed=0).get_tokenizer("tiny"))
    model = KnownLabelModel(renderer)
    return PreferenceModelJudge(model, renderer, allow_tie), model  # type: ignore[arg-type]


PROMPT: list[Message] = [{"role": "user", "content": "What is 2 + 3?"}]
A: Message = {"role": "assistant", "content": "5"}
B: Message = {"role": "assistant", "content": "6"}


def test_judge_answers_from_label_probabilities() -> None:
    judge, model = _judge(allow_tie=False)
    assert math.isclose(asyncio.run(judge(PROMPT, A, B)), (0.2 - 0.7) / 0.9)
    assert model.calls == 2
    logprobs = asyncio.run(judge.label_logprobs(PROMPT, A, B))
    assert math.isclose(logprobs["A"], math.log(0.7)) and math.isclose(logprobs["B"], math.log(0.2))


def test_judge_with_tie_label() -> None:
    judge, model = _judge(allow_tie=True)
    assert math.isclose(asyncio.run(judge(PROMPT, A, B)), 0.2 - 0.7)
    assert model.calls == 3


def test_message_completer_on_noop() -> None:
    backend = NoopBackend(seed=0)
    renderer = get_renderer("role_colon", backend.get_tokenizer("tiny"))

    async def go() -> Message:
        client = await backend.create_sampling_client(base_model="tiny")
        completer = MessageCompleter(client, renderer, SamplingParams(max_tokens=8, seed=1))
        return await completer(PROMPT)

    message = asyncio.run(go())
    assert message["role"] == "assistant"
    assert isinstance(message["content"], str)
