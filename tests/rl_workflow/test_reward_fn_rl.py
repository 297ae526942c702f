"""reward_fn_rl: RL from a prompt data set and reward functions named module:function."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kitchen.apps.cli import main
from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError, DataError
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import configs_dir, get_recipe
from kitchen.engine.runner import StageFailure
from kitchen.engine.runs.metrics import read_metrics
from kitchen.families.rl.rewards import (
    Completion,
    resolve_reward_fn,
    resolve_reward_fns,
    score,
    score_group,
    weighted_total,
)

RECIPE = get_recipe("reward_fn_rl")
QUICK = [
    "backend=noop",
    "rl.num_batches=2",
    "rl.groups_per_batch=4",
    "eval.every=1",
    "checkpoint.save_every=0",
    "warm_start.steps=2",
]
MODES = {
    "sync": [],
    "stream_minibatch": ["rl.stream_minibatch.num_minibatches=2"],
    "async": ["rl.async_config.max_steps_off_policy=1"],
}
SHIPPED = configs_dir() / "reward_fn_rl.yaml"
T = "tests.rl_workflow.reward_fns_for_tests"


def run(tmp_path: Path, *overrides: str, config_file: Path | None = SHIPPED) -> list[dict[str, Any]]:
    config = load_config(RECIPE.config_cls, config_file, [*QUICK, f"log_path={tmp_path}", *overrides])
    return read_metrics(run_recipe(RECIPE, config, progress=False).metrics)


@pytest.mark.parametrize("mode", list(MODES))
def test_shipped_config_runs_on_noop_in_every_mode(tmp_path: Path, mode: str) -> None:
    rows = run(tmp_path, *MODES[mode])
    assert [row["step"] for row in rows] == [0, 1]
    for row in rows:
        assert {"env/prompts/score/length", "env/prompts/score/keyword", "eval/eval/reward/total"} <= row.keys()
        expected = 0.2 * row["env/all/score/length"] + row["env/all/score/keyword"]
        assert row["env/all/reward/total"] == pytest.approx(expected)


def test_the_reward_function_sees_prompt_completion_and_record(tmp_path: Path) -> None:
    rows = run(tmp_path, f"env.reward_fn=[{T}:sees_prompt_and_record, {T}:first_char_even]", "env.reward_weights={}")
    assert all(row["env/all/score/has_prompt"] == 1.0 and row["env/all/score/has_answer"] == 1.0 for row in rows)
    assert all("env/all/score/first_char_even" in row for row in rows)


def test_async_reward_functions_and_a_chat_format_data_set(tmp_path: Path) -> None:
    data = tmp_path / "chat.jsonl"
    records = [{"prompt": [{"role": "user", "content": f"Name {w}."}], "answer": w} for w in ("a", "b", "c", "d")]
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = run(
        tmp_path / "run",
        f"env.dataset={data}",
        "env.eval_dataset=null",
        "warm_start.steps=0",
        "env.reward_fn=recipes.rewards.examples:async_keyword_reward",
        "env.reward_weights={}",
        config_file=None,
    )
    assert all("env/all/score/async_keyword_reward" in row for row in rows)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "unknown reward function 'no_colon'.*or name one as module:function"),
        ("no_such_module_xyz:f", "module 'no_such_module_xyz' cannot be imported"),
        (f"{T}:missing", "has no 'missing'"),
        (f"{T}:NOT_A_FUNCTION", "is a int, not a function"),
    ],
)
def test_a_reward_function_that_cannot_be_resolved_is_a_config_error(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(RECIPE.config_cls, None, [f"env.reward_fn={spec}"])


def test_a_weight_naming_no_function_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="reward_weights names 'lenght'"):
        load_config(RECIPE.config_cls, None, [f"env.reward_fn={T}:first_char_even", "env.reward_weights={lenght: 1}"])


def test_cli_validate_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "reward_fn_rl", "env.reward_fn=no_such_module_xyz:f"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no_such_module_xyz" in err


def test_a_non_number_reward_fails_the_run_naming_the_function(tmp_path: Path) -> None:
    with pytest.raises(StageFailure, match=r"says_hello returned str 'hello'; a reward must be a number"):
        run(tmp_path, f"env.reward_fn={T}:says_hello", "env.reward_weights={}", "warm_start.steps=0")


def test_score_and_weights() -> None:
    fns = resolve_reward_fns(["recipes.rewards.examples:length_and_keyword", f"{T}:first_char_even"])
    scores = asyncio.run(score(fns, "p", "The sea", {"answer": "sea", "target_length": 7}))
    assert scores == {"length": 1.0, "keyword": 1.0, "first_char_even": 1.0}  # ord('T') = 84
    with pytest.raises(DataError, match="reward_weights names 'x'"):
        weighted_total(scores, {"x": 1.0})
    with pytest.raises(DataError, match="must be finite"):
        asyncio.run(score([resolve_reward_fn(f"{T}:infinite")], "p", "", {}))


@given(st.dictionaries(st.sampled_from("abcde"), st.floats(-5, 5), min_size=1), st.data())
def test_weighted_total_is_the_weighted_sum(scores: dict[str, float], data: st.DataObject) -> None:
    names = sorted(scores)
    weights = data.draw(st.dictionaries(st.sampled_from(names), st.floats(-3, 3)))
    expected = sum(weights.get(name, 1.0) * value for name, value in scores.items())
    assert weighted_total(scores, weights) == pytest.approx(expected)


def test_runs_on_the_local_backend_with_the_tiny_model(tmp_path: Path) -> None:
    rows = run(tmp_path, "backend=local", "rl.num_batches=1", "eval.every=0", "rl.group_size=2")
    assert rows[0]["step"] == 0 and rows[0]["tokens/trained"] > 0 and "optim/kl_sample_train_v2" in rows[0]


def test_trl_batched_reward_functions_beside_per_sample_ones(tmp_path: Path) -> None:
    """`def reward(completions, **kwargs) -> list[float]` used to fail with a TypeError."""
    fns = resolve_reward_fns([f"{T}:trl_length", f"{T}:first_char_even", f"{T}:trl_sees_columns"])
    assert [fn.batched for fn in fns] == [True, False, True]
    completions = [Completion("The sea", [1, 2]), Completion("ab", [3])]
    scores = asyncio.run(score_group(fns, "p", completions, {"prompt": "p", "answer": "sea"}))
    assert scores == [
        {"trl_length": 7.0, "first_char_even": 1.0, "trl_sees_columns": 1.0},
        {"trl_length": 2.0, "first_char_even": 0.0},  # None: not scored
    ]
    chat = asyncio.run(score_group(fns[:1], [{"role": "user", "content": "q"}], completions, {}))
    assert chat == [{"trl_length": 7.0}, {"trl_length": 2.0}]  # conversational: [{role, content}] each
    with pytest.raises(DataError, match=r"trl_wrong_length \(batched\) returned 1 values; it must return a list of 2"):
        asyncio.run(score_group(resolve_reward_fns([f"{T}:trl_wrong_length"]), "p", completions, {}))
    rows = run(tmp_path, f"env.reward_fn=[{T}:trl_length, {T}:first_char_even]", "env.reward_weights={trl_length: 0.1}")
    for row in rows:
        expected = 0.1 * row["env/all/score/trl_length"] + row["env/all/score/first_char_even"]
        assert row["env/all/reward/total"] == pytest.approx(expected)


def test_reward_modules_resolve_beside_the_config_and_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `my_rewards.py` beside the config file, or in the current directory, used to need PYTHONPATH=."""
    import sys

    monkeypatch.setattr(sys, "path", list(sys.path))
    folder, cwd = tmp_path / "configs", tmp_path / "work"
    folder.mkdir()
    cwd.mkdir()
    (folder / "beside_config_rewards_7f3.py").write_text("def score(prompt, completion, record):\n    return 1.0\n")
    (cwd / "in_cwd_rewards_7f3.py").write_text("def score(prompt, completion, record):\n    return 2.0\n")
    config_file = folder / "mine.yaml"
    config_file.write_text("env:\n  reward_fn: beside_config_rewards_7f3:score\nbackend: noop\n")
    monkeypatch.chdir(cwd)
    config = load_config(RECIPE.config_cls, config_file)
    assert config.env.reward_fn == ["beside_config_rewards_7f3:score"]  # type: ignore[attr-defined]
    fn = resolve_reward_fn("in_cwd_rewards_7f3:score")
    assert asyncio.run(score([fn], "p", "c", {})) == {"score": 2.0}
    with pytest.raises(ConfigError, match=r"looked in .*work"):
        load_config(RECIPE.config_cls, None, ["env.reward_fn=nowhere_rewards_7f3:score"])


