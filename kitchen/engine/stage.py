"""Stage: one small job in a workflow. Its `run` signature is its declaration.

    @dataclass(frozen=True)
    class Batch:
        batch: list[Datum]

    class GetBatch(Stage):
        async def run(self, ctx: Context, train_data: list[Datum], config: BatchSettings) -> Batch:
            ...
            return Batch(batch=[train_data[i] for i in indices])

- every parameter but `ctx`, the settings and the ports is a **read** of the run-state key of the
  same name, typed by its annotation (a default makes the read optional: the value is passed when
  an earlier stage wrote it);
- a parameter annotated with a pydantic model is the stage's **settings**: the recipe's config
  must define every field of that model (checked when the workflow is built); the stage receives
  the run's config, so mypy holds it to those fields;
- a parameter annotated with a port protocol (`ServiceBackend`) is a **port**;
- the frozen dataclass it returns holds its **writes**: each field a key of that name and type
  (`Persisted[T]` marks a key saved in checkpoints and restored, type-checked, on resume);
- `Live[T]` reads a key whose later writes the stage sees while it runs (async mode's sampling
  workers follow the newest sampler);
- `calls` names the backend methods it calls, as the port protocols' own methods
  (`TrainingClient.forward_backward`), so `kitchen validate` can tell whether a backend runs them.

`keys={"parameter or field": "state key"}` binds one stage class to other keys (a second reference
model, the held-out set). The workflow validator (`kitchen.engine.workflow`) derives the wiring from
these and refuses a mis-wired workflow before any work starts.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Generic, TypeVar, get_args, get_origin

from pydantic import BaseModel

from kitchen.engine.errors import WiringError
from kitchen.engine.ports import PORT_TYPES, port_call_name
from kitchen.engine.typecompat import Deferred, LenientNames, strip_annotated

T = TypeVar("T")


class _Persist:
    """Marks a written key as saved in checkpoints (JSON through its type) and restored on resume."""

    def __repr__(self) -> str:
        return "PERSIST"


PERSIST = _Persist()

Persisted = Annotated[T, PERSIST]
"""`Persisted[str]`: an output field whose key is saved with every checkpoint and restored on resume."""


class Live(Generic[T]):
    """A read that sees later writes of its key: `.get()` gives the key's current value.

    For a stage that runs beside others (a `Parallel` branch) and must follow what they write."""

    __slots__ = ("_key", "_state")

    def __init__(self, state: Mapping[str, Any], key: str) -> None:
        self._state = state
        self._key = key

    def get(self) -> T:
        value: T = self._state[self._key]
        return value


@dataclass(frozen=True)
class Read:
    """A run-state key a stage reads: passed to `run` as `param`."""

    param: str
    key: str
    type: Any
    required: bool = True
    live: bool = False


@dataclass(frozen=True)
class Write:
    """A run-state key a stage writes: field `field` of the dataclass its `run` returns."""

    field: str
    key: str
    type: Any
    persisted: bool = False


@dataclass(frozen=True)
class StageSpec:
    """Everything a stage declares, read off its `run` signature (and its `calls`)."""

    reads: tuple[Read, ...]
    writes: tuple[Write, ...]
    settings: tuple[tuple[str, type[BaseModel]], ...]
    """(parameter, settings model): each receives the run's config."""
    ports: tuple[tuple[str, str], ...]
    """(parameter, port name)."""
    calls: tuple[str, ...]
    """`<Port>.<method>` for every backend method in the stage's `calls`."""
    takes_ctx: bool
    output: type | None

    @property
    def persisted(self) -> tuple[Write, ...]:
        return tuple(write for write in self.writes if write.persisted)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


