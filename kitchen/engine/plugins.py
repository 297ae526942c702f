"""Extension points: the things kitchen finds by name, each an entry-point group that any
installed package adds to — kitchen's own built-ins included, declared in its `pyproject.toml`
exactly as a third party declares theirs:

    [project.entry-points."kitchen.recipes"]
    my_recipe = "my_package.recipe:RECIPE"

| group                          | an entry is                                    | used by                         |
|--------------------------------|------------------------------------------------|---------------------------------|
| `kitchen.backends`             | a `kitchen.BackendSpec`                        | `backend:`                      |
| `kitchen.recipes`              | a `kitchen.Recipe`                             | `kitchen run NAME`              |
| `kitchen.losses`               | a `train_core.losses.LossSpec`                 | `algorithm.loss_fn:`            |
| `kitchen.advantage_estimators` | `(rewards_P, lengths_P, **options) -> adv_P`   | `algorithm.advantage_estimator:` |
| `kitchen.renderers`            | a renderer factory, `tokenizer -> Renderer`    | `renderer:`                     |
| `kitchen.rewards`              | a reward function (per sample or batched)      | `env.reward_fn:` (reward_fn_rl) |
| `kitchen.envs`                 | an `EnvSpec`: settings, task factory, check    | `env:` (env_rl)                 |
| `kitchen.tool_servers`         | a factory `target -> ToolServer`               | `kitchen serve --mcp-server`    |

An entry's name is the name configs use. Entries load on first use; one that fails to import or
is of the wrong kind is an error naming the entry point and its distribution, raised when its
group is used (a broken plugin never hides behind another name). Losses, advantage estimators
and renderers are registered into train_core's tables (`register_loss`, `register_estimator`,
`register_renderer`), which hold the
built-ins for code that uses train_core alone; the entry points of built-ins point at the same
objects, so loading them changes nothing, and a third party's name that clashes with a built-in
is refused.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, Generic, TypeVar

from kitchen.engine.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class ExtensionPoint(Generic[T]):
    """One entry-point group: what its entries must be (`check` returns the entry's object or
    raises TypeError saying what is wrong), and what to do with each once loaded (`install`)."""

    group: str
    kind: str
    check: Callable[[str, Any], T]
    install: Callable[[str, T], None] | None = None

    def load(self) -> dict[str, T]:
        """Every entry of the group by name (loaded once per process)."""
        return _load(self)

    def names(self) -> list[str]:
        return sorted(self.load())

    def get(self, name: str) -> T:
        """The entry called `name`; an unknown name is a ConfigError with a "did you mean"."""
        entries = self.load()
        if name not in entries:
            close = difflib.get_close_matches(name, entries, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"unknown {self.kind} {name!r}{hint} (registered: {', '.join(sorted(entries)) or 'none'})"
            )
        return entries[name]


def _origin(entry: EntryPoint) -> str:
    dist = entry.dist
    where = f" of {dist.name} {dist.version}" if dist is not None else ""
    return f"entry point {entry.name!r} ({entry.group}: {entry.value}){where}"


@cache
def _load(point: ExtensionPoint[Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = {}
    for entry in entry_points(group=point.group):
        if entry.name in loaded:
            raise ConfigError(f"{_origin(entry)}: another package already registers a {point.kind} {entry.name!r}")
        try:
            obj = point.check(entry.name, entry.load())
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"{_origin(entry)} cannot be loaded: {type(exc).__name__}: {exc}") from None
        except TypeError as exc:
            raise ConfigError(f"{_origin(entry)}: {exc}") from None
        if point.install is not None:
            try:
                point.install(entry.name, obj)
            except ValueError as exc:
                raise ConfigError(f"{_origin(entry)}: {exc}") from None
        loaded[entry.name] = obj
    return loaded


def clear_cache() -> None:
    """Forget loaded entry points (tests that install a throwaway distribution)."""
    _load.cache_clear()


OWN_RECIPES = Path(__file__).resolve().parents[2] / "recipes"
"""The recipes shipped beside this kitchen package (installed or in a checkout)."""


def own_recipes_package() -> Any:
    """kitchen's own `recipes` package, never one that happens to sit in the current directory
    (`python -m kitchen` puts the cwd first on sys.path): a foreign one is not imported."""
    loaded = sys.modules.get("recipes")
    if loaded is not None:
        where = Path(getattr(loaded, "__file__", "") or "").resolve().parent
        if where != OWN_RECIPES:
            raise ConfigError(
                f"the 'recipes' package already imported is {where}, not kitchen's own ({OWN_RECIPES}); "
                "run kitchen from another directory"
            )
        return loaded
    spec = importlib.util.find_spec("recipes")
    if spec is not None and spec.origin and Path(spec.origin).resolve().parent == OWN_RECIPES:
        return importlib.import_module("recipes")
    init = OWN_RECIPES / "__init__.py"
    if not init.is_file():
        raise ConfigError(f"kitchen's recipes package is missing: {init}")
    own = importlib.util.spec_from_file_location("recipes", init, submodule_search_locations=[str(OWN_RECIPES)])
    assert own is not None and own.loader is not None
    module = importlib.util.module_from_spec(own)
    sys.modules["recipes"] = module
    try:
        own.loader.exec_module(module)
    except BaseException:
        del sys.modules["recipes"]
        raise
    return module
