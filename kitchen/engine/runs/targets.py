"""A checkpoint named on the command line or in a config, resolved: a run directory (its last or
named checkpoint, `best` included) or a checkpoint path (local, `tinker://`, `noop://`) becomes the
weights to load, the run that made them, that run's shared config and renderer; then opened on its
backend for sampling. Evaluation and the apps (sample, chat, export) start here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kitchen.engine.backends import make_backend
from kitchen.engine.config.run import RunConfig
from kitchen.engine.config.yaml_bounded import load_yaml
from kitchen.engine.errors import ConfigError
from kitchen.engine.ports import SamplingClient, ServiceBackend
from kitchen.engine.runs.checkpoints import CheckpointRecord, read_records
from train_core.renderers.registry import recommended_renderer

RECIPE_SECTIONS = ("eval", "logging")
"""RunConfig's sections that a training family extends: left out when a run's config is read back."""
CONFIG_FILE = "config.yaml"
CHECKPOINTS_FILE = "checkpoints.jsonl"
EXPORT_INFO = "kitchen_export.json"
"""What `kitchen export` writes beside an exported model: the run and checkpoint it came from."""
BEST = "best"
"""`--checkpoint best`: the run's best checkpoint (`kitchen.engine.runs.best_checkpoint`)."""


@dataclass(frozen=True)
class CheckpointTarget:
    """A checkpoint resolved to the weights to load and the run that made them."""

    model_path: str | None
    """None: the base model `config.model_name` itself."""
    run_dir: Path | None
    """None for a bare model (no run made it)."""
    config: RunConfig
    """The run's shared keys and backend sections (recipe-specific keys are left out)."""
    renderer: str
    record: CheckpointRecord | None = None
    raw_config: dict[str, Any] = field(default_factory=dict)

    @property
    def trained_renderer(self) -> str | None:
        """The chat renderer the run trained with; None for a recipe without one (plain text)."""
        if "renderer" not in self.raw_config:
            return None
        return str(self.raw_config["renderer"] or recommended_renderer(self.config.model_name))

    def saved(self, key: str, flat: str) -> Any:
        """A key of the run's saved config by its dotted 0.3 path (`sampling.max_tokens`), or by its
        `flat` name in a run written by kitchen 0.2; None where the run has neither."""
        value: Any = self.raw_config
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value if value is not None else self.raw_config.get(flat)


def _has_scheme(text: str) -> bool:
    return "://" in text


def find_run_dir(path: Path) -> Path | None:
    """The nearest directory at or above `path` holding a run's config.yaml."""
    for candidate in (path, *path.parents):
        if (candidate / CONFIG_FILE).is_file():
            return candidate
    return None


def _read_run_config(run_dir: Path) -> dict[str, Any]:
    file = run_dir / CONFIG_FILE
    if not file.is_file():
        raise ConfigError(f"{run_dir}: no {CONFIG_FILE} (not a kitchen run directory)")
    try:
        raw = load_yaml(file.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{file}: cannot read it ({exc})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: the top level must be a mapping")
    return raw


def _shared_config(raw: Mapping[str, Any], where: Path, overrides: Mapping[str, Any]) -> RunConfig:
    """The run keys and backend sections of a run's config.yaml (its recipe's own sections, and
    `eval` and `logging` as a family extends them, are not needed to open its checkpoints)."""
    shared = {key: value for key, value in raw.items() if key in RunConfig.model_fields and key not in RECIPE_SECTIONS}
    shared.update({key: value for key, value in overrides.items() if value is not None})
    try:
        return RunConfig.model_validate(shared)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{where / CONFIG_FILE}: {problems}") from None


def _pick_record(run_dir: Path, name: str | None) -> CheckpointRecord:
    """The checkpoint named `name` (`best`: the run's best, `kitchen.engine.runs.best_checkpoint`), or the
    last one (a finished run's `final`)."""
    records = [r for r in read_records(run_dir / CHECKPOINTS_FILE) if r.sampler_path or r.state_path]
    if not records:
        raise ConfigError(f"{run_dir}: no checkpoint recorded in {CHECKPOINTS_FILE} yet")
    if name is None:
        return records[-1]
    if name == BEST:
        from kitchen.engine.runs.best_checkpoint import best_name

        name = best_name(run_dir)
    named = [r for r in records if r.name == name]
    if not named:
        names = ", ".join(dict.fromkeys(r.name for r in records))
        raise ConfigError(f"{run_dir}: no checkpoint named {name!r} (recorded: {names})")
    return named[-1]


def resolve_checkpoint(
    target: str,
    run_dir: Path | None = None,
    renderer: str | None = None,
    backend: str | None = None,
    checkpoint: str | None = None,
) -> CheckpointTarget:
    """`target` is a run directory (its checkpoint named `checkpoint`, default the last) or a
    checkpoint path; `run_dir` names the run when the path does not sit inside one (a `tinker://`
    path, a copied checkpoint directory)."""
    record = None
    if not _has_scheme(target) and (Path(target) / CHECKPOINTS_FILE).is_file():
        run_dir = Path(target)
        record = _pick_record(run_dir, checkpoint)
        model_path = record.sampler_path or record.state_path
        assert model_path is not None
    else:
        model_path = target
        if not _has_scheme(target):
            path = Path(target)
            if not path.exists():
                raise ConfigError(f"checkpoint not found: {target} (give a run directory or a checkpoint path)")
            model_path = str(path.resolve())
            run_dir = run_dir or find_run_dir(path.resolve())
        if run_dir is None:
            raise ConfigError(
                f"cannot tell which run made {target}: pass --run RUN_DIR (the run directory holding {CONFIG_FILE})"
            )
        for item in read_records(run_dir / CHECKPOINTS_FILE):
            if model_path in (item.sampler_path, item.state_path):
                record = item
    raw = _read_run_config(run_dir)
    config = _shared_config(raw, run_dir, {"backend": backend})
    name = renderer or raw.get("renderer") or recommended_renderer(config.model_name)
    return CheckpointTarget(model_path, run_dir, config, str(name), record, raw)


def resolve_base_model(
    model_name: str, renderer: str | None = None, backend: str | None = None, recommend_for: str | None = None
) -> CheckpointTarget:
    """A bare model as a target: the embedded `tiny`, a Hugging Face model folder or a hub id, on
    `backend` (default local). The renderer defaults to the one recommended for `recommend_for`
    (e.g. the base model an exported folder came from), else for `model_name`."""
    config = _shared_config({}, Path(model_name), {"backend": backend, "model_name": model_name})
    name = renderer or recommended_renderer(recommend_for or model_name)
    return CheckpointTarget(None, None, config, name)


def open_backend(target: CheckpointTarget) -> ServiceBackend:
    """The target's backend; checkpoints it would save go to its run (a bare model's backend
    saves none)."""
    where = target.run_dir if target.run_dir is not None else Path(target.config.model_name)
    return make_backend(target.config, where / "checkpoints")


async def open_sampling_client(backend: ServiceBackend, target: CheckpointTarget) -> SamplingClient:
    if target.model_path is None:
        return await backend.create_sampling_client(base_model=target.config.model_name)
    return await backend.create_sampling_client(model_path=target.model_path)
