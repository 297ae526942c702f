"""Checkpoints of the local backend: a directory with trainable weights, metadata and, for training
state, the optimizer.

    <dir>/metadata.json        base_model, lora_rank, seed, kind ("state" or "sampler", for people)
    <dir>/weights.safetensors  the trainable parameters (all of them, or only the LoRA adapters), at
                               master precision (float32 under mixed precision)
    <dir>/optimizer.pt         AdamW state (training state only)

Only trainable parameters are stored (for LoRA, the adapters alone): the rest of the model is
rebuilt from `base_model` (the tiny model's weights are a function of its fixed seed; other models
are re-read). A sampler checkpoint saved when the weights have not changed since a state
checkpoint hard-links that checkpoint's weights file instead of writing a second copy.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import load_file, save_file

from kitchen.engine.errors import ConfigError
from train_core.types import LoraLayers

CheckpointKind = Literal["state", "sampler"]
_METADATA = "metadata.json"
_WEIGHTS = "weights.safetensors"
_OPTIMIZER = "optimizer.pt"
_SUBDIRS: dict[CheckpointKind, str] = {"state": "weights", "sampler": "sampler_weights"}
_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class ModelIdentity:
    """What a client trains or samples, and all that is needed to rebuild it before loading weights."""

    base_model: str
    lora_rank: int | None
    seed: int
    """Seeds the LoRA initialisation (the tiny base model's weights do not depend on it)."""
    layers: LoraLayers | None = None
    """The layers that carry LoRA adapters, where a client chose them (None: the backend's
    `lora_target_modules`)."""


def checkpoint_path(checkpoint_dir: Path, kind: CheckpointKind, name: str) -> Path:
    """Where a checkpoint called `name` lives; names are plain file names (no slashes)."""
    if not _NAME_PATTERN.fullmatch(name):
        raise ConfigError(f"checkpoint name {name!r} must be letters, digits, '.', '_' or '-' (no slashes)")
    return checkpoint_dir / _SUBDIRS[kind] / name


def trainable_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """The parameters the optimizer updates, by name (tied weights appear once)."""
    return {name: param for name, param in model.named_parameters() if param.requires_grad}


def write_checkpoint(
    path: Path,
    weights: Callable[[], dict[str, torch.Tensor]],
    identity: ModelIdentity,
    kind: CheckpointKind,
    optimizer_state: dict[str, Any] | None,
    same_weights_as: Path | None = None,
) -> Path:
    """Write a checkpoint into a scratch directory, then move it into place (replacing any old one).

    `weights()` gives the full trainable tensors by name, on the cpu, at master precision (float32
    under mixed precision); it is called only when the file is written: `same_weights_as`, a
    checkpoint known to hold exactly these weights, has its weights file hard-linked (copied where
    links are not possible) instead. The single-process client passes its masters, the
    distributed one its workers' gathered shards, so checkpoints do not depend on how many
    workers trained."""
    scratch = path.with_name(path.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    needed = 0 if optimizer_state is None else tensor_bytes(optimizer_state)
    try:
        scratch.mkdir(parents=True)
        source = None if same_weights_as is None else same_weights_as / _WEIGHTS
        if source is not None and source.is_file():
            try:
                os.link(source, scratch / _WEIGHTS)
            except OSError:
                shutil.copyfile(source, scratch / _WEIGHTS)
        else:
            tensors = weights()
            needed += tensor_bytes(tensors)
            save_file(tensors, scratch / _WEIGHTS)
        if optimizer_state is not None:
            torch.save(optimizer_state, scratch / _OPTIMIZER)
        metadata = {**asdict(identity), "kind": kind}
        if identity.layers is None:  # the backend's own target modules: as checkpoints have always said
            del metadata["layers"]
        (scratch / _METADATA).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    except Exception as exc:
        shutil.rmtree(scratch, ignore_errors=True)  # a full disk leaves no half-written checkpoint
        full = disk_full_error(exc, path, needed)
        if full is None:
            raise
        raise full from exc
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    # Only a complete checkpoint replaces one of the same name (a rerun's); other names, the
    # previous step's checkpoint among them, are never touched here.
    shutil.rmtree(path, ignore_errors=True)
    scratch.rename(path)
    return path.resolve()


def tensor_bytes(value: Any) -> int:
    """Bytes of the tensors in a (nested) state dict: about what saving it writes."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(tensor_bytes(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(item) for item in value)
    return 0


def disk_full_error(exc: Exception, path: Path, needed: int) -> OSError | None:
    """An ENOSPC `OSError` naming `path` and the space it needed when `exc` came from a full disk:
    an ENOSPC / EDQUOT `OSError`, or a writer's own error (torch's zip writer and safetensors raise
    RuntimeErrors) while the file system has less room left than the checkpoint needs. None when
    the failure is something else."""
    errno_ = getattr(exc, "errno", None)
    try:
        free = shutil.disk_usage(next(p for p in (path, *path.parents) if p.exists())).free
    except (OSError, StopIteration):
        free = None
    out_of_space = errno_ in (errno.ENOSPC, errno.EDQUOT) or (free is not None and needed > free)
    if not out_of_space:
        return None
    room = f"; it needs about {needed:,} bytes and {free:,} are free" if needed and free is not None else ""
    return OSError(
        errno.ENOSPC,
        f"no space left on device while saving a checkpoint{room}; the previous checkpoint is kept",
        str(path),
    )


def read_identity(path: Path) -> ModelIdentity:
    """The model the checkpoint at `path` belongs to, or a ConfigError naming the path."""
    file = path / _METADATA
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
        layers = raw.get("layers")
        return ModelIdentity(
            raw["base_model"], raw["lora_rank"], raw["seed"], None if layers is None else LoraLayers(**layers)
        )
    except FileNotFoundError:
        raise ConfigError(f"{path}: not a local-backend checkpoint (no {_METADATA})") from None
    except (json.JSONDecodeError, TypeError, KeyError) as exc:
        raise ConfigError(f"{file}: unreadable checkpoint metadata ({exc!r})") from exc


def require_same_model(path: Path, identity: ModelIdentity) -> None:
    """A ConfigError unless the checkpoint at `path` was saved by a client training `identity`'s
    base model with its LoRA rank."""
    saved = read_identity(path)
    if (saved.base_model, saved.lora_rank) != (identity.base_model, identity.lora_rank):
        raise ConfigError(
            f"{path}: checkpoint of {saved.base_model!r} (lora_rank={saved.lora_rank}) cannot load "
            f"into a client training {identity.base_model!r} (lora_rank={identity.lora_rank})"
        )


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's weights by parameter name (full tensors, on the cpu)."""
    try:
        return load_file(path / _WEIGHTS)
    except Exception as exc:  # safetensors raises its own error type for a truncated file
        raise ConfigError(f"{path / _WEIGHTS}: unreadable weights ({type(exc).__name__}: {exc})") from None


def load_weights(path: Path, model: torch.nn.Module) -> None:
    """Copy the checkpoint's weights into `model`; every trainable parameter must be present."""
    copy_weights(read_weights(path), model, path)


def copy_weights(saved: dict[str, torch.Tensor], model: torch.nn.Module, path: Path | str) -> None:
    """Copy full tensors by name into `model`'s trainable parameters (all of them must be there)."""
    params = trainable_parameters(model)
    if saved.keys() != params.keys():
        missing = sorted(params.keys() - saved.keys())[:3]
        extra = sorted(saved.keys() - params.keys())[:3]
        raise ConfigError(f"{path}: weights do not fit this model (missing {missing}, unexpected {extra})")
    with torch.no_grad():
        for name, param in params.items():
            param.copy_(saved[name])


def load_optimizer(path: Path, optimizer: torch.optim.Optimizer) -> None:
    """Restore AdamW moments and step counts saved with `write_checkpoint`."""
    # torch moves each saved moment onto its parameter's device as it loads.
    state = read_optimizer(path)
    try:
        load_keeping_kernel(optimizer, state)
    except Exception as exc:  # a truncated or tampered file: pickle, zip and shape errors
        raise ConfigError(
            f"{path / _OPTIMIZER}: unreadable optimizer state ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None


def load_keeping_kernel(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """`optimizer.load_state_dict(state)`, but the optimizer keeps its own kernel choice (fused or
    foreach): the saver's may not suit this process (a sharded worker cannot use the fused one)."""
    kernel = {key: optimizer.param_groups[0].get(key) for key in ("fused", "foreach")}
    groups = [{**group, **kernel} for group in state["param_groups"]]
    optimizer.load_state_dict({"state": state["state"], "param_groups": groups})


def read_optimizer(path: Path) -> dict[str, Any]:
    """The optimizer state dict saved with a state checkpoint (full tensors, on the cpu)."""
    file = path / _OPTIMIZER
    if not file.exists():
        raise ConfigError(f"{path}: has no optimizer state (a sampler checkpoint?); load it with_optimizer=False")
    try:
        state: dict[str, Any] = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or tampered file: pickle, zip and shape errors
        raise ConfigError(f"{file}: unreadable optimizer state ({type(exc).__name__}: {str(exc)[:200]})") from None
    return state
