"""docs/explanation/layout.md, generated from the code: every package of the repository with the
first sentence of its docstring, and the import directions `kitchen.layers` declares.

    python -m docs.gen.layout --write     # rewrite the page
    python -m docs.gen.layout --check     # exit 1 when the page differs (tests/documentation does it)
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kitchen import layers  # noqa: E402

PAGE = REPO / "docs" / "explanation" / "layout.md"
DEPTH = {"kitchen": 3}
"""How deep each package's tree is listed (default 2: the package and its subpackages)."""


def purpose(package: Path) -> str:
    """The first sentence of the package's docstring (a package without one fails the build)."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")))
    if not doc:
        raise ValueError(f"{package.relative_to(REPO)}/__init__.py has no docstring: say what the package holds")
    text = " ".join(doc.split())
    match = re.match(r"(.+?\.)(\s|$)", text)
    return (match.group(1) if match else text).rstrip(".") + "."


def packages(top: str) -> list[Path]:
    root = REPO / top
    depth = DEPTH.get(top, 2)
    found = [
        init.parent
        for init in root.rglob("__init__.py")
        if len(init.parent.relative_to(REPO).parts) <= depth and "__pycache__" not in init.parts
    ]
    return sorted(found, key=lambda path: path.relative_to(REPO).parts)


def rows(top: str) -> list[str]:
    """One table row per package under `top`, the package itself first."""
    return [f"| `{package.relative_to(REPO)}/` | {purpose(package)} |" for package in packages(top)]


def render() -> str:
    tops = sorted(layers.REPOSITORY, key=lambda name: len(layers.REPOSITORY[name]))
    out = [
        "# Code layout",
        "",
        "<!-- Generated from the package docstrings and kitchen/layers.py by `python -m docs.gen.layout --write`;",
        "     tests/documentation/test_layout_page.py fails when this page and the code disagree. -->",
        "",
        "Every package of the repository, with what it holds (its docstring's first sentence). Imports",
        "run one way; `tests/architecture/test_layers.py` enforces it, imports inside functions and",
        "under `TYPE_CHECKING` included, and finds no import cycle.",
        "",
        "## The repository",
        "",
        "| package | may import |",
        "| --- | --- |",
    ]
    for top in tops:
        allowed = ", ".join(f"`{name}`" for name in layers.REPOSITORY[top]) or "nothing of the repository"
        out.append(f"| `{top}` | {allowed} |")
    out += ["", "## Packages", "", "| package | what it holds |", "| --- | --- |"]
    for top in tops:
        out += rows(top)
    out += [
        "",
        "## Inside kitchen",
        "",
        "kitchen's packages in layers, bottom up; a package imports its own layer and those below it,",
        "never one above:",
        "",
    ]
    for index, group in enumerate(layers.KITCHEN):
        out.append(f"{index + 1}. " + ", ".join(f"`{package}`" for package in group))
    out += [
        "",
        f"At most {layers.LOOSE_MODULES_MAX} modules sit directly in `kitchen/`: the public API",
        "(`kitchen/__init__.py`), these layers (`kitchen/layers.py`) and the table of module paths that",
        "moved (`kitchen/moved.py`).",
        "Where a new loss, estimator, environment, recipe, backend or app goes: [Contributing](../contributing.md).",
        "",
    ]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    text = render()
    if "--write" in argv:
        PAGE.write_text(text, encoding="utf-8")
        return 0
    if "--check" in argv:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            print(f"{PAGE.relative_to(REPO)} is out of date: run python -m docs.gen.layout --write", file=sys.stderr)
            return 1
        return 0
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
