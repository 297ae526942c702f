"""Bad records in the other recipes' data (conversations, comparisons, GSM8K answers, prompt
sets): exit 2 with one line naming the file and line, before any training; and conversations with
nothing to train on are skipped and counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kitchen.metrics import read_metrics
from tests.safety.helpers import assert_one_error_line, cli

GOOD_CHAT = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
GOOD_PAIR = {"prompt": "2+2?", "chosen": "4, thanks!", "rejected": "5"}
FAST = ("backend=noop", "max_steps=2", "save_every=0", "eval_every=0", "batch_size=2", "eval_dataset=null")


def _jsonl(tmp: Path, lines: list[object], name: str = "bad.jsonl") -> Path:
    path = tmp / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def _chat(*messages: dict[str, object]) -> dict[str, object]:
    return {"messages": list(messages)}


CASES: dict[str, tuple[str, list[object], tuple[str, ...]]] = {
    "chat_content_number": (
        "chat_sl",
        [GOOD_CHAT, _chat({"role": "user", "content": "hi"}, {"role": "assistant", "content": 5})],
        ("bad.jsonl line 2", "'content' must be a string", "int"),
    ),
    "chat_content_object": (
        "chat_sl",
        [GOOD_CHAT, _chat({"role": "user", "content": {"text": "hi"}}, {"role": "assistant", "content": "x"})],
        ("bad.jsonl line 2", "'content' must be a string", "dict"),
    ),
    "chat_unknown_role": (
        "chat_sl",
        [GOOD_CHAT, _chat({"role": "narrator", "content": "hi"}, {"role": "assistant", "content": "x"})],
        ("bad.jsonl line 2", "unknown role 'narrator'"),
    ),
    "chat_messages_not_list": ("chat_sl", [GOOD_CHAT, {"messages": "hi"}], ("bad.jsonl line 2", "list of messages")),
    "chat_nothing_to_train": (
        "chat_sl",
        [_chat({"role": "user", "content": "hi"})] * 3,
        ("bad.jsonl", "none of its 3 records has a token to train on"),
    ),
    "dpo_content_number": (
        "dpo",
        [GOOD_PAIR, {"prompt": [{"role": "user", "content": 7}], "chosen": "a", "rejected": "b"}],
        ("bad.jsonl line 2", "'content' must be a string", "int"),
    ),
    "dpo_unknown_role": (
        "dpo",
        [GOOD_PAIR, {"prompt": [{"role": "narrator", "content": "q"}], "chosen": "a", "rejected": "b"}],
        ("bad.jsonl line 2", "unknown role 'narrator'"),
    ),
    "dpo_duplicate_key": (
        "dpo",
        [GOOD_PAIR, '{"prompt": "q", "chosen": "a", "rejected": "b", "chosen": "c"}'],
        ("bad.jsonl line 2", "duplicate key 'chosen'"),
    ),
    "gsm8k_answer_not_a_number": (
        "math_rl",
        [{"question": "q?", "answer": "so #### 4"}, {"question": "q?", "answer": "work\n#### four"}],
        ("bad.jsonl line 2", "not a number", "four"),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_record_stops_the_run(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe, lines, needles = CASES[case]
    data = _jsonl(tmp_path, lines)
    extra = ["env=gsm8k", "warm_start_steps=0", "num_batches=1"] if recipe == "math_rl" else list(FAST)
    run_dir = tmp_path / "run"
    code, _, err = cli(capsys, "run", recipe, *extra, f"dataset={data}", f"log_path={run_dir}")
    assert_one_error_line(code, err, *needles)
    assert not (run_dir / "checkpoints.jsonl").exists() or not (run_dir / "checkpoints.jsonl").read_text().strip()


def test_conversation_without_assistant_is_skipped_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_reply = _chat({"role": "system", "content": "be nice"}, {"role": "user", "content": "hi"})
    data = _jsonl(tmp_path, [GOOD_CHAT, no_reply, GOOD_CHAT, no_reply, GOOD_CHAT])
    log = tmp_path / "run"
    code, _, err = cli(capsys, "run", "chat_sl", *FAST, f"dataset={data}", f"log_path={log}")
    assert code == 0, err
    rows = read_metrics(log / "metrics.jsonl")
    assert rows[0]["data/train_skipped"] == 2


def test_tool_role_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with_tool = _chat(
        {"role": "system", "content": "s"},
        {"role": "user", "content": "hi"},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "ok"},
    )
    data = _jsonl(tmp_path, [with_tool, GOOD_CHAT, with_tool])
    code, _, err = cli(capsys, "run", "chat_sl", *FAST, f"dataset={data}", f"log_path={tmp_path / 'run'}")
    assert code == 0, err


def test_sl_basic_max_length_too_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "max_length=2", f"log_path={tmp_path / 'run'}")
    assert_one_error_line(code, err, "has a token to train on", "max_length=2")


def test_distillation_prompt_with_number_content_names_the_line(tmp_path: Path) -> None:
    from kitchen.distillation.stages import load_prompts
    from kitchen.errors import DataError

    path = _jsonl(tmp_path, [{"prompt": "a"}, {"messages": [{"role": "user", "content": 3}]}])
    with pytest.raises(DataError, match=r"bad.jsonl line 2: a prompt record needs a string 'prompt'"):
        load_prompts(str(path))
    path = _jsonl(tmp_path, [{"prompt": "a"}, {"messages": [{"role": "robot", "content": "x"}]}], "roles.jsonl")
    with pytest.raises(DataError, match=r"roles.jsonl line 2: unknown message role 'robot'"):
        load_prompts(str(path))
