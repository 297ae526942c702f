"""Config loading: recipe defaults < YAML file < key=value overrides, validated by pydantic.

Errors name the full field path and where the bad value came from (file and line, or the
override), so a typo never costs a run.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.fields import FieldInfo

from kitchen.backends import backend_specs, get_backend_spec
from kitchen.errors import ConfigError

C = TypeVar("C", bound=BaseModel)
Path_ = tuple[str | int, ...]


# Bounded field types. Use them (not a bare `int` / `float`) where a subclass overrides a default:
# re-annotating `learning_rate: float = 3e-3` would silently drop the parent's `gt=0`.
Count = Annotated[int, Field(ge=1)]
Rate = Annotated[float, Field(gt=0)]
NonNegative = Annotated[int, Field(ge=0)]


def _backend_names() -> list[str]:
    return sorted(backend_specs())


class RunConfig(BaseModel):
    """Keys every recipe shares, plus one section per registered backend (`local`, `noop`,
    `tinker`, ...) holding that backend's own settings, with the adapter's settings model."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    MOVED_KEYS: ClassVar[dict[str, str]] = {}
    """Keys a config class used to have and where they went (old dotted path -> new one), so an
    old config gets "moved to ..." instead of "unknown key". Subclasses add theirs."""

    model_name: str = Field("tiny", description="'tiny' (embedded), a local HF model dir, or a hub name")
    backend: str = Field("local", description="a registered backend: " + ", ".join(_backend_names()))
    log_path: str | None = Field(None, description="run directory; default runs/<recipe>-<timestamp>")
    seed: int = 0
    lora_rank: int | None = Field(None, ge=1, description="LoRA rank; full fine-tune when unset (local)")
    load_checkpoint_path: str | None = Field(None, description="start from these weights, fresh optimizer")
    resume: Literal["auto", "never"] = "auto"
    keep_last: int | None = Field(
        None,
        ge=1,
        description="keep only the newest N step checkpoints on disk (never 'final' nor the one a resume "
        "needs); default: keep all",
    )
    keep_every: int | None = Field(
        None, ge=1, description="with keep_last: also keep the checkpoints of steps that are multiples of N"
    )

    for _name, _spec in backend_specs().items():
        __annotations__[_name] = _spec.settings
        locals()[_name] = Field(default_factory=_spec.settings, description=f"backend {_name}: {_spec.description}")
    del _name, _spec

    @field_validator("backend")
    @classmethod
    def _registered_backend(cls, name: str) -> str:
        try:
            get_backend_spec(name)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return name

    @classmethod
    def moved_keys(cls) -> dict[str, str]:
        moved = {old: f"{spec.name}.{new}" for spec in backend_specs().values() for old, new in spec.moved_keys.items()}
        for klass in reversed(cls.__mro__):
            moved.update(vars(klass).get("MOVED_KEYS", {}))
        return moved


def defaults(**values: Any) -> Callable[[type[C]], type[C]]:
    """Class decorator: new defaults for inherited keys, keeping their one definition (type, bounds,
    description). `@defaults(learning_rate=3e-3)` instead of re-declaring `learning_rate`."""

    def apply(cls: type[C]) -> type[C]:
        for name, value in values.items():
            field = cls.model_fields.get(name)
            if field is None:
                raise TypeError(f"{cls.__name__} has no config key {name!r} to set a default for")
            cls.model_fields[name] = FieldInfo.merge_field_infos(field, default=value)
        cls.model_rebuild(force=True)
        return cls

    return apply


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b=value` -> (["a", "b"], parsed value). Values are parsed as YAML scalars/lists."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key=value")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def _set_path(data: dict[str, Any], path: list[str], value: Any, origin: str) -> None:
    node = data
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{origin}: {'.'.join(path)}: {part!r} is not a nested section")
        node = child
    node[path[-1]] = value


def _yaml_lines(text: str) -> dict[Path_, int]:
    """1-based line of every key in a YAML mapping document, by its path."""
    lines: dict[Path_, int] = {}

    def walk(node: yaml.Node, prefix: Path_) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                path = (*prefix, str(key_node.value))
                lines[path] = key_node.start_mark.line + 1
                walk(value_node, path)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                lines[(*prefix, index)] = item.start_mark.line + 1
                walk(item, (*prefix, index))

    root = yaml.compose(text)
    if root is not None:
        walk(root, ())
    return lines


def read_yaml(path: Path) -> tuple[dict[str, Any], dict[Path_, int]]:
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
        lines = _yaml_lines(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path} line {mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    return data, lines


def load_config(
    config_cls: type[C],
    config_file: Path | None = None,
    overrides: list[str] | None = None,
    base: dict[str, Any] | None = None,
) -> C:
    """Build a validated config. `base` holds recipe-level defaults that sit under the YAML."""
    data: dict[str, Any] = dict(base or {})
    lines: dict[Path_, int] = {}
    if config_file is not None:
        file_data, lines = read_yaml(config_file)
        data.update(file_data)
    origins: dict[str, str] = {}
    for text in overrides or []:
        path, value = parse_override(text)
        _set_path(data, path, value, f"override {text!r}")
        origins[".".join(path)] = f"override {text!r}"
    try:
        return config_cls.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, config_cls, config_file, lines, origins)) from None


def _describe(
    exc: ValidationError,
    config_cls: type[BaseModel],
    config_file: Path | None,
    lines: dict[Path_, int],
    origins: dict[str, str],
) -> str:
    problems = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        dotted = ".".join(str(part) for part in loc)
        if dotted in origins:
            where = origins[dotted]
        elif loc in lines and config_file is not None:
            where = f"{config_file} line {lines[loc]}"
        else:
            where = str(config_file) if config_file else "config"
        moved = config_cls.moved_keys().get(dotted) if issubclass(config_cls, RunConfig) else None
        if error["type"] == "extra_forbidden" and moved is not None:
            problems.append(f"{where}: key {dotted!r} has moved: set {moved!r} instead")
        elif error["type"] == "extra_forbidden":
            valid = _field_names(config_cls, loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(valid)}"
            problems.append(f"{where}: unknown key {dotted!r}{hint}")
        else:
            problems.append(f"{where}: {dotted}: {error['msg']} (got {error.get('input')!r})")
    return "invalid config: " + "; ".join(problems)


def _field_names(config_cls: type[BaseModel], parent: Path_) -> list[str]:
    model: Any = config_cls
    for part in parent:
        field = getattr(model, "model_fields", {}).get(str(part))
        if field is None or not isinstance(field.annotation, type):
            return []
        model = field.annotation
    return sorted(getattr(model, "model_fields", {}))


def dump_config(config: BaseModel, path: Path) -> None:
    path.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
