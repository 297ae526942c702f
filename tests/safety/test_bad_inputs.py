"""Every bad input from issue 16, through `kitchen run` and `kitchen validate`: exit code 2, one
line naming the cause, no traceback, and nothing already in the run directory lost or changed."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.safety.helpers import FAST, assert_one_error_line, cli, snapshot

SECRET = "sk-planted-override-value-123456"
BOMB = """a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


NOT_UTF8_JSONL = b'{"prompt": "a", "completion": "b"}\n{"prompt": "\xff"}\n'
NOT_UTF8_JSON = b'[{"prompt": "\xfe"}]'


GOOD_LINE = b'{"prompt": "a", "completion": "b"}\n'


def _data(tmp: Path, second_line: str, name: str = "bad.jsonl") -> Path:
    """A data file whose line 2 is `second_line` (line 1 is a good record)."""
    return _file(tmp, name, GOOD_LINE + second_line.encode() + b"\n")


def _dataset(tmp: Path, second_line: str) -> list[str]:
    """A train file whose line 2 is `second_line`, accepted as a change by the resume check (so the
    error must come from reading the data)."""
    return [f"data.dataset={_data(tmp, second_line)}", "resume_allow_changes=[data.dataset,data.dataset#file]"]


def _table(tmp: Path, name: str, data: bytes) -> list[str]:
    """A train file other than JSONL (read through HF `datasets`), accepted as a change."""
    return [f"data.dataset={_file(tmp, name, data)}", "resume_allow_changes=[data.dataset,data.dataset#file]"]


def _file(tmp: Path, name: str, data: bytes) -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


def _dir(tmp: Path, name: str) -> Path:
    path = tmp / name
    path.mkdir()
    (path / "part-0").write_text("{}\n")
    return path


# name -> (build extra args from (tmp_path, run_dir), text the error line must contain)
Case = Callable[[Path, Path], list[str]]
CASES: dict[str, tuple[Case, tuple[str, ...]]] = {
    "dataset_is_directory": (
        lambda t, r: [f"data.dataset={_dir(t, 'train.jsonl')}"],
        ("train.jsonl", "is a directory"),
    ),
    "dataset_json_is_directory": (lambda t, r: [f"data.dataset={_dir(t, 'train.json')}"], ("is a directory",)),
    "dataset_parquet_is_directory": (lambda t, r: [f"data.dataset={_dir(t, 'train.parquet')}"], ("is a directory",)),
    "eval_dataset_is_directory": (
        lambda t, r: [f"data.eval_dataset={_dir(t, 'e.jsonl')}"],
        ("eval_dataset", "e.jsonl"),
    ),
    "dataset_missing": (lambda t, r: [f"data.dataset={t}/none.jsonl"], ("none.jsonl", "no such file")),
    "dataset_not_utf8": (
        lambda t, r: ["data.dataset=" + str(_file(t, "bad.jsonl", NOT_UTF8_JSONL))],
        ("bad.jsonl line 2", "not UTF-8", "byte offset 47"),
    ),
    "dataset_json_not_utf8": (
        lambda t, r: ["data.dataset=" + str(_file(t, "bad.json", NOT_UTF8_JSON))],
        ("bad.json line 1", "not UTF-8"),
    ),
    "log_path_is_file": (lambda t, r: [f"log_path={_file(t, 'afile', b'x')}"], ("afile", "is a file")),
    "log_path_under_file": (lambda t, r: [f"log_path={_file(t, 'afile', b'x')}/run"], ("which is a file",)),
    "log_path_not_a_run_dir": (
        lambda t, r: [f"log_path={_file(t, 'photos', b'') and _dir(t, 'mine')}"],
        ("not a kitchen run directory",),
    ),
    "log_path_unwritable_proc": (lambda t, r: ["log_path=/proc/kitchen-safety-test/run"], ("/proc",)),
    "resume_never_on_existing_run": (lambda t, r: ["resume=never"], ("overwrite=true",)),
    "learning_rate_inf": (lambda t, r: ["optimizer.learning_rate=.inf"], ("learning_rate",)),
    "learning_rate_nan": (lambda t, r: ["optimizer.learning_rate=.nan"], ("learning_rate",)),
    "adam_eps_inf": (lambda t, r: ["optimizer.adam_eps=.inf"], ("adam_eps",)),
    "weight_decay_inf": (lambda t, r: ["optimizer.weight_decay=.inf"], ("weight_decay",)),
    "batch_size_bool": (lambda t, r: ["data.batch_size=true"], ("batch_size",)),
    "seed_bool": (lambda t, r: ["seed=true"], ("seed",)),
    "lora_rank_bool": (lambda t, r: ["lora_rank=true"], ("lora_rank",)),
    "max_bad_steps_negative": (lambda t, r: ["max_bad_steps=-1"], ("max_bad_steps",)),
    "device_tpu": (lambda t, r: ["local.device=tpu"], ("local.device", "tpu")),
    "yaml_alias_bomb": (
        lambda t, r: ["--config", str(_file(t, "bomb.yaml", BOMB.encode()))],
        ("bomb.yaml", "expands to more than"),
    ),
    "config_not_utf8": (
        lambda t, r: ["--config", str(_file(t, "c.yaml", b"seed: 1\nmodel_name: \xff\n"))],
        ("c.yaml line 2", "not UTF-8"),
    ),
    "config_is_directory": (lambda t, r: ["--config", str(_dir(t, "conf.yaml"))], ("is a directory",)),
    "config_duplicate_key": (
        lambda t, r: ["--config", str(_file(t, "dup.yaml", b"seed: 1\nbatch_size: 4\nseed: 2\n"))],
        ("dup.yaml line 3", "key 'seed' given twice (line 1 and line 3)"),
    ),
    "dataset_nested_1000_deep": (
        lambda t, r: _dataset(t, '{"prompt": "a", "completion": "b", "x": ' + "[" * 1000 + "]" * 1000 + "}"),
        ("bad.jsonl line 2", "nested too deeply"),
    ),
    "secret_override": (lambda t, r: [f"api_key={SECRET}"], ("api_key", "environment")),
    "secret_token_override": (lambda t, r: [f"tinker.hf_token={SECRET}"], ("hf_token",)),
    "secret_in_config_file": (
        lambda t, r: ["--config", str(_file(t, "s.yaml", f"seed: 1\napi_key: {SECRET}\n".encode()))],
        ("s.yaml line 2", "api_key"),
    ),
    "prompt_is_number": (
        lambda t, r: _dataset(t, '{"prompt": 5, "completion": "b"}'),
        ("bad.jsonl line 2", "'prompt' must be a string", "int"),
    ),
    "completion_is_object": (
        lambda t, r: _dataset(t, '{"prompt": "a", "completion": {"x": 1}}'),
        ("bad.jsonl line 2", "'completion' must be a string", "dict"),
    ),
    "text_is_mixed_list": (
        lambda t, r: _dataset(t, '{"text": ["a", 1]}'),
        ("bad.jsonl line 2", "'text' must be a string", "list"),
    ),
    "json_prompt_is_number": (
        lambda t, r: _table(t, "bad.json", b'[{"prompt": "a", "completion": "b"}, {"prompt": 5, "completion": "c"}]'),
        ("bad.json record 2", "'prompt' must be a string", "int"),
    ),
    "json_row_without_completion": (
        lambda t, r: _table(t, "bad.json", b'[{"prompt": "a", "completion": "b"}, {"prompt": "x"}]'),
        ("bad.json record 2", "needs a 'completion' or a 'text'"),
    ),
    "json_without_text_column": (
        lambda t, r: _table(t, "bad.json", b'[{"prompt": "a"}]'),
        ("bad.json", "has no column 'completion' or 'text'"),
    ),
    "parquet_corrupt": (
        lambda t, r: _table(t, "bad.parquet", b"garbage"),
        ("bad.parquet", "could not be read as parquet"),
    ),
    "duplicate_json_key": (
        lambda t, r: _dataset(t, '{"prompt": "a", "completion": "b", "prompt": "c"}'),
        ("bad.jsonl line 2", "duplicate key 'prompt'"),
    ),
    "duplicate_nested_json_key": (
        lambda t, r: _dataset(t, '{"prompt": "a", "completion": "b", "m": {"k": 1, "k": 2}}'),
        ("bad.jsonl line 2", "duplicate key 'k'"),
    ),
    "resume_with_changed_batch_size": (
        lambda t, r: ["data.batch_size=4"],
        ("batch_size: 32 -> 4", "resume_allow_changes"),
    ),
    "resume_with_changed_seed": (lambda t, r: ["seed=7"], ("seed: 0 -> 7",)),
    "resume_with_changed_learning_rate": (lambda t, r: ["optimizer.learning_rate=0.01"], ("learning_rate",)),
    "resume_with_changed_lora_rank": (lambda t, r: ["lora_rank=8"], ("lora_rank: null -> 8",)),
    "resume_with_changed_model_name": (lambda t, r: ["model_name=other"], ("model_name",)),
}


