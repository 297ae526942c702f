"""env_rl trains on any registered environment, with its settings checked before any work; a
reward function can be named by its registered name."""

from __future__ import annotations

from typing import Any

import pytest
from transformers import AutoTokenizer

from adapters.common.tiny import TINY_DIR
from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.families.rl.envs import ENVS, env_task
from kitchen.families.rl.rewards import resolve_reward_fn
from recipes.env_rl import Config
from recipes.envs.guess_number import ENV as GUESS_NUMBER
from recipes.guess_number import Config as GuessNumberConfig
from recipes.rewards.examples import keyword_reward
from train_core.renderers.role_colon import RoleColonRenderer


def test_the_shipped_environments_are_registered() -> None:
    assert {"arithmetic", "gsm8k", "guess_number"} <= set(ENVS.names())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["env=guess_numbr"], "env: 'guess_numbr' is not a choice; did you mean 'guess_number'"),
        (
            ["env=guess_number", "env.max_turn=3"],
            "unknown key 'env.max_turn' for env 'guess_number'; did you mean 'env.max_turns'",
        ),
        (["env=arithmetic", "env.max_operand=-1"], "env.max_operand: Input should be greater"),
        (["env=gsm8k", "env.dataset=/no/such/file.jsonl"], None),
    ],
)
def test_bad_env_settings_are_config_errors_naming_the_key(overrides: list[str], message: str | None) -> None:
    if message is None:  # a missing data file is found by the check before work, not by the model
        assert load_config(Config, None, overrides).env.dataset == "/no/such/file.jsonl"
        return
    with pytest.raises(ConfigError, match=message):
        load_config(Config, None, overrides)


def test_env_rl_builds_the_same_task_as_the_environments_own_recipe() -> None:
    renderer = RoleColonRenderer(AutoTokenizer.from_pretrained(TINY_DIR))
    shared = ["rl.num_batches=3", "rl.groups_per_batch=2", "rl.group_size=2", "seed=5", "env.max_number=6"]
    generic = env_task(ENVS.load())(load_config(Config, None, ["env=guess_number", *shared]), renderer)
    own = env_task({"guess_number": GUESS_NUMBER})(load_config(GuessNumberConfig, None, shared), renderer)
    assert len(generic.train) == len(own.train) == 3
    assert [b.logging_tags() for b in generic.train.get_batch(1)] == [b.logging_tags() for b in own.train.get_batch(1)]
    assert len(generic.eval_builders) == len(own.eval_builders) == 6


def test_env_rl_runs_a_multi_turn_environment_on_noop(kitchen_run: Any) -> None:
    result = kitchen_run(
        "env_rl",
        "env=guess_number",
        "env.max_number=4",
        "rl.num_batches=2",
        "warm_start.steps=1",
        "rl.groups_per_batch=2",
        "rl.group_size=2",
    )
    assert [row["step"] for row in result.metrics] == [0, 1]
    assert len(result.column("env/all/reward/total")) == 2


def test_a_reward_function_is_found_by_its_registered_name() -> None:
    fn = resolve_reward_fn("keyword")
    assert fn.fn is keyword_reward and fn.name == "keyword"
    with pytest.raises(ValueError, match="did you mean 'keyword'"):
        resolve_reward_fn("keywrd")
