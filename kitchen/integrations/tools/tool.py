"""A tool is a typed Python function (sync or async). Its JSON schema comes from its signature
and docstring through pydantic, so what the model is told and what a call is checked against are
one definition: a call whose arguments do not validate is answered with the validation error,
as is one that raises or runs past its timeout. A tool never crashes a rollout."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from train_core.renderers.tool_declarations import ToolSpec

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s*(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


ResultKind = Literal["ok", "invalid", "failed"]
"""`invalid`: the call itself was wrong (an unknown tool, arguments that do not validate);
`failed`: a valid call whose tool raised or timed out."""


@dataclass(frozen=True)
class ToolResult:
    """What one call answered: the text shown to the model, and how the call went."""

    text: str
    kind: ResultKind
    latency_s: float

    @property
    def error(self) -> bool:
        return self.kind != "ok"


@dataclass(frozen=True)
class Tool:
    """A callable the model may use. `arguments` is the pydantic model its calls are validated
    against (and its schema what the model is shown), or, for a tool defined elsewhere (an MCP
    server's), that JSON schema itself; `timeout_s` bounds one call."""

    name: str
    description: str
    fn: Callable[..., Any]
    arguments: type[BaseModel] | dict[str, Any]
    timeout_s: float = 10.0

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None = None, timeout_s: float = 10.0) -> Tool:
        """A tool from `fn`'s signature (every parameter annotated) and docstring (its first
        paragraph describes the tool; an `Args:` section describes the parameters)."""
        tool_name = name or fn.__name__
        description, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
        hints = inspect.get_annotations(fn, eval_str=True)
        fields: dict[str, Any] = {}
        for parameter in inspect.signature(fn).parameters.values():
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise TypeError(f"tool {tool_name!r}: *args and **kwargs have no schema; name every parameter")
            if parameter.name not in hints:
                raise TypeError(f"tool {tool_name!r}: parameter {parameter.name!r} needs a type annotation")
            default = ... if parameter.default is parameter.empty else parameter.default
            fields[parameter.name] = (
                hints[parameter.name],
                Field(default, description=arg_docs.get(parameter.name)),
            )
        model = create_model(f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        return cls(tool_name, description, fn, model, timeout_s)

    @property
    def spec(self) -> ToolSpec:
        """The tool as an OpenAI-style function spec, the form chat templates declare."""
        function: dict[str, Any] = {"name": self.name}
        if self.description:
            function["description"] = self.description
        schema = self.arguments if isinstance(self.arguments, dict) else self.arguments.model_json_schema()
        function["parameters"] = strip_titles(schema)
        return ToolSpec(type="function", function=function)  # type: ignore[typeddict-item]

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        """Validate, run (a sync function in a worker thread), and answer as text; every failure
        is an error result naming the tool."""
        start = time.perf_counter()
        validated = self.validate(arguments)
        if isinstance(validated, str):
            return self._error(validated, start, "invalid")
        try:
            async with asyncio.timeout(self.timeout_s):
                if inspect.iscoroutinefunction(self.fn):
                    value = await self.fn(**validated)
                else:
                    # A thread cannot be stopped: past the timeout its answer is ignored.
                    value = await asyncio.to_thread(self.fn, **validated)
        except TimeoutError:
            return self._error(f"{self.name} timed out after {self.timeout_s:g} s", start, "failed")
        except Exception as error:
            return self._error(f"{self.name} failed: {type(error).__name__}: {error}", start, "failed")
        return ToolResult(as_text(value), "ok", time.perf_counter() - start)

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any] | str:
        """The validated keyword arguments, or what is wrong with them."""
        if isinstance(self.arguments, dict):
            import jsonschema  # installed with the `mcp` extra, the only source of schema-defined tools

            problems = [
                f"{'.'.join(map(str, e.absolute_path)) or 'arguments'}: {e.message}"
                for e in jsonschema.Draft202012Validator(self.arguments).iter_errors(arguments)
            ]
            return f"invalid arguments for {self.name}: {'; '.join(problems)}" if problems else dict(arguments)
        try:
            validated = self.arguments.model_validate(arguments)
        except ValidationError as error:
            problems = [f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in error.errors()]
            return f"invalid arguments for {self.name}: {'; '.join(problems)}"
        return {key: getattr(validated, key) for key in type(validated).model_fields}

    def _error(self, text: str, start: float, kind: ResultKind) -> ToolResult:
        return ToolResult(f"Error: {text}", kind, time.perf_counter() - start)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(*, name: str | None = None, timeout_s: float = 10.0) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None, timeout_s: float = 10.0
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator: `@tool` or `@tool(name=..., timeout_s=...)` turns a function into a `Tool`."""
    if fn is not None:
        return Tool.from_function(fn)
    return lambda f: Tool.from_function(f, name=name, timeout_s=timeout_s)


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph, and each `name: text` (or `name (type): text`) entry of an `Args:`
    section (continuation lines joined; a blank line or a dedent ends the section)."""
    lines = doc.splitlines()
    header = next((i for i, line in enumerate(lines) if _ARGS_HEADER.match(line)), len(lines))
    paragraph: list[str] = []
    for line in lines[:header]:
        if not line.strip():
            break
        paragraph.append(line.strip())
    arg_docs: dict[str, str] = {}
    base: int | None = None
    current: str | None = None
    for line in lines[header + 1 :]:
        indent = len(line) - len(line.lstrip())
        if not line.strip() or (base is not None and indent < base):
            break
        base = indent if base is None else base
        match = _ARG_LINE.match(line)
        if indent == base and match:
            current = match.group(1)
            arg_docs[current] = match.group(3).strip()
        elif current is not None:
            arg_docs[current] = f"{arg_docs[current]} {line.strip()}"
    return " ".join(paragraph), arg_docs


def strip_titles(schema: Any) -> Any:
    """A pydantic JSON schema without its generated `title`s (noise in a prompt); a property
    that is itself named `title` is kept."""
    if isinstance(schema, list):
        return [strip_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    cleaned: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            cleaned[key] = {name: strip_titles(sub) for name, sub in value.items()}
        else:
            cleaned[key] = strip_titles(value)
    return cleaned


def as_text(value: Any) -> str:
    """A tool's return value as the model sees it: a string as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value, ensure_ascii=False, default=str)
