"""sl_basic reads JSONL, JSON, parquet and `datasets.save_to_disk` folders through HF `datasets`;
`text` records train on all tokens. TRL's other formats: conversational prompt-completion records
(chat_sl) and implicit-prompt preference records (dpo), also from saved folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets
import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.metrics import read_metrics

RECORDS = [{"prompt": f"Question: {i} + 1?\nAnswer:", "completion": f" {i + 1}"} for i in range(40)]


def write(path: Path, fmt: str, records: list[dict[str, Any]]) -> Path:
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif fmt == "json":
        path.write_text(json.dumps(records))
    elif fmt == "parquet":
        datasets.Dataset.from_list(records).to_parquet(str(path))
    elif fmt == "saved":
        datasets.Dataset.from_list(records).save_to_disk(str(path))
    else:  # a DatasetDict, whose "train" split is read
        splits = {"train": records, "test": records[:8]}
        datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in splits.items()}).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet", "saved", "saved_dict"])
def test_sl_basic_reads_each_format(fmt: str, tmp_path: Path) -> None:
    data = write(tmp_path / f"train.{fmt}", fmt, RECORDS)
    recipe = get_recipe("sl_basic")
    overrides = [
        "backend=noop",
        f"data.dataset={data}",
        "data.eval_dataset=null",
        "data.batch_size=8",
        "data.num_epochs=2",
        f"log_path={tmp_path / 'run'}",
    ]
    run_dir = run_recipe(recipe, load_config(recipe.config_cls, None, overrides), progress=False)
    rows = read_metrics(run_dir.metrics)
    assert len(rows) == 10  # 40 records in batches of 8, two epochs
    assert [row["epoch"] for row in rows] == [0.0] * 5 + [1.0] * 5
    assert all(row["num_sequences"] == 8 for row in rows)


def test_text_records_train_on_every_token(tmp_path: Path) -> None:
    data = write(tmp_path / "text.jsonl", "jsonl", [{"text": f"sentence number {i}"} for i in range(16)])
    recipe = get_recipe("sl_basic")
    overrides = [
        "backend=noop",
        f"data.dataset={data}",
        "data.eval_dataset=null",
        "data.batch_size=8",
        "data.num_epochs=1",
        f"log_path={tmp_path / 'run'}",
    ]
    rows = read_metrics(run_recipe(recipe, load_config(recipe.config_cls, None, overrides), progress=False).metrics)
    assert all(row["num_loss_tokens"] == row["num_tokens"] for row in rows)


def _run(tmp_path: Path, recipe_name: str, *overrides: str) -> list[dict[str, float]]:
    recipe = get_recipe(recipe_name)
    config = load_config(recipe.config_cls, None, ["backend=noop", f"log_path={tmp_path / 'run'}", *overrides])
    return read_metrics(run_recipe(recipe, config, progress=False).metrics)


def test_conversational_prompt_completion_trains_the_completion(tmp_path: Path) -> None:
    """TRL's conversational prompt-completion records used to be refused (chat_sl wanted `messages`)."""
    from transformers import AutoTokenizer

    from adapters.common.tiny import TINY_DIR
    from kitchen.families.supervised.examples import Conversation
    from train_core.renderers import get_renderer

    record = {
        "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
        "completion": [{"role": "assistant", "content": "4"}],
    }
    tokenizer: Any = AutoTokenizer.from_pretrained(TINY_DIR)
    tokens, weights = Conversation()(record, tokenizer, get_renderer("role_colon", tokenizer))
    assert isinstance(tokens, list)  # text only: a ModelInput only when images are in the record
    assert tokenizer.decode([t for t, w in zip(tokens, weights, strict=True) if w]) == " 4\n\nUser:"
    data = write(tmp_path / "chat", "saved", [record] * 16)
    rows = _run(
        tmp_path, "chat_sl", f"data.dataset={data}", "data.eval_dataset=null", "data.batch_size=8", "data.num_epochs=1"
    )
    assert len(rows) == 2 and all(0 < row["num_loss_tokens"] < row["num_tokens"] for row in rows)


def test_implicit_prompt_preference_data(tmp_path: Path) -> None:
    """TRL's implicit-prompt preference records (no `prompt`) used to fail: missing key 'prompt'."""
    from train_core.preference.datasets import load_comparisons

    text = {"chosen": "The sky is blue.", "rejected": "The sky is green."}
    chat = {
        "chosen": [{"role": "user", "content": "Sky?"}, {"role": "assistant", "content": "Blue."}],
        "rejected": [{"role": "user", "content": "Sky?"}, {"role": "assistant", "content": "Green."}],
    }
    path = write(tmp_path / "implicit.jsonl", "jsonl", [text, chat, {"chosen": "abc", "rejected": "xyz"}])
    comparisons, report = load_comparisons(path, "comparisons")
    first, second = (c.comparison for c in comparisons)
    assert first.prompt_conversation == [{"role": "user", "content": "The sky is"}]
    assert first.completion_A == [{"role": "assistant", "content": " blue."}]
    assert first.completion_B == [{"role": "assistant", "content": " green."}]
    assert second.prompt_conversation == chat["chosen"][:1] and second.completion_B == chat["rejected"][1:]
    assert report.counts == {"mismatched_prompts": 1}  # nothing shared: no prompt to find
    pairs = [
        {"chosen": f"{i} plus 1 is {i + 1}. Thanks!", "rejected": f"{i} plus 1 is {i + 2}. Whatever."}
        for i in range(16)
    ]
    data = write(tmp_path / "pairs", "saved_dict", pairs)
    rows = _run(
        tmp_path, "dpo", f"data.dataset={data}", "data.eval_dataset=null", "data.batch_size=4", "data.max_steps=2"
    )
    assert [row["step"] for row in rows] == [0, 1] and rows[0]["num_pairs"] == 4
