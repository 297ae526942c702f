"""Config precedence and errors that name the field path and where the value came from."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field

from kitchen.engine.config.loading import load_config, parse_override
from kitchen.engine.config.run import RunConfig
from kitchen.engine.errors import ConfigError


class Optim(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lr: float = 1e-3
    betas: list[float] = [0.9, 0.95]


class Cfg(RunConfig):
    batch_size: int = 8
    optim: Optim = Optim()
    weights: dict[str, float] = Field(default_factory=lambda: {"a": 1.0, "b": 2.0})


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return path


def test_precedence_defaults_yaml_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, "batch_size: 16\noptim:\n  lr: 0.5\n")
    assert load_config(Cfg).batch_size == 8
    from_file = load_config(Cfg, path)
    assert (from_file.batch_size, from_file.optim.lr) == (16, 0.5)
    both = load_config(Cfg, path, ["optim.lr=1e-4", "seed=3"])
    assert (both.batch_size, both.optim.lr, both.seed) == (16, 1e-4, 3)


def test_a_section_given_as_a_mapping_is_merged_and_a_free_mapping_replaced(tmp_path: Path) -> None:
    path = write(tmp_path, "optim:\n  betas: [0.5, 0.5]\nweights:\n  c: 3.0\n")
    from_file = load_config(Cfg, path, ["optim.lr=0.25"])
    assert (from_file.optim.lr, from_file.optim.betas, from_file.weights) == (0.25, [0.5, 0.5], {"c": 3.0})
    from_overrides = load_config(Cfg, path, ["optim={lr: 0.5}", "weights={}"])
    assert (from_overrides.optim.lr, from_overrides.optim.betas, from_overrides.weights) == (0.5, [0.5, 0.5], {})


def test_unknown_key_in_yaml_names_file_line_and_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "seed: 1\nbatch_sise: 4\n")
    with pytest.raises(ConfigError, match=r"cfg.yaml line 2: unknown key 'batch_sise'; did you mean 'batch_size'"):
        load_config(Cfg, path)


def test_unknown_nested_key_names_full_path(tmp_path: Path) -> None:
    path = write(tmp_path, "optim:\n  lr: 0.1\n  momentum: 0.9\n")
    with pytest.raises(ConfigError, match=r"line 3: unknown key 'optim.momentum'"):
        load_config(Cfg, path)


def test_bad_type_from_override_names_the_override() -> None:
    with pytest.raises(ConfigError, match=r"override 'optim.lr=fast': optim.lr: Input should be a valid number"):
        load_config(Cfg, None, ["optim.lr=fast"])


def test_bad_type_in_yaml_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, "seed: 1\nbatch_size: many\n")
    with pytest.raises(ConfigError, match=r"cfg.yaml line 2: batch_size: Input should be a valid integer"):
        load_config(Cfg, path)


def test_missing_file_and_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(Cfg, tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"line 2: invalid YAML"):
        load_config(Cfg, write(tmp_path, "seed: 1\n  bad: 2\n"))


def test_override_parsing() -> None:
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("x=[1, 2]") == (["x"], [1, 2])
    assert parse_override("name=tiny") == (["name"], "tiny")
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("novalue")
    with pytest.raises(ConfigError, match="empty key"):
        parse_override("a..b=1")


def test_backend_must_be_known() -> None:
    with pytest.raises(ConfigError, match=r"backend: .*unknown backend 'gpu' \(registered: local, noop, tinker\)"):
        load_config(Cfg, None, ["backend=gpu"])


@pytest.mark.parametrize("recipe", ["sl_basic", "chat_sl", "dpo", "math_rl", "guess_number"])
@pytest.mark.parametrize("override", ["optimizer.learning_rate=-1", "data.batch_size=0", "rl.group_size=0"])
def test_recipe_overridden_defaults_keep_their_bounds(recipe: str, override: str) -> None:
    from kitchen.engine.config.sections import fields_at
    from kitchen.engine.recipe import get_recipe

    config_cls = get_recipe(recipe).config_cls
    key = override.split("=")[0]
    if not fields_at(config_cls, tuple(key.split("."))):
        pytest.skip(f"{recipe} has no {key}")
    with pytest.raises(ConfigError, match=override.split("=")[0]):
        load_config(config_cls, None, [override])


def test_a_recipe_default_replaces_a_default_factory() -> None:
    """`@defaults` on a key declared with a default_factory: the recipe's value wins (the factory
    used to, which silently gave distill_prompt an untrained teacher)."""
    from pydantic import Field

    from kitchen.engine.config.loading import defaults

    class Base(RunConfig):
        teachers: list[str] = Field(default_factory=list, description="test key")

    @defaults(teachers=["shipped"])
    class Recipe(Base):
        pass

    assert Recipe().teachers == ["shipped"]
    assert Base().teachers == []
