"""The one YAML loader: configs, run records (config.yaml, config_history.yaml), reports, serve
catalogs and eval task files all read YAML through it, so none of them can be made to expand a
few lines into gigabytes, nest until the parser overflows the stack, or silently keep the last
of two equal keys.

Errors are `yaml.MarkedYAMLError`s with the line where the problem is, so callers report them as
they report any other YAML syntax error.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_NODES = 100_000
"""How many values a document may expand to, aliases (`*name`) counted at every use: a few
nested aliases can expand nine lines into billions of nodes (a "YAML bomb")."""

MAX_DEPTH = 100
"""How deeply collections may nest. PyYAML's scanner slows down quadratically with nesting (a
thousand `[` take seconds) and its composer recurses once per level, so the scanner stops here."""

MERGE_TAG = "tag:yaml.org,2002:merge"


class BoundedYAMLError(yaml.MarkedYAMLError):
    """A well-formed document kitchen refuses: too large once aliases are expanded, nested too
    deeply, or a key given twice in one mapping."""


def _refuse(problem: str, node: yaml.Node | None, mark: yaml.Mark | None = None) -> BoundedYAMLError:
    return BoundedYAMLError(problem=problem, problem_mark=node.start_mark if node is not None else mark)


class _Loader(yaml.SafeLoader):
    """SafeLoader whose scanner refuses to nest collections deeper than MAX_DEPTH."""

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise _refuse(f"nested more than {MAX_DEPTH} levels deep (refused)", None, self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def add_indent(self, column: int) -> bool:
        if len(self.indents) >= MAX_DEPTH:
            raise _refuse(f"nested more than {MAX_DEPTH} levels deep (refused)", None, self.get_mark())
        return bool(super().add_indent(column))


def _expanded_size(root: yaml.Node) -> int:
    """Values in the document with every alias expanded, stopping a little above MAX_NODES."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = 1  # a recursive alias counts once
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(item) for item in node.value)
        else:
            total = 1
        sizes[id(node)] = min(total, MAX_NODES + 1)
        return sizes[id(node)]

    return size(root)


def _check_duplicate_keys(root: yaml.Node) -> None:
    """Refuse a mapping holding one key twice, naming both lines (merge keys `<<` may override)."""
    seen_nodes: set[int] = set()

    def walk(node: yaml.Node) -> None:
        if id(node) in seen_nodes:
            return
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], yaml.Node] = {}
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != MERGE_TAG:
                    key = (key_node.tag, key_node.value)
                    if key in first:
                        line = first[key].start_mark.line + 1
                        raise _refuse(
                            f"key {key_node.value!r} given twice (line {line} and line {key_node.start_mark.line + 1})",
                            key_node,
                        )
                    first[key] = key_node
                walk(key_node)
                walk(value_node)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item)

    walk(root)


def load_yaml_document(text: str) -> tuple[Any, yaml.Node | None]:
    """The document of `text` and its node tree (for line numbers); None, None when empty."""
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None
        if _expanded_size(root) > MAX_NODES:
            raise _refuse(f"expands to more than {MAX_NODES} values through aliases (refused)", root)
        _check_duplicate_keys(root)
        return loader.construct_document(root), root
    except RecursionError:
        # The parser and constructor recurse once per level of nesting: say so, never crash.
        raise _refuse(f"nested more than {MAX_DEPTH} levels deep (refused)", None) from None
    finally:
        loader.dispose()


def load_yaml(text: str) -> Any:
    """`yaml.safe_load`, bounded: see the module docstring."""
    return load_yaml_document(text)[0]
