"""Launching a recipe: checks first, then the run directory (locked), resume detection, logging,
backend, then the runner.

Nothing already in a run directory changes until the run is known to start: the config, the
log_path, the data files, the resume point (intact, same fingerprint) and the backend are
checked first; config.yaml is rewritten (the old one appended to config_history.yaml) and
metrics.jsonl truncated only just before the first stage that changes backend state.
"""

from __future__ import annotations

import asyncio
import codecs
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kitchen.engine.backends import make_backend
from kitchen.engine.config.run import RunConfig
from kitchen.engine.context import Context
from kitchen.engine.errors import ConfigError, DataError, RunDirError
from kitchen.engine.hooks import Hooks, ProgressHook
from kitchen.engine.observe.logging import handle_sigterm, make_run_logger
from kitchen.engine.observe.traces import start_observability
from kitchen.engine.ports import ServiceBackend
from kitchen.engine.recipe import Recipe
from kitchen.engine.runner import Runner
from kitchen.engine.runs.checkpoints import CheckpointRecord
from kitchen.engine.runs.datasets import is_hub_name, is_saved_dataset
from kitchen.engine.runs.metrics import MetricsRecorder, read_metrics, truncate_metrics
from kitchen.engine.runs.record_cache import cached_jsonl
from kitchen.engine.runs.rundir import (
    RunDirWatch,
    RunLock,
    check_log_path,
    check_resume_fingerprint,
    choose_resume_point,
    describe_os_error,
    dump_config_with_history,
    fingerprint,
    is_run_dir,
    recorded_fingerprint,
    run_lengths,
)
from kitchen.engine.secrets import install_logging_filter
from kitchen.engine.usage import UsageMeter, backend_prices
from kitchen.engine.validation import validate_recipe
from kitchen.engine.workflow import Workflow

DATA_KEYS = ("dataset", "eval_dataset")


@dataclass(frozen=True)
class RunDir:
    """The files of one run (see docs/reference/run-directory.md)."""

    path: Path
    already_complete: str | None = None
    """Set when the run had finished before: a one-line summary, and nothing was trained."""

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints.jsonl"

    @property
    def events(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / "checkpoints"


def resolve_log_path(recipe: str, config: RunConfig) -> Path:
    """The run directory: `log_path`, else a new `runs/<recipe>-<timestamp>` (suffixed `-2`, `-3`, ...
    when a run of the same second holds that name: a run without `log_path` never resumes another)."""
    if config.log_path:
        return Path(config.log_path)
    base = Path("runs") / f"{recipe}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def build_context(
    recipe: Recipe,
    config: RunConfig,
    run_dir: RunDir,
    backend: ServiceBackend,
    resume: CheckpointRecord | None,
    logger: Any,
) -> Context:
    return Context(
        config=config,
        ports={"service": backend},
        state=recipe.initial_state(config),
        run_dir=run_dir.path,
        metrics=MetricsRecorder(run_dir.metrics),
        logger=logger,
        resume=resume,
    )


def check_data_file(source: str, key: str) -> None:
    """A local data file named by `key` must be a readable UTF-8 (or binary parquet) file; a JSONL
    file must hold one JSON object per line. (The record fields each recipe needs are checked by
    the stages that read them: `Stage.check_inputs`.)"""
    if is_hub_name(source):
        return
    path = Path(source)
    if not path.exists():
        raise DataError(f"{key}: {path}: no such file")
    if is_saved_dataset(path):
        return  # its records are read by the stages' own checks
    if not path.is_file():
        raise DataError(
            f"{key}: {path}: is a directory, not a data file (nor a datasets.save_to_disk folder)"
            if path.is_dir()
            else f"{path}: not a file"
        )
    if not os.access(path, os.R_OK):
        raise DataError(f"{key}: {path}: not readable (permission denied)")
    if path.suffix == ".parquet":
        return
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    offset, line = 0, 1
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                bad = offset + exc.start
                line += chunk.count(b"\n", 0, exc.start)
                raise DataError(f"{path} line {line}: not UTF-8 text (byte offset {bad})") from None
            offset += len(chunk)
            line += chunk.count(b"\n")
    if path.suffix == ".jsonl":  # every line one JSON object, no duplicate keys (file and line named): checked
        cached_jsonl(path)  # as it is converted into the record cache, a batch at a time, for the run to read


