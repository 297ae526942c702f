"""The flat config keys of kitchen 0.2 and where they live now that config has sections.

The table is derived from the config class, never written out: every field of a `Section` of the
config (an environment choice's members included) had, in 0.2, the flat name its section declares
(`Section.flat_name`: `learning_rate` -> `optimizer.learning_rate`, `warm_start_steps` ->
`warm_start.steps`), plus what a config class lists in `RENAMED_KEYS` (`env_args` -> `env`). A
rename is a prefix: `wandb.project` -> `logging.wandb.project`. A key that is valid in the new
layout is never renamed, so `algorithm: dapo` stays (the section's shorthand for `algorithm.preset`).

One table serves every place an old key can come from, for one release (until 0.4): YAML files and
`key=value` overrides (with a `ConfigKeyRenamed` warning naming both), `resume_allow_changes`, and
the resume fingerprints of checkpoints written by 0.2 (`translate_fingerprint`).
"""

from __future__ import annotations

import typing
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, get_args, get_origin

from pydantic import BaseModel

from kitchen.engine.config.sections import Path_, Section, choices_of, members_of, shorthand_at
from kitchen.engine.errors import ConfigError

UNTIL = "0.4"
"""The release that drops the old names."""


class ConfigKeyRenamed(FutureWarning):
    """A config key was given by its kitchen 0.2 name; the message names the new one."""


def _is_free_mapping(annotation: Any) -> bool:
    """`dict[str, ...]` (any key is valid below it)."""
    inner = annotation
    while get_origin(inner) is typing.Annotated:
        inner = get_args(inner)[0]
    args = [arg for arg in get_args(inner) if arg is not type(None)] or [inner]
    return any(get_origin(arg) in (dict, Mapping) or arg is dict for arg in args)


def valid(model: type[BaseModel], path: Path_) -> bool:
    """Whether `path` names a key of `model`'s layout (for an environment choice: of any member)."""
    if not path:
        return True
    field = model.model_fields.get(path[0])
    if field is None:
        return False
    if len(path) == 1 or _is_free_mapping(field.annotation):
        return True
    return any(valid(member, path[1:]) for member in members_of(field))


def renames(config_cls: type[BaseModel]) -> dict[Path_, Path_]:
    """0.2 key path -> its path now, for `config_cls`."""
    table: dict[Path_, Path_] = {}
    for name, field in config_cls.model_fields.items():
        choices = choices_of(field)
        for member in members_of(field):
            if not issubclass(member, Section):
                continue  # a section that 0.2 had already (a backend's, OtherModel, ...)
            for sub in member.model_fields:
                if choices is None or sub != choices[0]:  # a choice's tag was the section's own key
                    table.setdefault((member.flat_name(sub),), (name, sub))
    for klass in reversed(config_cls.__mro__):
        for old, new in vars(klass).get("RENAMED_KEYS", {}).items():
            table[tuple(old.split("."))] = tuple(new.split("."))
    return table


def new_path(config_cls: type[BaseModel], path: Path_) -> Path_ | None:
    """Where `path` lives now: itself when valid, else its longest renamed prefix's new path plus
    the rest; None when it is neither (an unknown key: the validation error names it)."""
    if valid(config_cls, path):
        return path
    table = renames(config_cls)
    for cut in range(len(path), 0, -1):
        if path[:cut] in table:
            return table[path[:cut]] + path[cut:]
    return None


def dotted(path: Path_) -> str:
    return ".".join(path)


def warn_renamed(old: Path_, new: Path_, where: str) -> None:
    warnings.warn(
        f"{where}: config key {dotted(old)!r} is {dotted(new)!r} since kitchen 0.3 (the old name works until {UNTIL})",
        ConfigKeyRenamed,
        stacklevel=3,
    )


def _leaves(model: type[BaseModel] | None, data: Mapping[str, Any], prefix: Path_) -> Iterator[tuple[Path_, Any]]:
    """(path, value) of `data`, descending into a mapping only where `model` has a section there."""
    for key, value in data.items():
        path = (*prefix, str(key))
        field = model.model_fields.get(str(key)) if model is not None else None
        members = members_of(field) if field is not None else []
        if isinstance(value, Mapping) and members and not _is_free_mapping(field.annotation if field else None):
            choices = choices_of(field) if field is not None else None
            chosen = choices[1].get(str(value.get(choices[0]))) if choices is not None else None
            below = chosen or (members[0] if len(members) == 1 else None)
            if below is None:  # an environment choice without its name: no layout to check against
                yield path, value
            else:
                yield from _leaves(below, value, path)
        else:
            yield path, value


def _put(config_cls: type[BaseModel], data: dict[str, Any], path: Path_, value: Any, where: str, old: Path_) -> None:
    node = data
    for depth, part in enumerate(path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):  # a plain value for a section (`env: gsm8k`), and now a key in it
            shorthand = shorthand_at(config_cls, path[: depth + 1])
            child = node[part] = {} if shorthand is None else {shorthand: child}
        node = child
    if path[-1] in node:
        raise ConfigError(f"{where}: {dotted(old)!r} and {dotted(path)!r} are the same key (renamed); set it once")
    node[path[-1]] = value


def translate(config_cls: type[BaseModel], data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`data` (a YAML document, a layer of settings) with every 0.2 key moved to its new path, a
    warning for each; unknown keys are kept for validation to name."""
    out: dict[str, Any] = {}
    for path, value in _leaves(config_cls, data, ()):
        moved = new_path(config_cls, path)
        if moved is not None and moved != path:
            warn_renamed(path, moved, where)
            _put(config_cls, out, moved, value, where, path)
        else:
            _put(config_cls, out, path, value, where, path)
    return out


def translate_key(config_cls: type[BaseModel], key: str) -> str:
    """A dotted key named in `resume_allow_changes` or a fingerprint, in the new layout (a key
    that names a section with a shorthand names its shorthand field: `env` -> `env.name`)."""
    base, hash_, suffix = key.partition("#")
    marker = "@" if base.startswith("@") else ""
    path = tuple(base.removeprefix("@").split("."))
    moved = new_path(config_cls, path) or path
    shorthand = shorthand_at(config_cls, moved) if moved != path or valid(config_cls, moved) else None
    if shorthand is not None:
        moved = (*moved, shorthand)
    return marker + dotted(moved) + hash_ + suffix


def present(config: BaseModel, key: str) -> bool:
    """Whether the dotted `key` is a key of this config as loaded (an unchosen environment's are not)."""
    value: Any = config
    for part in key.removeprefix("@").partition("#")[0].split("."):
        if not isinstance(value, BaseModel):
            return isinstance(value, Mapping)
        if part not in type(value).model_fields:
            return False
        value = getattr(value, part)
    return True


def translate_fingerprint(config: BaseModel, recorded: Mapping[str, Any]) -> dict[str, Any]:
    """A fingerprint recorded by kitchen 0.2 (flat keys) in the current layout: each key renamed;
    a renamed key that this config does not have (an environment the run did not choose: 0.2 kept
    every environment's keys) is left out."""
    out: dict[str, Any] = {}
    for key, value in recorded.items():
        new = translate_key(type(config), key) if not key.startswith("recipe") else key
        if new != key and not present(config, new):
            continue
        out[new] = value
    return out
