"""Reference pages written from the code at build time, so they cannot drift from it.

Each function returns Markdown for one `<!-- gen:NAME -->` marker (`docs/gen/hooks.py` puts it
in place): the config keys of every recipe and backend (from the settings models, with the
stages that read them), the CLI (from its argument parser), the public API (mkdocstrings
directives for `kitchen.__all__`), the error classes the code defines, and one RL step's
dataflow (from the workflow `kitchen show math_rl` prints).
"""

from __future__ import annotations

import argparse
import ast
import builtins
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

REPO = Path(__file__).resolve().parents[2]
BACKEND_SECTIONS = ("local", "noop", "tinker")
ERROR_PACKAGES = ("kitchen", "train_core", "adapters", "recipes")
MAX_READERS_LISTED = 6
_BOUND_NAMES = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "multiple_of": "multiple of", "min_length": "min length"}


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


# --- config reference -----------------------------------------------------------------------


def _holder(model: type[BaseModel], dotted: str) -> tuple[type[BaseModel], FieldInfo] | None:
    """The settings model holding a dotted config key (`local.vllm.dtype`) and its field; for a
    choice (`env.max_turns`), the first member that has it."""
    from kitchen.engine.config.sections import fields_at

    found = fields_at(model, tuple(dotted.split(".")))
    return found[0] if found else None


def _field_at(model: type[BaseModel], dotted: str) -> FieldInfo | None:
    """The pydantic field of a dotted config key."""
    found = _holder(model, dotted)
    return found[1] if found is not None else None


def _constraints(annotation: Any) -> Iterator[Any]:
    """Constraint objects (annotated_types.Ge, ...) anywhere inside an annotation."""
    if get_origin(annotation) is Annotated:
        _, *metadata = get_args(annotation)
        for item in metadata:
            yield from getattr(item, "metadata", [item])
    for arg in get_args(annotation):
        yield from _constraints(arg)


def bounds(info: FieldInfo) -> str:
    """`>= 1, <= 2` from a field's constraints (its own and its type's)."""
    found = []
    for item in [*info.metadata, *_constraints(info.annotation)]:
        for attribute, symbol in _BOUND_NAMES.items():
            value = getattr(item, attribute, None)
            if value is not None and not isinstance(value, type):
                found.append(f"{symbol} {value}")
    return ", ".join(dict.fromkeys(found))


def _readers(recipe: Any) -> dict[str, set[str]]:
    """Section path (dotted; a top-level key for the config's own keys) -> who reads it, over the
    recipe's default config and its shipped configs (each may build another workflow shape): the
    workflow builder where it picks the shape from that section, and the stages by name."""
    from kitchen.engine.config.loading import load_config
    from kitchen.engine.config.sections import locate
    from kitchen.engine.recipe import shipped_configs

    config_cls = recipe.config_cls
    readers: dict[str, set[str]] = defaultdict(set)

    def read(reader: str, model: type[BaseModel]) -> None:
        path = locate(config_cls, model, reader)
        keys = [".".join(path)] if path else [name for name in model.model_fields]
        for key in keys:
            readers[key].add(reader)

    for model in getattr(recipe.workflow, "sections", ()):
        read("workflow builder", model)
    for config_file in [None, *shipped_configs(recipe.name)]:
        workflow = recipe.workflow(load_config(config_cls, config_file, []))
        for reader, model in workflow.config_sections():
            read(reader.split(" ", 1)[1].strip("'"), model)
    return readers


def _read_by(readers: dict[str, set[str]], key: str) -> str:
    """Who reads `key`: the readers of the innermost section holding it."""
    parts = key.split(".")
    for depth in range(len(parts), 0, -1):
        names = readers.get(".".join(parts[:depth]))
        if names:
            builder = ["workflow builder"] if "workflow builder" in names else []
            stages = sorted(names - {"workflow builder"})
            if len(stages) > MAX_READERS_LISTED:
                stages = [f"{len(stages)} stages"]
            return ", ".join(builder + stages)
    return "the recipe's own code (no stage declares it)"


