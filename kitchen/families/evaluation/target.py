"""What `kitchen eval` evaluates: a run directory (its last checkpoint, or one named), a
checkpoint path (local or `tinker://`, with the run that made it), a Hugging Face model folder,
or a base model by name; opened on its backend as the `EvalModel` tasks take."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from kitchen.engine.backends import get_backend_spec
from kitchen.engine.errors import ConfigError
from kitchen.engine.eval_tasks import EvalModel
from kitchen.engine.ports import SamplingClient, ServiceBackend
from kitchen.engine.runs.checkpoints import resolve_sampler_path
from kitchen.engine.runs.targets import (
    EXPORT_INFO,
    CheckpointTarget,
    find_run_dir,
    open_backend,
    open_sampling_client,
    resolve_base_model,
    resolve_checkpoint,
)
from train_core.renderers.registry import get_renderer

SAMPLE_CALL = "SamplingClient.sample"


def _is_model_folder(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file() and not (path / "checkpoints.jsonl").exists()


def resolve_target(
    target: str,
    run_dir: Path | None = None,
    checkpoint: str | None = None,
    renderer: str | None = None,
    backend: str | None = None,
    base_model: bool = False,
) -> CheckpointTarget:
    """`target` as a run, checkpoint, model folder or (with `base_model`) a model name; refused
    when its backend cannot sample."""
    path = Path(target)
    local = "://" not in target
    if base_model or (local and run_dir is None and _is_model_folder(path)):
        if checkpoint is not None:
            raise ConfigError(f"{target} is a model, not a run: --checkpoint does not apply")
        export_info = path / EXPORT_INFO
        origin = (
            json.loads(export_info.read_text(encoding="utf-8")).get("base_model") if export_info.is_file() else None
        )
        name = target if base_model else str(path.resolve())
        resolved = resolve_base_model(name, renderer, backend, recommend_for=origin)
    else:
        if local and path.is_dir() and run_dir is None and find_run_dir(path.resolve()) is None:
            raise ConfigError(
                f"{target} is not a run directory, a checkpoint or a model folder (no checkpoints.jsonl, no "
                "config.json); give one of those, or a model name with --base"
            )
        resolved = resolve_checkpoint(target, run_dir, renderer, backend, checkpoint)
    spec = get_backend_spec(resolved.config.backend)
    if spec.supported_calls is not None and SAMPLE_CALL not in spec.supported_calls:
        raise ConfigError(
            f"{target}: backend {spec.name!r} cannot sample ({SAMPLE_CALL} unsupported); kitchen eval needs a "
            "backend that samples (--backend)"
        )
    return resolved


def _reference(target: CheckpointTarget) -> str:
    """The model the target was trained against: its run's recorded DPO reference, else its base."""
    recorded = target.record.state.get("reference_path") if target.record is not None else None
    return str(recorded) if recorded else target.config.model_name


def describe(target: CheckpointTarget) -> str:
    return target.model_path or target.config.model_name


def sampler_opener(backend: ServiceBackend) -> Callable[[str], Awaitable[SamplingClient]]:
    """`EvalModel.open_sampler` on `backend`: a checkpoint path, or a base model name."""

    async def open_sampler(model: str) -> SamplingClient:
        if "://" in model or Path(model).exists():
            return await backend.create_sampling_client(model_path=resolve_sampler_path(model))
        return await backend.create_sampling_client(base_model=model)

    return open_sampler


@contextlib.asynccontextmanager
async def open_model(target: CheckpointTarget) -> AsyncIterator[EvalModel]:
    """The target's backend, sampler, tokenizer and renderer, for the duration of the block."""
    backend = open_backend(target)
    try:
        sampler = await open_sampling_client(backend, target)
        tokenizer = backend.get_tokenizer(target.config.model_name)
        try:
            renderer = get_renderer(target.renderer, tokenizer)
        except ValueError as exc:
            raise ConfigError(f"renderer: {exc}") from None

        yield EvalModel(
            sampler,
            renderer,
            tokenizer,
            describe(target),
            sampler_opener(backend),
            _reference(target),
            target.raw_config,
            backend.get_tokenizer,
        )
    finally:
        await backend.close()
