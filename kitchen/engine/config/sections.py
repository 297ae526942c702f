"""Config in sections: a recipe's config is a tree of small pydantic models, one per concern
(`optimizer`, `data`, `sampling`, `algorithm`, `checkpoint`, `env`, a backend's), so a stage's
settings parameter names the one section it reads and its signature says exactly what that is.

    class DoRollouts(Stage):
        async def run(self, ..., sampling: SamplingSettings, rl: RLLoopSettings) -> Rollouts:

The runner passes each settings parameter the config's section of that type (`locate`): the one
field of the config whose declared type is that model or a subclass of it, or the config itself
when the config's class is one (the run-wide keys: `model_name`, `seed`, ...). Building the workflow
proves that every section a stage, a `When` predicate or a loop count reads is there, so a
mis-wired recipe fails at `kitchen validate`.

A `Section` also says what its keys were called before config had sections (`FLAT`,
`FLAT_PREFIX`), which makes the renames of `kitchen.engine.config.renames`, and which key a plain
value sets (`SHORTHAND`: `algorithm: dapo` is `algorithm: {preset: dapo}`).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, get_args, get_origin

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.fields import FieldInfo

from kitchen.engine.errors import WiringError

S = TypeVar("S", bound=BaseModel)
Path_ = tuple[str, ...]


class Section(BaseModel):
    """A group of config keys one concern reads. Unknown keys are errors, as everywhere in config."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    FLAT: ClassVar[Mapping[str, str]] = {}
    """Field -> its name in kitchen 0.2's flat config, where that was not `FLAT_PREFIX + field`."""
    FLAT_PREFIX: ClassVar[str] = ""
    """Prefix the fields' flat 0.2 names had (`warm_start_` for `warm_start.steps`)."""
    SHORTHAND: ClassVar[str | None] = None
    """The field a plain value given for the whole section sets (`env: gsm8k` -> `env.name`)."""

    @model_validator(mode="before")
    @classmethod
    def _plain_value(cls, data: Any) -> Any:
        if cls.SHORTHAND is not None and data is not None and not isinstance(data, Mapping | BaseModel):
            return {cls.SHORTHAND: data}
        return data

    @classmethod
    def flat_name(cls, field: str) -> str:
        """What `field` was called in kitchen 0.2's flat config."""
        return cls.FLAT.get(field, cls.FLAT_PREFIX + field)


# -- resume roles ------------------------------------------------------------------------------

RESUME_SAFE: dict[str, Any] = {"resume": "safe"}
"""`json_schema_extra` of a key a resumed run may change: it changes nothing already trained (how
often to save or evaluate, where the run lives)."""
RUN_LENGTH: dict[str, Any] = {"resume": "length"}
"""`json_schema_extra` of a key that says how long to train: safe to change on resume, and a
finished run with the same value is complete."""


def resume_role(field: FieldInfo) -> str | None:
    """'safe', 'length' or None (changing it on resume is refused)."""
    extra = field.json_schema_extra
    role = extra.get("resume") if isinstance(extra, dict) else None
    return str(role) if role is not None else None


# -- the types of fields -----------------------------------------------------------------------


