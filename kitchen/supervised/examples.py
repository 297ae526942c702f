"""Turn dataset records into (tokens, weights) for supervised learning."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kitchen.ports import Tokenizer
from train_core.errors import InvalidInputError
from train_core.renderers.base import Renderer
from train_core.renderers.messages import STANDARD_ROLES, check_messages
from train_core.renderers.train_on_what import TrainOnWhat
from train_core.supervised import char_limit, cut_messages, prompt_completion_tokens

Example = tuple[list[int], list[float]]


class RecordFieldError(InvalidInputError):
    """A record field of the wrong type (e.g. a number where text belongs); the loader adds the
    file and line."""


def text_field(record: Mapping[str, Any], key: str, max_chars: int | None = None) -> str:
    """`record[key]` if it is a string (cut to `max_chars`), else a RecordFieldError: a number or
    object is never silently turned into text."""
    value = record[key]
    if not isinstance(value, str):
        raise RecordFieldError(f"{key!r} must be a string, got {type(value).__name__}")
    return value if max_chars is None else value[:max_chars]


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

    def __call__(
        self,
        record: Mapping[str, Any],
        tokenizer: Tokenizer,
        renderer: Renderer | None,
        max_length: int | None = None,
    ) -> Example:
        eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        limit = char_limit(max_length)
        if record.get(self.completion_key) is not None:
            prompt_text = text_field(record, self.prompt_key, limit) if record.get(self.prompt_key) is not None else ""
            completion_text = text_field(record, self.completion_key, limit)
            prompt = tokenizer.encode(prompt_text, add_special_tokens=False)
            completion = tokenizer.encode(completion_text, add_special_tokens=False)
            return prompt_completion_tokens(prompt, completion + eos)
        tokens = tokenizer.encode(text_field(record, self.text_key, limit), add_special_tokens=False) + eos
        return tokens, [1.0] * len(tokens)


@dataclass(frozen=True)
class Conversation:
    """`{messages: [...]}` records rendered by the chat renderer; weights by `train_on_what`."""

    train_on_what: TrainOnWhat = TrainOnWhat.LAST_ASSISTANT_MESSAGE
    messages_key: str = "messages"

    @property
    def required_any(self) -> tuple[tuple[str, ...], ...]:
        return ((self.messages_key,),)

    def __call__(
        self,
        record: Mapping[str, Any],
        tokenizer: Tokenizer,
        renderer: Renderer | None,
        max_length: int | None = None,
    ) -> Example:
        if renderer is None:
            raise ValueError("conversation examples need a renderer")
        roles = getattr(renderer, "roles", STANDARD_ROLES)
        messages = cut_messages(check_messages(record[self.messages_key], roles, self.messages_key), max_length)
        model_input, weights = renderer.build_supervised_example(messages, self.train_on_what)
        return model_input.to_ints(), [float(w) for w in weights]


ExampleBuilder = Callable[..., Example]
"""`(record, tokenizer, renderer, max_length=None) -> (tokens, weights)`; a builder that takes
`max_length` may cut text before tokenizing (the loader passes it by keyword when accepted)."""
