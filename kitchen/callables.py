"""Functions named in a config or on the command line as `module:function` (reward functions,
graders): importing them, with a message that says what is wrong when they cannot be."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def import_callable(spec: str, example: str) -> Callable[..., Any]:
    """The callable `spec` (`module:function`, or `module:Class.method`) names; a ValueError saying
    what is wrong otherwise. `example` is shown when `spec` is not of that form."""
    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr:
        raise ValueError(f"{spec!r} is not 'module:function' (e.g. {example})")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module's own error while importing
        raise ValueError(f"{spec!r}: module {module_name!r} cannot be imported: {exc}") from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"{spec!r}: module {module_name!r} has no {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{spec!r} is a {type(target).__name__}, not a function")
    return target
