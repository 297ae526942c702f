"""The shipped `rlhf_shorter` config (tinker-cookbook's `shorter`): RLHF's RL phase with the rule
judge `shorter` as tournament and win-rate judge. The judge's verdicts, the config on noop (no
preference model trained, the judge reaching the RL phase), and on the tiny model over three seeds
(slow): the trained policy's replies beat the SFT policy's for shortness."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe, resolve_config_path
from kitchen.engine.runner import StageFailure
from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from recipes.judges import get_judge
from tests.helpers import run_cli
from train_core.renderers.messages import Message

CONFIG = resolve_config_path("rlhf_shorter")
PROMPT = [Message(role="user", content="What is 2 + 2?")]
NOOP = (
    "backend=noop",
    "sft.data.max_steps=2",
    "rl.rl.num_batches=2",
    "rl.rl.groups_per_batch=2",
    "rl.rl.group_size=3",
    "rl.win_rate.prompts=4",
    "rl.eval.every=1",
)


def reply(text: str) -> Message:
    return Message(role="assistant", content=text)


def test_the_shorter_reply_wins_and_equal_lengths_tie() -> None:
    judge = get_judge("shorter")
    assert judge(PROMPT, reply("The answer is 4. Thank you!"), reply("4")) == 1.0
    assert judge(PROMPT, reply("4"), reply("The answer is 4.")) == -1.0
    assert judge(PROMPT, reply("four"), reply("4444")) == 0.0
    assert judge([], reply("a b"), reply("ab")) == 1.0  # it reads no prompt


def run(log_path: Path, *overrides: str, config: Path | None = CONFIG) -> None:
    recipe = get_recipe("rlhf")
    loaded = load_config(recipe.config_cls, config, [f"log_path={log_path}", *overrides])
    run_recipe(recipe, loaded, progress=False)


def test_the_shorter_config_runs_rl_on_the_sft_policy_with_the_rule_judge(tmp_path: Path) -> None:
    run(tmp_path, *NOOP, "phase=sft", config=None)
    run(tmp_path, *NOOP)
    assert not (tmp_path / "preference_model").exists()
    rl_config = yaml.safe_load((tmp_path / "rl" / "config.yaml").read_text())
    assert rl_config["tournament"]["judge"] == "shorter" and rl_config["win_rate"]["judge"] == "shorter"
    rows = read_metrics(tmp_path / "rl" / "metrics.jsonl")
    # one point per comparison, shared on a tie: a group's rewards average one half
    rewards = [row["env/all/reward/total"] for row in rows if "env/all/reward/total" in row]
    assert rewards == pytest.approx([0.5, 0.5])
    assert 0.0 <= rows[-1]["eval/win_rate"] <= 1.0
    assert read_records(tmp_path / "rl" / "checkpoints.jsonl")[-1].name == "final"


def test_without_an_sft_policy_the_config_says_what_to_run_first(tmp_path: Path) -> None:
    with pytest.raises(StageFailure, match="run phase=sft first"):
        run(tmp_path, *NOOP)


@pytest.fixture(scope="module")
def sft_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped SFT phase on the tiny model, once."""
    path = tmp_path_factory.mktemp("shorter_sft")
    result = run_cli("run", "rlhf", "phase=sft", f"log_path={path}")
    assert result.returncode == 0, result.stderr
    return path / "sft"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_shorter_config_makes_replies_shorter(sft_policy: Path, tmp_path: Path, seed: int) -> None:
    """For every seed the trained policy's replies beat the SFT policy's for shortness on held-out
    prompts (win rate by the same rule, both orderings) by at least 0.1 above even. Measured
    (2026-11-28, 2 cores, 10 steps, ~30 s each): 0.5 -> 0.72, 0.67, 0.665 (stderr 0.03); the SFT
    phase took about 3 minutes."""
    args = [f"seed={seed}", f"sft_checkpoint={sft_policy}", f"log_path={tmp_path}"]
    result = run_cli("run", "rlhf", "--config", str(CONFIG), *args)
    assert result.returncode == 0, result.stderr
    win_rates = [
        row["eval/win_rate"] for row in read_metrics(tmp_path / "rl" / "metrics.jsonl") if "eval/win_rate" in row
    ]
    assert win_rates[-1] >= 0.6, win_rates
