"""Declarative workflow trees and their build-time validation.

A workflow is plain data: `Workflow(name, steps, finally_=...)` of stages, `Loop`s, `When`s and
`Parallel`s. `validate` walks it in execution order and proves, from each stage's `run` signature
(`kitchen.engine.stage`), that every key a stage reads was written before (or is in the initial
state) with a type the stage accepts, that the recipe's config has every settings section a stage,
predicate or loop count names (`kitchen.engine.config.sections`), that every port it needs is
bound, and that names are unique.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from kitchen.engine.config.sections import locate, reference_path, section_of
from kitchen.engine.errors import WiringError
from kitchen.engine.stage import Read, Stage
from kitchen.engine.typecompat import assignable, type_name

if TYPE_CHECKING:
    from kitchen.engine.context import Context

S = TypeVar("S", bound=BaseModel)


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
        `config_cls`, also every settings section a stage, loop count or `When` predicate reads
        that the class lacks (or holds in several places)."""
        names: set[str] = {self.name}
        start = {key: Available(tp, "the initial state") for key, tp in initial.items()}
        ports = set(bound_ports)
        _check_nodes(self.steps, dict(start), ports, names)
        # finally_ stages run even when the main steps failed part-way, so they may rely only on
        # the initial state.
        _check_nodes(self.finally_, dict(start), ports, names, where="finally_")
        if config_cls is not None:
            check_sections(self.config_sections(), config_cls)

    def config_sections(self) -> Iterator[tuple[str, type[BaseModel]]]:
        """(reader, settings model) for every section a stage, loop count or `When` predicate reads."""
        for node in _iter_nodes([*self.steps, *self.finally_]):
            if isinstance(node, Stage):
                yield from ((f"stage {node.name!r}", model) for _, model in node.spec.settings)
            elif isinstance(node, Loop) and isinstance(node.over, ConfigPredicate | ConfigCount):
                yield f"loop {node.name!r}", node.over.section
            elif isinstance(node, When) and isinstance(node.predicate, ConfigPredicate):
                yield f"when {node.name!r}", node.predicate.section


def check_sections(readers: Iterable[tuple[str, type[BaseModel]]], config_cls: type[BaseModel]) -> None:
    """Raise WiringError for the first reader whose section `config_cls` lacks or holds twice."""
    for reader, model in readers:
        locate(config_cls, model, reader)


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


def _check_stage(stage: Stage, available: dict[str, Available], ports: set[str], where: str) -> None:
    spec = stage.spec
    for _, port in spec.ports:
        if port not in ports:
            raise WiringError(
                f"stage {stage.name!r} needs port {port!r}, which is not bound (bound: {sorted(ports) or 'none'})"
            )
    for read in spec.reads:
        _check_read(stage, read, available, where)
    for write in spec.writes:
        before = available.get(write.key)
        if before is not None and not assignable(write.type, before.type):
            raise WiringError(
                f"stage {stage.name!r} writes {write.key!r} as {type_name(write.type)}, but {before.writer} wrote "
                f"it as {type_name(before.type)} and later stages may read it so"
            )
        available[write.key] = Available(write.type, f"stage {stage.name!r}")


def _check_nodes(
    nodes: Sequence[Node], available: dict[str, Available], ports: set[str], names: set[str], where: str = ""
) -> None:
    for node in nodes:
        if isinstance(node, Stage):
            _claim(node.name, names)
            _check_stage(node, available, ports, where)
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
            _check_nodes(node.body, available, ports, names, where)
        elif isinstance(node, When):
            _claim(node.name, names)
            _check_nodes(node.body, dict(available), ports, names, where)
        else:
            _claim(node.name, names)
            written: dict[str, int] = {}
            results: list[dict[str, Available]] = []
            for index, branch in enumerate(node.branches):
                branch_keys = dict(available)
                _check_nodes(branch, branch_keys, ports, names, where)
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
class ConfigPredicate(Generic[S]):
    """A `When` predicate that reads one config section, declared so that building the workflow
    checks the config has it, as it does for stages: `test(ctx, section)`.

        post_update_kl_on = ConfigPredicate("post_update_kl is on", RLLoopSettings, lambda ctx, rl: rl.post_update_kl)
    """

    description: str
    section: type[S]
    test: Callable[[Context, S], bool]

    def __call__(self, ctx: Context) -> bool:
        return self.test(ctx, section_of(ctx.config, self.section))

    @property
    def __name__(self) -> str:
        return self.description


@dataclass(frozen=True)
class ConfigCount(Generic[S]):
    """A `Loop` count read from one config section (checked like a `ConfigPredicate`)."""

    description: str
    section: type[S]
    count: Callable[[S], int]

    def __call__(self, ctx: Context) -> int:
        return self.count(section_of(ctx.config, self.section))

    @property
    def __name__(self) -> str:
        return self.description


@dataclass(frozen=True)
class WorkflowBuilder:
    """A recipe's `workflow(config)` that reads config sections to choose the workflow's shape (a
    mode, optional stages), declared so the config is checked to have them before it is called."""

    description: str
    sections: tuple[type[BaseModel], ...]
    build: Callable[[Any], Workflow]

    def __call__(self, config: Any) -> Workflow:
        return self.build(config)


def every(
    section: type[S], period: Callable[[S], int | None], include_last: bool = False, before_update: bool = False
) -> ConfigPredicate[S]:
    """Predicate for a step loop: the steps done are a positive multiple of the period the section
    gives (`every(CheckpointSettings, lambda c: c.save_every)`), and with `include_last` also at
    the last step when the period is positive. Steps done count the current one, unless
    `before_update` (a stage placed before the step's update: due at step 0, N, 2N, ...)."""
    key = reference_path(section, period)

    def due(ctx: Context, settings: S) -> bool:
        length = int(period(settings) or 0)
        done = ctx.step if before_update else ctx.step + 1
        return length > 0 and (done % length == 0 or (include_last and ctx.step + 1 == ctx.total_steps))

    described = f"every N steps, N = {section.__name__}.{key}"
    described += (", before the update (from step 0)" if before_update else "") + (
        " and at the last step" if include_last else ""
    )
    return ConfigPredicate(described, section, due)


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
