"""Bad records in every recipe's data (conversations, comparisons, GSM8K answers, code problems,
prompt sets), through `kitchen run` and `kitchen validate` alike: exit 2 with one line naming the
file and line, before any training; and conversations with nothing to train on are skipped and
counted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kitchen.engine.runs.metrics import read_metrics
from recipes.data import shipped_data
from tests.safety.helpers import assert_one_error_line, cli

GOOD_CHAT = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
GOOD_PAIR = {"prompt": "2+2?", "chosen": "4, thanks!", "rejected": "5"}
GOOD_PROMPT = {"prompt": "2+2?"}
GOOD_PROBLEM = {"question": "q?", "answer": "so #### 4"}
GOOD_CODE = {"problem": "Print 1.", "tests": [{"input": "", "output": "1\n"}]}
FAST = (
    "backend=noop",
    "data.max_steps=2",
    "checkpoint.save_every=0",
    "eval.every=0",
    "data.batch_size=2",
    "data.eval_dataset=null",
)
RL_FAST = ("backend=noop", "warm_start.steps=0", "rl.num_batches=1", "eval.every=0")
RECIPE_ARGS: dict[str, tuple[str, ...]] = {
    "chat_sl": FAST,
    "dpo": FAST,
    "sl_basic": FAST,
    "distill_prompt": FAST,
    "math_rl": (*RL_FAST, "env=gsm8k"),
    "code_rl": RL_FAST,
    "reward_fn_rl": RL_FAST,
    "distill_on_policy": RL_FAST,
    "rlhf": ("backend=noop",),
}


def _jsonl(tmp: Path, lines: list[object], name: str = "bad.jsonl") -> Path:
    path = tmp / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def _chat(*messages: dict[str, object]) -> dict[str, object]:
    return {"messages": list(messages)}


Args = Callable[[Path], list[str]]


def _at(key: str, lines: list[object]) -> Args:
    """`key=` a JSONL file of `lines`."""
    return lambda tmp: [f"{key}={_jsonl(tmp, lines)}"]


def _prompt_set(make: Callable[[Path], Path]) -> Args:
    """distill_on_policy's one prompt set at the path `make` builds."""
    teacher = shipped_data("teachers/arithmetic")
    return lambda tmp: [f"datasets=[{{name: p, prompts: {make(tmp)}, teacher: {{checkpoint: {teacher}}}}}]"]


def _generated(lines: list[object]) -> Args:
    """distill_prompt's `generated_dataset`: a folder whose train.jsonl holds `lines`."""

    def args(tmp: Path) -> list[str]:
        (tmp / "generated").mkdir()
        return [f"teacher.generated_dataset={_jsonl(tmp / 'generated', lines, 'train.jsonl').parent}"]

    return args


def _directory(tmp: Path) -> Path:
    path = tmp / "bad.jsonl"
    path.mkdir()
    return path


def _not_utf8(tmp: Path) -> Path:
    path = tmp / "bad.jsonl"
    path.write_bytes(b'{"prompt": "a"}\n{"prompt": "\xff"}\n')
    return path


