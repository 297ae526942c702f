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

# A few steps of each recipe; a recipe missing here fails test_every_recipe_is_covered.
SMOKE_OVERRIDES: dict[str, list[str]] = {
    "sl_basic": ["max_steps=6", "save_every=3", "eval_every=3", "batch_size=8"],
    "chat_sl": ["max_steps=4", "save_every=2", "eval_every=2", "batch_size=8"],
    "dpo": ["max_steps=4", "save_every=2", "eval_every=2", "batch_size=4", "max_length=64"],
    "kto": ["max_steps=4", "save_every=2", "eval_every=2", "batch_size=4", "max_length=64"],
    "rm": ["max_steps=4", "save_every=2", "eval_every=2", "batch_size=4", "max_length=64"],
    "online_dpo": ["max_steps=3", "save_every=2", "eval_every=2", "batch_size=4", "win_rate_prompts=4"],
    "math_rl": ["num_batches=4", "save_every=2", "eval_every=2", "warm_start_steps=2", "groups_per_batch=4"],
    "rlhf": [
        "sft.max_steps=2",
        "preference_model.max_steps=2",
        "preference_model.judge_eval_pairs=4",
        "rl.num_batches=2",
        "rl.groups_per_batch=2",
        "rl.group_size=3",
        "rl.win_rate_prompts=4",
    ],
    "env_rl": ["env=guess_number", "env_args.max_number=4", "num_batches=4", "save_every=2", "warm_start_steps=2"],
    "guess_number": ["num_batches=4", "save_every=2", "eval_every=2", "warm_start_steps=2", "max_number=4"],
    # The shipped teacher is local weights; on noop the teachers are base models.
    "distill_on_policy": [
        "datasets=[{name: arithmetic, prompts: arithmetic}]",
        "num_batches=4",
        "save_every=2",
        "eval_every=2",
        "warm_start_steps=2",
        "groups_per_batch=4",
    ],
    "code_rl": [
        "num_batches=3",
        "save_every=2",
        "eval_every=2",
        "warm_start_steps=2",
        "groups_per_batch=2",
        "group_size=2",
        "max_tokens=16",
    ],
    "reward_fn_rl": ["num_batches=3", "save_every=2", "eval_every=2", "warm_start_steps=2", "groups_per_batch=4"],
    "tool_rl": ["num_batches=3", "save_every=2", "eval_every=2", "warm_start_steps=2", "groups_per_batch=2"],
    "lookup_agent": [
        "num_batches=3",
        "save_every=2",
        "eval_every=2",
        "warm_start_steps=2",
        "groups_per_batch=2",
        "group_size=2",
        "num_eval_questions=2",
    ],
    "distill_prompt": ["teacher.checkpoint=null", "max_steps=4", "save_every=2", "eval_every=2", "batch_size=8"],
    "vlm_classifier": [
        "max_steps=2",
        "save_every=2",
        "eval_every=2",
        "batch_size=4",
        "evals=[{task: jsonl, name: classes, every: 2, limit: 3, "
        "settings: {dataset: recipes/data/vlm_classifier/test.jsonl, grader: exact}}]",
    ],
}


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
