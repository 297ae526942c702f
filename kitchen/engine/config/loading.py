"""Config loading: recipe defaults < YAML file < key=value overrides, validated by pydantic.

Errors name the full field path and where the bad value came from (file and line, or the
override), so a typo never costs a run.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError, ValidationInfo
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from kitchen.engine.config.renames import new_path, translate, warn_renamed
from kitchen.engine.config.run import RunConfig
from kitchen.engine.config.sections import choices_of, fields_at, is_choice, members_of, merged, model_of, shorthand_at
from kitchen.engine.config.yaml_bounded import load_yaml, load_yaml_document
from kitchen.engine.errors import ConfigError
from kitchen.engine.secrets import looks_like_secret_key, redact, redact_value

C = TypeVar("C", bound=BaseModel)
Path_ = tuple[str | int, ...]


def defaults(**values: Any) -> Callable[[type[C]], type[C]]:
    """Class decorator: new defaults for inherited keys, keeping their one definition (type, bounds,
    description). `@defaults(seed=1)` instead of re-declaring `seed`; a section takes the keys it
    changes, as the section's model or a mapping, over its current default:
    `@defaults(optimizer=OptimizerSettings(learning_rate=3e-3))` keeps the other optimizer keys."""

    def apply(cls: type[C]) -> type[C]:
        for name, value in _sectioned(cls, values).items():
            field = cls.model_fields.get(name)
            if field is None:
                raise TypeError(f"{cls.__name__} has no config key {name!r} to set a default for")
            # Checked against the key's type and bounds now, so a bad default fails at import.
            annotated: Any = Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
            current = field.get_default(call_default_factory=True)
            holds_model = isinstance(current, BaseModel) or model_of(field.annotation) is not None
            if isinstance(value, BaseModel | Mapping) and (holds_model or choices_of(field) is not None):
                given = value.model_dump(exclude_unset=True) if isinstance(value, BaseModel) else dict(value)
                another_choice = choices_of(field) is not None and type(value) is not type(current)
                if isinstance(value, BaseModel) and (not isinstance(current, BaseModel) or another_choice):
                    given = value.model_dump()  # no default yet, or another environment: replaced whole
                    current = None
                below = {name: current.model_dump()} if isinstance(current, BaseModel) else {}
                layered = merged(below, {name: given}, cls)
                checked = TypeAdapter(annotated).validate_python(layered[name])
                factory = partial(_copy_of, checked)
                cls.model_fields[name] = FieldInfo.merge_field_infos(
                    field, default=PydanticUndefined, default_factory=factory
                )
                continue
            checked = TypeAdapter(annotated).validate_python(value)
            # default_factory=None: a new default replaces a factory too (else the factory would win)
            cls.model_fields[name] = FieldInfo.merge_field_infos(field, default=checked, default_factory=None)
        cls.model_rebuild(force=True)
        return cls

    return apply


def _sectioned(cls: type[BaseModel], values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` with kitchen 0.2's flat names moved into their sections (a warning each), so a
    plugin's recipe written for 0.2 keeps working for one release."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        moved = new_path(cls, (name,)) if name not in cls.model_fields else None
        if moved is None or len(moved) == 1:
            out[moved[0] if moved else name] = value
            continue
        warn_renamed((name,), moved, f"@defaults of {cls.__name__}")
        section = out.setdefault(moved[0], {})
        if isinstance(section, BaseModel):
            section = out[moved[0]] = section.model_dump(exclude_unset=True)
        node = section
        for part in moved[1:-1]:
            node = node.setdefault(part, {})
        node[moved[-1]] = value
    return out


def _copy_of(value: BaseModel) -> BaseModel:
    """A fresh copy of a section's default per config instance (sections are mutable)."""
    return value.model_copy(deep=True)


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
    """Build a validated config. `base` holds recipe-level defaults that sit under the YAML.
    Keys given by their kitchen 0.2 (flat) names are moved to their sections, with a warning."""
    lines: dict[Path_, int] = {}
    file_data: dict[str, Any] = {}
    if config_file is not None:
        raw, raw_lines = read_yaml(config_file)
        file_data = translate(config_cls, raw, str(config_file))
        lines = _moved_lines(config_cls, raw_lines)
    origins: dict[str, str] = {}
    parsed = []
    for text in overrides or []:
        path, value = parse_override(text)
        moved = new_path(config_cls, tuple(path))
        if moved is not None and moved != tuple(path):
            warn_renamed(tuple(path), moved, f"override {text!r}")
            path = list(moved)
        parsed.append((text, path, value))

    def layered(preset: Mapping[str, Any]) -> dict[str, Any]:
        data = merged(merged(dict(base or {}), preset, config_cls), file_data, config_cls)
        data = copy.deepcopy(data)  # overrides write into it
        for text, path, value in parsed:
            _set_path(config_cls, data, path, value, f"override {text!r}")
            origins[".".join(path)] = f"override {text!r}"
        return merged({}, data, config_cls)  # plain values of sections with a shorthand, expanded

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