CASES: dict[str, tuple[str, Args, tuple[str, ...]]] = {
    "chat_content_number": (
        "chat_sl",
        _at("dataset", [GOOD_CHAT, _chat({"role": "user", "content": "hi"}, {"role": "assistant", "content": 5})]),
        ("bad.jsonl line 2", "'content' must be a string", "int"),
    ),
    "chat_content_object": (
        "chat_sl",
        _at(
            "dataset", [GOOD_CHAT, _chat({"role": "user", "content": {"t": 1}}, {"role": "assistant", "content": "x"})]
        ),
        ("bad.jsonl line 2", "'content' must be a string", "dict"),
    ),
    "chat_unknown_role": (
        "chat_sl",
        _at(
            "dataset", [GOOD_CHAT, _chat({"role": "narrator", "content": "hi"}, {"role": "assistant", "content": "x"})]
        ),
        ("bad.jsonl line 2", "unknown role 'narrator'"),
    ),
    "chat_messages_not_list": (
        "chat_sl",
        _at("dataset", [GOOD_CHAT, {"messages": "hi"}]),
        ("bad.jsonl line 2", "list of messages"),
    ),
    "chat_missing_messages": (
        "chat_sl",
        _at("dataset", [GOOD_CHAT, {"text": "hi"}]),
        ("line 2", "missing key 'messages'"),
    ),
    "chat_content_image_part": (
        "chat_sl",
        _at(
            "dataset",
            [
                GOOD_CHAT,
                _chat(
                    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what is it?"}]},
                    {"role": "assistant", "content": "a cat"},
                ),
            ],
        ),
        ("bad.jsonl line 2", "'content' is a list of parts", "image parts need a vision-language renderer"),
    ),
    "chat_content_text_parts": (
        "chat_sl",
        _at("dataset", [GOOD_CHAT, _chat({"role": "user", "content": [{"type": "text", "text": "hi"}]})]),
        ("bad.jsonl line 2", "'content' is a list of parts", "give the text as one string"),
    ),
    "chat_eval_unknown_role": (
        "chat_sl",
        lambda t: [f"eval_dataset={_jsonl(t, [GOOD_CHAT, _chat({'role': 'robot', 'content': 'x'})], 'e.jsonl')}"],
        ("e.jsonl line 2", "unknown role 'robot'"),
    ),
    "chat_nothing_to_train": (
        "chat_sl",
        _at("dataset", [_chat({"role": "user", "content": "hi"})] * 3),
        ("bad.jsonl", "none of its 3 records has a token to train on"),
    ),
    "sl_missing_completion": ("sl_basic", _at("dataset", [{"prompt": "a"}]), ("line 1", "'completion' or 'text'")),
    "dpo_content_number": (
        "dpo",
        _at("dataset", [GOOD_PAIR, {"prompt": [{"role": "user", "content": 7}], "chosen": "a", "rejected": "b"}]),
        ("bad.jsonl line 2", "'content' must be a string", "int"),
    ),
    "dpo_unknown_role": (
        "dpo",
        _at("dataset", [GOOD_PAIR, {"prompt": [{"role": "narrator", "content": "q"}], "chosen": "a", "rejected": "b"}]),
        ("bad.jsonl line 2", "unknown role 'narrator'"),
    ),
    "dpo_duplicate_key": (
        "dpo",
        _at("dataset", [GOOD_PAIR, '{"prompt": "q", "chosen": "a", "rejected": "b", "chosen": "c"}']),
        ("bad.jsonl line 2", "duplicate key 'chosen'"),
    ),
    "dpo_missing_rejected": (
        "dpo",
        _at("dataset", [GOOD_PAIR, {"prompt": "q", "chosen": "a"}]),
        ("bad.jsonl line 2", "missing key 'rejected'"),
    ),
    "dpo_hh_not_a_transcript": (
        "dpo",
        lambda t: ["data.dataset_layout=hh_rlhf", f"dataset={_jsonl(t, [{'chosen': 'hi', 'rejected': 'yo'}])}"],
        ("bad.jsonl line 1", "'chosen' must be turns"),
    ),
    "rlhf_content_number": (
        "rlhf",
        _at("dataset", [GOOD_PAIR, {"prompt": "q", "chosen": [{"role": "assistant", "content": 1}], "rejected": "b"}]),
        ("bad.jsonl line 2", "'content' must be a string"),
    ),
    "rlhf_eval_missing_chosen": (
        "rlhf",
        lambda t: [f"eval_dataset={_jsonl(t, [GOOD_PAIR, {'prompt': 'q', 'rejected': 'b'}], 'e.jsonl')}"],
        ("e.jsonl line 2", "missing key 'chosen'"),
    ),
    "gsm8k_answer_not_a_number": (
        "math_rl",
        _at("dataset", [GOOD_PROBLEM, {"question": "q?", "answer": "work\n#### four"}]),
        ("bad.jsonl line 2", "not a number", "four"),
    ),
    "gsm8k_question_number": (
        "math_rl",
        _at("dataset", [GOOD_PROBLEM, {"question": 5, "answer": "#### 5"}]),
        ("bad.jsonl line 2", "'question' and 'answer'"),
    ),
    "code_tests_missing": (
        "code_rl",
        _at("dataset", [GOOD_CODE, {"problem": "Print 2."}]),
        ("bad.jsonl line 2", "'tests' must be"),
    ),
    "code_problem_number": (
        "code_rl",
        _at("dataset", [GOOD_CODE, {"problem": 5, "tests": ["assert True"]}]),
        ("bad.jsonl line 2", "missing string key 'problem'"),
    ),
    "reward_fn_prompt_number": (
        "reward_fn_rl",
        _at("dataset", [GOOD_PROMPT, {"prompt": 5}]),
        ("bad.jsonl line 2", "a prompt record needs a string 'prompt'"),
    ),
    "reward_fn_content_number": (
        "reward_fn_rl",
        _at("dataset", [GOOD_PROMPT, {"prompt": [{"role": "user", "content": 3}]}]),
        ("bad.jsonl line 2", "'content' must be a string", "int"),
    ),
    "reward_fn_unknown_role": (
        "reward_fn_rl",
        _at("dataset", [GOOD_PROMPT, {"messages": [{"role": "robot", "content": "x"}]}]),
        ("bad.jsonl line 2", "unknown role 'robot'"),
    ),
    "reward_fn_missing_prompt": (
        "reward_fn_rl",
        _at("dataset", [GOOD_PROMPT, {"question": "x"}]),
        ("bad.jsonl line 2", "a prompt record needs"),
    ),
    "reward_fn_duplicate_key": (
        "reward_fn_rl",
        _at("dataset", [GOOD_PROMPT, '{"prompt": "a", "prompt": "b"}']),
        ("bad.jsonl line 2", "duplicate key 'prompt'"),
    ),
    "reward_fn_eval_prompt_list_empty": (
        "reward_fn_rl",
        lambda t: [f"eval_dataset={_jsonl(t, [GOOD_PROMPT, {'prompt': []}], 'e.jsonl')}"],
        ("e.jsonl line 2", "a prompt record needs"),
    ),
    "distill_prompt_content_number": (
        "distill_prompt",
        _at("dataset", [GOOD_PROMPT, {"messages": [{"role": "user", "content": 3}]}]),
        ("bad.jsonl line 2", "'content' must be a string", "int"),
    ),
    "distill_prompt_unknown_role": (
        "distill_prompt",
        _at("dataset", [GOOD_PROMPT, {"messages": [{"role": "robot", "content": "x"}]}]),
        ("bad.jsonl line 2", "unknown role 'robot'"),
    ),
    "distill_generated_missing_system": (
        "distill_prompt",
        _generated([{**GOOD_CHAT, "system": "s"}, GOOD_CHAT]),
        ("train.jsonl line 2", "missing key 'system'"),
    ),
    "distill_generated_content_number": (
        "distill_prompt",
        _generated([{"system": "s", "messages": [{"role": "user", "content": 1}]}]),
        ("train.jsonl line 1", "'content' must be a string", "int"),
    ),
    "distill_on_policy_prompt_number": (
        "distill_on_policy",
        _prompt_set(lambda t: _jsonl(t, [GOOD_PROMPT, {"prompt": 5}])),
        ("bad.jsonl line 2", "a prompt record needs"),
    ),
    "distill_on_policy_prompts_directory": ("distill_on_policy", _prompt_set(_directory), ("bad.jsonl", "not a file")),
    "distill_on_policy_prompts_not_utf8": (
        "distill_on_policy",
        _prompt_set(_not_utf8),
        ("bad.jsonl line 2", "not UTF-8"),
    ),
    **{
        f"{recipe}_dataset_directory": (recipe, lambda t: [f"dataset={_directory(t)}"], ("bad.jsonl", "is a directory"))
        for recipe in ("chat_sl", "dpo", "math_rl", "code_rl", "reward_fn_rl", "distill_prompt", "rlhf")
    },
    **{
        f"{recipe}_dataset_not_utf8": (recipe, lambda t: [f"dataset={_not_utf8(t)}"], ("bad.jsonl line 2", "not UTF-8"))
        for recipe in ("chat_sl", "dpo", "math_rl", "code_rl", "reward_fn_rl", "distill_prompt", "rlhf")
    },
}

