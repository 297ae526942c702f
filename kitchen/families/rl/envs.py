"""RL environments by name: the `kitchen.envs` entry-point group (`kitchen.engine.plugins`).

An environment package registers an `EnvSpec`: the pydantic model of its own settings and the
factory that builds its `RLTask` from them, the run's RL settings and the renderer. The `env_rl`
recipe trains on any registered name (`env: NAME`, its settings under `env_args:`, checked before
any work), so a new environment needs no recipe of its own; recipes written for one environment
(math_rl, guess_number) mix the same settings models into their configs and call the same factory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from kitchen.engine.plugins import ExtensionPoint
from kitchen.families.rl.settings import RLSettings
from train_core.renderers.base import Renderer
from train_core.rl.task import RLTask

S = TypeVar("S", bound=BaseModel)


class EnvSettings(BaseModel):
    """Base of an environment's settings: unknown keys are errors, as in every config."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


@dataclass(frozen=True)
class EnvSpec(Generic[S]):
    """One environment: what it is, its settings and how to build its task."""

    description: str
    settings: type[S]
    build_task: Callable[[S, RLSettings, Renderer], RLTask]
    """(its settings, the run's RL settings: batch sizes, seed, ...; the renderer) -> the task."""
    check: Callable[[S], None] | None = None
    """Reads the environment's data files before any work starts (a DataError names the file)."""

    def parse(self, args: Mapping[str, Any]) -> S:
        """`env_args` as this environment's settings; a ValueError names each bad key."""
        try:
            return self.settings.model_validate(dict(args))
        except ValidationError as exc:
            problems = "; ".join(
                ".".join(["env_args", *(str(part) for part in error["loc"])]) + f": {error['msg']}"
                for error in exc.errors()
            )
            raise ValueError(problems) from None


def _check(name: str, obj: Any) -> EnvSpec[Any]:
    if not isinstance(obj, EnvSpec):
        raise TypeError("is not a kitchen.families.rl.envs.EnvSpec")
    return obj


ENVS: ExtensionPoint[EnvSpec[Any]] = ExtensionPoint("kitchen.envs", "RL environment", _check)