def strip_optional(annotation: Any) -> tuple[Any, bool]:
    """(`X`, True) for `X | None`, else (annotation, False)."""
    if get_origin(annotation) in (typing.Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(args) == 1 and len(get_args(annotation)) == 2:
            return args[0], True
    return annotation, False


def _unannotated(annotation: Any) -> Any:
    while get_origin(annotation) is typing.Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (`X` or `X | None`), else None."""
    inner, _ = strip_optional(_unannotated(annotation))
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def choices_of(field: FieldInfo) -> tuple[str, dict[str, type[BaseModel]]] | None:
    """A discriminated union of models (`env`): its tag key and the model of each tag, else None."""
    discriminator = field.discriminator
    if not isinstance(discriminator, str):
        return None
    members: dict[str, type[BaseModel]] = {}
    for member in get_args(_unannotated(field.annotation)):
        tag = member.model_fields[discriminator]
        for value in get_args(tag.annotation) or (tag.default,):
            members[str(value)] = member
    return discriminator, members


def members_of(field: FieldInfo) -> list[type[BaseModel]]:
    """The models a field holds: its model, or each member of its choice; none for a plain value
    or a free mapping (`dict[str, float]`: any key is valid below it)."""
    choices = choices_of(field)
    if choices is not None:
        return list(dict.fromkeys(choices[1].values()))
    model = model_of(field.annotation)
    return [model] if model is not None else []


def fields_at(config_cls: type[BaseModel], path: Path_) -> list[tuple[type[BaseModel], FieldInfo]]:
    """(holding model, field) of the key at `path`: one, or below a choice each member's that has
    it (`env.max_turns`: guess_number's and openenv's); none for a key that does not exist."""
    models: list[type[BaseModel]] = [config_cls]
    found: list[tuple[type[BaseModel], FieldInfo]] = []
    for part in path:
        found = [(model, model.model_fields[part]) for model in models if part in model.model_fields]
        models = [member for _, field in found for member in members_of(field)]
    return found if path else []


def sections(model: type[BaseModel]) -> Iterator[tuple[str, type[BaseModel]]]:
    """(field, model) for every field of `model` that holds one model (optional or not)."""
    for name, field in model.model_fields.items():
        inner = model_of(field.annotation)
        if inner is not None:
            yield name, inner


# -- locating a section ------------------------------------------------------------------------


def section_paths(config_cls: type[BaseModel], wanted: type[BaseModel]) -> list[Path_]:
    """Where `wanted` sits in `config_cls`: () for the config itself, else the paths of the
    (non-optional) fields declared as `wanted` or a subclass, searched through nested sections."""
    if issubclass(config_cls, wanted):
        return [()]
    found: list[Path_] = []

    def walk(model: type[BaseModel], prefix: Path_) -> None:
        for name, field in model.model_fields.items():
            annotation, optional = strip_optional(_unannotated(field.annotation))
            if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)) or optional:
                continue
            if issubclass(annotation, wanted):
                found.append((*prefix, name))
            else:
                walk(annotation, (*prefix, name))

    walk(config_cls, ())
    return found


def locate(config_cls: type[BaseModel], wanted: type[BaseModel], reader: str) -> Path_:
    """The one place `wanted` sits in `config_cls`; a WiringError naming `reader` otherwise."""
    paths = section_paths(config_cls, wanted)
    if len(paths) == 1:
        return paths[0]
    if not paths:
        raise WiringError(
            f"{reader} reads settings {wanted.__name__}, which config class {config_cls.__name__} does not have "
            f"(give it a field of type {wanted.__name__}, or subclass the workflow family's settings, e.g. "
            "kitchen.families.rl.RLSettings)"
        )
    where = ", ".join(".".join(path) for path in paths)
    raise WiringError(
        f"{reader} reads settings {wanted.__name__}, which config class {config_cls.__name__} has in several "
        f"places ({where}): it cannot tell which one is meant"
    )


def at(config: BaseModel, path: Path_) -> Any:
    """The value at `path` of `config`."""
    value: Any = config
    for name in path:
        value = getattr(value, name)
    return value


_LOCATIONS: dict[tuple[type[BaseModel], type[BaseModel]], Path_] = {}


def section_of(config: BaseModel, wanted: type[S]) -> S:
    """The section of type `wanted` of a config (located once per config class)."""
    key = (type(config), wanted)
    if key not in _LOCATIONS:
        _LOCATIONS[key] = locate(type(config), wanted, "a stage")
    value = at(config, _LOCATIONS[key])
    assert isinstance(value, wanted)
    return value


# -- layering values over defaults -------------------------------------------------------------


def shorthand_at(config_cls: type[BaseModel], path: Path_) -> str | None:
    """The key a plain value at `path` sets (`env=gsm8k` sets `env.name`)."""
    fields = fields_at(config_cls, path)
    return shorthand_of(fields[0][1]) if fields else None


def is_choice(config_cls: type[BaseModel], path: Path_) -> bool:
    """Whether `path` names a choice of sections by a tag (an `env`)."""
    return any(choices_of(field) is not None for _, field in fields_at(config_cls, path))


def shorthand_of(field: FieldInfo | None) -> str | None:
    """The key a plain value given for `field` sets: a choice's tag key, a section's `SHORTHAND`."""
    if field is None:
        return None
    choices = choices_of(field)
    if choices is not None:
        return choices[0]
    model = model_of(field.annotation)
    return model.SHORTHAND if model is not None and issubclass(model, Section) else None


def expand(field: FieldInfo | None, value: Any) -> Any:
    """`value` as a mapping where it is a plain value for a section with a shorthand."""
    key = shorthand_of(field)
    if key is not None and value is not None and not isinstance(value, Mapping | BaseModel | list):
        return {key: value}
    return value


def _below(field: FieldInfo | None, value: Mapping[str, Any]) -> type[BaseModel] | None:
    """The model of a mapping given for `field` (for a choice: the member its tag names)."""
    if field is None:
        return None
    choices = choices_of(field)
    if choices is not None:
        return choices[1].get(str(value.get(choices[0])))
    return model_of(field.annotation)


def merged(lower: Mapping[str, Any], upper: Mapping[str, Any], model: type[BaseModel] | None) -> dict[str, Any]:
    """`upper` over `lower`, nested mappings merged key by key (a preset's `dynamic_sampling` keeps
    the keys a YAML section does not set); a choice whose tag changes is replaced whole (the
    other member's keys would not fit)."""
    out = dict(lower)
    for key, value in upper.items():
        field = model.model_fields.get(key) if model is not None else None
        value = expand(field, value)
        below = expand(field, out.get(key))
        section = field is None or bool(members_of(field))  # a free mapping (`dict[str, float]`) is replaced
        if isinstance(below, Mapping) and isinstance(value, Mapping) and section:
            choices = choices_of(field) if field is not None else None
            if choices is not None and value.get(choices[0]) not in (None, below.get(choices[0])):
                out[key] = dict(value)
            else:
                out[key] = merged(below, value, _below(field, {**below, **value}))
        else:
            out[key] = value
    return out


def over_defaults(model: type[BaseModel], data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` with each section given as a mapping merged over that section's default, so a YAML
    `optimizer: {warmup_steps: 5}` keeps the recipe's learning rate (pydantic alone would build the
    section from its class defaults)."""
    out = dict(data)
    for name, field in model.model_fields.items():
        if name not in out:
            continue
        value = expand(field, out[name])
        if not isinstance(value, Mapping):
            out[name] = value
            continue
        default = field.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            out[name] = merged({name: default.model_dump()}, {name: value}, model)[name]
        else:
            out[name] = value
    return out


# -- typed references ---------------------------------------------------------------------------


class _Recorder:
    """Stands in for a section while a typed reference into it is read: records the path."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def __getattr__(self, name: str) -> _Recorder:
        self.parts.append(name)
        return self

    def __getitem__(self, index: int) -> _Recorder:
        self.parts.append(str(index))
        return self


def reference_path(section: type[BaseModel], read: Any) -> str:
    """The dotted path below `section` that `read` (a function of the section, `lambda c:
    c.save_every`) reads; a WiringError when it starts with no key of the section, so a typed
    reference is checked when the workflow is built."""
    recorder = _Recorder()
    read(recorder)
    if not recorder.parts or recorder.parts[0] not in section.model_fields:
        raise WiringError(
            f"a config reference into {section.__name__} must read one of its keys "
            f"({', '.join(section.model_fields)}), not {'.'.join(recorder.parts) or 'nothing'}"
        )
    return ".".join(recorder.parts)


T = TypeVar("T")


@dataclass(frozen=True)
class ConfigRef(Generic[S, T]):
    """A typed reference to a value inside one config section, for a stage that is told which one
    it reads (`OpenOtherModel(ConfigRef(WinRateSettings, lambda w: w.judge_model), ...)`): mypy
    checks the lambda against the section, building the workflow checks the config has it."""

    section: type[S]
    read: Callable[[S], T]

    @property
    def path(self) -> str:
        """The path below the section (`judge_model`)."""
        return reference_path(self.section, self.read)

    def of(self, config: BaseModel) -> T:
        """The value in `config` (a WiringError when the config has no such section)."""
        return self.read(section_of(config, self.section))

    def dotted(self, config_cls: type[BaseModel]) -> str:
        """The full dotted key in `config_cls` (`win_rate.judge_model`), for messages."""
        where = locate(config_cls, self.section, f"reference {self.path}")
        return ".".join([*where, self.path])
