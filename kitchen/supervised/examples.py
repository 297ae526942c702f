"""Turn dataset records into (tokens, weights) for supervised learning."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kitchen.ports import Tokenizer
from train_core.renderers.base import Renderer
from train_core.renderers.train_on_what import TrainOnWhat
from train_core.supervised import prompt_completion_tokens

Example = tuple[list[int], list[float]]


@dataclass(frozen=True)
class PromptCompletion:
    """`{prompt, completion}` records train on the completion (plus EOS); `{text}` records on all
    tokens. Keys are configurable."""

    prompt_key: str = "prompt"
    completion_key: str = "completion"
    text_key: str = "text"

    @property
    def required_any(self) -> tuple[tuple[str, ...], ...]:
        return ((self.completion_key, self.text_key),)

    def __call__(self, record: Mapping[str, Any], tokenizer: Tokenizer, renderer: Renderer | None) -> Example:
        eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        if record.get(self.completion_key) is not None:
            prompt = tokenizer.encode(str(record.get(self.prompt_key) or ""), add_special_tokens=False)
            completion = tokenizer.encode(str(record[self.completion_key]), add_special_tokens=False)
            return prompt_completion_tokens(prompt, completion + eos)
        tokens = tokenizer.encode(str(record[self.text_key]), add_special_tokens=False) + eos
        return tokens, [1.0] * len(tokens)


@dataclass(frozen=True)
class Conversation:
    """`{messages: [...]}` records rendered by the chat renderer; weights by `train_on_what`."""

    train_on_what: TrainOnWhat = TrainOnWhat.LAST_ASSISTANT_MESSAGE
    messages_key: str = "messages"

    @property
    def required_any(self) -> tuple[tuple[str, ...], ...]:
        return ((self.messages_key,),)

    def __call__(self, record: Mapping[str, Any], tokenizer: Tokenizer, renderer: Renderer | None) -> Example:
        if renderer is None:
            raise ValueError("conversation examples need a renderer")
        model_input, weights = renderer.build_supervised_example(record[self.messages_key], self.train_on_what)
        return model_input.to_ints(), [float(w) for w in weights]


ExampleBuilder = Callable[[Mapping[str, Any], Tokenizer, Renderer | None], Example]