def check_data_files(config: BaseModel) -> None:
    for key, value in leaves_named(config, DATA_KEYS, in_lists=False):
        check_data_file(value, key)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model", "vocab.txt", "tiktoken.model")
"""A model directory needs one of these (the vocabulary of a fast, SentencePiece, BPE or WordPiece
tokenizer) for `AutoTokenizer.from_pretrained` to load its tokenizer."""


def check_model_dir(name: str, key: str) -> None:
    """A `model_name` that is a local path must be a model directory with a tokenizer: otherwise the
    run would fail only when its first stage loads it (a hub name is left to the backend)."""
    if name == RunConfig.model_fields["model_name"].default:
        return  # the embedded model, whatever folder the command runs in
    path = Path(name).expanduser()
    if not path.exists():
        if name.startswith(("/", "./", "../", "~")):
            raise ConfigError(f"{key}: {name}: no such model directory")
        return
    if not path.is_dir():
        raise ConfigError(f"{key}: {name}: is a file; give a model directory (config.json, weights, tokenizer)")
    if not any((path / file).is_file() for file in TOKENIZER_FILES):
        raise ConfigError(
            f"{key}: {name}: the model directory has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); save "
            "it beside the weights (tokenizer.save_pretrained(DIR))"
        )


def leaves_named(config: BaseModel, names: tuple[str, ...], in_lists: bool = True) -> list[tuple[str, str]]:
    """(dotted key, value) of every non-empty string key called one of `names`, at any depth of
    the config (a data section's `dataset`, an environment's, a teacher's `model_name`); with
    `in_lists` false, not inside lists (the eval tasks' own files are their stage's to check)."""
    found: list[tuple[str, str]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, child in value.items():
                dotted = f"{prefix}.{key}" if prefix else str(key)
                if key in names and isinstance(child, str) and child:
                    found.append((dotted, child))
                else:
                    walk(dotted, child)
        elif isinstance(value, list) and in_lists:
            for index, child in enumerate(value):
                walk(f"{prefix}.{index}", child)

    walk("", config.model_dump(mode="json"))
    return found


def model_names(config: BaseModel) -> list[tuple[str, str]]:
    """(dotted key, value) of every `model_name` in the config: the trained model's, and those of
    teachers, judges and other models in its sections."""
    return leaves_named(config, ("model_name",))


def check_load_checkpoint(service: Any, config: RunConfig) -> None:
    """`load_checkpoint_path` must hold weights of `model_name` at `lora_rank` (when the backend
    can tell: `checkpoint_identity`)."""
    path = config.load_checkpoint_path
    identify = getattr(service, "checkpoint_identity", None)
    if not path or identify is None:
        return
    identity = identify(path)
    if identity is None:
        return
    base_model, lora_rank = identity
    if (base_model, lora_rank) != (config.model_name, config.lora_rank):
        raise ConfigError(
            f"load_checkpoint_path {path}: holds {base_model!r} with lora_rank={lora_rank}, but the config trains "
            f"model_name={config.model_name!r} with lora_rank={config.lora_rank}; make them agree"
        )


def completion_summary(run_dir: Path, final: CheckpointRecord, config: RunConfig) -> str | None:
    """A summary line when `final` finished the run this config describes; None when the config
    asks for more steps (the run continues from `final`)."""
    recorded = recorded_fingerprint(final, config)
    lengths = run_lengths(config)
    same_length = all(key not in recorded or recorded[key] == value for key, value in lengths.items())
    caps = [value for key, value in lengths.items() if key.endswith("max_steps") and isinstance(value, int)]
    if not (same_length or any(cap <= final.step for cap in caps)):
        return None
    rows = read_metrics(run_dir / "metrics.jsonl")
    last = rows[-1] if rows else {}
    skip = ("step", "batch", "epoch", "progress", "learning_rate")
    shown = ", ".join(
        f"{k}={v:.4g}"
        for k, v in last.items()
        if k not in skip and isinstance(v, float) and not k.startswith(("time/", "num_"))
    )[:160]
    return (
        f"already complete: {run_dir} finished {final.step} steps (checkpoint 'final'"
        f"{f'; last metrics: {shown}' if shown else ''}); raise its length (data.max_steps, rl.num_batches, ...) "
        "to train further, or use a new log_path"
    )


def preflight(recipe: Recipe, config: RunConfig) -> tuple[Workflow, Path]:
    """Every check `run` makes before it touches the run directory or a backend: the config and
    wiring, the log_path, the data files and their records (each stage's `check_inputs`), local
    model directories (a tokenizer beside the weights), and
    (for an existing run) that the checkpoint it would
    resume from is intact and was trained with the same settings. Changes nothing on disk."""
    workflow = validate_recipe(recipe, config)
    path = resolve_log_path(recipe.name, config)
    check_log_path(path, config.overwrite, config.resume)
    check_data_files(config)
    for key, name in model_names(config):
        check_model_dir(name, key)
    for stage in workflow.stages():
        stage.check_inputs(config)
    if config.resume == "auto" and path.is_dir():
        resume, _ = choose_resume_point(path)
        if resume is not None:
            complete = resume.final and completion_summary(path, resume, config) is not None
            check_resume_fingerprint(resume, config, recipe.name, complete)
    return workflow, path


def run_recipe(
    recipe: Recipe,
    config: RunConfig,
    hooks: Sequence[Hooks] = (),
    progress: bool = True,
    backend: ServiceBackend | None = None,
) -> RunDir:
    """Run `recipe` with `config`; resumes if `log_path` already holds a resumable checkpoint."""
    return asyncio.run(run_recipe_async(recipe, config, hooks, progress, backend))


async def run_recipe_async(
    recipe: Recipe,
    config: RunConfig,
    hooks: Sequence[Hooks] = (),
    progress: bool = True,
    backend: ServiceBackend | None = None,
) -> RunDir:
    """`run_recipe` inside a running event loop (e.g. a recipe that runs others as sub-runs, each
    in its own directory)."""
    install_logging_filter()
    workflow, path = preflight(recipe, config)
    run_dir = RunDir(path)
    try:
        run_dir.path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(describe_os_error(exc, f"log_path {run_dir.path}")) from None
    lock = RunLock(run_dir.path)
    lock.acquire()
    sink = None
    observe = None
    try:
        fresh = not is_run_dir(run_dir.path)
        resume, skipped = choose_resume_point(run_dir.path) if config.resume == "auto" else (None, [])
        summary = completion_summary(run_dir.path, resume, config) if resume is not None and resume.final else None
        if resume is not None:
            check_resume_fingerprint(resume, config, recipe.name, complete=summary is not None)
        if summary is not None:
            return RunDir(run_dir.path, already_complete=summary)
        current = fingerprint(config, recipe.name)
        if fresh:
            dump_config_with_history(config, run_dir.path)

        def commit() -> None:
            """The run starts: record the config, drop what this run will log again."""
            if config.resume == "never":
                for path in (run_dir.metrics, run_dir.checkpoints):
                    path.unlink(missing_ok=True)
            else:
                truncate_metrics(run_dir.metrics, before_step=resume.step if resume else 0)
            dump_config_with_history(config, run_dir.path)

        logger, sink = make_run_logger(run_dir.events, recipe=recipe.name)
        for skip in skipped:
            logger.warning("checkpoint.skipped", checkpoint=skip.name, reason=skip.reason)
        if resume is not None:
            logger.warning("run.resume", checkpoint=resume.name, step=resume.step, log_path=str(run_dir.path))
        service = backend or make_backend(config, run_dir.checkpoint_dir)
        if resume is None:
            check_load_checkpoint(service, config)
        meter = UsageMeter(backend_prices(service))
        ctx = build_context(recipe, config, run_dir, meter.wrap(service), resume, logger)
        ctx.usage = meter
        ctx.fingerprint = current
        ctx.set_commit(commit)
        observe = start_observability(recipe.name, config.logging, run_dir.path)
        observe.attach(ctx)
        watch = RunDirWatch(run_dir.path)
        all_hooks = [watch, *hooks, *observe.hooks, *([ProgressHook()] if progress else [])]
        with handle_sigterm():  # buffered events reach the disk even when the run is killed
            await Runner(workflow, all_hooks).run(ctx)
        logger.info("run.usage", **meter.totals())  # the steps' rows, and what came after the last
    finally:
        if observe is not None:
            observe.close()
        if sink is not None:
            sink.close()
        lock.release()
    return run_dir
