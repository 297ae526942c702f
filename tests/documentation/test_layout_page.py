"""docs/explanation/layout.md is generated from the code (`python -m docs.gen.layout --write`):
it fails here when a package, its docstring or a layer changed and the page was not rewritten."""

from __future__ import annotations

from docs.gen import layout


def test_the_layout_page_is_what_the_code_generates() -> None:
    assert layout.PAGE.read_text(encoding="utf-8") == layout.render(), "run: python -m docs.gen.layout --write"


def test_the_page_names_every_kitchen_package_and_layer() -> None:
    text = layout.render()
    packages = ("kitchen/engine/", "kitchen/families/rl/", "kitchen/apps/serve/", "kitchen/integrations/", "sandbox/")
    for package in packages:
        assert f"`{package}`" in text
    assert "1. `kitchen.engine`" in text
