"""Declarative workflow trees and their build-time validation.

A workflow is plain data: `Workflow(name, steps, finally_=...)` of stages, `Loop`s, `When`s and
`Parallel`s. `validate` walks it in execution order and proves that every key a stage reads was
written before (or is in the initial state), every port it needs is bound, and names are unique.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from kitchen.errors import WiringError
from kitchen.ports import PORT_CALLS
from kitchen.stage import Stage

if TYPE_CHECKING:
    from kitchen.context import Context


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


@dataclass
class Workflow:
    name: str
    steps: Sequence[Node]
    finally_: Sequence[Stage] = field(default_factory=list)

    def stages(self) -> Iterator[Stage]:
        yield from _iter_stages(self.steps)
        yield from self.finally_

    def persisted_keys(self) -> list[str]:
        return [key for stage in self.stages() for key in stage.persist]

    def validate(
        self, initial_keys: Collection[str], bound_ports: Collection[str], config_cls: type[BaseModel] | None = None
    ) -> None:
        """Raise WiringError naming the stage and key of the first wiring mistake; with
        `config_cls`, also every config key a stage or predicate reads that the class lacks."""
        names: set[str] = {self.name}
        available = set(initial_keys)
        _check_nodes(self.steps, available, set(bound_ports), names)
        # finally_ stages run even when the main steps failed part-way, so they may rely only on
        # the initial state.
        _check_nodes(self.finally_, set(initial_keys), set(bound_ports), names, where="finally_")
        if config_cls is not None:
            check_config_keys(self.config_keys(), config_cls)

    def config_keys(self) -> Iterator[tuple[str, str]]:
        """(reader, key) for every config key a stage, loop count or `When` predicate reads."""
        for node in _iter_nodes([*self.steps, *self.finally_]):
            if isinstance(node, Stage):
                yield from ((f"stage {node.name!r}", key) for key in node.config_keys)
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
                f"(subclass the workflow family's settings, e.g. kitchen.rl.settings.RLSettings)"
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


def _check_nodes(nodes: Sequence[Node], available: set[str], ports: set[str], names: set[str], where: str = "") -> None:
    for node in nodes:
        if isinstance(node, Stage):
            _claim(node.name, names)
            for port in node.ports:
                if port not in ports:
                    raise WiringError(
                        f"stage {node.name!r} needs port {port!r}, which is not bound "
                        f"(bound: {sorted(ports) or 'none'})"
                    )
            for call in node.calls:
                if call not in PORT_CALLS:
                    raise WiringError(f"stage {node.name!r} declares unknown backend call {call!r}")
            for key in node.reads:
                if key not in available:
                    hint = f" in {where}" if where else ""
                    raise WiringError(
                        f"stage {node.name!r}{hint} reads {key!r}, but no earlier stage writes it "
                        "and it is not in the initial state"
                    )
            available.update(node.writes)
        elif isinstance(node, Loop):
            _claim(node.name, names)
            if isinstance(node.over, str) and node.over not in available:
                raise WiringError(f"loop {node.name!r} counts over {node.over!r}, which nothing writes")
            _check_nodes(node.body, available, ports, names, where)
        elif isinstance(node, When):
            _claim(node.name, names)
            _check_nodes(node.body, set(available), ports, names, where)
        else:
            _claim(node.name, names)
            written: dict[str, int] = {}
            results: list[set[str]] = []
            for index, branch in enumerate(node.branches):
                branch_keys = set(available)
                _check_nodes(branch, branch_keys, ports, names, where)
                for key in branch_keys - available:
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
        period = int(getattr(ctx.full_config, config_key) or 0)
        done = ctx.step + 1
        return period > 0 and (done % period == 0 or (include_last and done == ctx.total_steps))

    return ConfigPredicate(
        f"every {config_key}" + (" and at the last step" if include_last else ""), (config_key,), due
    )


def render_tree(workflow: Workflow) -> str:
    """The workflow as an indented tree with each stage's reads, writes and ports."""
    lines = [f"workflow {workflow.name}"]

    def describe(stage: Stage) -> str:
        parts = [f"{stage.name} ({type(stage).__name__})"]
        declared = (("reads", stage.reads), ("writes", stage.writes), ("ports", stage.ports), ("calls", stage.calls))
        for label, keys in declared:
            if keys:
                parts.append(f"{label}: {', '.join(keys)}")
        return "  ".join(parts)

    def walk(nodes: Sequence[Node], depth: int) -> None:
        pad = "  " * depth
        for node in nodes:
            if isinstance(node, Stage):
                lines.append(f"{pad}- {describe(node)}")
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
