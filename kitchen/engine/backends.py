"""The backend registry: each adapter package registers its settings model, its factory and what
it can run; the engine names no backend.

Adapters register through the `kitchen.backends` entry-point group (an installed package's
`pyproject.toml`: `[project.entry-points."kitchen.backends"] name = "package.module:BACKEND"`) or
by calling `register_backend` before a config is loaded. A backend's settings live in the config
section named after it (`local.device`, `noop.latency`, `tinker.base_url`); `kitchen validate`
asks the spec, with no backend built, whether it runs every call and loss a workflow needs.
"""

from __future__ import annotations

import difflib
import inspect
import warnings
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from kitchen.engine.errors import ConfigError
from kitchen.engine.losses import loss_table
from kitchen.engine.plugins import ExtensionPoint
from train_core.losses import LossTable

if TYPE_CHECKING:
    from kitchen.engine.ports import ServiceBackend

ENTRY_POINT_GROUP = "kitchen.backends"

BackendFactory = Callable[[Any, Any, Path, LossTable], "ServiceBackend"]
"""`create(config, settings, checkpoint_dir, losses)`: the run's config, this backend's settings
section, where checkpoints go, and the losses by name (plugins' included) it computes built-in
losses with. Heavy imports (torch, an SDK) belong inside it, not at module level."""

ExportFn = Callable[[str, Path, bool, Any], Mapping[str, Any]]


@dataclass(frozen=True)
class BackendSpec:
    name: str
    description: str
    settings: type[BaseModel]
    create: BackendFactory
    supported_calls: frozenset[str] | None = None
    """Port calls (`<Port>.<method>`) it runs; None = every call in `kitchen.engine.ports`."""
    supported_losses: frozenset[str] | None = None
    """Built-in loss names it runs; None = every loss in `train_core.losses.LOSS_SPECS`."""
    requires_lora_rank: bool = False
    custom_loss_entropy: bool = False
    """Its `forward_backward_custom` hands a loss that takes `entropy_D` the policy's per-token
    entropies (with gradients): what an entropy bonus in the RL loss needs."""
    moved_keys: Mapping[str, str] = field(default_factory=dict)
    """Former top-level config keys now in this backend's section: old name -> name in the section."""
    export_hf: ExportFn | None = None
    """Optional: `export_hf(checkpoint_path, out_dir, merge_lora, settings)` writes a checkpoint as a
    Hugging Face model directory (`kitchen export`) and returns a summary of what it wrote;
    `settings` is this backend's section of the run's config (what the model was built with, e.g.
    its LoRA alpha and target modules)."""
    export_hint: str = ""
    """For backends without `export_hf`: what to do instead (shown by `kitchen export`)."""

    def build(self, config: Any, checkpoint_dir: Path) -> ServiceBackend:
        """This backend for `config`, made by its factory with its settings section and the loss
        table. (A factory of kitchen 0.2 takes no loss table: called without one, with a warning.)"""
        settings = getattr(config, self.name)
        parameters = inspect.signature(self.create).parameters.values()
        positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
        if len(positional) < 4 and not any(p.kind is p.VAR_POSITIONAL for p in positional):
            warnings.warn(
                f"backend {self.name!r}: its factory takes no loss table (kitchen 0.3 passes one as the 4th "
                "argument; see docs/how-to/migrate.md)",
                DeprecationWarning,
                stacklevel=2,
            )
            old_factory: Callable[..., ServiceBackend] = self.create
            return old_factory(config, settings, checkpoint_dir)
        return self.create(config, settings, checkpoint_dir, loss_table())

    def problems(
        self,
        calls: Collection[str],
        loss_fns: Collection[str],
        lora_rank: int | None,
        entropy_keys: Collection[str] = (),
    ) -> list[str]:
        """What this backend cannot run of a workflow's calls and losses, one line each
        (`entropy_keys`: the config keys whose loss terms need per-token entropies)."""
        found = []
        if entropy_keys and not self.custom_loss_entropy:
            found.append(
                f"{', '.join(entropy_keys)}: backend {self.name!r} does not hand a custom loss the policy's "
                "per-token entropies, which an entropy bonus or entropy masking needs (the local backend does)"
            )
        if self.supported_calls is not None:
            found += [f"it does not support {call}" for call in sorted(set(calls) - self.supported_calls)]
        if self.supported_losses is not None:
            found += [f"it does not run loss_fn {name!r}" for name in sorted(set(loss_fns) - self.supported_losses)]
        if self.requires_lora_rank and lora_rank is None:
            found.append(f"lora_rank: backend {self.name!r} trains LoRA adapters only; set lora_rank (e.g. 32)")
        return found


_REGISTERED: dict[str, BackendSpec] = {}


def register_backend(spec: BackendSpec) -> None:
    """Make `spec` selectable as `backend: <name>`. Register before loading a config: the config
    model's backend sections are built from the registry when `kitchen.engine.config.loading` is imported."""
    _REGISTERED[spec.name] = spec


def _check_spec(name: str, obj: Any) -> BackendSpec:
    if not isinstance(obj, BackendSpec) or obj.name != name:
        raise TypeError(f"is not a BackendSpec named {name!r}")
    return obj


BACKENDS: ExtensionPoint[BackendSpec] = ExtensionPoint(ENTRY_POINT_GROUP, "backend", _check_spec)
"""The installed backends, by entry point (`kitchen.engine.plugins`)."""


def backend_specs() -> dict[str, BackendSpec]:
    """Every registered backend by name (entry points first, then `register_backend` calls)."""
    return {**BACKENDS.load(), **_REGISTERED}


def get_backend_spec(name: str) -> BackendSpec:
    specs = backend_specs()
    if name not in specs:
        close = difflib.get_close_matches(name, specs, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown backend {name!r}{hint} (registered: {', '.join(sorted(specs)) or 'none'})")
    return specs[name]


def make_backend(config: Any, checkpoint_dir: Path) -> ServiceBackend:
    """The configured backend, built by its adapter's factory. Only the backend asked for is
    built: never a silent fallback."""
    return get_backend_spec(config.backend).build(config, checkpoint_dir)
