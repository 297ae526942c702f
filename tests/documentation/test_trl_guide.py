"""The TRL porting guide (docs/how-to/from-trl.md) against TRL and kitchen: every field of TRL's
configs has a row, every kitchen key a row names exists in its recipe, and the committed page is
what its generator writes from the table."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import trl  # the test extra pins trl==1.16.*

from docs.gen import trl_guide
from docs.gen.trl_fields import BASES, RECIPES, ROWS, place, resolve
from kitchen.apps.cli_tools import config_keys
from kitchen.engine.recipe import get_recipe


def _config_class(name: str) -> type:
    if name == "GKDConfig":
        with warnings.catch_warnings():  # TRL warns that its experimental package may change
            warnings.simplefilter("ignore")
            from trl.experimental.gkd import GKDConfig
        return GKDConfig
    if name == "TrainingArguments":
        from transformers import TrainingArguments

        return TrainingArguments
    return getattr(trl, name)


def _ancestry(cls: type) -> tuple[str, ...]:
    return tuple(base.__name__ for base in cls.__mro__)


def _fields(cls: type) -> list[str]:
    return [field.name for field in dataclasses.fields(cls)]


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_field_of_the_trl_config_has_a_row(name: str) -> None:
    cls = _config_class(name)
    ancestry = _ancestry(cls)
    missing = [field for field in _fields(cls) if resolve(ancestry, field) is None]
    assert not missing, f"{name} fields without a row in docs/gen/trl_fields.py: {missing}"
    assert len(_fields(cls)) > 100  # TrainingArguments' fields are part of every config


def test_every_row_names_a_field_its_trl_class_has() -> None:
    stale = [(row.trl_class, row.field) for row in ROWS if row.field not in _fields(_config_class(row.trl_class))]
    assert not stale, f"rows for fields TRL no longer has: {stale}"
    assert len({(row.trl_class, row.field) for row in ROWS}) == len(ROWS), "a field has two rows"


def test_rows_without_a_key_say_why() -> None:
    assert all(row.note.strip() for row in ROWS if not row.keys)


_KEYS: dict[str, set[str]] = {}


def _recipe_keys(recipe: str) -> set[str]:
    if recipe not in _KEYS:
        _KEYS[recipe] = {row[0] for row in config_keys(get_recipe(recipe).config_cls)}
    return _KEYS[recipe]


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_kitchen_key_a_field_maps_to_exists_in_its_recipe(name: str) -> None:
    cls = _config_class(name)
    ancestry = _ancestry(cls)
    absent = []
    for field in _fields(cls):
        row = resolve(ancestry, field)
        assert row is not None
        for key in row.keys:
            recipe, dotted = place(key, RECIPES[name])
            if dotted not in _recipe_keys(recipe):
                absent.append(f"{row.trl_class}.{field} -> {recipe}: {dotted}")
    assert not absent, f"kitchen keys that do not exist: {absent}"


def test_a_missing_field_and_a_wrong_key_are_caught() -> None:
    """The checks above can fail: a field nobody mapped resolves to nothing, and a made-up key is
    not among a recipe's keys."""
    ancestry = _ancestry(_config_class("GRPOConfig"))
    assert resolve(ancestry, "a_field_trl_might_add") is None
    assert resolve(ancestry, "max_steps") != resolve(("TrainingArguments",), "max_steps")  # GRPO overrides
    assert "dpo.not_a_key" not in _recipe_keys("dpo")
    assert "dpo.beta" in _recipe_keys("dpo")


def test_every_table_class_is_a_config_or_a_base_of_one() -> None:
    assert {row.trl_class for row in ROWS} == set(RECIPES) | set(BASES)
    for base in BASES:
        assert all(base in _ancestry(_config_class(name)) for name in RECIPES)


def test_the_committed_page_is_what_the_generator_writes() -> None:
    assert trl_guide.PAGE.read_text(encoding="utf-8") == trl_guide.render(), (
        "docs/how-to/from-trl.md is out of date: run `python -m docs.gen.trl_guide`"
    )
