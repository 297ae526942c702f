"""Metric sinks (`loggers: [...]`) and OpenTelemetry export (`trace_file`, OTEL_* env), on noop runs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

import kitchen.engine.launch
import kitchen.engine.observe.sinks
import kitchen.engine.observe.traces
from kitchen.apps.cli import main
from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.engine.launch import run_recipe
from kitchen.engine.runs.metrics import read_metrics
from recipes.sl_basic import RECIPE

STEPS = 4


def _run(tmp_path: Path, *overrides: str) -> Path:
    config = load_config(
        RECIPE.config_cls,
        None,
        [
            "backend=noop",
            f"data.max_steps={STEPS}",
            "data.batch_size=4",
            "eval.every=2",
            f"log_path={tmp_path / 'run'}",
            *overrides,
        ],
    )
    return run_recipe(RECIPE, config, progress=False).path


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _nll(run_dir: Path) -> list[tuple[int, float]]:
    return [(row["step"], row["train_mean_nll"]) for row in read_metrics(run_dir / "metrics.jsonl")]


def test_missing_logger_is_a_config_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        kitchen.engine.observe.sinks.importlib.util, "find_spec", lambda name: None if name == "wandb" else real(name)
    )
    with pytest.raises(ConfigError, match=r"kitchen\[wandb\]"):
        load_config(RECIPE.config_cls, None, ["logging.loggers=[wandb]"])
    assert main(["validate", "sl_basic", "logging.loggers=[wandb]"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kitchen: error:") and "pip install 'kitchen[wandb]'" in err
    with pytest.raises(ConfigError, match="loggers"):
        load_config(RECIPE.config_cls, None, ["logging.loggers=[neptune]"])


@pytest.mark.skipif(not _installed("tensorboard"), reason="the tensorboard extra is not installed")
def test_tensorboard_events_hold_every_step(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = _run(tmp_path, "logging.loggers=[tensorboard]")
    accumulator = EventAccumulator(str(run_dir / "tensorboard"))
    accumulator.Reload()
    scalars = [(event.step, event.value) for event in accumulator.Scalars("train_mean_nll")]
    assert [step for step, _ in scalars] == [step for step, _ in _nll(run_dir)]
    assert [value for _, value in scalars] == pytest.approx([value for _, value in _nll(run_dir)], rel=1e-6)
    assert "eval/nll" in accumulator.Tags()["scalars"]
    assert "config/text_summary" in accumulator.Tags()["tensors"]


@pytest.mark.skipif(not _installed("mlflow"), reason="the mlflow extra is not installed")
def test_mlflow_file_store_in_the_run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_dir = _run(tmp_path, "logging.loggers=[mlflow]")
    client = mlflow.MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    run = client.get_run((run_dir / "mlflow_run_id").read_text().strip())
    assert run.info.status == "FINISHED"
    assert run.data.params["backend"] == "noop"
    history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "train_mean_nll"))
    expected = _nll(run_dir)
    assert [step for step, _ in history] == [step for step, _ in expected]
    assert [value for _, value in history] == pytest.approx([value for _, value in expected])


@pytest.mark.skipif(not _installed("wandb"), reason="the wandb extra is not installed")
def test_wandb_offline_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = _run(tmp_path, "logging.loggers=[wandb]", "logging.wandb.project=kitchen-tests")
    run_id = (run_dir / "wandb_run_id").read_text().strip()
    offline = list((run_dir / "wandb").glob(f"offline-run-*-{run_id}"))
    assert offline and list(offline[0].glob("run-*.wandb"))
    events = (run_dir / "events.jsonl").read_text()
    assert "sink.failed" not in events


class _Broken(kitchen.engine.observe.sinks.Sink):
    name = "broken"

    def __init__(self) -> None:
        self.rows = 0

    def log_row(self, step: int, metrics: dict[str, float]) -> None:
        self.rows += 1
        if self.rows == 2:
            raise RuntimeError("disk full")


def test_a_failing_sink_warns_and_training_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kitchen.engine.observe.sinks, "make_sink", lambda *args: _Broken())
    monkeypatch.setattr(kitchen.engine.observe.sinks.importlib.util, "find_spec", lambda name: object())
    run_dir = _run(tmp_path, "logging.loggers=[tensorboard]")
    assert len(_nll(run_dir)) == STEPS
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    failed = [e for e in events if e.get("event") == "sink.failed"]
    assert len(failed) == 1 and "disk full" in failed[0]["error"]
    assert any(e.get("event") == "run.end" for e in events)


@pytest.fixture
def no_global_tracer_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process where nothing installed a global tracer provider (what a user's `kitchen run` is,
    whatever other tests in this process did): a run's own tracer must still record every span."""
    import opentelemetry.trace

    monkeypatch.setattr(opentelemetry.trace, "_TRACER_PROVIDER", None)


