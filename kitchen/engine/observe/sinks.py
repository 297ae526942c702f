"""Metric sinks beside the JSONL files: TensorBoard, Weights & Biases, MLflow (`loggers: [...]`).

Each is an optional extra (`pip install 'kitchen[tensorboard]'`, `[wandb]`, `[mlflow]`); choosing
one that is not installed is a config error when the config is loaded. A sink gets the resolved
config once (secrets redacted, as in config.yaml) and every metrics row as it is written. A sink
that fails (at start or mid-run) logs a warning and is dropped: it never stops training.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
import uuid
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from kitchen.engine.config.sections import Section
from kitchen.engine.hooks import Hooks
from kitchen.engine.secrets import redact_value

LoggerName = Literal["tensorboard", "wandb", "mlflow"]

REQUIRED_MODULES: dict[str, str] = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
"""The module each sink imports; its extra has the sink's name."""


def missing_logger_problem(name: str) -> str | None:
    """Why `name` cannot be used here (its package is not installed), or None."""
    module = REQUIRED_MODULES[name]
    if importlib.util.find_spec(module) is None:
        return f"logger {name!r} needs the {module!r} package: pip install 'kitchen[{name}]'"
    return None


class WandbSettings(BaseModel):
    """Config section `logging.wandb` (used when `logging.loggers` includes wandb). WANDB_MODE=offline is honoured."""

    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(default=None, description="W&B project; default: WANDB_PROJECT or 'kitchen'")
    entity: str | None = Field(default=None, description="W&B entity (team or user); default: your default entity")
    name: str | None = Field(default=None, description="run name; default: the run directory's name")


class MlflowSettings(BaseModel):
    """Config section `logging.mlflow` (used when `logging.loggers` includes mlflow)."""

    model_config = ConfigDict(extra="forbid")

    tracking_uri: str | None = Field(
        default=None, description="tracking URI; default: MLFLOW_TRACKING_URI, else a file store in RUN_DIR/mlruns"
    )
    experiment: str | None = Field(default=None, description="experiment name; default: the recipe name")
    run_name: str | None = Field(default=None, description="run name; default: the run directory's name")


class LoggingSettings(Section):
    """Config section `logging`: where metrics and traces go beside the run directory's JSONL files."""

    loggers: list[LoggerName] = Field(
        default_factory=list,
        description="metric sinks beside the JSONL files: tensorboard, wandb, mlflow (each an optional extra)",
    )
    wandb: WandbSettings = Field(default_factory=WandbSettings, description="Weights & Biases (loggers: [wandb])")
    mlflow: MlflowSettings = Field(default_factory=MlflowSettings, description="MLflow (loggers: [mlflow])")
    trace_file: bool = Field(default=False, description="write the run's OpenTelemetry spans to RUN_DIR/traces.jsonl")

    @field_validator("loggers")
    @classmethod
    def _installed_loggers(cls, names: list[str]) -> list[str]:
        problems = [problem for name in dict.fromkeys(names) if (problem := missing_logger_problem(name))]
        if problems:
            raise ValueError("; ".join(problems))
        return list(dict.fromkeys(names))

    @field_validator("trace_file")
    @classmethod
    def _sdk_for_trace_file(cls, enabled: bool) -> bool:
        if enabled and importlib.util.find_spec("opentelemetry.sdk") is None:
            raise ValueError("trace_file needs the opentelemetry-sdk package: pip install 'kitchen[otel]'")
        return enabled


def numeric_metrics(row: dict[str, Any]) -> dict[str, float]:
    """The row's finite numbers (the step excluded)."""
    return {
        key: float(value)
        for key, value in row.items()
        if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    }


class Sink:
    name = "sink"

    def log_config(self, config: dict[str, Any]) -> None: ...

    def log_row(self, step: int, metrics: dict[str, float]) -> None: ...

    def log_transcripts(self, step: int, records: list[dict[str, Any]], text: str) -> None:
        """An RL step's sampled transcripts (`rollouts/step_*.jsonl` records; `text` is that file)."""

    def close(self, error: BaseException | None) -> None: ...


