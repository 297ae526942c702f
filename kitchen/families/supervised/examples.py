"""Turn dataset records into (tokens, weights) for supervised learning."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kitchen.engine.errors import DataError
from kitchen.engine.ports import Tokenizer
from train_core.errors import InvalidInputError
from train_core.renderers.base import Renderer
from train_core.renderers.errors import RendererError
from train_core.renderers.messages import STANDARD_ROLES, Message, check_messages, has_images
from train_core.renderers.thinking import mask_think_blocks, think_token_ids
from train_core.renderers.train_on_what import TrainOnWhat
from train_core.supervised import char_limit, cut_messages, datum_from_model_input, prompt_completion_tokens
from train_core.types import Datum, ModelInput

Example = tuple[list[int] | ModelInput, list[float]]
"""Tokens (or a model input, which may hold images) and one weight per position."""


class RecordFieldError(InvalidInputError):
    """A record field of the wrong type (e.g. a number where text belongs); the loader adds the
    file and line."""


def text_field(record: Mapping[str, Any], key: str, max_chars: int | None = None) -> str:
    """`record[key]` if it is a string (cut to `max_chars`), else a RecordFieldError: a number or
    object is never silently turned into text."""
    value = record[key]
    if isinstance(value, list) and all(isinstance(item, dict) and "role" in item for item in value):
        raise RecordFieldError(
            f"{key!r} is a list of messages (a conversational record): train it with chat_sl, which renders it "
            "with a chat renderer"
        )
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

    def texts(self, record: Mapping[str, Any], max_chars: int | None = None) -> tuple[str, str | None]:
        """(prompt, completion) of a prompt/completion record (prompt "" when absent), or
        (text, None) of a text record; a field of the wrong type is a RecordFieldError."""
        if record.get(self.completion_key) is not None:
            prompt = text_field(record, self.prompt_key, max_chars) if record.get(self.prompt_key) is not None else ""
            return prompt, text_field(record, self.completion_key, max_chars)
        if record.get(self.text_key) is None:  # a table's row holds every column, maybe null
            raise RecordFieldError(f"needs a {self.completion_key!r} or a {self.text_key!r}")
        return text_field(record, self.text_key, max_chars), None

    def check(self, record: Mapping[str, Any], roles: frozenset[str]) -> None:
        """The record's field types, with no tokenizer (see `Stage.check_inputs`)."""
        self.texts(record)

    def __call__(
        self,
        record: Mapping[str, Any],
        tokenizer: Tokenizer,
        renderer: Renderer | None,
        max_length: int | None = None,
    ) -> Example:
        eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        first, completion = self.texts(record, char_limit(max_length))
        if completion is not None:
            prompt = tokenizer.encode(first, add_special_tokens=False)
            return prompt_completion_tokens(prompt, tokenizer.encode(completion, add_special_tokens=False) + eos)
        tokens = tokenizer.encode(first, add_special_tokens=False) + eos
        return tokens, [1.0] * len(tokens)


@dataclass(frozen=True)
class Conversation:
    """`{messages: [...]}` records rendered by the chat renderer, weights by `train_on_what`; or
    TRL's conversational prompt-completion records, `{prompt: [...], completion: [...]}` (both
    lists of messages), which train the completion's messages only (as TRL does by default)."""

    train_on_what: TrainOnWhat = TrainOnWhat.LAST_ASSISTANT_MESSAGE
    messages_key: str = "messages"
    images: bool = False
    """Whether content may hold image parts (the run's renderer takes images: `renderer_takes_images`)."""
    train_thinking: bool = True
    """Whether the reasoning of trained assistant messages (their think blocks) is trained too; off,
    only what follows it is (`train_core.renderers.thinking`)."""

    @property
    def required_any(self) -> tuple[tuple[str, ...], ...]:
        return ((self.messages_key, "completion"),)

    def check(self, record: Mapping[str, Any], roles: frozenset[str]) -> list[Message]:
        """The record's messages, each a {role, content} object with a role in `roles` and string
        content (a MessageFormatError otherwise); needs no tokenizer (see `Stage.check_inputs`)."""
        return self.conversation(record, roles)[0]

    def conversation(self, record: Mapping[str, Any], roles: frozenset[str]) -> tuple[list[Message], TrainOnWhat]:
        """The messages to render and what to train of them."""
        if record.get(self.messages_key) is not None or record.get("completion") is None:
            return check_messages(record[self.messages_key], roles, self.messages_key, self.images), self.train_on_what
        if record.get("prompt") is None:
            raise RecordFieldError("a prompt-completion record needs a 'prompt' (a list of messages)")
        prompt = check_messages(record["prompt"], roles, "prompt", self.images)
        completion = check_messages(record["completion"], roles, "completion", self.images)
        marked = [cast(Message, {**m, "trainable": False}) for m in prompt]
        marked += [cast(Message, {**m, "trainable": True}) for m in completion]
        return marked, TrainOnWhat.CUSTOMIZED

    def __call__(
        self,
        record: Mapping[str, Any],
        tokenizer: Tokenizer,
        renderer: Renderer | None,
        max_length: int | None = None,
    ) -> Example:
        if renderer is None:
            raise ValueError("conversation examples need a renderer")
        messages, train_on_what = self.conversation(record, getattr(renderer, "roles", STANDARD_ROLES))
        if not renderer.takes_images and has_images(messages):
            raise RendererError(f"the messages hold images, which renderer {type(renderer).__name__} cannot render")
        model_input, weights = renderer.build_supervised_example(cut_messages(messages, max_length), train_on_what)
        if not self.train_thinking:
            weights = mask_think_blocks(model_input.to_ints(), weights, *think_token_ids(renderer))
        # token ids, as every builder gives them; the model input only when it holds images
        return model_input if model_input.images else model_input.to_ints(), [float(w) for w in weights]


ExampleBuilder = Callable[..., Example]
"""`(record, tokenizer, renderer, max_length=None) -> (tokens, weights)`; a builder that takes
`max_length` may cut text before tokenizing (the loader passes it by keyword when accepted), and
one with a `check(record, roles)` method has its records checked before the run starts."""


def record_datum(
    builder: ExampleBuilder,
    record: Mapping[str, Any],
    where: str,
    tokenizer: Tokenizer,
    renderer: Renderer | None,
    max_length: int | None,
) -> Datum | None:
    """One record as a shifted datum, or None when it has no token to train on; a record the
    builder cannot read is a DataError naming `where`."""
    try:
        takes_max_length = "max_length" in inspect.signature(builder).parameters
    except (TypeError, ValueError):
        takes_max_length = False
    extra = {"max_length": max_length} if takes_max_length else {}
    try:
        tokens, weights = builder(record, tokenizer, renderer, **extra)
        model_input = tokens if isinstance(tokens, ModelInput) else ModelInput.from_ints(tokens)
        datum = datum_from_model_input(model_input, weights, max_length)
    except InvalidInputError as exc:  # incl. SequenceTooShortError
        raise DataError(f"{where}: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{where}: cannot build an example: {exc}") from None
    if not any(float(w) > 0 for w in datum.loss_fn_inputs["weights"].to_torch().tolist()):
        return None
    return datum
