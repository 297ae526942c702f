"""Bad input through the CLI: one clear line on stderr, exit code 2, no traceback (a runtime
failure: one line, exit code 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.apps import cli
from kitchen.apps.cli import main
from kitchen.engine.errors import RuntimeFailure
from kitchen.engine.runner import StageFailure


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err
    return code, err


def test_unknown_key(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, "validate", "sl_basic", "batch_sise=4")
    assert code == 2
    assert "unknown key 'batch_sise'" in err and "did you mean 'data.batch_size'" in err
    assert "Traceback" not in err


def test_bad_type_names_key(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, "validate", "sl_basic", "optimizer.learning_rate=fast")
    assert code == 2 and "learning_rate" in err and "valid number" in err


def test_bad_type_in_yaml_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("seed: 1\ndata:\n  batch_size: lots\n")
    code, err = run(capsys, "validate", "sl_basic", "--config", str(config))
    assert code == 2 and f"{config} line 3: data.batch_size" in err


def test_missing_config_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, "run", "sl_basic", "--config", "/nonexistent/cfg.yaml")
    assert code == 2 and "config file not found: /nonexistent/cfg.yaml" in err


def test_unknown_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, "run", "sl_fancy")
    assert code == 2 and "unknown recipe 'sl_fancy'" in err and "sl_basic" in err


def test_malformed_jsonl_line_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": "a", "completion": "b"}\n{"prompt": "c", "completion": \n')
    log = tmp_path / "run"
    code, err = run(
        capsys, "run", "sl_basic", "backend=noop", f"data.dataset={data}", "data.eval_dataset=null", f"log_path={log}"
    )
    assert code == 2
    assert f"{data} line 2: invalid JSON" in err
    # preflight reads every JSONL line, so the run stops before it creates the run directory
    assert not (log / "config.yaml").exists()


def test_missing_key_in_jsonl_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": "a", "completion": "b"}\n{"prompt": "c"}\n')
    code, err = run(capsys, "run", "sl_basic", "backend=noop", f"data.dataset={data}", f"log_path={tmp_path / 'r'}")
    assert code == 2 and f"{data} line 2: missing key 'completion' or 'text'" in err


def test_missing_dataset_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(
        capsys, "run", "sl_basic", "backend=noop", f"data.dataset={tmp_path}/none.jsonl", f"log_path={tmp_path / 'r'}"
    )
    assert code == 2 and f"{tmp_path}/none.jsonl: no such file" in err


def test_debug_shows_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    from kitchen.engine.errors import ConfigError

    with pytest.raises(ConfigError):
        main(["--debug", "validate", "sl_basic", "batch_sise=4"])


def test_validate_ok_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "chat_sl", "--config", "recipes/configs/chat_sl.yaml"]) == 0
    assert "is wired correctly" in capsys.readouterr().out
    assert main(["show", "sl_basic"]) == 0
    tree = capsys.readouterr().out
    assert "loop train over num_steps (step)" in tree and "submit_train_step (SubmitTrainStep)" in tree


def test_ls_lists_recipes_and_configs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ls"]) == 0
    out = capsys.readouterr().out
    assert "sl_basic" in out and "chat_sl" in out and "configs/sl_basic.yaml" in out


def test_overrides_may_come_before_or_after_config(capsys: pytest.CaptureFixture[str]) -> None:
    config = "recipes/configs/sl_basic.yaml"
    assert main(["validate", "sl_basic", "--config", config, "data.batch_size=4"]) == 0
    assert main(["validate", "sl_basic", "seed=2", "--config", config, "data.batch_size=4"]) == 0
    code, err = run(capsys, "validate", "sl_basic", "--config", config, "data.batch_size=none")
    assert code == 2 and "batch_size" in err
    with pytest.raises(SystemExit) as info:
        main(["validate", "sl_basic", "--config", config, "--bogus"])
    assert info.value.code == 2


@pytest.mark.parametrize("wrapped", [False, True])
def test_a_runtime_failure_exits_1_with_one_line_and_the_resume_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], wrapped: bool
) -> None:
    lost = RuntimeFailure("distributed training: worker 1 died during optim_step on node 10.0.0.7")

    def dispatch(args: object) -> None:
        raise StageFailure("train_step", lost) if wrapped else lost

    monkeypatch.setattr(cli, "_dispatch", dispatch)
    code, err = run(capsys, "run", "sl_basic")
    assert code == 1  # not 2: the input was fine, the machinery broke
    assert "worker 1 died during optim_step on node 10.0.0.7" in err
    assert "Traceback" not in err and "--debug" not in err
    assert "rerun the same command to resume" in err
    assert not StageFailure("train_step", lost).is_user_error
