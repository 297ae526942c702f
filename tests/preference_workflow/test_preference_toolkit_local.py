"""The reward model, KTO and online DPO learn on the local backend (the embedded tiny model,
random-init, CPU); a trained reward model judges held-out pairs as a `RewardModelJudge` and
exports as a Hugging Face sequence-classification model that scores conversations as training
did."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from adapters.common.tokenizer import load_tokenizer
from kitchen.apps.cli import main
from kitchen.engine.backends import make_backend
from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import RunDir, run_recipe
from kitchen.engine.recipe import Recipe, get_recipe
from kitchen.engine.renderers import get_renderer
from kitchen.engine.runs.checkpoints import resolve_sampler_path
from kitchen.engine.runs.metrics import read_metrics
from kitchen.families.common.completers import RewardModelJudge
from kitchen.families.preference.bradley_terry import score_token_ids
from kitchen.families.preference.nash_md import nash_md_workflow
from kitchen.families.preference.online_dpo import online_dpo_workflow
from kitchen.families.preference.reward_model import read_comparisons
from kitchen.families.preference.xpo import xpo_workflow
from recipes.data import shipped_data
from recipes.nash_md import Config as NashMDConfig
from recipes.online_dpo import Config as OnlineDPOConfig
from recipes.rm import Config as RMConfig
from recipes.xpo import Config as XPOConfig
from train_core.preference.bradley_terry import conversation_tokens
from train_core.preference.types import LabeledComparison
from train_core.renderers.base import Message, Renderer

pytestmark = pytest.mark.slow  # each trains the tiny model for 10-16 steps: 15-40 s on 2 cores

LOCAL = ["backend=local", "local.device=cpu", "renderer=role_colon", "checkpoint.save_every=0"]
HELD_OUT = shipped_data("preference/polite_arithmetic_test.jsonl")


@pytest.fixture(scope="module")
def held_out_subset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 24 held-out comparisons (a faster evaluation)."""
    path = tmp_path_factory.mktemp("data") / "held_out.jsonl"
    path.write_text("".join(Path(HELD_OUT).read_text(encoding="utf-8").splitlines(keepends=True)[:24]))
    return path


def _run(recipe: Recipe, log_path: Path, *overrides: str) -> RunDir:
    config = load_config(recipe.config_cls, None, [f"log_path={log_path}", *LOCAL, *overrides])
    return run_recipe(recipe, config, progress=False)


def test_reward_model_learns_and_exports_as_a_sequence_classifier(tmp_path: Path, held_out_subset: Path) -> None:
    run = _run(
        get_recipe("rm"), tmp_path / "rm", "data.max_steps=10", "eval.every=10", "data.batch_size=8",
        "data.max_length=64",
        f"data.eval_dataset={held_out_subset}",
    )  # fmt: skip
    rows = read_metrics(run.metrics)
    final = rows[-1]
    assert rows[0]["rm_loss"] > 0.5 and final["rm_loss"] < 0.5 * rows[0]["rm_loss"]
    assert final["eval/accuracy"] >= 0.9 and final["eval/margin"] > 1.0

    out = tmp_path / "export"
    assert main(["export", str(run.path), "--out", str(out)]) == 0
    info = json.loads((out / "kitchen_export.json").read_text())
    assert info["reward_model"]["class"].endswith("ForSequenceClassification")
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    renderer = get_renderer("role_colon", load_tokenizer("tiny"))
    comparisons = read_comparisons(str(held_out_subset), "comparisons", 64)
    assert asyncio.run(judge_verdicts(run, renderer, comparisons[:8])) == [1] * 8
    logged = [
        json.loads(line) for line in (run.path / "reward_examples" / "step_000009.jsonl").read_text().splitlines()
    ]
    for labeled, record in zip(comparisons[:4], logged[:4], strict=True):
        prompt = labeled.comparison.prompt_conversation
        for completion, key in (
            (labeled.comparison.completion_A, "chosen_score"),
            (labeled.comparison.completion_B, "rejected_score"),
        ):
            tokens = conversation_tokens(renderer, prompt, completion)
            with torch.no_grad():
                score = model(input_ids=torch.tensor([tokens])).logits[0, 0].item()
            assert score == pytest.approx(record[key], abs=1e-3)


async def judge_verdicts(run: RunDir, renderer: Renderer, comparisons: Sequence[LabeledComparison]) -> list[int]:
    """The trained reward model as a judge (what online DPO uses) on held-out pairs asked with the
    chosen completion as B: +1 where it prefers it."""
    config = load_config(RMConfig, None, [f"log_path={run.path}", *LOCAL])
    service = make_backend(config, run.path / "judge_checkpoints")
    try:
        client = await service.create_sampling_client(model_path=resolve_sampler_path(str(run.path)))
        judge = RewardModelJudge(
            client, renderer, score_token_ids(service.get_tokenizer("tiny"), config.reward_model.score_tokens)
        )
        verdicts = []
        for labeled in comparisons:
            chosen, rejected = labeled.chosen_and_rejected()
            verdict = await judge(labeled.comparison.prompt_conversation, rejected[0], chosen[0])
            verdicts.append(int(verdict > 0) - int(verdict < 0))
        return verdicts
    finally:
        await service.close()


