"""Functions named in a config or on the command line as `module:function` (reward functions,
graders): importing them, with a message that says what is wrong when they cannot be."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any


def import_module_from(name: str, folders: Sequence[Path] = ()) -> ModuleType:
    """Import `name` as Python would; if its top-level module is not found, look for it (a `.py`
    file or a package) in `folders` (e.g. the config file's folder, then the working directory),
    so a `my_rewards.py` there needs no PYTHONPATH. A folder that holds it is appended to sys.path
    (never put before installed packages)."""
    top = name.partition(".")[0]
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != top:
            raise  # the module exists; something it imports does not
        for folder in folders:
            if (folder / f"{top}.py").is_file() or (folder / top / "__init__.py").is_file():
                if str(folder) not in sys.path:
                    sys.path.append(str(folder))
                importlib.invalidate_caches()
                return importlib.import_module(name)
        raise


def import_callable(spec: str, example: str, folders: Sequence[Path] = ()) -> Callable[..., Any]:
    """The callable `spec` (`module:function`, or `module:Class.method`) names, its module found by
    `import_module_from` in `folders`; a ValueError saying what is wrong otherwise. `example` is
    shown when `spec` is not of that form."""
    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr:
        raise ValueError(f"{spec!r} is not 'module:function' (e.g. {example})")
    try:
        module = import_module_from(module_name, folders)
    except Exception as exc:  # ImportError, or the module's own error while importing
        where = f" (looked in {', '.join(str(folder) for folder in folders)})" if folders else ""
        raise ValueError(f"{spec!r}: module {module_name!r} cannot be imported{where}: {exc}") from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"{spec!r}: module {module_name!r} has no {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{spec!r} is a {type(target).__name__}, not a function")
    return target
