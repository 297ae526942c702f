"""RL modes are built from one set of stages: one `groups_per_batch` sizes every mode's step, the
update stages are the same objects' classes in every mode, and variants fill slots."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import kitchen.families.rl.stream
from kitchen.engine.config.loading import load_config
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import When
from kitchen.families.rl.step import ApplyKLPenalty, AssembleData, ComputeAdvantages
from kitchen.families.rl.workflow import rl_workflow
from tests.rl_workflow.runs import run_toy
from tests.rl_workflow.toy_task import TOY_RECIPE, ToyConfig, build_task

MODES = {
    "sync": [],
    "stream_minibatch": ["rl.stream_minibatch.num_minibatches=4"],
    "async": ["rl.async_config.max_steps_off_policy=1"],
}


@pytest.mark.parametrize("mode", list(MODES))
def test_groups_per_batch_override_sets_the_groups_trained_per_step_in_every_mode(tmp_path: Path, mode: str) -> None:
    _, rows = run_toy(
        tmp_path,
        *MODES[mode],
        "rl.groups_per_batch=64",
        "rl.group_size=2",
        "rl.num_batches=2",
        "eval.every=0",
        "checkpoint.save_every=0",
    )
    assert load_config(ToyConfig, None, [*MODES[mode], "rl.groups_per_batch=64"]).mode == mode
    assert [row["env/all/total_episodes"] for row in rows] == [64 * 2, 64 * 2]
    assert [row["num_datums"] for row in rows] == [64 * 2, 64 * 2]


def _stage_types(mode: str, **slots: list[Stage]) -> list[type[Stage]]:
    return [type(stage) for stage in rl_workflow(build_task, mode, **slots).stages()]  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", list(MODES))
def test_every_mode_runs_the_same_update_stages_and_slots(mode: str) -> None:
    marker = When("marker", lambda ctx: False, [])
    workflow = rl_workflow(build_task, mode, setup=[marker], adjust=[ApplyKLPenalty()])  # type: ignore[arg-type]
    types = [type(stage) for stage in workflow.stages()]
    for stage_type in (ComputeAdvantages, AssembleData, ApplyKLPenalty):
        assert types.count(stage_type) == 1, (mode, stage_type)
    assert types.index(AssembleData) < types.index(ApplyKLPenalty)
    assert marker in workflow.steps


def test_stream_mode_holds_no_update_math_of_its_own() -> None:
    """The stream stages call no advantage, assembly or KL function: the shared stages do that."""
    tree = ast.parse(inspect.getsource(kitchen.families.rl.stream))
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    forbidden = {
        "compute_advantages",
        "assemble_training_data",
        "incorporate_kl_penalty",
        "remove_constant_reward_groups",
    }
    assert not names & forbidden


def test_the_recipe_builder_fills_slots_from_the_config() -> None:
    plain = TOY_RECIPE.workflow(load_config(ToyConfig, None, []))
    penalized = TOY_RECIPE.workflow(
        load_config(ToyConfig, None, ["algorithm.kl_penalty_coef=0.1", "warm_start.steps=0"])
    )
    assert ApplyKLPenalty not in [type(s) for s in plain.stages()]
    assert ApplyKLPenalty in [type(s) for s in penalized.stages()]
    assert {s.name for s in penalized.stages()} - {s.name for s in plain.stages()} == {
        "apply_kl_penalty",
        "create_reference_client",
    }
