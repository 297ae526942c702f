"""Distillation workflows on the noop backend: every RL mode, several teachers, resume, generated
data reused, and a teacher with another tokenizer refused before training."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from transformers import AutoTokenizer

from adapters.common.tiny import TINY_DIR
from adapters.noop import NoopBackend
from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.engine.launch import run_recipe
from kitchen.engine.ports import Tokenizer
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runner import StageFailure
from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from recipes.data import shipped_data
from tests.rl_workflow.runs import CrashAfterStep, without_times

SHORT = [
    "backend=noop",
    "rl.num_batches=4",
    "warm_start.steps=2",
    "eval.every=2",
    "checkpoint.save_every=2",
    "rl.groups_per_batch=4",
]
ONE_TEACHER = {"datasets": [{"name": "arithmetic", "prompts": "arithmetic", "teacher": {"model_name": "tiny"}}]}
TWO_TEACHERS = {
    "rl": {"groups_per_batch": 6},
    "datasets": [
        {"name": "arithmetic", "prompts": "arithmetic", "teacher": {"model_name": "tiny"}, "groups_per_batch": 4},
        {"name": "instructions", "prompts": shipped_data("sl_basic/test.jsonl"), "groups_per_batch": 2},
    ],
}


def on_policy(tmp_path: Path, config: dict[str, Any], *overrides: str, **run: Any) -> list[dict[str, Any]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    recipe = get_recipe("distill_on_policy")
    settings = load_config(recipe.config_cls, path, [*SHORT, f"log_path={tmp_path / 'run'}", *overrides])
    return read_metrics(run_recipe(recipe, settings, progress=False, **run).metrics)


@pytest.mark.parametrize(
    "mode", [[], ["rl.stream_minibatch.num_minibatches=2"], ["rl.async_config.max_steps_off_policy=1"]], ids=str
)
def test_every_rl_mode_trains_against_the_teacher(tmp_path: Path, mode: list[str]) -> None:
    rows = on_policy(tmp_path, ONE_TEACHER, *mode)
    assert [row["step"] for row in rows] == [0, 1, 2, 3]
    assert all(row["teacher_kl"] == row["teacher_kl/arithmetic"] for row in rows)
    assert all("optim/kl_sample_train_v2" in row and row["num_datums"] == 4 * 8 for row in rows)
    assert "teacher_eval/all/reward/total" in rows[0] and "eval/teacher_kl" in rows[2]


def test_several_teachers_each_score_their_own_prompts(tmp_path: Path) -> None:
    rows = on_policy(tmp_path, TWO_TEACHERS, "rl.groups_per_batch=6")
    for row in rows:
        assert {"teacher_kl/arithmetic", "teacher_kl/instructions"} <= row.keys()
        assert row["env/arithmetic/total_episodes"] == 4 * 8 and row["env/instructions/total_episodes"] == 2 * 8


def test_dataset_shares_must_fill_the_batch(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"must all be set and sum to rl\.groups_per_batch"):
        on_policy(tmp_path, TWO_TEACHERS, "rl.groups_per_batch=8")


@pytest.mark.slow
def test_resume_reproduces_the_per_step_metrics(tmp_path: Path) -> None:
    whole = on_policy(tmp_path / "whole", ONE_TEACHER)
    with pytest.raises(RuntimeError, match="simulated crash"):
        on_policy(tmp_path / "crashed", ONE_TEACHER, hooks=[CrashAfterStep(2)])
    assert [r.name for r in read_records(tmp_path / "crashed" / "run" / "checkpoints.jsonl")] == ["000002"]
    resumed = on_policy(tmp_path / "crashed", ONE_TEACHER)
    assert [row["step"] for row in resumed] == [0, 1, 2, 3]
    for got, want in zip(without_times(resumed), without_times(whole), strict=True):
        assert got == pytest.approx(want, rel=1e-6)


class TokenizersByPath(NoopBackend):
    """The noop backend, but a model path gets that directory's own tokenizer (noop gives every
    model the tiny one)."""

    def get_tokenizer(self, base_model: str) -> Tokenizer:
        return cast(Tokenizer, AutoTokenizer.from_pretrained(TINY_DIR if base_model == "tiny" else base_model))


def test_a_teacher_with_another_tokenizer_is_refused_before_training(tmp_path: Path) -> None:
    other = tmp_path / "other_tokenizer"
    tokenizer = AutoTokenizer.from_pretrained(TINY_DIR)
    tokenizer.add_tokens(["<a_token_the_student_lacks>"])
    tokenizer.save_pretrained(other)
    config = {"datasets": [{"name": "a", "prompts": "arithmetic", "teacher": {"model_name": str(other)}}]}
    backend = TokenizersByPath(seed=0, checkpoint_dir=tmp_path / "ck")
    with pytest.raises(StageFailure, match="has a different tokenizer from model_name 'tiny'"):
        on_policy(tmp_path, config, backend=backend)
    assert not [call for call in backend.calls if call.method in ("forward_backward", "sample")]


def prompt_distillation(tmp_path: Path, *overrides: str, backend: NoopBackend | None = None) -> list[dict[str, Any]]:
    recipe = get_recipe("distill_prompt")
    settings = load_config(
        recipe.config_cls,
        None,
        [
            "backend=noop",
            "teacher.model.checkpoint=null",
            "data.num_epochs=1",
            "eval.every=5",
            f"log_path={tmp_path}",
            *overrides,
        ],
    )
    return read_metrics(run_recipe(recipe, settings, progress=False, backend=backend).metrics)


def test_prompt_distillation_generates_once_and_reuses_generated_data(tmp_path: Path) -> None:
    rows = prompt_distillation(tmp_path / "run")
    assert rows[0].keys() >= {"eval/nll_initial", "eval/bits_per_byte_initial", "eval/teacher_nll"}
    assert rows[-1].keys() >= {"eval/nll", "eval/bits_per_byte"}
    generated = tmp_path / "run" / "distill"
    train = [yaml.safe_load(line) for line in (generated / "train.jsonl").read_text().splitlines()]
    assert len(train) == 320 and all(r["messages"][0]["role"] == "user" and "system" in r for r in train)
    assert all(r["messages"][-1]["role"] == "assistant" for r in train)

    backend = NoopBackend(seed=0, checkpoint_dir=tmp_path / "again" / "checkpoints")
    prompt_distillation(tmp_path / "again", f"teacher.generated_dataset={generated}", backend=backend)
    assert not [call for call in backend.calls if call.method == "sample"]
    assert not (tmp_path / "again" / "distill").exists()