def test_kto_learns_from_unpaired_examples(tmp_path: Path, held_out_subset: Path) -> None:
    run = _run(
        get_recipe("kto"), tmp_path / "kto", "data.max_steps=10", "eval.every=5", "data.batch_size=8",
        "data.max_length=64",
        f"data.eval_dataset={held_out_subset}",
    )  # fmt: skip
    rows = read_metrics(run.metrics)
    assert rows[0]["kto_loss"] == pytest.approx(0.5, abs=1e-6)  # the policy starts as the reference
    evals = [row for row in rows if "eval/kto_loss" in row]
    assert len(evals) == 2
    assert evals[-1]["eval/kto_loss"] < 0.45
    assert evals[-1]["eval/reward_margin"] > 0.5 and evals[-1]["eval/accuracy"] > 0.75


class TokenRangeJudge:
    """Prefers the reply with more tokens whose ids lie in one fixed range (about a tenth of the
    vocabulary): a preference the random-init tiny model can learn from a few hundred pairs.
    Records each judged pair's mean count."""

    def __init__(self) -> None:
        self.tokenizer = load_tokenizer("tiny")
        self.mean_counts: list[float] = []

    def count(self, message: Message) -> int:
        return sum(1000 <= t < 1300 for t in self.tokenizer.encode(message["content"], add_special_tokens=False))

    def __call__(self, prompt: Sequence[Message], completion_A: Message, completion_B: Message) -> float:
        a, b = self.count(completion_A), self.count(completion_B)
        self.mean_counts.append((a + b) / 2)
        return float((b > a) - (b < a))


def test_online_dpo_learns_what_its_judge_prefers(tmp_path: Path) -> None:
    judge = TokenRangeJudge()
    recipe = Recipe("online_dpo_token_range", "test", OnlineDPOConfig, lambda config: online_dpo_workflow(judge))
    steps, prompts = 16, 16
    run = _run(
        recipe, tmp_path / "online", f"data.max_steps={steps}", f"eval.every={steps}", f"data.batch_size={prompts}",
        "sampling.max_tokens=8", "optimizer.learning_rate=1e-2", "win_rate.prompts=32", "win_rate.max_tokens=8",
    )  # fmt: skip
    rows = read_metrics(run.metrics)
    sampled = judge.mean_counts[: steps * prompts]
    first, last = sum(sampled[: 4 * prompts]) / (4 * prompts), sum(sampled[-4 * prompts :]) / (4 * prompts)
    assert last > first + 0.3, f"preferred tokens per reply {first:.2f} -> {last:.2f}"
    assert rows[-1]["eval/win_rate"] > 0.5 + 2 * rows[-1]["eval/win_rate_stderr"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_xpo_learns_what_its_judge_prefers(tmp_path: Path, seed: int) -> None:
    """XPO's pairs are one policy and one reference completion: the mean count of the judged pairs
    rises only through the policy's half, and the policy ends up beating the reference. Measured
    (2 CPU cores): counts +0.38 to +0.61, win rates 0.66 to 0.81 (stderr 0.05 to 0.07), ~10 s a seed."""
    judge = TokenRangeJudge()
    recipe = Recipe("xpo_token_range", "test", XPOConfig, lambda config: xpo_workflow(judge))
    steps, prompts = 16, 16
    run = _run(
        recipe, tmp_path / "xpo", f"seed={seed}", f"data.max_steps={steps}", f"eval.every={steps}",
        f"data.batch_size={prompts}", "sampling.max_tokens=8", "optimizer.learning_rate=1e-2", "win_rate.prompts=32",
        "win_rate.max_tokens=8",
    )  # fmt: skip
    rows = read_metrics(run.metrics)
    sampled = judge.mean_counts[: steps * prompts]
    first, last = sum(sampled[: 4 * prompts]) / (4 * prompts), sum(sampled[-4 * prompts :]) / (4 * prompts)
    assert last > first + 0.2, f"preferred tokens per reply {first:.2f} -> {last:.2f}"
    assert rows[-1]["eval/win_rate"] > 0.6, rows[-1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nash_md_learns_what_its_judge_prefers(tmp_path: Path, seed: int) -> None:
    """Nash-MD trains the policy on its own completions, judged against the policy-reference
    mixture's: the judged win rate against the reference rises between the first evaluation and
    the last, to clearly above a half. `dpo.beta` 0.01: at TRL's 0.1 the KL term holds the tiny
    model near the reference for this many steps. Measured (2 CPU cores, seeds 0 to 2): win rates
    at steps 7 / 15 / 23 of 0.53 / 0.70 / 0.88, 0.59 / 0.80 / 0.80, 0.77 / 0.94 / 0.95."""
    judge = TokenRangeJudge()
    recipe = Recipe("nash_md_token_range", "test", NashMDConfig, lambda config: nash_md_workflow(judge))
    steps, prompts = 24, 16
    run = _run(
        recipe, tmp_path / "nash_md", f"seed={seed}", f"data.max_steps={steps}", "eval.every=8",
        f"data.batch_size={prompts}", "sampling.max_tokens=8", "optimizer.learning_rate=1e-2", "dpo.beta=0.01",
        "win_rate.prompts=32", "win_rate.max_tokens=8",
    )  # fmt: skip
    evals = [row for row in read_metrics(run.metrics) if "eval/win_rate" in row]
    assert [row["step"] for row in evals] == [7, 15, 23]
    first, last = evals[0], evals[-1]
    assert last["eval/win_rate"] > first["eval/win_rate"] + 0.1, evals
    assert last["eval/win_rate"] > 0.5 + 2 * last["eval/win_rate_stderr"], last
