"""The sampler/trainer mismatch when both run in bfloat16 (the engine's dtype follows
`local.dtype`): reported, not zero; the off-policy corrections in RL are sized from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.common.tiny import TINY32_MODEL_NAME
from adapters.local import LocalBackend
from adapters.local.vllm_settings import VllmSettings
from tests.adapters.vllm_engine.engine_checks import SKIP_REASON, run, sample_and_compare
from train_core.types import ModelInput

pytest.importorskip("vllm", reason=SKIP_REASON)


def test_bfloat16_sampler_and_trainer_nearly_agree(tmp_path: Path) -> None:
    async def scenario() -> dict[str, float]:
        backend = LocalBackend(tmp_path / "checkpoints", device="cpu", dtype="bfloat16", vllm=VllmSettings())
        try:
            training = await backend.create_training_client(TINY32_MODEL_NAME)
            sampler = await training.save_weights_and_get_sampling_client()
            tokenizer = training.get_tokenizer()
            prompts = [
                ModelInput.from_ints(tokenizer.encode(text, add_special_tokens=False))
                for text in ("What is 23 + 45?", "Alice reads a red book.")
            ]
            return await sample_and_compare(sampler, training, prompts, 8, 16)
        finally:
            await backend.close()

    mismatch = run(scenario())
    print(f"bfloat16 sampler vs trainer: {mismatch}")
    assert mismatch["optim/kl_sample_train_v2"] < 1e-2
    assert mismatch["max_abs_diff"] < 0.5