def transcript_rows(records: list[dict[str, Any]], limit: int = 2000) -> list[tuple[int, int, float, str, str]]:
    """(group, trajectory, total reward, first observation, actions) per trajectory, texts cut to `limit`."""
    rows = []
    for record in records:
        turns = record.get("turns") or []
        prompt = str(turns[0].get("observation", "")) if turns else ""
        reply = "\n".join(str(turn.get("action", "")) for turn in turns)
        reward = record.get("total_reward")
        rows.append(
            (
                int(record.get("group", 0)),
                int(record.get("trajectory", 0)),
                float(reward) if isinstance(reward, (int, float)) else math.nan,
                prompt[:limit],
                reply[:limit],
            )
        )
    return rows


class TensorBoardSink(Sink):
    """Event files in RUN_DIR/tensorboard (`tensorboard --logdir RUN_DIR/tensorboard`)."""

    name = "tensorboard"

    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = run_dir / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.log_dir), flush_secs=10)

    def log_config(self, config: dict[str, Any]) -> None:
        text = yaml.safe_dump(config, sort_keys=False)
        self.writer.add_text("config", "    " + text.replace("\n", "\n    "), 0)

    def log_row(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def log_transcripts(self, step: int, records: list[dict[str, Any]], text: str) -> None:
        def cell(value: str) -> str:
            return value.replace("|", "\\|").replace("\n", "<br>")

        lines = ["| group | trajectory | reward | prompt | reply |", "| --- | --- | --- | --- | --- |"]
        for group, trajectory, reward, prompt, reply in transcript_rows(records, 500):
            lines.append(f"| {group} | {trajectory} | {reward:.3g} | {cell(prompt)} | {cell(reply)} |")
        self.writer.add_text("transcripts", "\n".join(lines), step)

    def close(self, error: BaseException | None) -> None:
        self.writer.flush()
        self.writer.close()


class WandbSink(Sink):
    """A W&B run; its id is kept in RUN_DIR/wandb_run_id so a resumed kitchen run continues it."""

    name = "wandb"

    def __init__(self, run_dir: Path, recipe: str, settings: WandbSettings) -> None:
        import wandb

        id_file = run_dir / "wandb_run_id"
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
        id_file.write_text(run_id + "\n")
        self.run = wandb.init(
            project=settings.project or os.environ.get("WANDB_PROJECT") or "kitchen",
            entity=settings.entity,
            name=settings.name or run_dir.name,
            dir=str(run_dir),
            id=run_id,
            resume="allow",
            group=recipe,
            reinit="create_new",
        )

    def log_config(self, config: dict[str, Any]) -> None:
        self.run.config.update(config, allow_val_change=True)

    def log_row(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def log_transcripts(self, step: int, records: list[dict[str, Any]], text: str) -> None:
        import wandb

        table = wandb.Table(columns=["step", "group", "trajectory", "reward", "prompt", "reply"])
        for row in transcript_rows(records):
            table.add_data(step, *row)
        self.run.log({"transcripts": table}, commit=False)

    def close(self, error: BaseException | None) -> None:
        self.run.finish(exit_code=0 if error is None else 1)


class MlflowSink(Sink):
    """An MLflow run in the configured tracking store (a file store under RUN_DIR by default)."""

    name = "mlflow"

    def __init__(self, run_dir: Path, recipe: str, settings: MlflowSettings) -> None:
        import mlflow

        self.mlflow = mlflow
        uri = settings.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            uri = (run_dir / "mlruns").resolve().as_uri()
            # MLflow 3 keeps its file store only on request; it is the offline default here.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = mlflow.MlflowClient(tracking_uri=uri)
        self.tracking_uri = uri
        experiment_name = settings.experiment or recipe
        experiment = self.client.get_experiment_by_name(experiment_name)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(experiment_name)
        id_file = run_dir / "mlflow_run_id"
        run_id = id_file.read_text().strip() if id_file.exists() else None
        if run_id is None:
            run = self.client.create_run(experiment_id, run_name=settings.run_name or run_dir.name)
            run_id = run.info.run_id
            id_file.write_text(run_id + "\n")
        self.run_id = run_id

    def log_config(self, config: dict[str, Any]) -> None:
        from mlflow.entities import Param

        flat = _flatten(config)
        params = [Param(key, str(value)[:6000]) for key, value in flat.items()]
        try:
            for start in range(0, len(params), 100):
                self.client.log_batch(self.run_id, params=params[start : start + 100])
        except Exception:
            # params are immutable in MLflow: a resumed run re-logs the same ones (or changed ones)
            self.client.log_text(self.run_id, yaml.safe_dump(config, sort_keys=False), "config.yaml")
            return
        self.client.log_text(self.run_id, yaml.safe_dump(config, sort_keys=False), "config.yaml")

    def log_row(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(_mlflow_key(key), value, now, step) for key, value in metrics.items()]
        for start in range(0, len(batch), 1000):
            self.client.log_batch(self.run_id, metrics=batch[start : start + 1000])

    def log_transcripts(self, step: int, records: list[dict[str, Any]], text: str) -> None:
        self.client.log_text(self.run_id, text, f"rollouts/step_{step:06d}.jsonl")

    def close(self, error: BaseException | None) -> None:
        self.client.set_terminated(self.run_id, status="FINISHED" if error is None else "FAILED")


def _mlflow_key(key: str) -> str:
    # MLflow keys allow alphanumerics, _ - . space / : ; anything else becomes '_'
    return "".join(c if c.isalnum() or c in "_-. /:" else "_" for c in key)


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def make_sink(name: str, run_dir: Path, recipe: str, settings: LoggingSettings) -> Sink:
    if name == "tensorboard":
        return TensorBoardSink(run_dir)
    if name == "wandb":
        return WandbSink(run_dir, recipe, settings.wandb)
    if name == "mlflow":
        return MlflowSink(run_dir, recipe, settings.mlflow)
    raise ValueError(f"unknown logger {name!r}")


class MetricSinksHook(Hooks):
    """Sends the config once (secrets redacted) and every metrics row to the configured sinks."""

    def __init__(self, settings: LoggingSettings, run_dir: Path, recipe: str) -> None:
        self.settings = settings
        self.names = list(settings.loggers)
        self.run_dir = run_dir
        self.recipe = recipe
        self.sinks: list[Sink] = []
        self._rows_seen = 0
        self._transcripts_sent: set[str] = set()

    def _warn(self, ctx: Any, sink: str, what: str, exc: BaseException) -> None:
        ctx.log.warning("sink.failed", sink=sink, during=what, error=f"{type(exc).__name__}: {exc}")

    def on_run_start(self, ctx: Any, workflow: Any) -> None:
        config = redact_value(ctx.config.model_dump(mode="json")) if hasattr(ctx.config, "model_dump") else {}
        for name in self.names:
            try:
                sink = make_sink(name, self.run_dir, self.recipe, self.settings)
                sink.log_config(config)
            except Exception as exc:
                self._warn(ctx, name, "start", exc)
                continue
            self.sinks.append(sink)
        self._rows_seen = len(ctx.metrics.rows)

    def _send_rows(self, ctx: Any) -> None:
        rows = ctx.metrics.rows[self._rows_seen :]
        self._rows_seen = len(ctx.metrics.rows)
        for row in rows:
            metrics = numeric_metrics(row)
            for sink in list(self.sinks):
                try:
                    sink.log_row(int(row["step"]), metrics)
                except Exception as exc:
                    self._warn(ctx, sink.name, f"step {row['step']}", exc)
                    self.sinks.remove(sink)

    def _send_transcripts(self, ctx: Any, through: int | None) -> None:
        """New `rollouts/step_N.jsonl` files (N <= `through`; all at the end of the run)."""
        folder = self.run_dir / "rollouts"
        if not self.sinks or not folder.is_dir():
            return
        for file in sorted(folder.glob("step_*.jsonl")):
            try:
                step = int(file.stem.removeprefix("step_"))
            except ValueError:
                continue
            if file.name in self._transcripts_sent or (through is not None and step > through):
                continue
            self._transcripts_sent.add(file.name)
            text = file.read_text(encoding="utf-8")
            records = []
            for line in text.splitlines():
                try:
                    records.append(json.loads(line))
                except (json.JSONDecodeError, RecursionError):
                    continue
            for sink in list(self.sinks):
                try:
                    sink.log_transcripts(step, records, text)
                except Exception as exc:
                    self._warn(ctx, sink.name, f"transcripts of step {step}", exc)
                    self.sinks.remove(sink)

    def on_step_end(self, ctx: Any, step: int) -> None:
        self._send_rows(ctx)
        self._send_transcripts(ctx, step)

    def on_run_end(self, ctx: Any, error: BaseException | None) -> None:
        self._send_rows(ctx)
        self._send_transcripts(ctx, None)
        for sink in self.sinks:
            try:
                sink.close(error)
            except Exception as exc:
                self._warn(ctx, sink.name, "close", exc)
        self.sinks = []
