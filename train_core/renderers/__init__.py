"""Chat formats: conversations to tokens and weights, and sampled tokens back to messages."""

from train_core.renderers.base import Renderer, as_train_on_what
from train_core.renderers.errors import RendererError, UnknownRendererError
from train_core.renderers.messages import Message, ToolCall
from train_core.renderers.registry import (
    check_tool_renderer,
    get_renderer,
    recommended_renderer,
    register_renderer,
    renderer_names,
)
from train_core.renderers.tokenizer import Tokenizer
from train_core.renderers.tool_declarations import ToolSpec
from train_core.renderers.train_on_what import TrainOnWhat

__all__ = [
    "Message",
    "Renderer",
    "RendererError",
    "Tokenizer",
    "ToolCall",
    "ToolSpec",
    "TrainOnWhat",
    "UnknownRendererError",
    "as_train_on_what",
    "check_tool_renderer",
    "get_renderer",
    "recommended_renderer",
    "register_renderer",
    "renderer_names",
]
