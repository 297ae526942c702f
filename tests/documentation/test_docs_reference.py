"""The generated reference pages (docs/gen/reference.py) cover what the code has, and the nav hook
publishes every page: a key, command, option, public name or error class the code gains shows up
in the docs or fails here."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pytest

import kitchen
from docs.gen import hooks, reference
from kitchen.apps.cli import build_parser
from kitchen.apps.cli_tools import config_keys, format_keys
from kitchen.engine.recipe import get_recipe, recipe_names
from tests.helpers import REPO

DOCS = REPO / "docs"


@pytest.fixture(scope="module")
def config_page() -> str:
    return reference.config_reference()


def _section(page: str, heading: str) -> str:
    start = page.index(heading)
    end = page.find("\n## ", start + len(heading))
    return page[start : end if end >= 0 else None]


@pytest.mark.slow  # builds every recipe's workflows (~5 s)
def test_config_reference_lists_every_key_kitchen_keys_prints_for_every_recipe(config_page: str) -> None:
    backends = _section(config_page, "## Backend sections")
    for name in recipe_names():
        printed = [line.split()[0] for line in format_keys(get_recipe(name).config_cls).splitlines()[1:]]
        assert len(printed) > 20
        own = _section(config_page, f"## `{name}`")
        missing = [
            key
            for key in printed
            if f"| `{key}` |" not in (backends if key.split(".")[0] in reference.BACKEND_SECTIONS else own)
        ]
        assert missing == [], f"{name}: keys missing from the config reference: {missing}"


def test_every_config_key_of_every_recipe_has_a_description() -> None:
    undescribed = sorted(
        {
            f"{key} ({name})"
            for name in recipe_names()
            for key, *_, text in config_keys(get_recipe(name).config_cls)
            if not text
        }
    )
    assert undescribed == [], f"give these settings a Field(description=...): {undescribed}"


def test_config_reference_shows_bounds_defaults_and_readers(config_page: str) -> None:
    rows = {row["key"]: row for row in reference.config_rows("math_rl")}
    assert rows["rl.group_size"]["bounds"] == ">= 1"
    assert rows["optimizer.adam_beta1"]["bounds"] == ">= 0, < 1"
    assert rows["optimizer.adam_beta1"]["defined_in"] == "OptimizerSettings"
    assert rows["env.dataset"]["default"] == "'recipes/data/gsm8k_sample/train.jsonl'"  # no machine path
    assert rows["warm_start.steps"]["read_by"].startswith("workflow builder, ")  # it picks the workflow shape
    assert "warm_start" in rows["warm_start.steps"]["read_by"]
    assert rows["local.dtype"]["read_by"] == "the `local` backend"
    sl_rows = {row["key"]: row for row in reference.config_rows("sl_basic")}
    assert "load_supervised_data" in sl_rows["data.dataset"]["read_by"]
    assert "workflow builder" not in sl_rows["data.dataset"]["read_by"]
    assert sl_rows["data.dataset"]["defined_in"] == "DataSettings"
    assert str(REPO) not in config_page


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return reference._subcommands(parser)


def test_cli_reference_covers_every_subcommand_and_option() -> None:
    page = reference.cli_reference()
    for name, sub in _subcommands(build_parser()).items():
        section = _section(page, f"## `kitchen {name}`")
        options = [opt for action in sub._actions for opt in action.option_strings if opt not in ("-h", "--help")]
        assert [opt for opt in options if f"`{opt}" not in section] == [], name
        undocumented = [action.dest for action in sub._actions if not action.help]
        assert undocumented == [], f"kitchen {name}: give these arguments a help text"


def test_api_reference_documents_every_public_name_at_its_module() -> None:
    page = reference.api_reference()
    exports: dict[str, str] = vars(kitchen)["_EXPORTS"]  # read from kitchen/__init__.pyi at import
    public = [name for name in vars(kitchen)["__all__"] if name != "__version__"]
    assert sorted(exports) == sorted(public)
    for name in public:
        module = exports[name]
        assert f"::: {module}.{name}\n" in page
        assert getattr(importlib.import_module(module), name) is getattr(kitchen, name)
    assert "## Other" not in page, "group the new public name in kitchen/__init__.py's docstring"


def test_every_error_class_is_indexed_and_has_a_troubleshooting_section() -> None:
    classes = {row["name"]: row for row in reference.error_classes()}
    assert {"ConfigError", "DataError", "WiringError", "StageError", "RunDirError", "TinkerCallError"} <= set(classes)
    assert "kitchen.engine.workflow" in classes["WiringError"]["raised_in"]
    prose = (DOCS / "reference" / "troubleshooting.md").read_text()
    missing = [name for name in classes if f"\n### {name}\n" not in prose]
    assert missing == [], f"explain these errors in docs/reference/troubleshooting.md: {missing}"


def test_rl_step_dataflow_is_drawn_from_the_workflow() -> None:
    chart = reference.rl_step_dataflow("math_rl")
    assert chart.startswith("```mermaid\nflowchart TD")
    assert "do_rollouts -->|sampled_groups| compute_advantages" in chart
    assert "assemble_data -->|rl_data| rl_train_step" in chart
    assert "refresh_sampler -.->|sampling_client, next step| do_rollouts" in chart
    assert "style save_checkpoint stroke-dasharray" in chart  # runs only every save_every


def test_markers_expand_and_an_unknown_one_fails(tmp_path: Path) -> None:
    (tmp_path / "b-page.md").write_text("# Second\n")
    (tmp_path / "a-page.md").write_text("# First\n")
    assert hooks.expand("x\n<!-- gen:page-list -->\n", tmp_path) == "x\n- [First](a-page.md)\n- [Second](b-page.md)\n"
    with pytest.raises(ValueError, match="unknown docs marker <!-- gen:nope -->"):
        hooks.expand("<!-- gen:nope -->", tmp_path)


def test_a_page_dropped_into_a_nav_folder_is_added_to_its_section(tmp_path: Path) -> None:
    (tmp_path / "how-to").mkdir()
    for page in ("index.md", "known.md", "new-guide.md"):
        (tmp_path / "how-to" / page).write_text(f"# {page}\n")
    nav: list[object] = [{"Home": "index.md"}, {"How-to": ["how-to/index.md", "how-to/known.md"]}]
    hooks.complete_nav(nav, tmp_path)
    assert nav[1] == {"How-to": ["how-to/index.md", "how-to/known.md", "how-to/new-guide.md"]}


def test_every_docs_page_is_in_the_nav() -> None:
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=Loader)  # python/ tags read as None
    hooks.complete_nav(config["nav"], DOCS)
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "gen" not in p.parts}
    assert pages - hooks._listed(config["nav"]) == set()
