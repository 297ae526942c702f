"""Declarative workflow trees and their build-time validation.

A workflow is plain data: `Workflow(name, steps, finally_=...)` of stages, `Loop`s, `When`s and
`Parallel`s. `validate` walks it in execution order and proves, from each stage's `run` signature
(`kitchen.engine.stage`), that every key a stage reads was written before (or is in the initial state)
with a type the stage accepts, that the recipe's config defines every setting a stage names,
that every port it needs is bound, and that names are unique.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from kitchen.engine.errors import WiringError
from kitchen.engine.stage import Read, Stage
from kitchen.engine.typecompat import assignable, type_name

if TYPE_CHECKING:
    from kitchen.engine.context import Context


@dataclass
class Loop:
    """Run `body` `over` times. `over` is a state key holding an int, or a function of the context.

    `step=True` marks the loop whose iterations are optimizer steps: the runner closes a
    metrics row and runs `on_step_end` hooks after each iteration. `reduce_metrics=True` marks a
    loop inside a step (e.g. over minibatches) whose iterations record the same metrics: each is
    reduced over the iterations into the step's row, summed for counts (`num_*`, `*:sum`) and
    averaged otherwise.
    """

    name: str
    over: str | Callable[[Context], int]
    body: Sequence[Node]
    step: bool = False
    reduce_metrics: bool = False


@dataclass
class When:
    """Run `body` only when `predicate(ctx)` holds. Keys written inside stay local to the body."""

    name: str
    predicate: Callable[[Context], bool]
    body: Sequence[Node]


@dataclass
class Parallel:
    """Run branches concurrently (asyncio). Branches may not write the same key."""

    name: str
    branches: Sequence[Sequence[Node]]


Node = Stage | Loop | When | Parallel


@dataclass(frozen=True)
class Available:
    """A key the run state holds at some point of the workflow: its type and who wrote it."""

    type: Any
    writer: str


def state_types(state: Mapping[str, Any]) -> dict[str, Any]:
    """The types of an initial run state's values (a recipe's `initial_state`)."""
    return {key: type(value) for key, value in state.items()}


@dataclass
class Workflow:
    name: str
    steps: Sequence[Node]
    finally_: Sequence[Stage] = field(default_factory=list)

    def stages(self) -> Iterator[Stage]:
        yield from _iter_stages(self.steps)
        yield from self.finally_

    def validate(
        self, initial: Mapping[str, Any], bound_ports: Iterable[str], config_cls: type[BaseModel] | None = None
    ) -> None:
        """Raise WiringError naming the stage, key and types of the first wiring mistake.

        `initial` maps the initial state's keys to their types (`state_types`); with
        `config_cls`, also every setting a stage, loop count or `When` predicate reads that the
        class lacks or declares with another type."""
        names: set[str] = {self.name}
        start = {key: Available(tp, "the initial state") for key, tp in initial.items()}
        ports = set(bound_ports)
        _check_nodes(self.steps, dict(start), ports, names, config_cls)
        # finally_ stages run even when the main steps failed part-way, so they may rely only on
        # the initial state.
        _check_nodes(self.finally_, dict(start), ports, names, config_cls, where="finally_")
        if config_cls is not None:
            check_config_keys(self.config_keys(), config_cls)

    def config_keys(self) -> Iterator[tuple[str, str]]:
        """(reader, key) for every config key a stage's settings, loop count or `When` predicate
        reads."""
        for node in _iter_nodes([*self.steps, *self.finally_]):
            if isinstance(node, Stage):
                for _, model in node.spec.settings:
                    yield from ((f"stage {node.name!r}", key) for key in model.model_fields)
            elif isinstance(node, Loop) and not isinstance(node.over, str):
                yield from ((f"loop {node.name!r}", key) for key in getattr(node.over, "config_keys", ()))
            elif isinstance(node, When):
                yield from ((f"when {node.name!r}", key) for key in getattr(node.predicate, "config_keys", ()))


def _has_key(config_cls: type[BaseModel], key: str) -> bool:
    return key in config_cls.model_fields or isinstance(getattr(config_cls, key, None), property)


def check_config_keys(readers: Iterable[tuple[str, str]], config_cls: type[BaseModel]) -> None:
    """Raise WiringError for the first (reader, key) whose key `config_cls` does not define."""
    for reader, key in readers:
        if not _has_key(config_cls, key):
            raise WiringError(
                f"{reader} reads config key {key!r}, which config class {config_cls.__name__} does not define "
                f"(subclass the workflow family's settings, e.g. kitchen.families.rl.settings.RLSettings)"
            )


def check_settings(stage: Stage, config_cls: type[BaseModel]) -> None:
    """Every field of every settings model the stage names is a config field of a type it accepts."""
    for _, model in stage.spec.settings:
        for key, wanted in model.model_fields.items():
            present = config_cls.model_fields.get(key)
            if present is None:
                raise WiringError(
                    f"stage {stage.name!r} needs setting {key!r} ({model.__name__}), which config class "
                    f"{config_cls.__name__} does not define (subclass {model.__name__} or the workflow family's "
                    "settings, e.g. kitchen.families.rl.settings.RLSettings)"
                )
            if not assignable(present.annotation, wanted.annotation):
                raise WiringError(
                    f"stage {stage.name!r} reads setting {key!r} as {type_name(wanted.annotation)} "
                    f"({model.__name__}), but config class {config_cls.__name__} declares it as "
                    f"{type_name(present.annotation)}"
                )


def _iter_nodes(nodes: Sequence[Node]) -> Iterator[Node]:
    for node in nodes:
        yield node
        if isinstance(node, (Loop, When)):
            yield from _iter_nodes(node.body)
        elif isinstance(node, Parallel):
            for branch in node.branches:
                yield from _iter_nodes(branch)


def _iter_stages(nodes: Sequence[Node]) -> Iterator[Stage]:
    return (node for node in _iter_nodes(nodes) if isinstance(node, Stage))


def _claim(name: str, names: set[str]) -> None:
    if name in names:
        raise WiringError(f"duplicate name {name!r} in workflow: stage and loop names must be unique")
    names.add(name)


def _check_read(stage: Stage, read: Read, available: dict[str, Available], where: str) -> None:
    found = available.get(read.key)
    if found is None:
        if read.required:
            hint = f" in {where}" if where else ""
            raise WiringError(
                f"stage {stage.name!r}{hint} reads {read.key!r} ({type_name(read.type)}), but no earlier stage "
                "writes it and it is not in the initial state"
            )
        return
    if not assignable(found.type, read.type):
        raise WiringError(
            f"stage {stage.name!r} reads {read.key!r} as {type_name(read.type)}, but {found.writer} writes it "
            f"as {type_name(found.type)}"
        )


def _check_stage(
    stage: Stage,
    available: dict[str, Available],
    ports: set[str],
    config_cls: type[BaseModel] | None,
    where: str,
) -> None:
    spec = stage.spec
    for _, port in spec.ports:
        if port not in ports:
            raise WiringError(
                f"stage {stage.name!r} needs port {port!r}, which is not bound (bound: {sorted(ports) or 'none'})"
            )
    for read in spec.reads:
        _check_read(stage, read, available, where)
    if config_cls is not None:
        check_settings(stage, config_cls)
    for write in spec.writes:
        before = available.get(write.key)
        if before is not None and not assignable(write.type, before.type):
            raise WiringError(
                f"stage {stage.name!r} writes {write.key!r} as {type_name(write.type)}, but {before.writer} wrote "
                f"it as {type_name(before.type)} and later stages may read it so"
            )
        available[write.key] = Available(write.type, f"stage {stage.name!r}")


def _check_nodes(
    nodes: Sequence[Node],
    available: dict[str, Available],
    ports: set[str],
    names: set[str],
    config_cls: type[BaseModel] | None,
    where: str = "",
) -> None:
    for node in nodes:
        if isinstance(node, Stage):
            _claim(node.name, names)
            _check_stage(node, available, ports, config_cls, where)
        elif isinstance(node, Loop):
            _claim(node.name, names)
            if isinstance(node.over, str):
                count = available.get(node.over)
                if count is None:
                    raise WiringError(f"loop {node.name!r} counts over {node.over!r}, which nothing writes")
                if not assignable(count.type, int):
                    raise WiringError(
                        f"loop {node.name!r} counts over {node.over!r}, which {count.writer} writes as "
                        f"{type_name(count.type)}, not int"
                    )
            _check_nodes(node.body, available, ports, names, config_cls, where)
        elif isinstance(node, When):
            _claim(node.name, names)
            _check_nodes(node.body, dict(available), ports, names, config_cls, where)
        else:
            _claim(node.name, names)
            written: dict[str, int] = {}
            results: list[dict[str, Available]] = []
            for index, branch in enumerate(node.branches):
                branch_keys = dict(available)
                _check_nodes(branch, branch_keys, ports, names, config_cls, where)
                for key, value in branch_keys.items():
                    if available.get(key) is value:
                        continue
                    if key in written:
                        raise WiringError(
                            f"parallel {node.name!r}: branches {written[key]} and {index} both write {key!r}"
                        )
                    written[key] = index
                results.append(branch_keys)
            for keys in results:
                available.update(keys)


@dataclass(frozen=True)
class ConfigPredicate:
    """A `When` predicate (or a `Loop` count) that reads config keys, declared so that building
    the workflow checks them against the recipe's config class, as it does for stages."""

    description: str
    config_keys: tuple[str, ...]
    test: Callable[[Context], bool]

    def __call__(self, ctx: Context) -> bool:
        return self.test(ctx)

    @property
    def __name__(self) -> str:
        return self.description


