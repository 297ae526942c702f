"""The `prm` recipe (a process reward model, TRL's PRMTrainer) and its use as an RL reward
(`env.process_reward` of the reward_fn environment): on the noop backend, and on the embedded
tiny model, where it learns the shipped count_up labels and then orders a right solution above a
wrong one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from adapters.common.tokenizer import load_tokenizer
from kitchen.apps.cli import main
from kitchen.engine.backends import make_backend
from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.engine.launch import RunDir, run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.checkpoints import resolve_sampler_path
from kitchen.engine.runs.metrics import read_metrics
from kitchen.families.rl.process_reward import ProcessRewardFn, ProcessRewardScorer
from kitchen.testing import RunResult
from recipes.data import shipped_data
from train_core.rl.model_slot import ModelSlot

PRM = get_recipe("prm")
HELD_OUT = Path(shipped_data("stepwise/count_up_test.jsonl"))
LOCAL = ["backend=local", "local.device=cpu", "checkpoint.save_every=0"]


def held_out_true_share() -> float:
    labels = [label for line in HELD_OUT.read_text().splitlines() for label in json.loads(line)["labels"]]
    return sum(labels) / len(labels)


def test_prm_runs_on_noop_with_held_out_step_metrics(kitchen_run: Callable[..., RunResult]) -> None:
    run = kitchen_run(PRM, "data.max_steps=4", "eval.every=2", "data.batch_size=4")
    assert [row["step"] for row in run.metrics] == [0, 1, 2, 3]
    assert all(row["prm_loss"] > 0 for row in run.metrics)
    assert run.column("eval/num_trajectories") == [100.0, 100.0]
    assert run.column("eval/num_steps") == [300.0, 300.0]
    share = held_out_true_share()
    assert run.column("eval/majority_baseline")[-1] == pytest.approx(max(share, 1 - share))
    assert 0.0 <= run.column("eval/trajectory_accuracy")[-1] <= run.column("eval/step_accuracy")[-1] <= 1.0


def test_a_bad_record_stops_the_run_naming_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "steps.jsonl"
    good = {"prompt": "Count up.", "completions": ["1 + 1 = 2"], "labels": [True]}
    bad = {"prompt": "Count up.", "completions": ["1 + 1 = 2", "2 + 1 = 3"], "labels": [True]}
    data.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    code = main(["run", "prm", "backend=noop", f"data.dataset={data}", f"log_path={tmp_path / 'run'}"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{data} line 2: 2 steps but 1 labels" in err and "Traceback" not in err


def test_label_tokens_must_be_single_tokens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "prm", "backend=noop", "prm.label_tokens=[' good one', '-']", f"log_path={tmp_path}"])
    assert code == 2
    assert "prm.label_tokens: ' good one' is" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="must differ"):
        load_config(PRM.config_cls, None, ["prm.label_tokens=[+, +]"])


RL_QUICK = ["rl.num_batches=2", "rl.groups_per_batch=4", "eval.every=1", "warm_start.steps=0", "env.reward_fn=[]"]


@pytest.mark.parametrize("aggregation", ["min", "product", "last"])
def test_rl_runs_with_the_process_reward_on_noop(kitchen_run: Callable[..., RunResult], aggregation: str) -> None:
    run = kitchen_run(
        get_recipe("reward_fn_rl"),
        *RL_QUICK,
        "env.process_reward.model.model_name=tiny",
        f"env.process_reward.aggregation={aggregation}",
    )
    scores = run.column("env/all/score/process_reward")
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores)
    assert run.column("env/all/reward/total") == scores
    assert run.column("eval/eval/score/process_reward")


def test_rl_needs_a_reward_function_or_the_process_reward() -> None:
    with pytest.raises(ConfigError, match=r"name at least one reward function.*or set process_reward"):
        load_config(get_recipe("reward_fn_rl").config_cls, None, ["env.reward_fn=[]"])


# -- the tiny model ------------------------------------------------------------------------------


def train(log_path: Path, seed: int) -> RunDir:
    config = load_config(
        PRM.config_cls, None, [f"log_path={log_path}", f"seed={seed}", *LOCAL, "data.max_steps=120", "eval.every=60"]
    )
    return run_recipe(PRM, config, progress=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    return train(tmp_path_factory.mktemp("prm") / "seed0", 0)


def final_eval(run: RunDir) -> dict[str, Any]:
    return [row for row in read_metrics(run.metrics) if "eval/step_accuracy" in row][-1]


def assert_learned(run: RunDir) -> None:
    final = final_eval(run)
    assert final["eval/step_accuracy"] >= final["eval/majority_baseline"] + 0.1
    assert final["eval/trajectory_accuracy"] > 0.5


@pytest.mark.slow  # 120 steps of the tiny model: ~30 s on 2 cores
def test_prm_learns_the_step_labels_beyond_the_majority_class(trained: RunDir) -> None:
    assert_learned(trained)


@pytest.mark.slow
def test_prm_learns_with_another_seed(tmp_path: Path) -> None:
    assert_learned(train(tmp_path / "seed1", 1))


@pytest.mark.slow
def test_the_trained_prm_scores_a_right_solution_above_a_wrong_one(trained: RunDir) -> None:
    """The RL reward's scorer on the trained checkpoint: for each start, the right count-up scores
    above the same count-up with one slip, under every aggregation."""
    config = load_config(PRM.config_cls, None, [f"log_path={trained.path}", *LOCAL])
    service = make_backend(config, trained.path / "scorer_checkpoints")

    async def scores() -> list[tuple[list[float], list[float]]]:
        try:
            slot = ModelSlot("process_reward")
            slot.bind(await service.create_sampling_client(model_path=resolve_sampler_path(str(trained.path))))
            scorer = ProcessRewardScorer(slot, load_tokenizer("tiny"), ProcessRewardFn(model={"checkpoint": "x"}))
            out = []
            for start in (1, 2, 3, 4):
                prompt = f"Count up by one from {start}, three times."
                right = "\n".join(f"{n} + 1 = {n + 1}" for n in range(start, start + 3))
                wrong = f"{start} + 1 = {start + 1}\n{start + 1} + 1 = {start + 3}\n{start + 3} + 1 = {start + 4}"
                out.append((await scorer.step_scores(prompt, right), await scorer.step_scores(prompt, wrong)))
            return out
        finally:
            await service.close()

    for right, wrong in asyncio.run(scores()):
        assert len(right) == len(wrong) == 3
        assert min(right) > min(wrong) and wrong[1] < 0.5 < right[1]
        assert right[0] == pytest.approx(wrong[0], abs=1e-6)  # the same first step, the same score
