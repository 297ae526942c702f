"""Extension without editing kitchen: recipes, losses, advantage estimators, renderers, backends,
RL environments and reward functions come from entry-point groups, kitchen's own built-ins
included. The registries are tested by their properties (each entry loads, names are unique,
each says what it is), never by their exact lists, and each extension point is shown working
with a throwaway distribution."""

from __future__ import annotations

import inspect
import json
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from kitchen.engine.backends import BACKENDS
from kitchen.engine.losses import LOSSES
from kitchen.engine.plugins import ExtensionPoint
from kitchen.engine.recipe import RECIPES
from kitchen.engine.renderers import RENDERERS
from kitchen.engine.rewards import REWARDS
from kitchen.engine.tool_servers import TOOL_SERVERS
from kitchen.families.rl.algorithm_settings import ESTIMATORS
from kitchen.families.rl.envs import ENVS
from tests.testing.distributions import run_python, write_distribution
from train_core.losses import LOSS_SPECS
from train_core.renderers.registry import BUILTIN_RENDERERS
from train_core.rl.advantages import ADVANTAGE_ESTIMATORS

POINTS: list[ExtensionPoint[object]] = [RECIPES, LOSSES, ESTIMATORS, RENDERERS, BACKENDS, ENVS, REWARDS, TOOL_SERVERS]  # type: ignore[list-item]


def _doc(obj: object) -> str:
    target = getattr(obj, "func", obj)  # a functools.partial documents its function
    return inspect.getdoc(target) or ""


@pytest.mark.parametrize("point", POINTS, ids=[p.group for p in POINTS])
def test_every_entry_loads_under_a_unique_name_and_says_what_it_is(point: ExtensionPoint[object]) -> None:
    declared = [entry.name for entry in entry_points(group=point.group)]
    assert declared and len(declared) == len(set(declared))
    loaded = point.load()
    assert sorted(loaded) == sorted(declared)
    for name, obj in loaded.items():
        described = getattr(obj, "description", None) or _doc(getattr(obj, "formula", obj))
        assert described.strip(), f"{point.group} entry {name!r} has no description or docstring"


def test_the_built_ins_go_through_the_same_entry_points_as_plugins() -> None:
    """Nothing is registered behind the entry points' back: every built-in loss and renderer in
    train_core's tables is one of kitchen's own entry points, naming the same object."""
    losses = LOSSES.load()
    assert {name: spec for name, spec in LOSS_SPECS.items() if name in losses} == losses
    assert set(LOSS_SPECS) == set(losses)
    renderers = RENDERERS.load()
    assert renderers == vars(BUILTIN_RENDERERS)
    estimators = ESTIMATORS.load()
    assert {name: fn for name, fn in ADVANTAGE_ESTIMATORS.items() if name in estimators} == estimators


PLUGIN = textwrap.dedent(
    '''
    """A third party's package adding a recipe, a loss, an advantage estimator, a renderer, an RL
    environment and a reward function to kitchen."""
    from functools import partial
    from typing import Literal

    from pydantic import Field

    from kitchen import Recipe
    from kitchen.families.rl import EnvSettings, EnvSpec
    from kitchen.families.supervised import PromptCompletion, supervised_workflow
    from recipes.envs.guess_number import guess_number_task
    from recipes.sl_basic import Config
    from train_core.losses import LossSpec, importance_sampling
    from train_core.renderers.role_colon import RoleColonRenderer


    def halved_importance_sampling(logprobs_T, sampling_logprobs_T, advantages_T):
        """Importance sampling at half the step (a stand-in for a new policy-gradient loss)."""
        return 0.5 * importance_sampling(logprobs_T, sampling_logprobs_T, advantages_T)


    HALVED = LossSpec("halved_is", halved_importance_sampling, ("logprobs", "advantages"), builtin=False)
    RECIPE = Recipe("plugin_sl", "sl_basic, from a plugin", Config, lambda c: supervised_workflow(PromptCompletion()))
    SHOUTY = partial(RoleColonRenderer)


    class CoinSettings(EnvSettings):
        name: Literal["coin"] = "coin"
        sides: int = Field(2, ge=2, description="the coin's sides")


    def coin_task(settings, config, renderer):
        return guess_number_task(
            renderer, num_batches=config.rl.num_batches, groups_per_batch=config.rl.groups_per_batch,
            group_size=config.rl.group_size, max_number=settings.sides, max_turns=1, seed=config.seed,
        )


    COIN = EnvSpec("guess a coin's side in one try", CoinSettings, coin_task)


    def shortness(prompt, completion, record):
        """Shorter replies score higher."""
        return -len(completion)


    def sign(rewards_P, lengths_P):
        """The sign of each reward's distance from its group's mean (a stand-in for a new estimator)."""
        return [(rewards_G - rewards_G.mean()).sign() for rewards_G in rewards_P]
    '''
)

