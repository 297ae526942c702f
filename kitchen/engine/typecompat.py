"""Whether a value of one annotated type may flow where another is expected, for the workflow
validator: the type a producer writes against the type a consumer reads (and a recipe's config
field against a stage's setting).

Deliberately a little lenient where Python's typing cannot be decided at run time (an `Any`, a
type variable, a callable's signature); strict on what matters for wiring: a different class, a
container of different items, a protocol whose members the class lacks, a literal outside the
declared set.
"""

from __future__ import annotations

import builtins
import collections.abc
import types
import typing
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin


class Deferred:
    """A type named in an annotation but imported only for type checkers (`torch.Tensor` under
    `TYPE_CHECKING`, so that validating a workflow never imports torch): compared by its dotted
    name with the classes it may stand for."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attribute: str) -> Deferred:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return Deferred(f"{self.name}.{attribute}")

    def __getitem__(self, item: Any) -> Deferred:
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Deferred) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return self.name

    def matches(self, other: Any) -> bool:
        if isinstance(other, Deferred):
            return other.name == self.name
        qualified = f"{getattr(other, '__module__', '')}.{getattr(other, '__qualname__', '')}"
        short = self.name.rsplit(".", 1)[-1]
        return qualified == self.name or getattr(other, "__qualname__", None) == short


class LenientNames(dict[str, Any]):
    """Names for evaluating string annotations: the given namespaces (module globals, first
    first) and the builtins, and a `Deferred` for any other name (one imported only under
    TYPE_CHECKING)."""

    def __init__(self, *namespaces: dict[str, Any]) -> None:
        super().__init__()
        self._namespaces = namespaces

    def __missing__(self, key: str) -> Any:
        for namespace in self._namespaces:
            if key in namespace:
                return namespace[key]
        found = getattr(builtins, key, None)
        return found if found is not None else Deferred(key)


def strip_annotated(tp: Any) -> Any:
    """The type inside `Annotated[...]` (the markers are not part of the type)."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _is_protocol(tp: Any) -> bool:
    return isinstance(tp, type) and bool(getattr(tp, "_is_protocol", False))


def _protocol_members(protocol: type) -> set[str]:
    members: set[str] = set()
    for klass in protocol.__mro__:
        if klass in (object, typing.Generic) or not getattr(klass, "_is_protocol", False):
            continue
        members |= {name for name in vars(klass) if not name.startswith("_")}
        members |= set(getattr(klass, "__annotations__", {}))
    return members


def assignable(source: Any, target: Any) -> bool:
    """Whether a value declared as `source` may be passed where `target` is declared."""
    source, target = strip_annotated(source), strip_annotated(target)
    if target is Any or target is object or source is Any or source is target:
        return True
    if isinstance(source, TypeVar) or isinstance(target, TypeVar):
        return True
    if isinstance(source, Deferred):
        return source.matches(get_origin(target) or target) or _is_protocol(target)
    if isinstance(target, Deferred):
        return target.matches(get_origin(source) or source)
    if _is_union(source):
        return all(assignable(member, target) for member in get_args(source))
    if _is_union(target):
        return any(assignable(source, member) for member in get_args(target))
    if get_origin(target) is Literal:
        return get_origin(source) is Literal and set(get_args(source)) <= set(get_args(target))
    if get_origin(source) is Literal:
        return all(assignable(type(value), target) for value in get_args(source))
    if source is None or source is type(None):
        return target is None or target is type(None)
    source_class = get_origin(source) or source
    target_class = get_origin(target) or target
    if target_class is collections.abc.Callable or source_class is collections.abc.Callable:
        return callable(source_class) and (target_class is collections.abc.Callable or _is_protocol(target_class))
    if not isinstance(source_class, type) or not isinstance(target_class, type):
        return source == target
    if _is_protocol(target_class) and not issubclass_safe(source_class, target_class):
        present = set(dir(source_class)) | set(getattr(source_class, "__annotations__", {}))
        if not _protocol_members(target_class) <= present:
            return False
    elif not issubclass_safe(source_class, target_class):
        return False
    return _arguments_assignable(get_args(source), get_args(target), target_class)


def issubclass_safe(source: type, target: type) -> bool:
    try:
        return issubclass(source, target)
    except TypeError:  # a protocol that is not runtime-checkable
        return source is target


def _arguments_assignable(source_args: tuple[Any, ...], target_args: tuple[Any, ...], target_class: type) -> bool:
    """Container item types, covariantly (a wiring check, not a variance proof)."""
    if not source_args or not target_args:
        return True
    if target_class is tuple:
        if len(target_args) == 2 and target_args[1] is Ellipsis:
            items = source_args[:1] if len(source_args) == 2 and source_args[1] is Ellipsis else source_args
            return all(assignable(item, target_args[0]) for item in items)
        if len(source_args) != len(target_args):
            return False
    if len(source_args) != len(target_args):
        return True  # e.g. a Mapping subclass with its own parameters: not decidable here
    return all(assignable(s, t) for s, t in zip(source_args, target_args, strict=True))


def type_name(tp: Any) -> str:
    """A short readable name: `list[Datum]`, `SamplingClient | None`."""
    tp = strip_annotated(tp)
    if tp is type(None) or tp is None:
        return "None"
    if _is_union(tp):
        return " | ".join(type_name(arg) for arg in get_args(tp))
    if get_origin(tp) is Literal:
        return "Literal[" + ", ".join(repr(arg) for arg in get_args(tp)) + "]"
    origin = get_origin(tp)
    if origin is not None:
        args = get_args(tp)
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join('...' if a is Ellipsis else type_name(a) for a in args)}]" if args else name
    if tp is Any:
        return "Any"
    if isinstance(tp, Deferred):
        return tp.name.rsplit(".", 1)[-1]
    return getattr(tp, "__name__", str(tp))
