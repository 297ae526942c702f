"""Context: everything a run carries — config, ports, run state, loop positions, run dir, telemetry."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry import trace
from pydantic import BaseModel, TypeAdapter

from kitchen.engine.errors import WiringError
from kitchen.engine.observe.logging import make_run_logger
from kitchen.engine.runs.checkpoints import CheckpointRecord
from kitchen.engine.runs.metrics import MetricsRecorder
from kitchen.engine.usage import UsageMeter


def reduce_records(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One value per key over several records of it: counts (`num_*`, `*:sum`) are summed, other
    numbers averaged; anything else keeps its last value."""
    values: dict[str, list[Any]] = {}
    for record in records:
        for key, value in record.items():
            values.setdefault(key, []).append(value)
    reduced: dict[str, Any] = {}
    for key, seen in values.items():
        if not all(isinstance(v, (int, float)) for v in seen):
            reduced[key] = seen[-1]
        elif key.startswith("num_") or key.endswith(":sum"):
            reduced[key] = sum(seen)
        else:
            reduced[key] = sum(seen) / len(seen)
    return reduced


@dataclass
class LoopPosition:
    index: int
    total: int


class Context:
    """One run: its config, bound ports, run state, loop positions, run dir and telemetry.

    Stages never touch the run state directly: the runner passes each stage the keys its `run`
    signature reads and stores the dataclass it returns (`kitchen.engine.stage`). What a stage uses of
    the context is the run around it: the step, loop positions, metrics, the logger, the run dir."""

    def __init__(
        self,
        config: BaseModel,
        ports: Mapping[str, Any],
        state: dict[str, Any] | None = None,
        run_dir: Path | None = None,
        metrics: MetricsRecorder | None = None,
        logger: Any = None,
        resume: CheckpointRecord | None = None,
    ) -> None:
        self.config: Any = config
        """The recipe's config (stages receive it through their typed settings parameter)."""
        self.ports = dict(ports)
        self.state: dict[str, Any] = dict(state or {})
        self.run_dir = run_dir
        self.metrics = metrics or MetricsRecorder()
        self.log = logger or make_run_logger(None)[0]
        self.tracer = trace.get_tracer("kitchen")
        self.resume = resume
        self.step = resume.step if resume else 0
        self.total_steps: int | None = None
        self.bad_steps = 0
        """Consecutive optimizer steps whose loss or gradient norm was NaN/inf."""
        self.last_step_loops: dict[str, int] = dict(resume.loops) if resume else {}
        """Loop positions when the last completed step ended (what a final checkpoint records)."""
        self.fingerprint: dict[str, Any] = {}
        """What this run trains (`kitchen.engine.runs.rundir.fingerprint`), recorded with every checkpoint."""
        self.hooks: tuple[Any, ...] = ()
        """The run's hooks (set by the runner), for stages that start sub-runs."""
        self.usage: UsageMeter | None = None
        """Counts the tokens the run's backend is asked for (set where the run starts); each
        step's counts go into its metrics row."""
        self.persisted: dict[str, TypeAdapter[Any]] = {}
        """The state keys saved with checkpoints, each with its declared type (set by the runner)."""
        self._loops: dict[str, LoopPosition] = {}
        self._step_end_callbacks: list[Callable[[], None]] = []
        self._metric_scopes: list[list[dict[str, Any]]] = []
        self._commit: Callable[[], None] | None = None
        self.committed = True

    # -- the point a run starts changing its run dir -------------------------------------------
    def set_commit(self, commit: Callable[[], None]) -> None:
        """`commit` runs once, just before the first change to backend state or the run dir's
        logs (the runner calls `commit()` before the first stage that calls the backend beyond
        its tokenizer, and the metrics recorder before its first row)."""
        self._commit = commit
        self.committed = False
        self.metrics.before_write = self.commit

    def commit(self) -> None:
        if self._commit is not None:
            commit, self._commit = self._commit, None
            commit()
        self.committed = True

    def persisted_state(self) -> dict[str, Any]:
        """The persisted keys' values as JSON-ready data, for a checkpoint record."""
        return {
            key: adapter.dump_python(self.state[key], mode="json")
            for key, adapter in self.persisted.items()
            if key in self.state
        }

    # -- loops and steps ---------------------------------------------------------------------
    def loop(self, name: str) -> LoopPosition:
        try:
            return self._loops[name]
        except KeyError:
            raise WiringError(f"loop {name!r} is not running (running: {list(self._loops)})") from None

    def loop_positions(self) -> dict[str, int]:
        return {name: pos.index for name, pos in self._loops.items()}

    def enter_loop(self, name: str, position: LoopPosition) -> None:
        self._loops[name] = position

    def exit_loop(self, name: str) -> None:
        self._loops.pop(name, None)

    def at_step_end(self, callback: Callable[[], None]) -> None:
        """Run `callback` when the current step ends, after its metrics row is written."""
        self._step_end_callbacks.append(callback)

    def take_step_end_callbacks(self) -> list[Callable[[], None]]:
        callbacks, self._step_end_callbacks = self._step_end_callbacks, []
        return callbacks

    # -- metrics -----------------------------------------------------------------------------
    def record(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """Record metrics for `step` (default: the current step, through the innermost metric
        scope if one is open)."""
        if step is None and self._metric_scopes:
            self._metric_scopes[-1].append(metrics)
        else:
            self.metrics.record(self.step if step is None else step, metrics)

    def open_metric_scope(self) -> None:
        """Collect what is recorded for the current step until `close_metric_scope`."""
        self._metric_scopes.append([])

    def close_metric_scope(self) -> None:
        """Record what the scope collected, each key reduced over its records (see `reduce_records`)."""
        self.record(reduce_records(self._metric_scopes.pop()))
