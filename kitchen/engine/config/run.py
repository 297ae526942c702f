"""The keys every run shares, at the top of every recipe's config: the model, the backend, where
the run lives and how it resumes; its `logging` and `eval` sections; and one section per
registered backend (`local`, `noop`, `tinker`, ...) holding that backend's own settings, with the
adapter's settings model. A training family's settings add their sections to these
(`kitchen.families.common.settings.TrainingSettings`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kitchen.engine.backends import backend_specs, get_backend_spec
from kitchen.engine.config.eval_schedule import EvalSchedule
from kitchen.engine.config.renames import new_path, warn_renamed
from kitchen.engine.config.sections import RESUME_SAFE, over_defaults
from kitchen.engine.observe.sinks import LoggingSettings

# Bounded field types. Use them (not a bare `int` / `float`) where a subclass overrides a default:
# re-annotating `learning_rate: float = 3e-3` would silently drop the parent's `gt=0`.
# Booleans are not counts (`batch_size=true` is an error, not 1), and inf/nan are never a rate.
Count = Annotated[int, Field(ge=1, strict=True)]
Rate = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[int, Field(ge=0, strict=True)]


def _backend_names() -> list[str]:
    return sorted(backend_specs())


class RunConfig(BaseModel):
    """The run-wide keys (a stage that reads them names this class, or its recipe's config class)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    MOVED_KEYS: ClassVar[dict[str, str]] = {}
    """Keys a config class had before 0.2 and where they went (old dotted path -> new one): an old
    config gets "moved to ..." instead of "unknown key". Subclasses add theirs. (The flat keys of
    0.2 are renamed, with a warning, by `kitchen.engine.config.renames`.)"""

    model_name: str = Field(
        "tiny", description="'tiny', 'tiny32' or 'tiny64k' (embedded), a local HF model dir, or a hub name"
    )
    backend: str = Field("local", description="a registered backend: " + ", ".join(_backend_names()))
    log_path: str | None = Field(
        None, description="run directory; default runs/<recipe>-<timestamp>", json_schema_extra=RESUME_SAFE
    )
    seed: Annotated[int, Field(strict=True)] = Field(
        0, description="seed of data order, sampling and the tiny model's initial weights: same seed, same run"
    )
    lora_rank: Annotated[int, Field(strict=True)] | None = Field(
        None, ge=1, description="LoRA rank; full fine-tune when unset (local)"
    )
    load_checkpoint_path: str | None = Field(
        None, description="start from these weights, fresh optimizer", json_schema_extra=RESUME_SAFE
    )
    resume: Literal["auto", "never"] = Field(
        "auto",
        description="auto: continue from the run directory's last checkpoint; never: refuse an existing run",
        json_schema_extra=RESUME_SAFE,
    )
    overwrite: bool = Field(
        False, description="with resume=never, start an existing run directory over", json_schema_extra=RESUME_SAFE
    )
    resume_allow_changes: list[str] = Field(
        default_factory=list,
        description="keys a resumed run may change from what its checkpoint was trained with",
        json_schema_extra=RESUME_SAFE,
    )
    max_bad_steps: NonNegative = Field(
        0,
        description="consecutive NaN/inf steps (not applied) tolerated before the run stops",
        json_schema_extra=RESUME_SAFE,
    )
    logging: LoggingSettings = Field(
        default_factory=LoggingSettings, description="metric sinks and traces beside the run directory's files"
    )
    eval: EvalSchedule = Field(
        default_factory=EvalSchedule, description="evaluation during training", json_schema_extra=RESUME_SAFE
    )

    for _name, _spec in backend_specs().items():
        __annotations__[_name] = _spec.settings
        locals()[_name] = Field(
            default_factory=_spec.settings,
            description=f"backend {_name}: {_spec.description}",
            json_schema_extra=RESUME_SAFE,
        )
    del _name, _spec

    @model_validator(mode="before")
    @classmethod
    def _sections_over_their_defaults(cls, data: Any) -> Any:
        """A section given in part keeps its other keys' defaults, the recipe's included."""
        return over_defaults(cls, data) if isinstance(data, Mapping) else data

    @model_validator(mode="after")
    def _allowed_changes_by_their_new_names(self) -> RunConfig:
        """`resume_allow_changes` naming a kitchen 0.2 key: the key's 0.3 path, with a warning."""
        renamed = []
        for key in self.resume_allow_changes:
            path = tuple(key.split("."))
            moved = new_path(type(self), path)
            if moved is not None and moved != path:
                warn_renamed(path, moved, "resume_allow_changes")
                key = ".".join(moved)
            renamed.append(key)
        if renamed != self.resume_allow_changes:
            object.__setattr__(self, "resume_allow_changes", renamed)  # not a re-validation
        return self

    @field_validator("backend")
    @classmethod
    def _registered_backend(cls, name: str) -> str:
        get_backend_spec(name)  # a ConfigError is a ValueError: pydantic reports it on the field
        return name

    @classmethod
    def preset(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """Defaults a key of the config being loaded selects (e.g. RL's `algorithm.preset`), applied
        above the recipe's defaults and below the YAML and `key=value` overrides. None here."""
        return {}

    def builtin_loss_fns(self) -> list[str]:
        """The losses this run sends to the backend's built-in forward_backward, which `kitchen
        validate` checks the backend runs (RL's policy loss, unless its custom route takes it)."""
        return []

    def entropy_keys(self) -> list[str]:
        """The config keys whose loss terms need the policy's per-token entropies (an entropy
        bonus, entropy masking), which a backend must compute; empty: none. None here."""
        return []

    def resolved_summary(self) -> list[str]:
        """Lines `kitchen show` prints after the workflow: values resolved from several keys (e.g.
        an RL `algorithm` preset's). None here."""
        return []

    if not TYPE_CHECKING:  # for mypy a config has exactly its declared keys

        def __getattr__(self, name: str) -> Any:
            """A key read by its kitchen 0.2 (flat) name, for one release: the sectioned key's value,
            with a `ConfigKeyRenamed` warning (`config.learning_rate` -> `config.optimizer.learning_rate`)."""
            try:
                return super().__getattr__(name)
            except AttributeError:
                moved = None if name.startswith("_") else new_path(type(self), (name,))
                if moved is None or moved == (name,):
                    raise
                warn_renamed((name,), moved, f"{type(self).__name__}.{name}")
                value: Any = self
                for part in moved:
                    value = getattr(value, part)
                return value

    @classmethod
    def moved_keys(cls) -> dict[str, str]:
        moved = {old: f"{spec.name}.{new}" for spec in backend_specs().values() for old, new in spec.moved_keys.items()}
        for klass in reversed(cls.__mro__):
            moved.update(vars(klass).get("MOVED_KEYS", {}))
        return moved