class Stage:
    """Subclass and implement `async def run(self, ctx, <reads>, <settings>, <ports>) -> <writes>`
    (see the module doc). Stages hold no algorithm code: they call train_core for the math and
    ports for the backend."""

    calls: ClassVar[tuple[Callable[..., Any], ...]] = ()
    """The backend methods the stage calls, e.g. `(TrainingClient.forward_backward,)`."""

    def __init__(self, name: str | None = None, *, keys: Mapping[str, str] | None = None) -> None:
        self.name = name or _snake(type(self).__name__)
        self.keys: dict[str, str] = dict(keys or {})
        self._spec: StageSpec | None = None

    @property
    def spec(self) -> StageSpec:
        """What the stage reads, writes, needs and calls, derived once from its `run` signature."""
        if self._spec is None:
            self._spec = stage_spec(self)
        return self._spec

    def check_inputs(self, config: Any) -> None:
        """Check the input files this stage will read (record fields, message roles) from the
        config alone, with no backend and no tokenizer, raising an InvalidInputError naming file
        and line: `kitchen validate` and `kitchen run` call it before anything starts, so bad data
        fails the same way in both. Most stages read no files."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _hints(target: Any, owner: type, *namespaces: dict[str, Any]) -> dict[str, Any]:
    """The resolved annotations of a stage's `run` or of its output dataclass: names from the
    target's own module, then `namespaces` (the stage module's, for an output class defined in a
    module that was loaded from a file and never registered in `sys.modules`)."""
    module = sys.modules.get(getattr(target, "__module__", ""))
    own = vars(module) if module is not None else getattr(target, "__globals__", {})
    try:
        return typing.get_type_hints(target, localns=LenientNames(own, *namespaces), include_extras=True)
    except (NameError, TypeError) as exc:
        raise WiringError(
            f"stage class {owner.__name__}: the annotations of run() cannot be resolved ({exc}); "
            "import the types it names at run time, not only under TYPE_CHECKING"
        ) from None


def _call_name(method: Callable[..., Any], owner: type) -> str:
    name = port_call_name(getattr(method, "__qualname__", ""))
    if name is None:
        raise WiringError(f"stage class {owner.__name__} declares {method!r} in `calls`, which is no port method")
    return name


def _is_settings(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _output_writes(output: Any, owner: type, keys: Mapping[str, str], namespace: dict[str, Any]) -> tuple[Write, ...]:
    if output is None or output is type(None):
        return ()
    if isinstance(output, Deferred):
        raise WiringError(
            f"stage class {owner.__name__}: run() returns {output!r}, a name that cannot be resolved from its "
            "module: define the output dataclass at module level and import it at run time"
        )
    if not (isinstance(output, type) and dataclasses.is_dataclass(output)):
        raise WiringError(f"stage class {owner.__name__}: run() must return None or a frozen dataclass, not {output!r}")
    if not output.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise WiringError(f"stage class {owner.__name__}: its output {output.__name__} must be a frozen dataclass")
    hints = _hints(output, owner, namespace)
    writes = []
    for field in dataclasses.fields(output):
        annotated = hints[field.name]
        persisted = get_origin(annotated) is Annotated and any(m is PERSIST for m in annotated.__metadata__)
        writes.append(Write(field.name, keys.get(field.name, field.name), strip_annotated(annotated), persisted))
    return tuple(writes)


def stage_spec(stage: Stage) -> StageSpec:
    """Read a stage's declaration off its `run` signature; raise WiringError on a malformed one."""
    owner = type(stage)
    run = getattr(owner, "run", None)
    if run is None or not inspect.iscoroutinefunction(run):
        raise WiringError(f"stage {stage.name!r} ({owner.__name__}) has no `async def run`")
    hints = _hints(run, owner)
    parameters = list(inspect.signature(run).parameters.values())[1:]  # without self
    reads: list[Read] = []
    settings: list[tuple[str, type[BaseModel]]] = []
    ports: list[tuple[str, str]] = []
    takes_ctx = False
    for index, parameter in enumerate(parameters):
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise WiringError(f"stage class {owner.__name__}: run() takes no *args / **kwargs")
        if index == 0 and parameter.name == "ctx":
            takes_ctx = True
            continue
        if parameter.name not in hints:
            raise WiringError(f"stage class {owner.__name__}: run() parameter {parameter.name!r} has no type")
        annotation = hints[parameter.name]
        if annotation in PORT_TYPES:
            ports.append((parameter.name, PORT_TYPES[annotation]))
        elif _is_settings(annotation):
            settings.append((parameter.name, annotation))
        else:
            live = get_origin(annotation) is Live
            value_type = get_args(annotation)[0] if live else annotation
            key = stage.keys.get(parameter.name, parameter.name)
            reads.append(Read(parameter.name, key, value_type, parameter.default is parameter.empty, live))
    writes = _output_writes(hints.get("return"), owner, stage.keys, run.__globals__)
    known = {p.name for p in parameters} | {w.field for w in writes}
    unknown = sorted(set(stage.keys) - known)
    if unknown:
        raise WiringError(f"stage {stage.name!r}: keys= names {unknown}, which run() neither reads nor writes")
    output = hints.get("return")
    return StageSpec(
        reads=tuple(reads),
        writes=writes,
        settings=tuple(settings),
        ports=tuple(ports),
        calls=tuple(_call_name(method, owner) for method in owner.calls),
        takes_ctx=takes_ctx,
        output=output if isinstance(output, type) and output is not type(None) else None,
    )
