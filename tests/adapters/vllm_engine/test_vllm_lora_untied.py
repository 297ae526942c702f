"""Weight sync into the vLLM engine for a model with an untied output head, by full weights and by
LoRA adapters applied per request (never merged), on one LoRA-capable engine in float32: after
optimizer steps the engine's logprobs are the trainer's, older snapshots keep theirs, and the base
model (a reference client) is served beside the adapters."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from adapters.common.tiny import EMBEDDED_MODELS, TINY32_MODEL_NAME, TINY_DIR
from adapters.local import LocalBackend
from adapters.local.vllm_sampling_client import VllmSamplingClient
from adapters.local.vllm_settings import VllmSettings
from kitchen.engine.ports import SamplingClient, TrainingClient
from tests.adapters.vllm_engine.engine_checks import (
    SKIP_REASON,
    run,
    sample_and_compare,
    sampled_datum,
    training_logprobs,
)
from train_core.types import AdamParams, Datum, ModelInput, TokensWithLogprobs

pytest.importorskip("vllm", reason=SKIP_REASON)

LORA_RANK = 8


def build_untied_model(directory: Path) -> str:
    """tiny32's architecture with its own output head, random weights, saved as an HF model."""
    config = AutoConfig.from_pretrained(EMBEDDED_MODELS[TINY32_MODEL_NAME])
    config.tie_word_embeddings = False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(TINY_DIR / name, directory / name)
    return str(directory)


@dataclass
class Engine:
    backend: LocalBackend
    model: str
    data: list[Datum]
    prompts: list[ModelInput]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    model = build_untied_model(tmp_path_factory.mktemp("untied"))
    run_dir = tmp_path_factory.mktemp("vllm-run")
    backend = LocalBackend(run_dir / "checkpoints", device="cpu", vllm=VllmSettings(), lora_rank=LORA_RANK)
    tokenizer = backend.get_tokenizer(model)
    texts = ("What is 23 + 45? The answer is 68.", "Alice reads a red book and the old garden.")
    token_lists = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    data = [
        sampled_datum(ModelInput.from_ints(t[:2]), TokensWithLogprobs(t[2:], [0.0] * (len(t) - 2))) for t in token_lists
    ]
    prompts = [ModelInput.from_ints(t[:4]) for t in token_lists]
    yield Engine(backend, model, data, prompts)
    run(backend.close())


async def _engine_logprobs(client: SamplingClient, data: list[Datum]) -> list[torch.Tensor]:
    """The engine's logprobs of each datum's targets (prompt logprobs of the whole sequence)."""
    scored = []
    for datum in data:
        tokens = [*datum.model_input.to_ints(), int(datum.loss_fn_inputs["target_tokens"].data[-1])]
        scored.append(torch.tensor((await client.compute_logprobs(ModelInput.from_ints(tokens)))[1:]))
    return scored


async def _step(training: TrainingClient, data: list[Datum], learning_rate: float) -> None:
    await (await training.forward_backward(data, "cross_entropy"))
    await (await training.optim_step(AdamParams(learning_rate=learning_rate)))


def _close(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.allclose(x, y, atol=1e-4) for x, y in zip(a, b, strict=True))


def test_full_weight_sync_is_exact_with_an_untied_head(engine: Engine) -> None:
    async def scenario() -> None:
        training = await engine.backend.create_training_client(engine.model)
        before = await training.save_weights_and_get_sampling_client()
        old = await training_logprobs(training, engine.data)
        assert _close(await _engine_logprobs(before, engine.data), old)
        await _step(training, engine.data, 1e-2)
        after = await training.save_weights_and_get_sampling_client()
        new = await training_logprobs(training, engine.data)
        assert max(float((n - o).abs().max()) for n, o in zip(new, old, strict=True)) > 0.1
        assert _close(await _engine_logprobs(after, engine.data), new)
        assert _close(await _engine_logprobs(before, engine.data), old)  # the old snapshot, reloaded
        await training.close()

    run(scenario())


def test_lora_adapters_are_pushed_per_request_and_match_peft(engine: Engine) -> None:
    async def scenario() -> None:
        training = await engine.backend.create_training_client(engine.model, lora_rank=LORA_RANK)
        reference = await engine.backend.create_sampling_client(base_model=engine.model)
        base = await training_logprobs(training, engine.data)  # B = 0: the adapters start as the identity
        await _step(training, engine.data, 2e-2)
        first = await training.save_weights_and_get_sampling_client()
        assert isinstance(first, VllmSamplingClient) and first.weight_sync_s is not None
        trained = await training_logprobs(training, engine.data)
        assert max(float((t - b).abs().max()) for t, b in zip(trained, base, strict=True)) > 0.05
        assert _close(await _engine_logprobs(first, engine.data), trained)
        mismatch = await sample_and_compare(first, training, engine.prompts, 4, 10)
        assert mismatch["optim/kl_sample_train_v2"] < 1e-3
        await _step(training, engine.data, 2e-2)
        second = await training.save_weights_and_get_sampling_client()
        assert _close(await _engine_logprobs(second, engine.data), await training_logprobs(training, engine.data))
        assert _close(await _engine_logprobs(first, engine.data), trained)  # its own adapter version
        assert _close(await _engine_logprobs(reference, engine.data), base)  # the base model, no adapter
        await training.close()

    run(scenario())
