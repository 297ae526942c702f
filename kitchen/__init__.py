"""kitchen: LLM post-training as declarative workflows of typed stages.

The public surface, importable from `kitchen` itself, is written once, in `kitchen/__init__.pyi`
(what type checkers read); each name loads from its module on first use, so `import kitchen`
stays cheap and a backend adapter importing `kitchen.engine.ports` does not pull in the whole
engine. Everything else is internal and may change between minor versions (see CHANGELOG.md);
the training families' public modules are `kitchen.families.{supervised,preference,rl,distillation}`.

    from kitchen import Stage, Workflow, Loop, Context, run_recipe, load_config

Module paths of kitchen 0.2 still import for one release (`kitchen.moved`).
"""

from __future__ import annotations

import ast
import importlib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from kitchen import moved

moved.install()


def _exports() -> dict[str, str]:
    """Public name -> its module, read from the stub's `from MODULE import NAME as NAME` lines."""
    tree = ast.parse((Path(__file__).parent / "__init__.pyi").read_text(encoding="utf-8"))
    return {
        alias.asname: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
        if alias.asname == alias.name
    }


_EXPORTS = _exports()
__all__ = sorted([*_EXPORTS, "__version__"])

try:
    __version__ = version("kitchen")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kitchen' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