def _moved_lines(config_cls: type[BaseModel], lines: Mapping[Path_, int]) -> dict[Path_, int]:
    """The YAML lines of keys, by their paths in the new layout (an old name's line stays its own)."""
    out: dict[Path_, int] = {}
    for path, line in lines.items():
        names = tuple(str(part) for part in path)
        cut = next((i for i, part in enumerate(path) if isinstance(part, int)), len(path))
        moved = new_path(config_cls, names[:cut]) or names[:cut]
        out[(*moved, *path[cut:])] = line
    return out


def _set_path(config_cls: type[BaseModel], data: dict[str, Any], path: list[str], value: Any, origin: str) -> None:
    node = data
    for depth, part in enumerate(path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            shorthand = shorthand_at(config_cls, tuple(path[: depth + 1]))
            if shorthand is None:
                raise ConfigError(f"{origin}: {'.'.join(path)}: {part!r} is not a nested section")
            child = node[part] = {shorthand: child}  # `env=gsm8k env.dataset=...`
        node = child
    shorthand = shorthand_at(config_cls, tuple(path))
    below = node.get(path[-1])
    choice = is_choice(config_cls, tuple(path))
    if shorthand is not None and below is not None and not isinstance(below, dict | list):
        below = {shorthand: below}  # `env=guess_number` given before
    fields = fields_at(config_cls, tuple(path))
    if isinstance(value, dict) and isinstance(below, dict) and fields and members_of(fields[0][1]):
        node[path[-1]] = merged({path[-1]: below}, {path[-1]: value}, fields[0][0])[path[-1]]  # `optimizer={...}`
    elif shorthand is None or not isinstance(below, dict) or isinstance(value, dict | list):
        node[path[-1]] = value
    elif choice and below.get(shorthand) != value:
        node[path[-1]] = {shorthand: value}  # `env=gsm8k` over arithmetic's keys: another environment
    else:
        below[shorthand] = value  # `algorithm=dapo` over a section's keys: its preset only


def _shown(config_cls: type[BaseModel], loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """An error location without the tags pydantic puts in it for a choice (`env.gsm8k.dataset`
    is the key `env.dataset`)."""
    model: Any = config_cls
    shown: list[Any] = []
    choices: tuple[str, dict[str, type[BaseModel]]] | None = None
    for part in loc:
        if choices is not None:  # this part is the choice's tag
            model, choices = choices[1].get(str(part)), None
            continue
        shown.append(part)
        field = getattr(model, "model_fields", {}).get(str(part)) if model is not None else None
        choices = choices_of(field) if field is not None else None
        if choices is None:
            model = model_of(field.annotation) if field is not None else None
    return tuple(shown)


def _describe(
    exc: ValidationError,
    config_cls: type[BaseModel],
    config_file: Path | None,
    lines: dict[Path_, int],
    origins: dict[str, str],
) -> str:
    problems = []
    for error in exc.errors():
        loc = _shown(config_cls, tuple(error["loc"]))
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
        elif error["type"] == "extra_forbidden" and len(error["loc"]) > len(loc):  # under a choice's member
            chosen = next(str(part) for part in error["loc"] if str(part) not in map(str, loc))
            members = _members(config_cls, loc[:-1])
            others = [tag for tag, member in members.items() if str(loc[-1]) in member.model_fields]
            own = list(members[chosen].model_fields) if chosen in members else []
            close = difflib.get_close_matches(str(loc[-1]), own, n=1)
            hint = f"; it is a key of {', '.join(map(repr, others))}" if others else ""
            hint += f"; did you mean {'.'.join(map(str, [*loc[:-1], close[0]]))!r}?" if close and not others else ""
            problems.append(f"{where}: unknown key {dotted!r} for {'.'.join(map(str, loc[:-1]))} {chosen!r}{hint}")
        elif error["type"] == "extra_forbidden":
            valid = _field_names(config_cls, loc[:-1])
            parent = "".join(f"{part}." for part in loc[:-1])
            close = [parent + key for key in difflib.get_close_matches(str(loc[-1]), valid, n=1)]
            close = close or _elsewhere(config_cls, str(loc[-1]))
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(valid)}"
            problems.append(f"{where}: unknown key {dotted!r}{hint}")
        elif error["type"] == "union_tag_invalid":  # a choice (`env: NAME`) naming no member
            tags = [tag.strip(" '") for tag in str(error.get("ctx", {}).get("expected_tags", "")).split(",")]
            close = difflib.get_close_matches(str(error.get("ctx", {}).get("tag")), tags, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"one of: {', '.join(tags)}"
            problems.append(f"{where}: {dotted}: {error['ctx']['tag']!r} is not a choice; {hint}")
        elif not loc:  # a check across keys: its message names them
            problems.append(f"{where}: {error['msg'].removeprefix('Value error, ')}")
        else:
            problems.append(f"{where}: {dotted}: {error['msg']} (got {error.get('input')!r})")
    return redact("invalid config: " + "; ".join(problems))


def _elsewhere(config_cls: type[BaseModel], name: str) -> list[str]:
    """The dotted key in another section whose own name is close to `name` (`batch_sise` ->
    `data.batch_size`): a key given in the wrong place, or misspelt there."""
    keys: dict[str, str] = {}

    def walk(model: type[BaseModel], prefix: str) -> None:
        for key, field in model.model_fields.items():
            dotted = f"{prefix}{key}"
            keys.setdefault(key, dotted)
            choices = choices_of(field)
            for member in list(choices[1].values()) if choices is not None else [model_of(field.annotation)]:
                if member is not None and prefix.count(".") < 2:
                    walk(member, f"{dotted}.")

    walk(config_cls, "")
    close = difflib.get_close_matches(name, list(keys), n=1)
    return [keys[close[0]]] if close else []


def _members(config_cls: type[BaseModel], choice: Path_) -> dict[str, type[BaseModel]]:
    """The members (tag -> settings model) of the choice at `choice` (`env`)."""
    fields = fields_at(config_cls, tuple(map(str, choice)))
    choices = choices_of(fields[0][1]) if fields else None
    return choices[1] if choices is not None else {}


def _field_names(config_cls: type[BaseModel], parent: Path_) -> list[str]:
    """The keys under `parent` (for a choice: every member's)."""
    fields = fields_at(config_cls, tuple(map(str, parent)))
    models = [member for _, field in fields for member in members_of(field)] if parent else [config_cls]
    return sorted({name for model in models for name in model.model_fields})


def dump_config(config: BaseModel, path: Path) -> None:
    """Write `config` as YAML, secrets (URL credentials, API keys) redacted."""
    data = redact_value(config.model_dump(mode="json"))
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
