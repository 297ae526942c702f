"""`kitchen export / sample / chat` on checkpoints of short tiny-model runs.

Export round trip: the exported directory loads with transformers (and peft for adapters) and
gives the same logprobs as kitchen's own sampler on the same tokens.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from kitchen.apps.cli import main
from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.runs.targets import open_backend, resolve_checkpoint
from recipes.sl_basic import RECIPE
from tests.helpers import REPO
from train_core.types import ModelInput

pytestmark = pytest.mark.slow

TOKENS = [5, 17, 230, 99, 4, 61, 77, 3, 18, 250, 12]


def _train(path: Path, *overrides: str) -> Path:
    config = load_config(
        RECIPE.config_cls,
        None,
        [
            "data.max_steps=2",
            "data.batch_size=4",
            "data.eval_dataset=null",
            "optimizer.learning_rate=1e-2",
            f"log_path={path}",
            *overrides,
        ],
    )
    return run_recipe(RECIPE, config, progress=False).path


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _train(tmp_path_factory.mktemp("full") / "run")


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Not the defaults (alpha 32, all-linear): the export must build the adapters the run trained.
    return _train(
        tmp_path_factory.mktemp("lora") / "run",
        "lora_rank=4",
        "local.lora_alpha=8",
        "local.lora_target_modules=[q_proj,v_proj]",
    )


def _kitchen_logprobs(run_dir: Path) -> list[float]:
    target = resolve_checkpoint(str(run_dir))

    async def score() -> list[float | None]:
        backend = open_backend(target)
        try:
            client = await backend.create_sampling_client(model_path=target.model_path)
            return await client.compute_logprobs(ModelInput.from_ints(TOKENS))
        finally:
            await backend.close()

    return [x for x in asyncio.run(score()) if x is not None]


@torch.no_grad()
def _hf_logprobs(model: torch.nn.Module) -> list[float]:
    ids = torch.tensor([TOKENS])
    logprobs = torch.log_softmax(model(input_ids=ids).logits.float(), dim=-1)
    return logprobs[0, :-1].gather(-1, ids[0, 1:, None]).squeeze(-1).tolist()


def _assert_close(a: list[float], b: list[float]) -> None:
    assert len(a) == len(b) == len(TOKENS) - 1
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5


def test_full_export_round_trip(full_run: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "hf"
    assert main(["export", str(full_run), "--out", str(out)]) == 0
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (out / name).is_file(), name
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template is None  # sl_basic trains plain text: no chat format to claim
    info = json.loads((out / "kitchen_export.json").read_text())
    assert info["renderer"] is None and info["chat_template"].startswith("none")
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    _assert_close(_hf_logprobs(model), _kitchen_logprobs(full_run))
    recorded = resolve_checkpoint(str(full_run)).model_path
    assert json.loads((out / "kitchen_export.json").read_text())["checkpoint"] == recorded


def test_lora_adapter_and_merged_exports(lora_run: Path, tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    expected = _kitchen_logprobs(lora_run)
    adapter = tmp_path / "adapter"
    assert main(["export", str(lora_run), "--out", str(adapter)]) == 0
    adapter_config = json.loads((adapter / "adapter_config.json").read_text())
    assert adapter_config["lora_alpha"] == 8 and sorted(adapter_config["target_modules"]) == ["q_proj", "v_proj"]
    base_dir = adapter_config["base_model_name_or_path"]
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    _assert_close(_hf_logprobs(PeftModel.from_pretrained(base, adapter).eval()), expected)

    merged = tmp_path / "merged"
    assert main(["export", str(lora_run), "--out", str(merged), "--merge-lora"]) == 0
    assert not (merged / "adapter_config.json").exists()
    _assert_close(_hf_logprobs(AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).eval()), expected)


def test_export_writes_the_renderer_the_run_trained_with(tmp_path: Path) -> None:
    """chat_sl trained with role_colon; the export used to ship the tokenizer's ChatML template."""
    from transformers import AutoTokenizer

    from recipes.chat_sl import RECIPE as CHAT
    from train_core.renderers import get_renderer

    config = load_config(
        CHAT.config_cls,
        None,
        ["data.max_steps=1", "data.batch_size=4", "data.eval_dataset=null", f"log_path={tmp_path / 'run'}"],
    )
    run_dir = run_recipe(CHAT, config, progress=False).path
    out = tmp_path / "hf"
    assert main(["export", str(run_dir), "--out", str(out)]) == 0
    assert json.loads((out / "kitchen_export.json").read_text())["renderer"] == "role_colon"
    tokenizer = AutoTokenizer.from_pretrained(out)
    renderer = get_renderer("role_colon", tokenizer)
    messages: Any = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]
    prompt = tokenizer.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    assert prompt == tokenizer.decode(renderer.build_generation_prompt(messages[:1]).to_ints())
    full = tokenizer.apply_chat_template(messages, tokenize=False)
    assert full == tokenizer.decode(renderer.build_supervised_example(messages)[0].to_ints())


def test_export_refusals(full_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(full_run), "--out", str(tmp_path / "x"), "--merge-lora"]) == 2
    assert "full fine-tune" in capsys.readouterr().err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    assert main(["export", str(full_run), "--out", str(tmp_path / "busy")]) == 2
    assert "not empty" in capsys.readouterr().err


def test_sample_is_reproducible_with_a_seed(full_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sample", str(full_run), "--prompt", "What is 2+2?", "--seed", "7", "--max-tokens", "12"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    assert capsys.readouterr().out == first
    assert first.strip()
    # the checkpoint path from checkpoints.jsonl names the same weights
    path = resolve_checkpoint(str(full_run)).model_path
    assert path is not None and main(["sample", path, *args[2:]]) == 0
    assert capsys.readouterr().out == first


def _read_until(fd: int, needle: str, deadline: float) -> str:
    seen = ""
    while needle not in seen:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"waited for {needle!r}; got {seen!r}")
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            try:
                chunk = os.read(fd, 4096).decode(errors="replace")
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen


def test_chat_two_turns_in_a_terminal(full_run: Path) -> None:
    primary, secondary = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    args = [sys.executable, "-m", "kitchen", "chat", str(full_run), "--seed", "1", "--max-tokens", "8"]
    proc = subprocess.Popen(args, stdin=secondary, stdout=secondary, stderr=secondary, env=env, cwd=REPO)
    os.close(secondary)
    deadline = time.monotonic() + 240
    try:
        assert "you> " in _read_until(primary, "you> ", deadline)
        os.write(primary, b"hello\n")
        first = _read_until(primary, "you> ", deadline)
        assert "assistant> " in first
        os.write(primary, b"what is 3+4?\n")
        second = _read_until(primary, "you> ", deadline)
        assert "assistant> " in second
        os.write(primary, b"/exit\n")
        assert proc.wait(timeout=max(1.0, deadline - time.monotonic())) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(primary)