ENV_DATA = {"math_rl", "code_rl", "reward_fn_rl"}
"""Recipes whose data files are their environment's (`env.dataset`), not a `data` section's."""


def keyed(recipe: str, args: list[str]) -> list[str]:
    """`dataset=` / `eval_dataset=` as the recipe's section names them."""
    section = "env" if recipe in ENV_DATA else "data"
    return [f"{section}.{arg}" if arg.startswith(("dataset=", "eval_dataset=")) else arg for arg in args]


RUN_ONLY = {"chat_nothing_to_train"}
"""Found only once the records are tokenized, which needs the model's tokenizer (a backend call)."""


@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_record_stops_the_run(case: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe, args, needles = CASES[case]
    run_dir = tmp_path / "run"
    code, _, err = cli(
        capsys, command, recipe, *RECIPE_ARGS[recipe], *keyed(recipe, args(tmp_path)), f"log_path={run_dir}"
    )
    if command == "validate" and case in RUN_ONLY:
        assert code == 0, err
        return
    assert_one_error_line(code, err, *needles)
    assert not (run_dir / "checkpoints.jsonl").exists() or not (run_dir / "checkpoints.jsonl").read_text().strip()


def test_conversation_without_assistant_is_skipped_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_reply = _chat({"role": "system", "content": "be nice"}, {"role": "user", "content": "hi"})
    data = _jsonl(tmp_path, [GOOD_CHAT, no_reply, GOOD_CHAT, no_reply, GOOD_CHAT])
    log = tmp_path / "run"
    code, _, err = cli(capsys, "run", "chat_sl", *FAST, f"data.dataset={data}", f"log_path={log}")
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
    code, _, err = cli(capsys, "run", "chat_sl", *FAST, f"data.dataset={data}", f"log_path={tmp_path / 'run'}")
    assert code == 0, err


def test_sl_basic_max_length_too_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_length=2", f"log_path={tmp_path / 'run'}")
    assert_one_error_line(code, err, "has a token to train on", "data.max_length=2")
