"""Chat renderers by name: train_core's built-ins plus every `kitchen.renderers` entry point
(`kitchen.engine.plugins`: a factory `tokenizer -> Renderer`), registered into train_core's registry on
first use. Look renderers up here, so that a plugin's are found."""

from __future__ import annotations

from typing import Any

from kitchen.engine.plugins import ExtensionPoint
from train_core.renderers import registry
from train_core.renderers.base import Renderer
from train_core.renderers.registry import RendererFactory
from train_core.renderers.tokenizer import Tokenizer


def _check(name: str, obj: Any) -> RendererFactory:
    if not callable(obj):
        raise TypeError(f"is not a renderer factory (a callable tokenizer -> Renderer; got {type(obj).__name__})")
    factory: RendererFactory = obj
    return factory


def _install(name: str, factory: RendererFactory) -> None:
    try:
        registry.register_renderer(name, factory)
    except registry.RendererError as exc:
        raise ValueError(str(exc)) from None


RENDERERS: ExtensionPoint[RendererFactory] = ExtensionPoint("kitchen.renderers", "renderer", _check, _install)


def renderer_names() -> list[str]:
    RENDERERS.load()
    return registry.renderer_names()


def get_renderer(name: str, tokenizer: Tokenizer) -> Renderer:
    RENDERERS.load()
    return registry.get_renderer(name, tokenizer)


def renderer_roles(name: str) -> frozenset[str]:
    RENDERERS.load()
    return registry.renderer_roles(name)


def renderer_takes_images(name: str) -> bool:
    RENDERERS.load()
    return registry.renderer_takes_images(name)


def image_renderer_names() -> list[str]:
    """The renderers that take image parts (vision-language formats)."""
    return [name for name in renderer_names() if registry.renderer_takes_images(name)]
