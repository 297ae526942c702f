"""Renderers by name, plus which one suits a model name."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from types import SimpleNamespace

from train_core.renderers.base import Renderer
from train_core.renderers.deepseek_v3 import DeepSeekV3Renderer
from train_core.renderers.deepseek_v4 import REASONING_BUDGETS, DeepSeekV4Renderer
from train_core.renderers.errors import RendererError, UnknownRendererError
from train_core.renderers.glm5_3 import Glm5_3Renderer
from train_core.renderers.gpt_oss import GptOssRenderer
from train_core.renderers.hf_chat_template import HfChatTemplateRenderer
from train_core.renderers.kimi_k2 import KimiK2Renderer, ReplyOpening
from train_core.renderers.llama3 import Llama3Renderer
from train_core.renderers.messages import STANDARD_ROLES
from train_core.renderers.nemotron3 import Nemotron3Renderer
from train_core.renderers.qwen3 import Qwen3Renderer
from train_core.renderers.qwen3_5 import Qwen3_5Renderer
from train_core.renderers.qwen3_vl import Qwen3VLRenderer
from train_core.renderers.role_colon import RoleColonRenderer
from train_core.renderers.tml_v0 import TmlV0Renderer
from train_core.renderers.tokenizer import Tokenizer

RendererFactory = Callable[[Tokenizer], Renderer]

_KIMI_K25_OPENINGS: tuple[tuple[str, ReplyOpening], ...] = (("", "think"), ("_disable_thinking", "no_think"))

_FACTORIES: dict[str, RendererFactory] = {
    "llama3": Llama3Renderer,
    "qwen3": Qwen3Renderer,
    "qwen3_disable_thinking": partial(Qwen3Renderer, mode="disabled"),
    "qwen3_instruct": partial(Qwen3Renderer, mode="instruct"),
    "qwen3_vl": Qwen3VLRenderer,
    "qwen3_vl_instruct": partial(Qwen3VLRenderer, mode="instruct"),
    "qwen3_5": Qwen3_5Renderer,
    "qwen3_5_disable_thinking": partial(Qwen3_5Renderer, name="qwen3_5_disable_thinking", thinking=False),
    "qwen3_5_preserve_thinking": partial(Qwen3_5Renderer, name="qwen3_5_preserve_thinking", preserve_thinking=True),
    **{
        f"qwen3_8_{effort}_reasoning": partial(
            Qwen3_5Renderer, name=f"qwen3_8_{effort}_reasoning", version="3.8", reasoning_effort=effort
        )
        for effort in ("xhigh", "medium", "low")
    },
    "qwen3_8_disable_thinking": partial(
        Qwen3_5Renderer, name="qwen3_8_disable_thinking", version="3.8", thinking=False
    ),
    "role_colon": RoleColonRenderer,
    # As in tinker-cookbook: `deepseekv3` is thinking off, `deepseekv3_disable_thinking` its alias.
    "deepseekv3": DeepSeekV3Renderer,
    "deepseekv3_disable_thinking": DeepSeekV3Renderer,
    "deepseekv3_thinking": partial(DeepSeekV3Renderer, thinking=True),
    "deepseekv4_1": DeepSeekV4Renderer,
    "deepseekv4_1_low_reasoning": partial(DeepSeekV4Renderer, reasoning_budget=REASONING_BUDGETS["low"]),
    "deepseekv4_1_max_reasoning": partial(DeepSeekV4Renderer, reasoning_budget=REASONING_BUDGETS["max"]),
    "deepseekv4_1_disable_thinking": partial(DeepSeekV4Renderer, reasoning_budget=None),
    "deepseekv4_1_preserve_thinking": partial(DeepSeekV4Renderer, preserve_thinking=True),
    "kimi_k2": KimiK2Renderer,
    # Kimi K2.5 and K2.6 share one format (the K2.6 template adds only `preserve_thinking`).
    **{
        f"{name}{suffix}": partial(KimiK2Renderer, name=f"{name}{suffix}", opening=opening)
        for name in ("kimi_k25", "kimi_k26")
        for suffix, opening in _KIMI_K25_OPENINGS
    },
    "kimi_k26_preserve_thinking": partial(
        KimiK2Renderer, name="kimi_k26_preserve_thinking", opening="think", preserve_thinking=True
    ),
    "glm5_3_max_reasoning": Glm5_3Renderer,
    "glm5_3_high_reasoning": partial(Glm5_3Renderer, reasoning_effort="High"),
    "glm5_3_low_reasoning": partial(Glm5_3Renderer, reasoning_effort="Low"),
    "nemotron3": Nemotron3Renderer,
    "nemotron3_low_thinking": partial(Nemotron3Renderer, name="nemotron3_low_thinking", effort="low"),
    "nemotron3_disable_thinking": partial(Nemotron3Renderer, name="nemotron3_disable_thinking", thinking=False),
    "nemotron3_preserve_thinking": partial(
        Nemotron3Renderer, name="nemotron3_preserve_thinking", preserve_thinking=True
    ),
    "nemotron3_ultra": partial(Nemotron3Renderer, name="nemotron3_ultra", variant="ultra"),
    "nemotron3_ultra_disable_thinking": partial(
        Nemotron3Renderer, name="nemotron3_ultra_disable_thinking", variant="ultra", thinking=False
    ),
    "nemotron3_ultra_medium_thinking": partial(
        Nemotron3Renderer, name="nemotron3_ultra_medium_thinking", variant="ultra", effort="medium"
    ),
    "nemotron3_ultra_preserve_thinking": partial(
        Nemotron3Renderer, name="nemotron3_ultra_preserve_thinking", variant="ultra", preserve_thinking=True
    ),
    "gpt_oss_no_sysprompt": GptOssRenderer,
    "gpt_oss_low_reasoning": partial(GptOssRenderer, reasoning_effort="low"),
    "gpt_oss_medium_reasoning": partial(GptOssRenderer, reasoning_effort="medium"),
    "gpt_oss_high_reasoning": partial(GptOssRenderer, reasoning_effort="high"),
    "tml_v0": TmlV0Renderer,
    "hf_chat_template": HfChatTemplateRenderer,
}

BUILTIN_RENDERERS = SimpleNamespace(**_FACTORIES)
"""The built-in factories by name, as attributes: what kitchen's `kitchen.renderers` entry points
name (`train_core.renderers.registry:BUILTIN_RENDERERS.qwen3`), like a plugin's."""

