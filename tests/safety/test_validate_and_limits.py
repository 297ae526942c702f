"""`kitchen validate` never writes to the run directory (it takes no lock either, so it never waits
on a running run); LoRA ranks wider than the model and huge records are caught cheaply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.safety.helpers import FAST, assert_one_error_line, cli


def _everything(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every entry's bytes and mtime, the event log and lock file included."""
    return {
        str(p.relative_to(directory)): (p.read_bytes() if p.is_file() else b"", p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
    }


def test_validate_never_writes_to_the_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "run"
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=4", f"log_path={log}")
    assert code == 0, err
    before = _everything(log)
    for extra in ([], ["data.max_steps=8"], ["data.batch_size=4"], ["optimizer.learning_rate=.nan"]):
        cli(capsys, "validate", "sl_basic", *FAST, f"log_path={log}", *extra)
        assert _everything(log) == before, extra
    fresh = tmp_path / "fresh" / "run"
    code, _, err = cli(capsys, "validate", "sl_basic", *FAST, f"log_path={fresh}")
    assert code == 0, err
    assert not fresh.exists() and not fresh.parent.exists()


def test_lora_rank_above_hidden_size_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(
        capsys, "run", "sl_basic", "backend=local", "data.max_steps=1", "lora_rank=100000", f"log_path={tmp_path / 'r'}"
    )
    assert_one_error_line(code, err, "lora_rank=100000", "hidden size (96)")


def test_huge_record_is_cut_before_tokenizing(tmp_path: Path) -> None:
    from kitchen.families.supervised.examples import Conversation, PromptCompletion

    class CountingTokenizer:
        eos_token_id = 0
        longest = 0

        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            CountingTokenizer.longest = max(CountingTokenizer.longest, len(text))
            return [ord(c) % 50 + 1 for c in text]

    tokenizer: Any = CountingTokenizer()
    huge = "x" * 5_000_000
    PromptCompletion()({"prompt": huge, "completion": huge}, tokenizer, None, max_length=16)
    assert CountingTokenizer.longest == 8 * 16
    tokens, _ = PromptCompletion()({"text": huge}, tokenizer, None, max_length=16)
    assert isinstance(tokens, list)
    assert len(tokens) <= 8 * 16 + 1

    seen: list[int] = []

    class Renderer:
        takes_images = False

        def build_supervised_example(self, messages, train_on_what):
            from train_core.types import ModelInput

            seen.extend(len(m["content"]) for m in messages)
            return ModelInput.from_ints([1, 2]), [0.0, 1.0]

    record = {"messages": [{"role": "user", "content": huge}, {"role": "assistant", "content": huge}]}
    Conversation()(record, tokenizer, Renderer(), max_length=16)  # type: ignore[arg-type]
    assert seen == [128, 128]
    assert len(record["messages"][0]["content"]) == 5_000_000  # the record read is left as it was


def test_huge_comparison_is_cut_before_tokenizing(tmp_path: Path) -> None:
    """A multi-megabyte comparison reaches the real tokenizer cut to `8 * max_length` characters
    per message: the prompt it measures and the sequences it renders stay that short."""
    import json

    from adapters.common.tokenizer import load_tokenizer
    from train_core.preference.datasets import load_comparisons
    from train_core.preference.datums import preference_datums
    from train_core.renderers.registry import get_renderer

    renderer = get_renderer("role_colon", load_tokenizer("tiny"))
    huge = "lorem ipsum dolor sit amet " * 100_000  # 2.7 MB: hundreds of thousands of tokens whole
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"prompt": huge, "chosen": huge, "rejected": "no"}) + "\n", encoding="utf-8")
    max_length = 32
    measured: list[int] = []

    def prompt_length(messages: list[Any]) -> int:
        measured.append(renderer.build_generation_prompt(messages).length)
        return measured[-1] if measured[-1] < max_length else 0  # measured, but not skipped

    comparisons, report = load_comparisons(path, "comparisons", prompt_length=prompt_length, max_length=max_length)
    assert report.num_skipped == 0 and len(comparisons) == 1
    bound = 8 * max_length + 8  # the cut text, plus the role headers
    assert 0 < measured[0] <= bound
    chosen, _ = comparisons[0].chosen_and_rejected()
    full, _ = renderer.build_supervised_example([*comparisons[0].comparison.prompt_conversation, *chosen])
    assert full.length <= 2 * bound
    assert [d.model_input.length for d in preference_datums(comparisons, renderer, max_length)] == [31, 31]


def test_model_dir_without_a_tokenizer_fails_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It used to pass `validate` and fail only when the run's first stage loaded the tokenizer."""
    from adapters.common.tiny import TINY_DIR

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_bytes((TINY_DIR / "config.json").read_bytes())
    (model / "model.safetensors").write_bytes(b"")  # never read: the check is on the folder
    code, _, err = cli(capsys, "validate", "sl_basic", "backend=local", f"model_name={model}")
    assert_one_error_line(code, err, "model_name", str(model), "no tokenizer")
    (model / "tokenizer.json").write_bytes((TINY_DIR / "tokenizer.json").read_bytes())
    code, _, err = cli(capsys, "validate", "sl_basic", "backend=local", f"model_name={model}")
    assert code == 0, err
    code, _, err = cli(capsys, "validate", "sl_basic", "backend=local", f"model_name={tmp_path / 'missing'}")
    assert_one_error_line(code, err, "no such model directory")
