"""env_rl trains on any registered environment, with its settings checked before any work; a
reward function can be named by its registered name."""

from __future__ import annotations

from typing import Any

import pytest
from transformers import AutoTokenizer

from adapters.common.tiny import TINY_DIR
from kitchen.engine.errors import ConfigError
from kitchen.families.rl.envs import ENVS
from recipes.env_rl import Config
from recipes.env_rl import build_task as build_env_task
from recipes.guess_number import Config as GuessNumberConfig
from recipes.guess_number import build_task as build_guess_number_task
from recipes.rewards import resolve_reward_fn
from recipes.rewards.examples import keyword_reward
from train_core.renderers.role_colon import RoleColonRenderer


def test_the_shipped_environments_are_registered() -> None:
    assert {"arithmetic", "gsm8k", "guess_number"} <= set(ENVS.names())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"env": "guess_numbr"}, "did you mean 'guess_number'"),
        ({"env": "guess_number", "env_args": {"max_turn": 3}}, "env_args.max_turn: Extra inputs are not permitted"),
        ({"env": "arithmetic", "env_args": {"max_operand": -1}}, "env_args.max_operand: Input should be greater"),
        ({"env": "gsm8k", "env_args": {"dataset": "/no/such/file.jsonl"}}, None),
    ],
)
def test_bad_env_settings_are_config_errors_naming_the_key(overrides: dict[str, Any], message: str | None) -> None:
    if message is None:  # a missing data file is found by the check before work, not by the model
        assert Config.model_validate(overrides).env_args["dataset"] == "/no/such/file.jsonl"
        return
    with pytest.raises((ConfigError, ValueError), match=message):
        Config.model_validate(overrides)


def test_env_rl_builds_the_same_task_as_the_environments_own_recipe() -> None:
    renderer = RoleColonRenderer(AutoTokenizer.from_pretrained(TINY_DIR))
    shared = {"num_batches": 3, "groups_per_batch": 2, "group_size": 2, "seed": 5}
    generic = build_env_task(Config(env="guess_number", env_args={"max_number": 6}, **shared), renderer)
    own = build_guess_number_task(GuessNumberConfig(max_number=6, **shared), renderer)
    assert len(generic.train) == len(own.train) == 3
    assert [b.logging_tags() for b in generic.train.get_batch(1)] == [b.logging_tags() for b in own.train.get_batch(1)]
    assert len(generic.eval_builders) == len(own.eval_builders) == 6


def test_env_rl_runs_a_multi_turn_environment_on_noop(kitchen_run: Any) -> None:
    result = kitchen_run(
        "env_rl",
        "env=guess_number",
        "env_args.max_number=4",
        "num_batches=2",
        "warm_start_steps=1",
        "groups_per_batch=2",
        "group_size=2",
    )
    assert [row["step"] for row in result.metrics] == [0, 1]
    assert len(result.column("env/all/reward/total")) == 2


def test_a_reward_function_is_found_by_its_registered_name() -> None:
    fn = resolve_reward_fn("keyword")
    assert fn.fn is keyword_reward and fn.name == "keyword"
    with pytest.raises(ValueError, match="did you mean 'keyword'"):
        resolve_reward_fn("keywrd")
