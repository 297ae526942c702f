"""Config loading: recipe defaults < YAML file < key=value overrides, validated by pydantic.

Errors name the full field path and where the bad value came from (file and line, or the
override), so a typo never costs a run.
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo

from kitchen.engine.backends import backend_specs, get_backend_spec
from kitchen.engine.config.eval_schedule import TrainingEvalSettings
from kitchen.engine.config.yaml_bounded import load_yaml, load_yaml_document
from kitchen.engine.errors import ConfigError
from kitchen.engine.observe.sinks import LoggerName, MlflowSettings, WandbSettings, missing_logger_problem
from kitchen.engine.secrets import looks_like_secret_key, redact, redact_value

C = TypeVar("C", bound=BaseModel)
Path_ = tuple[str | int, ...]


# Bounded field types. Use them (not a bare `int` / `float`) where a subclass overrides a default:
# re-annotating `learning_rate: float = 3e-3` would silently drop the parent's `gt=0`.
# Booleans are not counts (`batch_size=true` is an error, not 1), and inf/nan are never a rate.
Count = Annotated[int, Field(ge=1, strict=True)]
Rate = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[int, Field(ge=0, strict=True)]


def _backend_names() -> list[str]:
    return sorted(backend_specs())


class RunConfig(TrainingEvalSettings):
    """Keys every recipe shares (evaluation during training among them: `evals`,
    `best_checkpoint`), plus one section per registered backend (`local`, `noop`, `tinker`, ...)
    holding that backend's own settings, with the adapter's settings model."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    MOVED_KEYS: ClassVar[dict[str, str]] = {}
    """Keys a config class used to have and where they went (old dotted path -> new one), so an
    old config gets "moved to ..." instead of "unknown key". Subclasses add theirs."""

    model_name: str = Field("tiny", description="'tiny' or 'tiny32' (embedded), a local HF model dir, or a hub name")
    backend: str = Field("local", description="a registered backend: " + ", ".join(_backend_names()))
    log_path: str | None = Field(None, description="run directory; default runs/<recipe>-<timestamp>")
    seed: Annotated[int, Field(strict=True)] = Field(
        0, description="seed of data order, sampling and the tiny model's initial weights: same seed, same run"
    )
    lora_rank: Annotated[int, Field(strict=True)] | None = Field(
        None, ge=1, description="LoRA rank; full fine-tune when unset (local)"
    )
    load_checkpoint_path: str | None = Field(None, description="start from these weights, fresh optimizer")
    resume: Literal["auto", "never"] = Field(
        "auto", description="auto: continue from the run directory's last checkpoint; never: refuse an existing run"
    )
    loggers: list[LoggerName] = Field(
        default_factory=list,
        description="metric sinks beside the JSONL files: tensorboard, wandb, mlflow (each an optional extra)",
    )
    wandb: WandbSettings = Field(default_factory=WandbSettings, description="Weights & Biases (loggers: [wandb])")
    mlflow: MlflowSettings = Field(default_factory=MlflowSettings, description="MLflow (loggers: [mlflow])")
    trace_file: bool = Field(default=False, description="write the run's OpenTelemetry spans to RUN_DIR/traces.jsonl")
    overwrite: bool = Field(False, description="with resume=never, start an existing run directory over")
    resume_allow_changes: list[str] = Field(
        default_factory=list, description="keys a resumed run may change from what its checkpoint was trained with"
    )
    max_bad_steps: NonNegative = Field(
        0, description="consecutive NaN/inf steps (not applied) tolerated before the run stops"
    )
    keep_last: int | None = Field(
        5,
        ge=1,
        description="keep only the newest N step checkpoints on disk, plus 'final', the one with the best "
        "held-out metric and the one a resume needs; null: keep all",
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
        get_backend_spec(name)  # a ConfigError is a ValueError: pydantic reports it on the field
        return name

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

    @classmethod
    def preset(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """Defaults a key of the config being loaded selects (e.g. RL's `algorithm`), applied above
        the recipe's defaults and below the YAML and `key=value` overrides. None here."""
        return {}

    def resolved_summary(self) -> list[str]:
        """Lines `kitchen show` prints after the workflow: values resolved from several keys (e.g.
        an RL `algorithm` preset's). None here."""
        return []

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
            # Checked against the key's type and bounds now, so a bad default fails at import.
            annotated: Any = Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
            checked = TypeAdapter(annotated).validate_python(value)
            # default_factory=None: a new default replaces a factory too (else the factory would win)
            cls.model_fields[name] = FieldInfo.merge_field_infos(field, default=checked, default_factory=None)
        cls.model_rebuild(force=True)
        return cls

    return apply


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b=value` -> (["a", "b"], parsed value). Values are parsed as YAML scalars/lists."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key=value")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {redact(text)!r} has an empty key")
    if looks_like_secret_key(key):
        raise ConfigError(
            f"override {key!r}: secrets are not accepted on the command line or in config files (the value was "
            "not shown or stored); set them in the environment, e.g. TINKER_API_KEY"
        )
    try:
        value = load_yaml(raw) if raw.strip() else ""
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


def _yaml_lines(root: yaml.Node | None) -> dict[Path_, int]:
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

    if root is not None:
        walk(root, ())
    return lines


def _read_text(path: Path) -> str:
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    if not path.is_file():
        raise ConfigError(f"config file {path}: is a directory, not a file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot be read: {exc.strerror}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path} line {line}: not UTF-8 text (byte offset {exc.start})") from None


def read_yaml(path: Path) -> tuple[dict[str, Any], dict[Path_, int]]:
    text = _read_text(path)
    try:
        data, root = load_yaml_document(text)
        lines = _yaml_lines(root)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path} line {mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    for key_path, line in lines.items():
        if key_path and looks_like_secret_key(str(key_path[-1])):
            dotted = ".".join(str(part) for part in key_path)
            raise ConfigError(
                f"{path} line {line}: key {dotted!r}: secrets are not accepted in config files (the value was not "
                "shown or stored); set them in the environment, e.g. TINKER_API_KEY"
            )
    return data, lines


CONFIG_DIR = "config_dir"
"""Validation context key: the folder of the config file being loaded (absent for overrides alone),
for validators that resolve names relative to it (e.g. reward modules)."""


def config_dir(info: ValidationInfo) -> Path | None:
    """The loading config file's folder, from a validator's `info`; None without a config file."""
    context = info.context or {}
    folder = context.get(CONFIG_DIR)
    return folder if isinstance(folder, Path) else None


def load_config(
    config_cls: type[C],
    config_file: Path | None = None,
    overrides: list[str] | None = None,
    base: dict[str, Any] | None = None,
) -> C:
    """Build a validated config. `base` holds recipe-level defaults that sit under the YAML."""
    lines: dict[Path_, int] = {}
    file_data: dict[str, Any] = {}
    if config_file is not None:
        file_data, lines = read_yaml(config_file)
    origins: dict[str, str] = {}
    parsed = [(text, *parse_override(text)) for text in overrides or []]

    def layered(preset: Mapping[str, Any]) -> dict[str, Any]:
        data = copy.deepcopy(_merged(_merged(dict(base or {}), preset), file_data))  # overrides write into it
        for text, path, value in parsed:
            _set_path(data, path, value, f"override {text!r}")
            origins[".".join(path)] = f"override {text!r}"
        return data

    data = layered({})
    if issubclass(config_cls, RunConfig):
        preset = config_cls.preset(data)
        if preset:
            data = layered(preset)
    context = {CONFIG_DIR: config_file.resolve().parent} if config_file is not None else {}
    try:
        return config_cls.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, config_cls, config_file, lines, origins)) from None


def _merged(lower: dict[str, Any], upper: Mapping[str, Any]) -> dict[str, Any]:
    """`upper` over `lower`, nested sections merged key by key (a preset's `dynamic_sampling` keeps
    the keys a YAML section does not set)."""
    merged = dict(lower)
    for key, value in upper.items():
        below = merged.get(key)
        merged[key] = _merged(below, value) if isinstance(below, dict) and isinstance(value, dict) else value
    return merged


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
        elif not loc:  # a check across keys: its message names them
            problems.append(f"{where}: {error['msg'].removeprefix('Value error, ')}")
        else:
            problems.append(f"{where}: {dotted}: {error['msg']} (got {error.get('input')!r})")
    return redact("invalid config: " + "; ".join(problems))


def _field_names(config_cls: type[BaseModel], parent: Path_) -> list[str]:
    model: Any = config_cls
    for part in parent:
        field = getattr(model, "model_fields", {}).get(str(part))
        if field is None or not isinstance(field.annotation, type):
            return []
        model = field.annotation
    return sorted(getattr(model, "model_fields", {}))


def dump_config(config: BaseModel, path: Path) -> None:
    """Write `config` as YAML, secrets (URL credentials, API keys) redacted."""
    data = redact_value(config.model_dump(mode="json"))
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