def test_held_out_prompts_ask_about_subjects_the_model_can_name() -> None:
    """The old held-out prompts asked about words absent from training, which the tiny model never
    names: their keyword score was 0 whatever RL did, so eval could not show learning."""
    from recipes.data import shipped_data

    def records(name: str) -> list[dict[str, str]]:
        return [json.loads(line) for line in Path(shipped_data(f"reward_fn/{name}.jsonl")).read_text().splitlines()]

    def answers(name: str) -> set[str]:
        return {record["answer"] for record in records(name)}

    train_prompts = {record["prompt"] for record in records("prompts")}
    held_out = [record["prompt"] for record in records("eval")]
    assert answers("eval") <= answers("prompts") and not set(held_out) & train_prompts


@pytest.mark.slow
def test_shipped_example_learns(tmp_path: Path) -> None:
    """The shipped config used to lose reward (0.61 at step 1, 0.40 at step 20: the keyword score
    fell to 0). Now RL raises it on the train prompts: mean reward of the last 10 steps minus the
    first 10, measured (2026-11-26) over seeds 0-5: 0.12-0.22 (mean 0.18); with the learning rate
    changed by one part in a million (1.000001e-3): 0.02-0.19 (mean 0.14). A tiny model's RL run
    is chaotic at this scale: rounding-level changes move one seed's outcome by up to 0.15, so
    the test asserts the mean over two seeds (0.17 and 0.10 in those two series). The held-out
    reward is not asserted: its change from step 0 to step 39 was -0.20 to +0.29 across the same
    runs (seed 0: +0.12, and -0.09 with the perturbed rate), so it measures rounding, not
    learning."""
    gains = []
    for seed in (0, 1):
        overrides = [f"log_path={tmp_path / str(seed)}", "checkpoint.save_every=0", f"seed={seed}"]
        config = load_config(RECIPE.config_cls, SHIPPED, overrides)
        rows = read_metrics(run_recipe(RECIPE, config, progress=False).metrics)
        reward = [row["env/all/reward/total"] for row in rows]
        assert len(reward) == 40 and sum("eval/all/reward/total" in row for row in rows) == 5
        gains.append(sum(reward[-10:]) / 10 - sum(reward[:10]) / 10)
    assert sum(gains) / len(gains) > 0.05, gains
