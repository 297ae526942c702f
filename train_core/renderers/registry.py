"""Renderers by name, plus which one suits a model name."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial

from train_core.renderers.base import Renderer
from train_core.renderers.deepseek_v3 import DeepSeekV3Renderer
from train_core.renderers.errors import RendererError, UnknownRendererError
from train_core.renderers.gpt_oss import GptOssRenderer
from train_core.renderers.hf_chat_template import HfChatTemplateRenderer
from train_core.renderers.kimi_k2 import KimiK2Renderer
from train_core.renderers.llama3 import Llama3Renderer
from train_core.renderers.messages import STANDARD_ROLES
from train_core.renderers.qwen3 import Qwen3Renderer
from train_core.renderers.role_colon import RoleColonRenderer
from train_core.renderers.tokenizer import Tokenizer

RendererFactory = Callable[[Tokenizer], Renderer]

_FACTORIES: dict[str, RendererFactory] = {
    "llama3": Llama3Renderer,
    "qwen3": Qwen3Renderer,
    "qwen3_disable_thinking": partial(Qwen3Renderer, mode="disabled"),
    "qwen3_instruct": partial(Qwen3Renderer, mode="instruct"),
    "role_colon": RoleColonRenderer,
    # As in tinker-cookbook: `deepseekv3` is thinking off, `deepseekv3_disable_thinking` its alias.
    "deepseekv3": DeepSeekV3Renderer,
    "deepseekv3_disable_thinking": DeepSeekV3Renderer,
    "deepseekv3_thinking": partial(DeepSeekV3Renderer, thinking=True),
    "kimi_k2": KimiK2Renderer,
    "gpt_oss_no_sysprompt": GptOssRenderer,
    "gpt_oss_low_reasoning": partial(GptOssRenderer, reasoning_effort="low"),
    "gpt_oss_medium_reasoning": partial(GptOssRenderer, reasoning_effort="medium"),
    "gpt_oss_high_reasoning": partial(GptOssRenderer, reasoning_effort="high"),
    "hf_chat_template": HfChatTemplateRenderer,
}

_DECLARED_ROLES: dict[str, frozenset[str]] = {}
"""Roles given to `register_renderer` for factories whose class does not say."""

# First match wins; patterns run against the lowercased model name or path.
_RECOMMENDATIONS: tuple[tuple[str, str], ...] = (
    (r"^tiny(32)?$", "role_colon"),
    (r"llama-?3", "llama3"),
    (r"qwen3.*instruct", "qwen3_instruct"),
    (r"qwen3", "qwen3"),
    (r"deepseek-?v3", "deepseekv3"),
    (r"kimi-?k2", "kimi_k2"),
    (r"gpt-?oss", "gpt_oss_medium_reasoning"),
)
FALLBACK_RENDERER = "hf_chat_template"


def register_renderer(
    name: str, factory: RendererFactory, *, roles: frozenset[str] | None = None, replace: bool = False
) -> None:
    """Adds a user renderer; re-registering a name needs `replace=True` so typos do not shadow.
    `roles`: the message roles its renderers accept, checked in the data before the run starts;
    by default a Renderer class's own `roles` (a plain function factory: the standard roles)."""
    if name in _FACTORIES and not replace:
        raise RendererError(f"a renderer named {name!r} is already registered (pass replace=True)")
    _FACTORIES[name] = factory
    if roles is None:
        _DECLARED_ROLES.pop(name, None)
    else:
        _DECLARED_ROLES[name] = frozenset(roles)


def renderer_names() -> list[str]:
    return sorted(_FACTORIES)


def _factory(name: str) -> RendererFactory:
    if name not in _FACTORIES:
        raise UnknownRendererError(f"unknown renderer {name!r}; valid renderers: {', '.join(renderer_names())}")
    return _FACTORIES[name]


def get_renderer(name: str, tokenizer: Tokenizer) -> Renderer:
    return _factory(name)(tokenizer)


def renderer_roles(name: str) -> frozenset[str]:
    """The message roles renderer `name` has a format for, known without a tokenizer (a renderer
    class declares them in `roles`), so data can be checked before any model is loaded."""
    factory = _factory(name)
    if name in _DECLARED_ROLES:
        return _DECLARED_ROLES[name]
    roles = getattr(getattr(factory, "func", factory), "roles", STANDARD_ROLES)
    return roles if isinstance(roles, frozenset) else STANDARD_ROLES


def recommended_renderer(model_name: str) -> str:
    """The renderer for a known model family; others render through their own chat template."""
    lowered = model_name.lower()
    for pattern, name in _RECOMMENDATIONS:
        if re.search(pattern, lowered):
            return name
    return FALLBACK_RENDERER
