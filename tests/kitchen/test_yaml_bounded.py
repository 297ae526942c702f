"""The one bounded YAML loader: alias bombs, deep nesting and duplicate keys refused with a line,
and the same loader behind configs, run records, reports and `kitchen runs`."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
import yaml

from kitchen.engine.config.loading import read_yaml
from kitchen.engine.config.yaml_bounded import MAX_DEPTH, MAX_NODES, load_yaml, load_yaml_document
from kitchen.engine.errors import ConfigError
from tests.safety.test_bad_inputs import BOMB


def test_an_alias_bomb_is_refused_without_expanding() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(yaml.YAMLError, match=f"more than {MAX_NODES} values"):
        load_yaml(BOMB)
    # 9**9 strings would need gigabytes: refusing it must not grow the process by even 100 MB.
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000


def test_aliases_within_the_bound_load() -> None:
    assert load_yaml("a: &x [1, 2]\nb: *x\n") == {"a": [1, 2], "b": [1, 2]}


def test_a_duplicate_key_names_both_lines() -> None:
    with pytest.raises(yaml.MarkedYAMLError) as caught:
        load_yaml("seed: 1\nmodel_name: m\nnested:\n  a: 1\n  a: 2\nseed: 3\n")
    # The first duplicate met in document order: the nested one (lines 4 and 5).
    assert "key 'a' given twice (line 4 and line 5)" in str(caught.value.problem)
    assert caught.value.problem_mark is not None and caught.value.problem_mark.line + 1 == 5


def test_a_duplicate_top_level_key_in_a_config_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("seed: 1\nmodel_name: m\nseed: 3\n")
    with pytest.raises(ConfigError, match=r"c.yaml line 3: invalid YAML: key 'seed' given twice \(line 1 and line 3\)"):
        read_yaml(path)


def test_merge_keys_may_override() -> None:
    text = "base: &b {lr: 1, seed: 2}\nrun:\n  <<: *b\n  lr: 3\n"
    assert load_yaml(text)["run"] == {"lr": 3, "seed": 2}


def test_equal_keys_of_different_types_are_different_keys() -> None:
    assert load_yaml("1: a\n'1': b\n") == {1: "a", "1": "b"}


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000, 20_000])
def test_deep_flow_nesting_is_refused_not_a_crash(depth: int) -> None:
    with pytest.raises(yaml.YAMLError, match=f"nested more than {MAX_DEPTH} levels deep"):
        load_yaml_document("[" * depth + "]" * depth)


def test_deep_block_nesting_is_refused() -> None:
    text = "".join(" " * level + "a:\n" for level in range(MAX_DEPTH + 1)) + " " * (MAX_DEPTH + 1) + "b: 1\n"
    with pytest.raises(yaml.MarkedYAMLError, match=f"nested more than {MAX_DEPTH} levels deep") as caught:
        load_yaml(text)
    assert caught.value.problem_mark is not None and caught.value.problem_mark.line + 1 == MAX_DEPTH + 1


def test_nesting_up_to_the_bound_loads() -> None:
    depth = MAX_DEPTH - 1
    assert load_yaml("[" * depth + "]" * depth) is not None


def test_a_config_nested_too_deeply(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match=f"deep.yaml line 1: invalid YAML: nested more than {MAX_DEPTH} levels"):
        read_yaml(path)


def test_every_yaml_read_goes_through_the_bounded_loader() -> None:
    root = Path(__file__).resolve().parents[2]
    unbounded = [
        f"{path.relative_to(root)}: {needle}"
        for folder in ("kitchen", "adapters", "recipes", "train_core")
        for path in (root / folder).rglob("*.py")
        if path.name != "yaml_bounded.py"
        for needle in ("yaml.safe_load(", "yaml.load(", "yaml.SafeLoader(", "yaml.full_load(", "yaml.unsafe_load(")
        if needle in path.read_text(encoding="utf-8")
    ]
    assert unbounded == []