def test_trace_file_has_one_span_per_stage_with_attributes(tmp_path: Path, no_global_tracer_provider: None) -> None:
    """(Before: with no global provider, only the workflow span was written.)"""
    run_dir = _run(tmp_path, "logging.trace_file=true", "checkpoint.save_every=2")
    spans = [json.loads(line) for line in (run_dir / "traces.jsonl").read_text().splitlines()]
    workflow = [s for s in spans if s["name"].startswith("workflow ")]
    assert len(workflow) == 1
    assert len({s["trace_id"] for s in spans}) == 1
    stages = [s for s in spans if s["name"].startswith("stage ")]
    assert stages and all(s["parent_id"] == workflow[0]["span_id"] for s in stages)
    for span in spans:
        assert span["attributes"]["kitchen.run_id"] == "run"
        assert span["attributes"]["kitchen.recipe"] == "sl_basic"
    for span in stages:
        assert span["attributes"]["kitchen.stage"] == span["name"].removeprefix("stage ")
        assert isinstance(span["attributes"]["kitchen.step"], int)
    steps = [s["attributes"]["kitchen.step"] for s in stages if s["name"] == "stage submit_train_step"]
    assert steps == list(range(STEPS))
    names = {s["attributes"]["kitchen.stage"] for s in stages}
    assert {"get_tokenizer", "create_training_client", "save_final_checkpoint", "close_backend"} <= names
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    declared = next(e["stages"] for e in events if e.get("event") == "run.start")
    # every stage of the workflow, each with its own span, except those of evaluation during
    # training, which run only when `evals:` lists some (this run has none)
    assert names == set(declared) - {"start_evals", "finish_evals"}


def test_in_memory_exporter_and_no_export_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_global_tracer_provider: None
) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    config = load_config(RECIPE.config_cls, None, [])
    assert kitchen.engine.observe.traces.start_observability("sl_basic", config.logging, tmp_path).tracer is None

    memory = InMemorySpanExporter()
    real = kitchen.engine.observe.traces.start_observability

    def with_memory(recipe: str, config: Any, run_dir: Path) -> Any:
        return real(recipe, config, run_dir, extra_exporters=[(memory, False)])

    monkeypatch.setattr(kitchen.engine.launch, "start_observability", with_memory)
    run_dir = _run(tmp_path)
    spans = memory.get_finished_spans()
    by_stage = [s for s in spans if s.name == "stage collect_train_step"]
    assert len(by_stage) == STEPS
    assert all((s.attributes or {})["kitchen.recipe"] == "sl_basic" for s in spans)
    assert not (run_dir / "traces.jsonl").exists()


def test_otlp_requested_without_the_exporter_warns_and_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)

    def no_exporter(name: str) -> Any:
        raise ImportError(name)

    monkeypatch.setattr(kitchen.engine.observe.traces.importlib, "import_module", no_exporter)
    run_dir = _run(tmp_path)
    assert "opentelemetry-exporter-otlp is not installed" in capsys.readouterr().err
    assert len(_nll(run_dir)) == STEPS


@pytest.mark.skipif(not _installed("tensorboard"), reason="the tensorboard extra is not installed")
def test_rl_transcripts_go_to_tensorboard_as_text(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from recipes.math_rl import RECIPE as MATH_RL

    overrides = ["backend=noop", "rl.num_batches=3", "rl.groups_per_batch=2", "rl.group_size=2", "warm_start.steps=2"]
    config = load_config(
        MATH_RL.config_cls, None, [*overrides, "logging.loggers=[tensorboard]", f"log_path={tmp_path / 'rl'}"]
    )
    run_dir = run_recipe(MATH_RL, config, progress=False).path
    accumulator = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"tensors": 0})
    accumulator.Reload()
    texts = accumulator.Tensors("transcripts/text_summary")
    assert sorted(event.step for event in texts) == [0, 1, 2]
    assert "What is" in texts[0].tensor_proto.string_val[0].decode()
