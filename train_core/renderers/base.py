"""The renderer interface: conversations in, tokens and per-token weights out, and back again."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from train_core.renderers.errors import RendererError
from train_core.renderers.messages import STANDARD_ROLES, Message, ToolCall
from train_core.renderers.tokenizer import Tokenizer
from train_core.renderers.tool_declarations import ToolSpec
from train_core.renderers.train_on_what import TrainOnWhat
from train_core.types import ModelInput, StopCondition

__all__ = ["Message", "Renderer", "ToolCall", "TrainOnWhat", "as_train_on_what"]


class Renderer(ABC):
    """Turns conversations into a model family's exact chat format.

    Weights from `build_supervised_example` are 0 on BOS and role headers (1 on headers only under
    ALL_TOKENS) and 1 on the bodies of the messages `train_on_what` selects. `roles` are the
    message roles it has a format for (data with another role is rejected before rendering)."""

    roles: frozenset[str] = STANDARD_ROLES
    declares_tools: bool = False
    """Whether the format has a native way to declare tools (`declare_tools`) and to write and
    parse the model's calls to them; tool-use envs refuse a renderer without one."""
    takes_images: bool = False
    """Whether message content may hold image parts (a vision-language format); its model inputs
    then hold image chunks."""
    think_delimiters: tuple[str, str] | None = None
    """The special tokens that open and close an assistant's reasoning, where the format writes it
    between two (`train_core.renderers.thinking` masks what lies between them)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    @abstractmethod
    def build_generation_prompt(
        self, messages: Sequence[Message], role: str = "assistant", prefill: str | None = None
    ) -> ModelInput:
        """The tokens a sampler continues to write the next `role` message (after `prefill`)."""

    @abstractmethod
    def build_supervised_example(
        self,
        messages: Sequence[Message],
        train_on_what: TrainOnWhat | str = TrainOnWhat.LAST_ASSISTANT_MESSAGE,
    ) -> tuple[ModelInput, list[float]]:
        """The whole conversation's tokens and one weight per token."""

    @abstractmethod
    def get_stop_sequences(self) -> StopCondition:
        """What ends a sampled message: token ids, or strings for text-only formats."""

    def declare_tools(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[Message]:
        """The conversation with `tools` declared where the model's own template declares them."""
        raise RendererError(f"{type(self).__name__} has no native tool format to declare tools in")

    def tool_call_prefill(self, name: str | None = None) -> str:
        """The start of a reply that can only go on as a tool call (to `name` when given), in the
        format `parse_response` reads: a generation-prompt `prefill` that forces a call."""
        raise RendererError(f"{type(self).__name__} has no native tool format to force a tool call in")

    @abstractmethod
    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        """The assistant message in sampled tokens; ok is False when the response was cut off or
        malformed (the raw text is then kept in `content`)."""


def as_train_on_what(value: TrainOnWhat | str) -> TrainOnWhat:
    """Accepts the enum or its config spelling; an unknown spelling lists the valid ones."""
    try:
        return TrainOnWhat(value)
    except ValueError:
        valid = ", ".join(t.value for t in TrainOnWhat)
        raise RendererError(f"unknown train_on_what {value!r}; valid values: {valid}") from None
