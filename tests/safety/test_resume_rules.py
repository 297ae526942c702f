"""Resume rules: fingerprints per key, resume_allow_changes, config history, finished runs,
load_checkpoint_path identity, corrupt-checkpoint fallback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from tests.safety.helpers import FAST, assert_one_error_line, cli, finished_run, snapshot

CHANGES = {
    "data.batch_size": "8",
    "seed": "3",
    "optimizer.learning_rate": "0.01",
    "lora_rank": "4",
    "model_name": "other-model",
    "data.max_length": "64",
    "optimizer.lr_schedule": "cosine",
    "optimizer.warmup_steps": "2",
}


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_changed_key_is_refused_then_allowed(key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "run"
    before = finished_run(capsys, log, "data.max_steps=4")
    change = f"{key}={CHANGES[key]}"
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=6", f"log_path={log}", change)
    assert_one_error_line(code, err, f"{key}:", f"resume_allow_changes=[{key}]")
    assert snapshot(log) == before
    if key in {"model_name", "lora_rank"}:
        return  # the checkpoint itself cannot load into another model: allowing it is the backend's call
    allow = f"resume_allow_changes=[{key}]"
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=6", f"log_path={log}", change, allow)
    assert code == 0, err
    history = (log / "config_history.yaml").read_text()
    assert history.count("# replaced") == 1 and "max_steps: 4" in history


def test_changed_data_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from recipes.data import shipped_data

    data = tmp_path / "train.jsonl"
    data.write_bytes(Path(shipped_data("sl_basic/train.jsonl")).read_bytes())
    log = tmp_path / "run"
    finished_run(capsys, log, "data.max_steps=4", f"data.dataset={data}")
    with data.open("a") as handle:
        handle.write('{"prompt": "new", "completion": "row"}\n')
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=6", f"log_path={log}", f"data.dataset={data}")
    assert_one_error_line(code, err, "dataset#file")


def test_safe_keys_change_freely(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "run"
    finished_run(capsys, log, "data.max_steps=4")
    code, _, err = cli(
        capsys,
        "run",
        "sl_basic",
        *FAST,
        "data.max_steps=6",
        "checkpoint.save_every=3",
        "eval.every=3",
        f"log_path={log}",
    )
    assert code == 0, err
    assert [row["step"] for row in read_metrics(log / "metrics.jsonl")] == list(range(6))


def test_finished_run_is_not_trained_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "run"
    before = finished_run(capsys, log)
    code, out, err = cli(capsys, "run", "sl_basic", *FAST, f"log_path={log}")
    assert code == 0, err
    assert "already complete" in out and "5 steps" in out
    assert snapshot(log) == before


def test_raising_max_steps_continues_a_finished_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "run"
    finished_run(capsys, log)
    code, out, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=8", f"log_path={log}")
    assert code == 0, err
    assert "step 6/8" in err + out and "step 9" not in err + out
    assert [row["step"] for row in read_metrics(log / "metrics.jsonl")] == list(range(8))
    finals = [r for r in read_records(log / "checkpoints.jsonl") if r.final]
    assert [r.step for r in finals] == [5, 8]
    code, out, _ = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=8", f"log_path={log}")
    assert code == 0 and "already complete" in out and "8 steps" in out


def test_load_checkpoint_path_must_match_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from adapters.noop.backend import NoopBackend
    from kitchen.engine.config.loading import load_config
    from kitchen.engine.errors import ConfigError
    from kitchen.engine.launch import run_recipe
    from kitchen.engine.recipe import get_recipe

    source = tmp_path / "source"
    finished_run(capsys, source, "lora_rank=4")
    record = read_records(source / "checkpoints.jsonl")[-1]
    recipe = get_recipe("sl_basic")
    target = tmp_path / "target"
    config = load_config(
        recipe.config_cls, None, [*FAST, f"log_path={target}", f"load_checkpoint_path={record.state_path}"]
    )
    backend = NoopBackend(checkpoint_dir=source / "checkpoints")
    with pytest.raises(ConfigError, match=r"lora_rank=4.*'tiny' with lora_rank=None"):
        run_recipe(recipe, config, progress=False, backend=backend)
    assert not (target / "metrics.jsonl").exists()


def _corrupt(run: Path, name: str) -> None:
    record = next(r for r in read_records(run / "checkpoints.jsonl") if r.name == name)
    first = sorted(record.files)[0]
    path = run / first
    path.write_bytes(path.read_bytes()[:-3])


def test_corrupt_latest_checkpoint_falls_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "run"
    finished_run(capsys, log, "data.max_steps=5")
    _corrupt(log, "final")
    code, _out, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=5", f"log_path={log}")
    assert code == 0, err
    assert "checkpoint.skipped" in err and "checkpoint=final" in err
    assert "checkpoint=000004" in err  # resumed from the newest intact one
    events = [json.loads(line) for line in (log / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "checkpoint.skipped" for e in events)
    assert [row["step"] for row in read_metrics(log / "metrics.jsonl")] == list(range(5))


def test_missing_checkpoint_file_falls_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "run"
    finished_run(capsys, log, "data.max_steps=5")
    record = read_records(log / "checkpoints.jsonl")[-1]
    for name in record.files:
        (log / name).unlink()
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=5", f"log_path={log}")
    assert code == 0, err
    assert "is missing" in err


def test_no_intact_checkpoint_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "run"
    finished_run(capsys, log, "data.max_steps=5")
    for name in ("000002", "000004", "final"):
        _corrupt(log, name)
    before = snapshot(log)
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=5", f"log_path={log}")
    assert_one_error_line(code, err, "no intact checkpoint", "000002", "final")
    assert snapshot(log) == before


def test_old_records_without_fingerprint_still_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "run"
    finished_run(capsys, log, "data.max_steps=4")
    lines = (log / "checkpoints.jsonl").read_text().splitlines()
    old = []
    for line in lines:
        data = json.loads(line)
        for key in ("fingerprint", "files", "final"):
            data.pop(key)
        old.append(json.dumps(data))
    (log / "checkpoints.jsonl").write_text("\n".join(old[:-1]) + "\n")  # drop final: an interrupted old run
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=6", f"log_path={log}", "data.batch_size=8")
    assert code == 0, err


def test_overwrite_starts_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "run"
    finished_run(capsys, log, "data.max_steps=4")
    code, _, err = cli(
        capsys, "run", "sl_basic", *FAST, "data.max_steps=3", "resume=never", "overwrite=true", f"log_path={log}"
    )
    assert code == 0, err
    assert [row["step"] for row in read_metrics(log / "metrics.jsonl")] == [0, 1, 2]
    assert [r.name for r in read_records(log / "checkpoints.jsonl")] == ["000002", "final"]


def test_finished_run_with_a_changed_config_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It used to print "already complete" and exit 0, as if the changed run had been trained."""
    log = tmp_path / "run"
    before = finished_run(capsys, log)
    code, out, err = cli(
        capsys, "run", "sl_basic", *FAST, f"log_path={log}", "optimizer.learning_rate=0.01", "data.batch_size=8"
    )
    assert_one_error_line(code, err, "already complete", "batch_size: 32 -> 8", "learning_rate:")
    assert "resume_allow_changes=[data.batch_size,optimizer.learning_rate]" in err and "already complete" not in out
    assert snapshot(log) == before
    code, _, err = cli(capsys, "validate", "sl_basic", *FAST, f"log_path={log}", "optimizer.learning_rate=0.01")
    assert_one_error_line(code, err, "already complete", "learning_rate:")
    code, _, err = cli(capsys, "run", "chat_sl", *FAST, f"log_path={log}")  # another recipe, same directory
    assert_one_error_line(code, err, "already complete", "recipe: 'sl_basic' -> 'chat_sl'")
    assert snapshot(log) == before
    allow = "resume_allow_changes=[optimizer.learning_rate]"
    code, out, err = cli(capsys, "run", "sl_basic", *FAST, f"log_path={log}", "optimizer.learning_rate=0.01", allow)
    assert code == 0 and "already complete" in out, err