@dataclass(frozen=True)
class WorkflowBuilder:
    """A recipe's `workflow(config)` that reads config keys to choose the workflow's shape (a
    mode, optional stages), declared so they are checked before it is called."""

    description: str
    config_keys: tuple[str, ...]
    build: Callable[[Any], Workflow]

    def __call__(self, config: Any) -> Workflow:
        return self.build(config)


def every(config_key: str, include_last: bool = False) -> ConfigPredicate:
    """Predicate for a step loop: the step count is a positive multiple of config `config_key`
    (and, with `include_last`, also the last step when the period is positive)."""

    def due(ctx: Context) -> bool:
        period = int(getattr(ctx.config, config_key) or 0)
        done = ctx.step + 1
        return period > 0 and (done % period == 0 or (include_last and done == ctx.total_steps))

    return ConfigPredicate(
        f"every {config_key}" + (" and at the last step" if include_last else ""), (config_key,), due
    )


def describe_stage(stage: Stage) -> str:
    """One line: the stage's name and class, and its reads, writes, settings, ports and calls."""
    spec = stage.spec
    parts = [f"{stage.name} ({type(stage).__name__})"]
    reads = [f"{r.key}: {type_name(r.type)}{'' if r.required else ' (optional)'}" for r in spec.reads]
    writes = [f"{w.key}: {type_name(w.type)}{' (persisted)' if w.persisted else ''}" for w in spec.writes]
    declared = (
        ("reads", reads),
        ("writes", writes),
        ("settings", [model.__name__ for _, model in spec.settings]),
        ("ports", [port for _, port in spec.ports]),
        ("calls", list(spec.calls)),
    )
    parts += [f"{label}: {', '.join(items)}" for label, items in declared if items]
    return "  ".join(parts)


def render_tree(workflow: Workflow) -> str:
    """The workflow as an indented tree with each stage's reads, writes, settings, ports and calls."""
    lines = [f"workflow {workflow.name}"]

    def walk(nodes: Sequence[Node], depth: int) -> None:
        pad = "  " * depth
        for node in nodes:
            if isinstance(node, Stage):
                lines.append(f"{pad}- {describe_stage(node)}")
            elif isinstance(node, Loop):
                over = node.over if isinstance(node.over, str) else getattr(node.over, "__name__", "fn")
                lines.append(f"{pad}loop {node.name} over {over}{' (step)' if node.step else ''}")
                walk(node.body, depth + 1)
            elif isinstance(node, When):
                lines.append(f"{pad}when {node.name} [{getattr(node.predicate, '__name__', 'predicate')}]")
                walk(node.body, depth + 1)
            else:
                lines.append(f"{pad}parallel {node.name}")
                for index, branch in enumerate(node.branches):
                    lines.append(f"{pad}  branch {index}")
                    walk(branch, depth + 2)

    walk(workflow.steps, 1)
    if workflow.finally_:
        lines.append("  finally")
        walk(workflow.finally_, 2)
    return "\n".join(lines)