def _defined_in(config_cls: type[BaseModel], key: str) -> str:
    """The settings class that declares `key` (the most basic one in the MRO of its holder)."""
    found = _holder(config_cls, key)
    holder = found[0] if found is not None else config_cls
    name = key.rsplit(".", 1)[-1]
    for cls in reversed(holder.__mro__):
        if name in getattr(cls, "__annotations__", {}):
            return cls.__name__ if cls is not config_cls else f"{cls.__module__}.{cls.__name__}"
    return holder.__name__


def _default(text: str) -> str:
    return text.replace(f"{REPO}/", "")


def config_rows(recipe_name: str) -> list[dict[str, str]]:
    """One row per key `kitchen keys RECIPE` prints: key, type, default, bounds, description and
    the stages that read it."""
    from kitchen.apps.cli_tools import config_keys
    from kitchen.engine.recipe import get_recipe

    recipe = get_recipe(recipe_name)
    readers = _readers(recipe)
    rows = []
    for key, type_, default, description in config_keys(recipe.config_cls):
        info = _field_at(recipe.config_cls, key)
        top = key.split(".", 1)[0]
        read_by = f"the `{top}` backend" if top in BACKEND_SECTIONS else _read_by(readers, key)
        rows.append(
            {
                "key": key,
                "type": type_,
                "default": _default(default),
                "bounds": bounds(info) if info is not None else "",
                "description": description,
                "read_by": read_by,
                "defined_in": _defined_in(recipe.config_cls, key),
            }
        )
    return rows


def _table(rows: list[dict[str, str]], read_by: bool) -> list[str]:
    header = "| key | type | default | bounds | description |" + (" defined in | read by |" if read_by else "")
    lines = [header, "|" + " --- |" * (7 if read_by else 5)]
    for row in rows:
        cells = [
            _code(row["key"]),
            _code(row["type"]),
            _code(row["default"]),
            row["bounds"],
            _cell(row["description"]),
        ]
        if read_by:
            cells += [_code(row["defined_in"]), _cell(row["read_by"])]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def config_reference() -> str:
    """Every recipe's keys (without the backend sections, listed once at the end)."""
    from kitchen.engine.recipe import get_recipe, recipe_names

    lines: list[str] = []
    backend_rows: dict[str, dict[str, str]] = {}
    for name in recipe_names():
        rows = config_rows(name)
        own = [row for row in rows if row["key"].split(".", 1)[0] not in BACKEND_SECTIONS]
        backend_rows.update({row["key"]: row for row in rows if row not in own})
        lines += [
            f"## `{name}`",
            "",
            _cell(get_recipe(name).description) + f". `kitchen keys {name}` prints the same keys; "
            "the backend sections are [below](#backend-sections).",
            "",
            *_table(own, read_by=True),
            "",
        ]
    lines += [
        "## Backend sections",
        "",
        "Every recipe has one section per registered backend; only the section of the backend "
        "a run uses (`backend: NAME`) is read, by that backend.",
        "",
        *_table(list(backend_rows.values()), read_by=False),
        "",
    ]
    return "\n".join(lines)


def config_renames() -> str:
    """The kitchen 0.2 flat keys and their 0.3 places, over every recipe (a key that moved to
    different places in different recipes gets one row per place, naming the recipes)."""
    from kitchen.engine.config.renames import dotted, renames
    from kitchen.engine.recipe import get_recipe, recipe_names

    names = recipe_names()
    places: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name in names:
        for old_path, new_path in renames(get_recipe(name).config_cls).items():
            places[(dotted(old_path), dotted(new_path))].append(name)
    lines = ["| 0.2 key | 0.3 key | recipes |", "| --- | --- | --- |"]
    for (old, new), used in sorted(places.items()):
        unused = [name for name in names if name not in used]
        if len(unused) < len(used):
            where = "all" + (" but " + ", ".join(f"`{name}`" for name in unused) if unused else "")
        else:
            where = ", ".join(f"`{name}`" for name in used)
        lines.append(f"| `{old}` | `{new}` | {where} |")
    return "\n".join(lines)


