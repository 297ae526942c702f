"""Every built-in recipe's workflow runs end to end on the noop backend in seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.noop import NoopBackend
from kitchen.engine.config.loading import load_config
from kitchen.engine.context import Context
from kitchen.engine.hooks import Hooks
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe, recipe_names
from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from kitchen.engine.stage import Stage
from sandbox import bubblewrap_unavailable_reason

# A few steps of each recipe; a recipe missing here fails test_every_recipe_is_covered.
SMOKE_OVERRIDES: dict[str, list[str]] = {
    "sl_basic": ["data.max_steps=6", "checkpoint.save_every=3", "eval.every=3", "data.batch_size=8"],
    "chat_sl": ["data.max_steps=4", "checkpoint.save_every=2", "eval.every=2", "data.batch_size=8"],
    "dpo": ["data.max_steps=4", "checkpoint.save_every=2", "eval.every=2", "data.batch_size=4", "data.max_length=64"],
    "kto": ["data.max_steps=4", "checkpoint.save_every=2", "eval.every=2", "data.batch_size=4", "data.max_length=64"],
    "rm": ["data.max_steps=4", "checkpoint.save_every=2", "eval.every=2", "data.batch_size=4", "data.max_length=64"],
    "prm": ["data.max_steps=4", "checkpoint.save_every=2", "eval.every=2", "data.batch_size=4"],
    "online_dpo": [
        "data.max_steps=3",
        "checkpoint.save_every=2",
        "eval.every=2",
        "data.batch_size=4",
        "win_rate.prompts=4",
    ],
    "xpo": [
        "data.max_steps=3",
        "checkpoint.save_every=2",
        "eval.every=2",
        "data.batch_size=4",
        "win_rate.prompts=4",
    ],
    "nash_md": [
        "data.max_steps=3",
        "checkpoint.save_every=2",
        "eval.every=2",
        "data.batch_size=4",
        "win_rate.prompts=4",
    ],
    "math_rl": [
        "rl.num_batches=4",
        "checkpoint.save_every=2",
        "eval.every=2",
        "warm_start.steps=2",
        "rl.groups_per_batch=4",
    ],
    "rlhf": [
        "sft.data.max_steps=2",
        "preference_model.data.max_steps=2",
        "preference_model.judge_eval.pairs=4",
        "rl.rl.num_batches=2",
        "rl.rl.groups_per_batch=2",
        "rl.rl.group_size=3",
        "rl.win_rate.prompts=4",
    ],
    "env_rl": [
        "env=guess_number",
        "env.max_number=4",
        "rl.num_batches=4",
        "checkpoint.save_every=2",
        "warm_start.steps=2",
    ],
    "guess_number": [
        "rl.num_batches=4",
        "checkpoint.save_every=2",
        "eval.every=2",
        "warm_start.steps=2",
        "env.max_number=4",
    ],
    # The shipped teacher is local weights; on noop the teachers are base models.
    "distill_on_policy": [
        "datasets=[{name: arithmetic, prompts: arithmetic}]",
        "rl.num_batches=4",
        "checkpoint.save_every=2",
        "eval.every=2",
        "warm_start.steps=2",
        "rl.groups_per_batch=4",
    ],
    "code_rl": [
        "rl.num_batches=3",
        "checkpoint.save_every=2",
        "eval.every=2",
        "warm_start.steps=2",
        "rl.groups_per_batch=2",
        "rl.group_size=2",
        "sampling.max_tokens=16",
    ],
    "reward_fn_rl": [
        "rl.num_batches=3",
        "checkpoint.save_every=2",
        "eval.every=2",
        "warm_start.steps=2",
        "rl.groups_per_batch=4",
    ],
    "tool_rl": [
        "rl.num_batches=3",
        "checkpoint.save_every=2",
        "eval.every=2",
        "warm_start.steps=2",
        "rl.groups_per_batch=2",
    ],
    "lookup_agent": [
        "rl.num_batches=3",
        "checkpoint.save_every=2",
        "eval.every=2",
        "warm_start.steps=2",
        "rl.groups_per_batch=2",
        "rl.group_size=2",
        "env.num_eval_questions=2",
    ],
    "distill_prompt": [
        "teacher.model.checkpoint=null",
        "data.max_steps=4",
        "checkpoint.save_every=2",
        "eval.every=2",
        "data.batch_size=8",
    ],
    "gkd": [
        "gkd.teacher.checkpoint=null",
        "rl.num_batches=3",
        "warm_start.steps=2",
        "eval.every=2",
        "rl.groups_per_batch=4",
        "gkd.topk=4",
    ],
    "sdft": ["rl.num_batches=3", "warm_start.steps=2", "eval.every=2", "rl.groups_per_batch=4", "sdft.topk=4"],
    "distill_reasoning": ["data.max_steps=2", "checkpoint.save_every=2", "eval.every=2"],
    "search_tool": [
        "rl.num_batches=2",
        "rl.group_size=2",
        "rl.groups_per_batch=2",
        "eval.every=2",
        "warm_start.steps=2",
    ],
    "forecasting": ["rl.num_batches=2", "warm_start.steps=2", "eval.every=1", "rl.groups_per_batch=4"],
    "decisions": ["rl.num_batches=2", "warm_start.steps=2", "eval.every=1", "rl.groups_per_batch=2", "rl.group_size=4"],
    "text_arena": [
        "rl.num_batches=2",
        "warm_start.steps=2",
        "eval.every=1",
        "rl.groups_per_batch=4",
        "env.eval_games=4",
    ],
    "rubric_rl": [
        "rl.num_batches=2",
        "warm_start.steps=2",
        "eval.every=1",
        "rl.groups_per_batch=4",
        "grader.max_tokens=8",
    ],
    "rl_numerics_check": ["env.num_pages=3", "env.page_words=40", "rl.group_size=2"],
    "terminal_rl": [
        "rl.num_batches=1",
        "rl.group_size=2",
        "rl.groups_per_batch=3",
        "sampling.max_tokens=16",
        "warm_start.steps=2",
        "env.eval_episodes=1",
    ],
    "twenty_questions": [
        "rl.num_batches=2",
        "warm_start.steps=2",
        "eval.every=1",
        "rl.groups_per_batch=4",
        "rl.group_size=2",
        "env.answerer.checkpoint=null",
    ],
    "vlm_classifier": [
        "data.max_steps=2",
        "checkpoint.save_every=2",
        "eval.every=2",
        "data.batch_size=4",
        "eval.tasks=[{task: jsonl, name: classes, every: 2, limit: 3, "
        "settings: {dataset: recipes/data/vlm_classifier/test.jsonl, grader: exact}}]",
    ],
}


NEEDS_BUBBLEWRAP = {"terminal_rl"}  # its tasks' files sit at fixed paths, which only bubblewrap shows


def test_every_recipe_is_covered() -> None:
    assert sorted(SMOKE_OVERRIDES) == recipe_names()


PORTS = {"service": "ServiceBackend", "training": "TrainingClient", "sampling": "SamplingClient"}


class CallsByStage(Hooks):
    """Attributes each backend call to the stage running when it was made (these smoke runs are
    all in sync mode: one stage runs at a time)."""

    def __init__(self, backend: NoopBackend) -> None:
        self.backend = backend
        self.seen = 0
        self.undeclared: set[tuple[str, str]] = set()

    def after_stage(self, ctx: Context, stage: Stage, seconds: float) -> None:
        for kind, method, _ in self.backend.calls[self.seen :]:
            call = f"{PORTS[kind]}.{method}"
            if call not in stage.spec.calls:
                self.undeclared.add((stage.name, call))
        self.seen = len(self.backend.calls)


@pytest.mark.parametrize("name", sorted(SMOKE_OVERRIDES))
def test_recipe_runs_on_noop(name: str, tmp_path: Path) -> None:
    """...and every backend call a stage makes is among the calls its `calls` declares (what
    `kitchen validate` checks a backend against)."""
    if name in NEEDS_BUBBLEWRAP and bubblewrap_unavailable_reason() is not None:
        pytest.skip(f"{name} runs its tasks in bubblewrap only: {bubblewrap_unavailable_reason()}")
    recipe = get_recipe(name)
    config = load_config(recipe.config_cls, None, ["backend=noop", f"log_path={tmp_path}", *SMOKE_OVERRIDES[name]])
    backend = NoopBackend(seed=config.seed, checkpoint_dir=tmp_path / "checkpoints")
    calls = CallsByStage(backend)
    run_dir = run_recipe(recipe, config, hooks=[calls], progress=False, backend=backend)
    if name != "rlhf":  # rlhf runs its phases as sub-runs on a wrapped backend
        assert calls.seen > 0 and calls.undeclared == set()
    rows = read_metrics(run_dir.metrics)
    assert rows, "no metrics were logged"
    assert [row["step"] for row in rows] == list(range(len(rows)))
    assert all(any(key.startswith("time/") for key in row) for row in rows)
    records = read_records(run_dir.checkpoints)
    assert records and records[-1].name == "final"
    assert (run_dir.path / "config.yaml").exists() and (run_dir.path / "events.jsonl").exists()