@pytest.fixture(scope="module")
def template_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run dir stopped at step 4 (max_steps=4): a rerun with max_steps=8 would continue it."""
    from kitchen.apps.cli import main

    log = tmp_path_factory.mktemp("template") / "run"
    assert main(["run", "sl_basic", *FAST, "data.max_steps=4", f"log_path={log}"]) == 0
    return log


@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input(
    case: str, command: str, template_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    run_dir = tmp_path / "run"
    shutil.copytree(template_run, run_dir)
    before = snapshot(run_dir)
    events_before = (run_dir / "events.jsonl").read_bytes()
    build, needles = CASES[case]
    extra = build(tmp_path, run_dir)
    args = [*FAST, "data.max_steps=8", f"log_path={run_dir}", *extra]
    code, out, err = cli(capsys, command, "sl_basic", *args)
    assert_one_error_line(code, err, *needles)
    assert SECRET not in err + out
    assert snapshot(run_dir) == before, "the run dir changed"
    assert (run_dir / "events.jsonl").read_bytes().startswith(events_before)


def test_dpo_beta_inf(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "validate", "dpo", "dpo.beta=.inf")
    assert_one_error_line(code, err, "dpo.beta")


def test_cuda_without_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, _, err = cli(capsys, "run", "sl_basic", "data.max_steps=1", "local.device=cuda", f"log_path={tmp_path / 'r'}")
    assert_one_error_line(code, err, "local.device=cuda", "no CUDA GPU")


def test_torn_metrics_line_is_dropped_on_resume(
    template_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kitchen.engine.runs.metrics import read_metrics

    run_dir = tmp_path / "run"
    shutil.copytree(template_run, run_dir)
    with (run_dir / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 4, "train_mean_n')
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=6", f"log_path={run_dir}")
    assert code == 0, err
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == list(range(6))


def test_foreign_recipes_package_in_cwd_is_not_imported(tmp_path: Path) -> None:
    from tests.helpers import run_cli

    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "__init__.py").write_text("raise SystemExit('foreign recipes imported')\n")
    result = run_cli("ls", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "foreign recipes imported" not in result.stderr + result.stdout
    assert "sl_basic" in result.stdout