_DECLARED_ROLES: dict[str, frozenset[str]] = {}
"""Roles given to `register_renderer` for factories whose class does not say."""

# First match wins; patterns run against the lowercased model name or path.
_RECOMMENDATIONS: tuple[tuple[str, str], ...] = (
    (r"^tiny(32|64k)?$", "role_colon"),
    (r"^tiny-vl$", "qwen3_vl_instruct"),
    (r"qwen3-vl.*instruct", "qwen3_vl_instruct"),
    (r"qwen3-vl", "qwen3_vl"),
    (r"llama-?3", "llama3"),
    (r"qwen3\.[56]", "qwen3_5"),
    (r"qwen3\.8", "qwen3_8_xhigh_reasoning"),
    (r"qwen3.*instruct", "qwen3_instruct"),
    (r"qwen3", "qwen3"),
    (r"deepseek-?v3", "deepseekv3"),
    (r"deepseek-?v4", "deepseekv4_1"),
    (r"kimi-?k2\.5", "kimi_k25"),
    (r"kimi-?k2\.6", "kimi_k26"),
    (r"kimi-?k2", "kimi_k2"),
    (r"gpt-?oss", "gpt_oss_medium_reasoning"),
    (r"glm-?5\.3", "glm5_3_max_reasoning"),
    (r"nemotron-?3(\.5)?-(ultra|super-?3\.5|lightning)|nemotron-?3\.5", "nemotron3_ultra"),
    (r"nemotron-?3", "nemotron3"),
    (r"inkling", "tml_v0"),
)
FALLBACK_RENDERER = "hf_chat_template"


def register_renderer(
    name: str, factory: RendererFactory, *, roles: frozenset[str] | None = None, replace: bool = False
) -> None:
    """Adds a user renderer; re-registering a name needs `replace=True` so typos do not shadow
    (registering the same factory again changes nothing). `roles`: the message roles its
    renderers accept, checked in the data before the run starts; by default a Renderer class's
    own `roles` (a plain function factory: the standard roles)."""
    if _FACTORIES.get(name) is factory and roles is None:
        return
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


def renderer_declares_tools(name: str) -> bool:
    """Whether renderer `name` has a native tool format (declares tools, writes and parses calls),
    known without a tokenizer from its class's `declares_tools`."""
    factory = _factory(name)
    return bool(getattr(getattr(factory, "func", factory), "declares_tools", False))


def renderer_takes_images(name: str) -> bool:
    """Whether renderer `name` renders image parts (a vision-language format)."""
    factory = _factory(name)
    return bool(getattr(getattr(factory, "func", factory), "takes_images", False))


def tool_renderer_names() -> list[str]:
    return [name for name in renderer_names() if renderer_declares_tools(name)]


def check_tool_renderer(name: str) -> None:
    """Refuses, naming it, a renderer with no native tool format for a run that declares tools."""
    if not renderer_declares_tools(name):
        raise RendererError(
            f"renderer {name!r} has no native tool format, so it cannot declare tools or parse tool calls; "
            f"use one that has: {', '.join(tool_renderer_names())}"
        )


def recommended_renderer(model_name: str) -> str:
    """The renderer for a known model family; others render through their own chat template."""
    lowered = model_name.lower()
    for pattern, name in _RECOMMENDATIONS:
        if re.search(pattern, lowered):
            return name
    return FALLBACK_RENDERER
