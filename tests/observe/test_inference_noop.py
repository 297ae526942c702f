"""kitchen sample / export on noop runs: checkpoint resolution and the export refusals (fast)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.apps.cli import main
from kitchen.apps.inference import export_checkpoint
from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.engine.launch import run_recipe
from kitchen.engine.runs.targets import resolve_checkpoint
from recipes.chat_sl import RECIPE as CHAT_SL


@pytest.fixture(scope="module")
def noop_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log = tmp_path_factory.mktemp("noop") / "run"
    overrides = ["backend=noop", "data.max_steps=2", "data.batch_size=4", "renderer=llama3", f"log_path={log}"]
    config = load_config(CHAT_SL.config_cls, None, overrides)
    return run_recipe(CHAT_SL, config, progress=False).path


def test_resolves_the_last_checkpoint_and_the_runs_renderer(noop_run: Path) -> None:
    target = resolve_checkpoint(str(noop_run))
    assert target.model_path is not None and target.model_path.startswith("noop://") and target.record is not None
    assert target.record.name == "final"
    assert target.config.backend == "noop" and target.renderer == "llama3"
    assert resolve_checkpoint(str(noop_run), renderer="role_colon").renderer == "role_colon"
    same = resolve_checkpoint(target.model_path, run_dir=noop_run)
    assert same.model_path == target.model_path and same.record == target.record


def test_sample_on_noop_is_seeded(noop_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sample", str(noop_run), "--prompt", "hi", "--seed", "3", "--max-tokens", "6"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    assert capsys.readouterr().out == first


def test_paths_outside_a_run_need_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="pass --run RUN_DIR"):
        resolve_checkpoint("tinker://abc/sampler_weights/final")
    assert main(["sample", str(tmp_path / "missing"), "--prompt", "x"]) == 2
    assert "checkpoint not found" in capsys.readouterr().err
    assert main(["sample", str(tmp_path), "--prompt", "x"]) == 2
    assert "pass --run RUN_DIR" in capsys.readouterr().err


def test_backends_without_export_say_what_to_do(
    noop_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", str(noop_run), "--out", str(tmp_path / "out")]) == 2
    assert "backend 'noop' cannot export checkpoints: the noop backend has no model weights" in capsys.readouterr().err
    tinker = resolve_checkpoint(str(noop_run), backend="tinker")
    with pytest.raises(ConfigError, match="tinker checkpoint download"):
        export_checkpoint(tinker, tmp_path / "out", merge_lora=False)
    assert not (tmp_path / "out").exists()
