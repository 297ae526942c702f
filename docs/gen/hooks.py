"""mkdocs hooks (`hooks:` in mkdocs.yml): generated content, and a nav that takes new pages.

- `on_config`: every Markdown page in a nav section's folder that the nav does not list is
  appended to that section, so a page dropped into `docs/how-to/` or `docs/reference/` is
  published (and linked from its folder's index) without editing mkdocs.yml.
- `on_page_markdown`: `<!-- gen:NAME -->` markers are replaced by what `docs/gen/reference.py`
  writes from the code; an unknown marker fails the build.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `mkdocs` runs from its own script folder: make the checkout importable
    sys.path.insert(0, str(REPO))

from docs.gen import reference  # noqa: E402

MARKER = re.compile(r"<!-- gen:([\w-]+) -->")


def _generators(page_dir: Path) -> dict[str, Callable[[], str]]:
    return {
        "config-reference": reference.config_reference,
        "config-renames": reference.config_renames,
        "cli-reference": reference.cli_reference,
        "api-reference": reference.api_reference,
        "error-index": reference.error_index,
        "rl-step-dataflow": reference.rl_step_dataflow,
        "page-list": lambda: reference.page_list(page_dir),
        "contributing": lambda: root_page("CONTRIBUTING.md"),
    }


def root_page(name: str) -> str:
    """A Markdown file of the repository root, its links made relative to docs/ (where the page
    that shows it sits)."""
    text = (REPO / name).read_text(encoding="utf-8")
    text = text.replace("](docs/", "](").replace("](CHANGELOG.md)", "](changelog.md)")
    return text.replace("](CONTRIBUTING.md)", "](contributing.md)").replace("](README.md)", "](index.md)")


def expand(markdown: str, page_dir: Path) -> str:
    """`markdown` with each marker replaced by its generated text."""
    generators = _generators(page_dir)

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in generators:
            raise ValueError(f"unknown docs marker <!-- gen:{name} --> (known: {', '.join(sorted(generators))})")
        return generators[name]()

    return MARKER.sub(replace, markdown)


def _listed(items: list[Any]) -> set[str]:
    found: set[str] = set()
    for item in items:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            found |= _listed(value)
        elif isinstance(value, str):
            found.add(value)
    return found


def complete_nav(nav: list[Any], docs_dir: Path) -> None:
    """Append to each nav section the pages of its folder that it does not list yet."""
    listed = _listed(nav)
    for item in nav:
        if not isinstance(item, dict):
            continue
        entries = next(iter(item.values()))
        if not isinstance(entries, list):
            continue
        folders = {Path(entry).parent for entry in entries if isinstance(entry, str)}
        for folder in sorted(folders):
            for page in sorted((docs_dir / folder).glob("*.md")):
                relative = page.relative_to(docs_dir).as_posix()
                if relative not in listed:
                    entries.append(relative)
                    listed.add(relative)


def on_config(config: Any) -> Any:
    if config["nav"]:
        complete_nav(config["nav"], Path(config["docs_dir"]))
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    page_dir = (Path(config["docs_dir"]) / page.file.src_uri).parent
    return expand(markdown, page_dir)