# --- CLI reference --------------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_of(parser: argparse.ArgumentParser, name: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name:
                    return choice.help or ""
    return ""


def _argument_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        metavar = str(action.metavar or "")
        name = ", ".join(action.option_strings) or metavar or action.dest
        if action.option_strings and action.nargs != 0:
            name += f" {metavar or action.dest.upper()}"
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS) else f"`{_default(str(default))}`"
        if action.choices and not isinstance(action, argparse._SubParsersAction):
            shown = (shown + " " if shown else "") + "one of " + ", ".join(f"`{c}`" for c in action.choices)
        rows.append(f"| `{_cell(str(name))}` | {shown} | {_cell(action.help or '')} |")
    return rows


def cli_reference() -> str:
    """Every `kitchen` subcommand: its usage line, help and arguments."""
    from kitchen.apps.cli import build_parser

    parser = build_parser()
    lines = [f"`kitchen`: {parser.description}.", "", "| argument | default | meaning |", "| --- | --- | --- |"]
    lines += _argument_rows(parser)
    for name, sub in sorted(_subcommands(parser).items()):
        usage = " ".join(sub.format_usage().split()).removeprefix("usage: ")
        lines += ["", f"## `kitchen {name}`", "", _help_of(parser, name) + ".", "", "```text", usage, "```", ""]
        rows = _argument_rows(sub)
        if rows:
            lines += ["| argument | default | meaning |", "| --- | --- | --- |", *rows]
    return "\n".join(lines)


# --- API reference --------------------------------------------------------------------------


STUB = REPO / "kitchen" / "__init__.pyi"
"""Where kitchen's public names are written, grouped under `# comment` lines."""


def api_groups() -> dict[str, list[tuple[str, str]]]:
    """(name, module) of every public name, grouped as the stub's comment lines group them."""
    groups: dict[str, list[tuple[str, str]]] = {}
    group = "Other"
    for line in STUB.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^# ([a-z][\w ,:]+)$", line)
        if heading:
            group = heading.group(1)[0].upper() + heading.group(1)[1:]
        imported = re.match(r"^from ([\w.]+) import (\w+) as (\w+)$", line)
        if imported and imported.group(2) == imported.group(3):
            groups.setdefault(group, []).append((imported.group(2), imported.group(1)))
    return groups


def api_reference() -> str:
    """mkdocstrings directives for every public name, at its defining module."""
    lines: list[str] = []
    for group, names in api_groups().items():
        lines += [f"## {group}", ""]
        for name, module in names:
            lines += [f"::: {module}.{name}", ""]
    return "\n".join(lines)


# --- error index ----------------------------------------------------------------------------


TOP_LEVEL_CLASS = re.compile(r"^class (\w+)\(([^)]*)\)", re.MULTILINE)


def _sources() -> Iterator[tuple[str, Path, str]]:
    """(module, path, text) of every Python file in kitchen's packages."""
    for package in ERROR_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            yield ".".join(path.relative_to(REPO).with_suffix("").parts), path, path.read_text(encoding="utf-8")


def _docstring(path: Path, name: str) -> str:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return (ast.get_docstring(node) or "").split("\n\n")[0].replace("\n", " ")
    return ""