CHECKS = textwrap.dedent(
    """
    import json
    from kitchen.apps.cli import main

    results = {}
    for name, argv in {
        "ls": ["ls"],
        "run_recipe": ["run", "plugin_sl", "backend=noop", "data.max_steps=2", "data.eval_dataset=null", "log_path=r"],
        "loss_local": ["validate", "math_rl", "algorithm.loss_fn=halved_is"],
        "loss_tinker": ["validate", "math_rl", "algorithm.loss_fn=halved_is", "backend=tinker", "lora_rank=8"],
        "renderer": ["validate", "chat_sl", "renderer=shouty"],
        "env": ["run", "env_rl", "env=coin", "env.sides=3", "backend=noop", "rl.num_batches=1",
                "warm_start.steps=1", "rl.groups_per_batch=2", "rl.group_size=2", "log_path=env_run"],
        "env_bad_args": ["validate", "env_rl", "env=coin", "env.sides=1"],
        "reward": ["validate", "reward_fn_rl", "env.reward_fn=shortness"],
        "estimator": ["run", "math_rl", "algorithm.advantage_estimator=sign", "backend=noop", "rl.num_batches=1",
                      "warm_start.steps=0", "rl.groups_per_batch=2", "rl.group_size=2", "log_path=estimator_run"],
        "estimator_unknown": ["validate", "math_rl", "algorithm.advantage_estimator=sgn"],
    }.items():
        try:
            results[name] = main(argv)
        except SystemExit as exc:
            results[name] = exc.code
    print(json.dumps(results))
    """
)


@pytest.mark.slow
def test_a_throwaway_distribution_adds_a_recipe_a_loss_an_estimator_a_renderer_an_env_and_a_reward(
    tmp_path: Path,
) -> None:
    site = write_distribution(
        tmp_path / "site",
        "kitchen-plugin-demo",
        {"plugin_demo.py": PLUGIN},
        {
            "kitchen.recipes": {"plugin_sl": "plugin_demo:RECIPE"},
            "kitchen.losses": {"halved_is": "plugin_demo:HALVED"},
            "kitchen.renderers": {"shouty": "plugin_demo:SHOUTY"},
            "kitchen.envs": {"coin": "plugin_demo:COIN"},
            "kitchen.rewards": {"shortness": "plugin_demo:shortness"},
            "kitchen.advantage_estimators": {"sign": "plugin_demo:sign"},
        },
    )
    result = run_python(["-c", CHECKS], site, tmp_path)
    codes = json.loads(result.stdout.strip().splitlines()[-1])
    assert codes == {
        "ls": 0,
        "run_recipe": 0,
        "loss_local": 0,
        "loss_tinker": 0,
        "renderer": 0,
        "env": 0,
        "env_bad_args": 2,
        "reward": 0,
        "estimator": 0,
        "estimator_unknown": 2,
    }
    assert "plugin_sl" in result.stdout and "sl_basic, from a plugin" in result.stdout
    assert (tmp_path / "r" / "checkpoints.jsonl").exists()
    # the Tinker service has no built-in 'halved_is': the RL update sends it through
    # forward_backward_custom there, so validate accepts it (kitchen.families.rl.step.policy_update)
    assert (tmp_path / "env_run" / "checkpoints.jsonl").exists()
    assert "env.sides: Input should be greater than or equal to 2" in result.stderr
    assert (tmp_path / "estimator_run" / "checkpoints.jsonl").exists()
    assert "unknown advantage_estimator 'sgn'" in result.stderr and "'sign'" in result.stderr
    assert result.stderr.count("kitchen: error") == 2


@pytest.mark.slow
def test_a_broken_plugin_is_an_error_naming_its_entry_point(tmp_path: Path) -> None:
    site = write_distribution(
        tmp_path / "site",
        "kitchen-broken-demo",
        {"broken_renderer.py": "raise ImportError('this plugin is broken on purpose')\n"},
        {"kitchen.renderers": {"broken": "broken_renderer:FACTORY"}},
    )
    result = run_python(["-m", "kitchen", "validate", "chat_sl"], site, tmp_path)
    assert result.returncode == 2
    assert (
        "entry point 'broken' (kitchen.renderers: broken_renderer:FACTORY) of kitchen-broken-demo 0.1" in result.stderr
    )
    assert "this plugin is broken on purpose" in result.stderr and "Traceback" not in result.stderr
