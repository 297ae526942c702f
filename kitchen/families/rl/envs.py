"""RL environments by name, and the `env` section that picks one.

An environment package registers an `EnvSpec` under the `kitchen.envs` entry-point group
(`kitchen.engine.plugins`): the pydantic model of its own settings (an `EnvSettings` whose `name`
is the entry point's name) and the factory that builds its `RLTask` from them, the run's config and
the renderer. A recipe's `env` section is the choice of one environment, discriminated by `name`,
so only the chosen environment's keys exist:

    env: {name: gsm8k, dataset: problems.jsonl}      # or just `env: gsm8k`

`env_choice` types the section over the registered environments (the `env_rl` recipe: any of
them) and `env_task` / `env_check` dispatch the task and its data check to the chosen one; a recipe
written for a few environments lists them (`Annotated[ArithmeticEnv | WordProblemEnv, CHOICE]`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar, Union

from pydantic import BaseModel, Field, create_model

from kitchen.engine.config.sections import Section
from kitchen.engine.plugins import ExtensionPoint
from kitchen.families.rl.settings import RLSettings
from train_core.renderers.base import Renderer
from train_core.rl.task import DataCheck, RLTask

S = TypeVar("S", bound=BaseModel)


class EnvSettings(Section):
    """Base of an environment's settings: its `name` (a `Literal` of the name it is registered
    under) picks it in a config's `env` section; a plain value is the name."""

    SHORTHAND: ClassVar[str | None] = "name"

    name: str = Field(..., description="the environment, as registered (entry-point group kitchen.envs)")


CHOICE = Field(discriminator="name")
"""The metadata that makes a union of environment settings a choice by `name`."""


@dataclass(frozen=True)
class EnvSpec(Generic[S]):
    """One environment: what it is, its settings and how to build its task."""

    description: str
    settings: type[S]
    build_task: Callable[[S, RLSettings, Renderer], RLTask]
    """(its settings, the run's config: batch sizes, seed, ...; the renderer) -> the task."""
    check: Callable[[S, frozenset[str]], None] | None = None
    """Reads the environment's data files before any work starts (a DataError names the file);
    the roles are those the run's renderer takes."""


def _check(name: str, obj: Any) -> EnvSpec[Any]:
    if not isinstance(obj, EnvSpec):
        raise TypeError("is not a kitchen.families.rl.envs.EnvSpec")
    tag = obj.settings.model_fields.get("name")
    if tag is not None and tag.is_required() and issubclass(obj.settings, EnvSettings):
        return _named(name, obj)
    if tag is None or tag.default != name:
        raise TypeError(f"its settings' `name` must be Literal[{name!r}], defaulting to its registered name")
    return obj


def _named(name: str, spec: EnvSpec[Any]) -> EnvSpec[Any]:
    """An environment written for kitchen 0.2, whose settings have no `name` of their own: they get
    `name: Literal[<registered name>]`, with a DeprecationWarning (declare it; until 0.4)."""
    warnings.warn(
        f"RL environment {name!r}: its settings class {spec.settings.__name__} declares no "
        f"`name: Literal[{name!r}]`; kitchen 0.3 adds it (declare it yourself: this works until 0.4)",
        DeprecationWarning,
        stacklevel=2,
    )
    tag: Any = Literal[name]
    named = create_model(spec.settings.__name__, __base__=spec.settings, name=(tag, Field(name)))
    return dataclasses.replace(spec, settings=named)


ENVS: ExtensionPoint[EnvSpec[Any]] = ExtensionPoint("kitchen.envs", "RL environment", _check)


def env_choice(specs: Mapping[str, EnvSpec[Any]]) -> Any:
    """The type of an `env` section choosing among `specs` (by `name`)."""
    members = tuple(spec.settings for spec in specs.values())
    if len(members) == 1:
        return members[0]
    return Annotated[Union[members], CHOICE]  # noqa: UP007  (a union built at run time)


def env_task(specs: Mapping[str, EnvSpec[Any]]) -> Callable[[Any, Renderer], RLTask]:
    """A recipe's task factory: the chosen environment's task from the config's `env` section."""

    def build(config: Any, renderer: Renderer) -> RLTask:
        spec = specs[config.env.name]
        return spec.build_task(config.env, config, renderer)

    return build


def env_check(specs: Mapping[str, EnvSpec[Any]]) -> DataCheck:
    """A recipe's data check: the chosen environment's own, before anything starts."""

    def check(config: Any, roles: frozenset[str]) -> None:
        spec = specs[config.env.name]
        if spec.check is not None:
            spec.check(config.env, roles)

    return check
