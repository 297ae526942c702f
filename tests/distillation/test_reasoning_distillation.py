"""Reasoning distillation: think blocks trained or masked (on the renderer's real tokens), traces
from a file or written by a teacher (reasoning kept), a renderer without think blocks refused,
and the held-out NLL of the shipped traces falling on the tiny model over three seeds (slow)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from adapters.common.tiny import TINY_DIR
from kitchen.engine.runner import StageFailure
from kitchen.engine.runs.metrics import read_metrics
from kitchen.families.supervised import Conversation
from kitchen.testing import RunResult
from recipes.data import shipped_data
from tests.helpers import run_cli
from train_core.renderers.registry import get_renderer
from train_core.renderers.thinking import mask_think_blocks
from train_core.renderers.train_on_what import TrainOnWhat

TRACE = {
    "messages": [
        {"role": "user", "content": "What is 12 + 30?"},
        {"role": "assistant", "thinking": "Ones: 2 + 0 = 2. Tens: 1 + 3 = 4.", "content": "42"},
    ]
}


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return AutoTokenizer.from_pretrained(TINY_DIR)


def trained_text(tokenizer: Any, train_thinking: bool) -> str:
    renderer = get_renderer("qwen3", tokenizer)
    builder = Conversation(TrainOnWhat.LAST_ASSISTANT_MESSAGE, train_thinking=train_thinking)
    tokens, weights = builder(TRACE, tokenizer, renderer)
    assert isinstance(tokens, list)
    return str(tokenizer.decode([t for t, w in zip(tokens, weights, strict=True) if w > 0]))


def test_masked_thinking_leaves_only_the_answer_trained(tokenizer: Any) -> None:
    whole = trained_text(tokenizer, train_thinking=True)
    assert "<think>" in whole and "Ones: 2 + 0 = 2." in whole and "42" in whole
    answer = trained_text(tokenizer, train_thinking=False)
    assert "Ones" not in answer and "<think>" not in answer and "</think>" not in answer
    assert answer.strip().startswith("42")


def test_a_block_opened_by_the_prompt_is_masked_up_to_its_close() -> None:
    assert mask_think_blocks([5, 6, 2, 7], [1, 1, 1, 1], open_id=1, close_id=2) == [0, 0, 0, 1]
    assert mask_think_blocks([5, 1, 6, 2, 7, 1, 8], [1] * 7, open_id=1, close_id=2) == [1, 0, 0, 0, 1, 0, 0]


def test_distill_reasoning_trains_on_the_shipped_traces(kitchen_run: Callable[..., RunResult]) -> None:
    run = kitchen_run("distill_reasoning", "data.max_steps=2", "data.train_thinking=false")
    assert "eval/nll_initial" in run.metrics[0] and "eval/nll" in run.metrics[-1]


def test_a_teacher_writes_traces_with_its_reasoning(kitchen_run: Callable[..., RunResult], tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?"}) + "\n" for i in range(8)))
    run = kitchen_run(
        "distill_reasoning",
        f"data.dataset={prompts}",
        f"data.eval_dataset={prompts}",
        "data.max_steps=1",
        "teacher.max_tokens=32",
        "data.batch_size=4",
        replies=lambda prompt: "<think>\ncount on by one\n</think>\n\n5<|im_end|>",
    )
    records = [json.loads(line) for line in (run.path / "distill" / "train.jsonl").read_text().splitlines()]
    assert len(records) == 8
    reply = records[0]["messages"][-1]
    assert reply == {"role": "assistant", "content": "5", "thinking": "count on by one"}
    assert "system" not in records[0]


def test_masking_needs_a_renderer_with_think_blocks(kitchen_run: Callable[..., RunResult]) -> None:
    with pytest.raises(StageFailure, match="no think block"):
        kitchen_run(
            "distill_reasoning",
            "renderer=role_colon",
            f"data.dataset={shipped_data('chat_sl/train.jsonl')}",
            f"data.eval_dataset={shipped_data('chat_sl/test.jsonl')}",
            "data.max_steps=1",
            "data.train_thinking=false",
        )


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "train_thinking"), [(0, "false"), (1, "false"), (2, "false"), (0, "true")])
def test_the_held_out_nll_of_the_traces_falls(tmp_path: Path, seed: int, train_thinking: str) -> None:
    """The defaults (two epochs of the shipped traces) cut the held-out NLL of what is trained by at
    least 30%, for seed (the seed orders the data) with the thinking masked, and with it trained.
    Measured (2026-11-28, 2 cores, the defaults): masked 7.11 -> 2.28, 2.27, 2.26 (seeds 0-2);
    thinking trained 7.29 -> 3.04 (seed 0)."""
    args = [f"seed={seed}", f"data.train_thinking={train_thinking}", f"log_path={tmp_path}"]
    result = run_cli("run", "distill_reasoning", *args)
    assert result.returncode == 0, result.stderr
    rows = read_metrics(tmp_path / "metrics.jsonl")
    before, after = rows[0]["eval/nll_initial"], rows[-1]["eval/nll"]
    assert after <= 0.7 * before, (before, after)
    assert Path(shipped_data("reasoning/test.jsonl")).exists()
