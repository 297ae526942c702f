"""Stage: one small job in a workflow, with the state keys it reads and writes declared."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kitchen.context import Context


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


class Stage:
    """Subclass, declare `reads` / `writes` / `ports`, and implement `run`.

    Stages hold no algorithm code: they call train_core for the math and ports for the backend.
    Declarations are checked when a workflow is built, so a mis-wired stage fails before any
    work starts. `persist` lists written keys that are saved in checkpoints and restored on
    resume (they must be JSON-serialisable). `calls` names the backend calls the stage makes, as
    `<Port>.<method>` after the protocols in `kitchen.ports` (e.g. "TrainingClient.forward_backward"),
    so `kitchen validate RECIPE backend=...` can tell, with no network, whether a backend runs them.
    `config_keys` names the config keys it reads (`ctx.config.<key>`): building a workflow checks
    them against the recipe's config class, and reading an undeclared key fails while it runs.
    """

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    ports: tuple[str, ...] = ()
    persist: tuple[str, ...] = ()
    calls: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()

    def __init__(self, name: str | None = None) -> None:
        self.name = name or _snake(type(self).__name__)

    async def run(self, ctx: Context) -> None:
        raise NotImplementedError(f"stage {self.name!r} does not implement run()")

    def check_inputs(self, config: Any) -> None:
        """Check the input files this stage will read (record fields, message roles) from the
        config alone, with no backend and no tokenizer, raising an InvalidInputError naming file
        and line: `kitchen validate` and `kitchen run` call it before anything starts, so bad data
        fails the same way in both. Most stages read no files."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