def test_every_held_out_data_key_is_safe_to_change_on_resume() -> None:
    """Where held-out data comes from changes nothing trained (kitchen 0.2 treated every `eval*` key
    so): every recipe's `eval_dataset` / `eval_split`, in whichever section (an RL env's too)."""
    from kitchen.apps.cli_tools import config_keys
    from kitchen.engine.recipe import get_recipe, recipe_names
    from kitchen.engine.runs.rundir import key_role

    unsafe = [
        f"{name}: {key}"
        for name in recipe_names()
        for key, *_ in config_keys(get_recipe(name).config_cls)
        if key.rsplit(".", 1)[-1] in {"eval_dataset", "eval_split"}
        and key_role(get_recipe(name).config_cls, tuple(key.split("."))) != "safe"
    ]
    assert unsafe == []


def test_a_resumed_rl_run_may_change_its_env_eval_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from recipes.data import shipped_data

    held_out = tmp_path / "eval.jsonl"
    held_out.write_text(Path(shipped_data("reward_fn/eval.jsonl")).read_text().splitlines()[0] + "\n")
    log = tmp_path / "run"
    args = ["run", "reward_fn_rl", "backend=noop", "warm_start.steps=0", "rl.groups_per_batch=2", f"log_path={log}"]
    assert cli(capsys, *args, "rl.num_batches=2")[0] == 0
    code, _, err = cli(capsys, *args, "rl.num_batches=3", f"env.eval_dataset={held_out}")
    assert code == 0, err
    assert [row["step"] for row in read_metrics(log / "metrics.jsonl")] == [0, 1, 2]
