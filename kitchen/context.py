"""Context: everything a run carries — config, ports, run state, loop positions, run dir, telemetry."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry import trace
from pydantic import BaseModel

from kitchen.checkpoints import CheckpointRecord
from kitchen.errors import WiringError
from kitchen.logging import make_run_logger
from kitchen.metrics import MetricsRecorder
from kitchen.stage import Stage

_CURRENT_STAGE: ContextVar[Stage | None] = ContextVar("kitchen_current_stage", default=None)


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


class _DeclaredConfig:
    """A running stage's view of the config: reading a key it did not declare is a WiringError,
    so `config_keys` (checked against the config class when the workflow is built) stays honest."""

    __slots__ = ("_config", "_stage")

    def __init__(self, config: BaseModel, stage: Stage) -> None:
        self._config = config
        self._stage = stage

    def __getattr__(self, key: str) -> Any:
        if key not in self._stage.config_keys:
            raise WiringError(
                f"stage {self._stage.name!r} reads config key {key!r} without declaring it in `config_keys`"
            )
        return getattr(self._config, key)


@dataclass
class LoopPosition:
    index: int
    total: int


class Context:
    """The state of one run. Stages read and write run state with `ctx[key]`; while a stage runs,
    only the keys it declared are reachable, so undeclared coupling fails loudly."""

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
        self.full_config: Any = config
        """The whole config, for recipe code that reads its own keys (e.g. a task factory); stages
        read `config`, which holds them to their declared `config_keys`."""
        self.ports = dict(ports)
        self.state: dict[str, Any] = dict(state or {})
        self.run_dir = run_dir
        self.metrics = metrics or MetricsRecorder()
        self.log = logger or make_run_logger(None)[0]
        self.tracer = trace.get_tracer("kitchen")
        self.resume = resume
        self.step = resume.step if resume else 0
        self.total_steps: int | None = None
        self.persist_keys: tuple[str, ...] = ()
        self.bad_steps = 0
        """Consecutive optimizer steps whose loss or gradient norm was NaN/inf."""
        self.last_step_loops: dict[str, int] = dict(resume.loops) if resume else {}
        """Loop positions when the last completed step ended (what a final checkpoint records)."""
        self.fingerprint: dict[str, Any] = {}
        """What this run trains (`kitchen.rundir.fingerprint`), recorded with every checkpoint."""
        self.hooks: tuple[Any, ...] = ()
        """The run's hooks (set by the runner), for stages that start sub-runs."""
        self._loops: dict[str, LoopPosition] = {}
        self._step_end_callbacks: list[Callable[[], None]] = []
        self._metric_scopes: list[list[dict[str, Any]]] = []
        self._commit: Callable[[], None] | None = None
        self.committed = True
        if resume:
            self.state.update(resume.state)

    @property
    def config(self) -> Any:
        """The recipe's config; while a stage runs, only the keys it declared are reachable."""
        stage = _CURRENT_STAGE.get()
        return self.full_config if stage is None else _DeclaredConfig(self.full_config, stage)

    # -- run state, checked against the running stage's declarations ------------------------
    def __getitem__(self, key: str) -> Any:
        stage = _CURRENT_STAGE.get()
        if stage is not None and key not in stage.reads and key not in stage.writes:
            raise WiringError(f"stage {stage.name!r} reads {key!r} without declaring it in `reads`")
        try:
            return self.state[key]
        except KeyError:
            raise WiringError(f"{key!r} is not in the run state (read by {self._who()})") from None

    def __setitem__(self, key: str, value: Any) -> None:
        stage = _CURRENT_STAGE.get()
        if stage is not None and key not in stage.writes:
            raise WiringError(f"stage {stage.name!r} writes {key!r} without declaring it in `writes`")
        self.state[key] = value

    def __contains__(self, key: str) -> bool:
        return key in self.state

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self.state else default

    def port(self, name: str) -> Any:
        stage = _CURRENT_STAGE.get()
        if stage is not None and name not in stage.ports:
            raise WiringError(f"stage {stage.name!r} uses port {name!r} without declaring it in `ports`")
        return self.ports[name]

    def _who(self) -> str:
        stage = _CURRENT_STAGE.get()
        return f"stage {stage.name!r}" if stage else "the runner"

    @contextmanager
    def running(self, stage: Stage) -> Iterator[None]:
        token = _CURRENT_STAGE.set(stage)
        try:
            yield
        finally:
            _CURRENT_STAGE.reset(token)

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