def error_classes() -> list[dict[str, str]]:
    """Every exception class defined at the top of a module of kitchen's packages (read from the
    source, so optional dependencies need not import): name, module, bases, first docstring line
    and the modules that construct it."""
    exceptions = {name for name, obj in vars(builtins).items() if isinstance(obj, type) and issubclass(obj, Exception)}
    sources = list(_sources())
    defs = [
        (module, path, name, [base.strip().rsplit(".", 1)[-1] for base in bases.split(",") if base.strip()])
        for module, path, text in sources
        for name, bases in TOP_LEVEL_CLASS.findall(text)
        if not name.startswith("_")
    ]
    found: dict[str, tuple[str, Path, list[str]]] = {}
    changed = True
    while changed:
        changed = False
        for module, path, name, bases in defs:
            if name not in found and any(base in exceptions or base in found for base in bases):
                found[name] = (module, path, bases)
                changed = True
    raised: dict[str, set[str]] = defaultdict(set)
    constructed = re.compile(rf"(?<!class )\b({'|'.join(found)})\(")
    for module, _, text in sources:
        for name in constructed.findall(text):
            raised[name].add(module)
    return [
        {
            "name": name,
            "module": module,
            "base": ", ".join(bases),
            "doc": _docstring(path, name),
            "raised_in": ", ".join(sorted(raised[name])),
        }
        for name, (module, path, bases) in sorted(found.items())
    ]


def error_index() -> str:
    lines = ["| error | subclass of | defined in | what it means | raised in |", "| --- | --- | --- | --- | --- |"]
    for row in error_classes():
        anchor = row["name"].lower()
        lines.append(
            f"| [`{row['name']}`](#{anchor}) | `{row['base']}` | `{row['module']}` | {_cell(row['doc'])} | "
            f"{_cell(row['raised_in']) or '(a base class)'} |"
        )
    return "\n".join(lines)


# --- one RL step's dataflow -----------------------------------------------------------------


def _flatten(nodes: Any, condition: str = "") -> Iterator[tuple[Any, str]]:
    from kitchen.engine.stage import Stage
    from kitchen.engine.workflow import Loop, Parallel, When

    for node in nodes:
        if isinstance(node, Stage):
            yield node, condition
        elif isinstance(node, When):
            yield from _flatten(node.body, getattr(node.predicate, "__name__", node.name))
        elif isinstance(node, Loop):
            yield from _flatten(node.body, condition)
        elif isinstance(node, Parallel):
            for branch in node.branches:
                yield from _flatten(branch, condition)


def rl_step_dataflow(recipe_name: str = "math_rl") -> str:
    """A mermaid flowchart of the step loop of `kitchen show RECIPE`: one node per stage (dashed
    when it runs only sometimes), one edge per state key from its last writer to each reader;
    keys written before the loop come from a `setup` node."""
    from kitchen.engine.config.loading import load_config
    from kitchen.engine.recipe import get_recipe
    from kitchen.engine.workflow import Loop

    recipe = get_recipe(recipe_name)
    workflow = recipe.workflow(load_config(recipe.config_cls, None, []))
    loop = next(node for node in workflow.steps if isinstance(node, Loop) and node.step)
    lines = ["```mermaid", "flowchart TD", '  setup(["setup stages (before the loop)"])']
    writer: dict[str, str] = {}
    from_setup: list[tuple[str, str]] = []
    for stage, condition in _flatten(loop.body):
        node = stage.name
        label = f"{node}<br/><small>{type(stage).__name__}</small>"
        if condition:
            label += f"<br/><i>when: {condition}</i>"
        lines.append(f'  {node}["{label}"]')
        for read in stage.spec.reads:
            source = writer.get(read.key, "setup")
            lines.append(f"  {source} -->|{read.key}| {node}")
            if source == "setup":
                from_setup.append((read.key, node))
        for write in stage.spec.writes:
            writer[write.key] = node
        if condition:
            lines.append(f"  style {node} stroke-dasharray: 5 5")
    # A key read before the loop's own stage rewrites it comes from that stage on later steps.
    lines += [f"  {writer[key]} -.->|{key}, next step| {node}" for key, node in from_setup if key in writer]
    lines.append("```")
    return "\n".join(lines)


# --- page lists -----------------------------------------------------------------------------


def page_title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem.replace("-", " ").capitalize()


def page_list(folder: Path) -> str:
    """A bullet list linking every page of `folder` but its index, by title."""
    pages = sorted(p for p in folder.glob("*.md") if p.name != "index.md")
    return "\n".join(f"- [{page_title(p)}]({p.name})" for p in pages)
