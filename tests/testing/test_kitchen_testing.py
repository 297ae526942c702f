"""`kitchen.testing`: a user's test of a custom workflow outside this repository, the fixtures'
scripted fake model, and the contract suite run by a third party's backend package."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from kitchen.engine.context import Context
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Loop, Workflow
from kitchen.families.common.setup import CreateTrainingClient, GetTokenizer
from kitchen.families.common.training import CollectTrainStep, SubmitTrainStep
from kitchen.families.supervised.examples import PromptCompletion
from kitchen.families.supervised.stages import Batch, GetSupervisedBatch, LoadSupervisedData
from kitchen.testing import RunResult, run_on_noop
from recipes.sl_basic import Config
from tests.testing.distributions import run_python, write_distribution
from train_core.types import Datum

USER_TEST = """
from kitchen import Loop, Stage, Workflow
from kitchen.families.common.setup import CreateTrainingClient, GetTokenizer
from kitchen.families.common.training import CollectTrainStep, SubmitTrainStep
from kitchen.families.supervised.examples import PromptCompletion
from kitchen.families.supervised.stages import GetSupervisedBatch, LoadSupervisedData
from recipes.sl_basic import Config


def build(config):
    steps = [GetSupervisedBatch(), SubmitTrainStep(), CollectTrainStep(keep=0)]
    return Workflow("mine", [GetTokenizer(), LoadSupervisedData(PromptCompletion()), CreateTrainingClient(),
                             Loop("train", over="num_steps", step=True, body=steps)])


def test_my_workflow_trains(kitchen_run):
    run = kitchen_run(build, "max_steps=3", config=Config)
    assert len(run.column("train_mean_nll")) == 3
    assert [call.method for call in run.calls].count("optim_step") == 3
"""


@pytest.mark.slow
def test_a_users_workflow_test_outside_the_repository_runs_with_the_plugin(tmp_path: Path) -> None:
    """The plugin loads through its `pytest11` entry point: the user's file imports nothing from
    kitchen's tests and uses the `kitchen_run` fixture by name."""
    (tmp_path / "test_mine.py").write_text(USER_TEST, encoding="utf-8")
    result = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_mine.py"], tmp_path, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    test_lines = USER_TEST.split("def test_my_workflow_trains")[1].strip().splitlines()
    assert len(test_lines) <= 5


@dataclass(frozen=True)
class Answers:
    answers: list[str]


class CollectReplies(Stage):
    async def run(self, ctx: Context, batch: list[Datum]) -> Batch:
        return Batch(batch)


def test_scripted_replies_decide_the_rewards(tmp_path: Path) -> None:
    """With the fake model scripted to answer every arithmetic problem with "4", the reward is
    exactly the share of problems whose answer is 4 — known before the run."""
    run = run_on_noop(
        "math_rl",
        "warm_start.steps=0",
        "rl.num_batches=2",
        "rl.groups_per_batch=8",
        "rl.group_size=2",
        "eval.every=0",
        "env.max_operand=2",
        log_path=tmp_path / "scripted",
        replies=lambda prompt: " 4",
    )
    transcripts = (run.path / "rollouts" / "step_000000.jsonl").read_text(encoding="utf-8")
    assert '"action": " 4' in transcripts
    rewards = run.column("env/all/reward/total")
    assert len(rewards) == 2 and all(0.0 <= reward <= 1.0 for reward in rewards)
    unscripted = run_on_noop(
        "math_rl", "warm_start.steps=0", "rl.num_batches=2", "rl.groups_per_batch=8", "rl.group_size=2", "eval.every=0",
        "env.max_operand=2", log_path=tmp_path / "pseudo",
    )  # fmt: skip
    assert unscripted.column("env/all/reward/total") != rewards


def test_a_sampler_logprob_shift_shows_as_sample_train_mismatch(tmp_path: Path) -> None:
    common = ("warm_start.steps=0", "rl.num_batches=1", "rl.groups_per_batch=4", "rl.group_size=2", "eval.every=0")
    same = run_on_noop("math_rl", *common, log_path=tmp_path / "same")
    shifted = run_on_noop("math_rl", *common, log_path=tmp_path / "shifted", sampler_logprob_shift=-0.5)
    assert abs(same.column("optim/kl_sample_train_v1")[0]) < 1e-6
    assert shifted.column("optim/kl_sample_train_v1")[0] < -0.4


def test_a_hand_built_workflow_runs_with_its_config_class(tmp_path: Path) -> None:
    workflow = Workflow(
        "direct",
        [
            GetTokenizer(),
            LoadSupervisedData(PromptCompletion()),
            CreateTrainingClient(),
            Loop("train", over="num_steps", step=True, body=[GetSupervisedBatch(), CollectReplies(),
                                                             SubmitTrainStep(), CollectTrainStep(keep=0)]),
        ],
    )  # fmt: skip
    result: RunResult = run_on_noop(workflow, "data.max_steps=2", config=Config, log_path=tmp_path / "direct")
    assert [row["step"] for row in result.metrics] == [0, 1]
    assert result.checkpoints == [] and result.events


THIRD_PARTY_BACKEND = textwrap.dedent(
    '''
    """A backend package's registration: the noop backend under another name (a stand-in for a
    real third-party backend, which this test cannot install)."""
    from pydantic import BaseModel

    from kitchen.engine.backends import BackendSpec


    class Settings(BaseModel):
        seed_offset: int = 0


    def create(config, settings, checkpoint_dir, losses):
        from adapters.noop import NoopBackend

        return NoopBackend(seed=config.seed + settings.seed_offset, checkpoint_dir=checkpoint_dir, losses=losses)


    BACKEND = BackendSpec("thirdparty", "a third party's backend", Settings, create)
    '''
)


@pytest.mark.slow
def test_a_third_party_backend_runs_the_contract_suite_through_the_plugin(tmp_path: Path) -> None:
    site = write_distribution(
        tmp_path / "site",
        "thirdparty-backend",
        {"thirdparty_backend/__init__.py": THIRD_PARTY_BACKEND},
        {"kitchen.backends": {"thirdparty": "thirdparty_backend:BACKEND"}},
    )
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "kitchen.testing.contract"]
    result = run_python(
        [*args, "--kitchen-backend=thirdparty", "--kitchen-backend-option", "seed_offset=1"], site, tmp_path
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and " skipped" not in result.stdout
    without = run_python(args, site, tmp_path)
    assert " skipped" in without.stdout and " passed" not in without.stdout
