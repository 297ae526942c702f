"""The vLLM engine against kitchen's sampler contract, on the embedded tiny32 model in float32:
logprobs equal to the trainer's, temperature, stop strings and tokens, max tokens, seeds, `n`
samples, prompt logprobs, weight sync through shared memory after an optimizer step (tied head),
bad input, and an engine that dies. One engine serves the module; the death test runs last."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from adapters.common.stop_matcher import StopMatcher
from adapters.common.tiny import TINY32_MODEL_NAME, TINY_MODEL_NAME
from adapters.local import LocalBackend
from adapters.local.model_loading import load_model
from adapters.local.training_client import LocalTrainingClient
from adapters.local.vllm_engine import EngineDied
from adapters.local.vllm_sampling_client import VllmSamplingClient
from adapters.local.vllm_settings import VllmSettings
from kitchen.engine.errors import ConfigError, DataError
from tests.adapters.vllm_engine.engine_checks import (
    SKIP_REASON,
    run,
    sample_and_compare,
    sampled_datum,
    training_logprobs,
)
from train_core.types import AdamParams, ModelInput, SamplingParams, TokensWithLogprobs

pytest.importorskip("vllm", reason=SKIP_REASON)

TEXTS = ("What is 23 + 45?", "Alice reads a red book.", "The quick dog finds the old garden and")


@dataclass
class Engine:
    backend: LocalBackend
    training: LocalTrainingClient
    sampler: VllmSamplingClient
    run_dir: Path
    prompts: list[ModelInput]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    run_dir = tmp_path_factory.mktemp("vllm-run")
    backend = LocalBackend(run_dir / "checkpoints", device="cpu", vllm=VllmSettings(max_restarts=1))

    async def start() -> tuple[LocalTrainingClient, VllmSamplingClient]:
        training = await backend.create_training_client(TINY32_MODEL_NAME)
        sampler = await training.save_weights_and_get_sampling_client()
        return training, sampler  # type: ignore[return-value]

    training, sampler = run(start())
    assert isinstance(sampler, VllmSamplingClient)
    tokenizer = training.get_tokenizer()
    prompts = [ModelInput.from_ints(tokenizer.encode(text, add_special_tokens=False)) for text in TEXTS]
    yield Engine(backend, training, sampler, run_dir, prompts)
    run(backend.close())


def _as_sequence(tokens: list[int]) -> TokensWithLogprobs:
    """Given tokens as if sampled (their logprobs unused), to build a datum scoring them."""
    return TokensWithLogprobs(tokens, [0.0] * len(tokens), "length")


def _sample(client: VllmSamplingClient, prompt: ModelInput, n: int, params: SamplingParams) -> list[list[int]]:
    return [s.tokens for s in run(client.sample(prompt, n, params)).sequences]


def test_sampled_logprobs_are_the_trainers_in_float32(engine: Engine) -> None:
    mismatch = run(sample_and_compare(engine.sampler, engine.training, engine.prompts, 8, 16))
    print(f"float32 sampler vs trainer: {mismatch}")
    assert mismatch["optim/kl_sample_train_v2"] < 1e-3
    assert mismatch["max_abs_diff"] < 1e-4


def test_prompt_logprobs_are_the_trainers(engine: Engine) -> None:
    tokens = engine.prompts[2].to_ints()
    scored = run(engine.sampler.compute_logprobs(engine.prompts[2]))
    datum = sampled_datum(ModelInput.from_ints(tokens[:1]), _as_sequence(tokens[1:]))
    trained = run(training_logprobs(engine.training, [datum]))[0]
    assert scored[0] is None and len(scored) == len(tokens)
    assert torch.allclose(torch.tensor(scored[1:]), trained, atol=1e-4)
    assert run(engine.sampler.compute_logprobs(ModelInput.from_ints(tokens[:1]))) == [None]


def test_logprobs_at_another_temperature_are_the_tempered_distributions(engine: Engine) -> None:
    """At temperature 0.7 the reported logprobs are log_softmax(logits / 0.7) of the sampled
    tokens (vLLM's raw logprobs would be those at temperature 1)."""
    prompt = engine.prompts[0]
    result = run(engine.sampler.sample(prompt, 2, SamplingParams(max_tokens=10, temperature=0.7, seed=5)))
    model = load_model(TINY32_MODEL_NAME, None, 0, torch.device("cpu"))  # the weights the engine holds
    for sequence in result.sequences:
        tokens = prompt.to_ints() + sequence.tokens
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([tokens[:-1]])).logits[0, -len(sequence.tokens) :].float()
        targets = torch.tensor(sequence.tokens).unsqueeze(-1)
        tempered = torch.log_softmax(logits / 0.7, dim=-1).gather(-1, targets).squeeze(-1)
        untempered = torch.log_softmax(logits, dim=-1).gather(-1, targets).squeeze(-1)
        assert torch.allclose(torch.tensor(sequence.logprobs), tempered, atol=1e-4)
        assert not torch.allclose(tempered, untempered, atol=1e-2)


def test_max_tokens_seeds_and_samples(engine: Engine) -> None:
    prompt, client = engine.prompts[1], engine.sampler
    first = run(client.sample(prompt, 4, SamplingParams(max_tokens=7, seed=3))).sequences
    assert all(len(s.tokens) == len(s.logprobs) == 7 and s.stop_reason == "length" for s in first)
    assert len({tuple(s.tokens) for s in first}) == 4  # the samples of one call differ
    assert _sample(client, prompt, 4, SamplingParams(max_tokens=7, seed=3)) == [s.tokens for s in first]
    assert _sample(client, prompt, 4, SamplingParams(max_tokens=7, seed=4)) != [s.tokens for s in first]
    unseeded = [_sample(client, prompt, 1, SamplingParams(max_tokens=7))[0] for _ in range(2)]
    assert unseeded[0] != unseeded[1]


def test_concurrent_requests_get_what_they_would_alone(engine: Engine) -> None:
    """Requests of one event-loop turn share an engine call; each still gets its own samples."""
    client, params = engine.sampler, SamplingParams(max_tokens=6, seed=11)

    async def together() -> list[list[list[int]]]:
        results = await asyncio.gather(*(client.sample(p, 3, params) for p in engine.prompts))
        return [[s.tokens for s in r.sequences] for r in results]

    alone = [_sample(client, p, 3, params) for p in engine.prompts]
    assert run(together()) == alone


def _suitable_sample(client: VllmSamplingClient, prompt: ModelInput) -> tuple[int, list[int]]:
    """A seed whose 12-token sample decodes to printable text with a non-blank 4th token."""
    tokenizer = client.get_tokenizer()
    for seed in range(50):
        tokens = _sample(client, prompt, 1, SamplingParams(max_tokens=12, seed=seed))[0]
        text = tokenizer.decode(tokens[:4], skip_special_tokens=False)
        last = tokenizer.decode(tokens[3:4], skip_special_tokens=False)
        if "\ufffd" not in text and last.strip() and "<|" not in text:
            return seed, tokens
    raise AssertionError("no seed gave a printable sample")


def _stopped_prefix(tokens: list[int], matcher: StopMatcher) -> list[int]:
    """What kitchen's sampler returns for these draws: up to the token completing a stop."""
    for end in range(1, len(tokens) + 1):
        if matcher.is_done(tokens[:end]):
            return tokens[:end]
    return tokens


def test_stop_strings_and_stop_tokens_keep_the_stopping_token(engine: Engine) -> None:
    client, prompt = engine.sampler, engine.prompts[0]
    tokenizer = client.get_tokenizer()
    seed, tokens = _suitable_sample(client, prompt)

    stop_string = tokenizer.decode(tokens[:4], skip_special_tokens=False)[-2:]
    stopped = run(client.sample(prompt, 1, SamplingParams(max_tokens=12, seed=seed, stop=[stop_string]))).sequences[0]
    assert stopped.tokens == _stopped_prefix(tokens, StopMatcher([stop_string], tokenizer))
    assert stopped.stop_reason == "stop" and len(stopped.tokens) <= 4
    assert len(stopped.logprobs) == len(stopped.tokens)

    stop_token = tokens[3]
    by_token = run(client.sample(prompt, 1, SamplingParams(max_tokens=12, seed=seed, stop=[stop_token]))).sequences[0]
    assert by_token.tokens == tokens[: tokens.index(stop_token) + 1]
    assert by_token.stop_reason == "stop"

    eos = tokenizer.eos_token_id
    assert eos is not None
    free = run(client.sample(prompt, 2, SamplingParams(max_tokens=12, seed=seed))).sequences
    assert all(len(s.tokens) == 12 for s in free)  # no stop at EOS unless asked, as kitchen's sampler


def test_weight_sync_after_an_optimizer_step_is_exact_with_a_tied_head(engine: Engine) -> None:
    """A second training client on the same engine: after a step the new sampling client's
    logprobs are the updated trainer's; the old client keeps sampling with the old weights."""

    async def scenario() -> None:
        training = await engine.backend.create_training_client(TINY32_MODEL_NAME)
        before = await training.save_weights_and_get_sampling_client()
        tokens = engine.prompts[2].to_ints()
        datum = sampled_datum(ModelInput.from_ints(tokens[:2]), _as_sequence(tokens[2:]))
        old = (await training_logprobs(training, [datum]))[0]
        await (await training.forward_backward([datum], "cross_entropy"))
        await (await training.optim_step(AdamParams(learning_rate=1e-2)))
        after = await training.save_weights_and_get_sampling_client()
        assert isinstance(after, VllmSamplingClient)
        assert after.weight_sync_s is not None and after.weight_sync_s > 0
        new = (await training_logprobs(training, [datum]))[0]
        assert (new - old).abs().max() > 0.1  # the step moved the tied embedding / head
        scored_new = await after.compute_logprobs(ModelInput.from_ints(tokens))
        scored_old = await before.compute_logprobs(ModelInput.from_ints(tokens))
        assert torch.allclose(torch.tensor(scored_new[2:]), new[1:], atol=1e-4)
        assert torch.allclose(torch.tensor(scored_old[2:]), old[1:], atol=1e-4)
        mismatch = await sample_and_compare(after, training, engine.prompts, 4, 12)
        assert mismatch["optim/kl_sample_train_v2"] < 1e-3
        buffers = engine.backend._vllm.buffers  # type: ignore[union-attr]
        held = buffers.in_use
        del before
        gc.collect()
        assert buffers.in_use == held - 1  # a snapshot no client holds gives its segment back
        await training.close()

    run(scenario())


def test_bad_requests_fail_before_the_engine(engine: Engine) -> None:
    client = engine.sampler
    with pytest.raises(DataError, match="outside the vocabulary"):
        run(client.sample(ModelInput.from_ints([1, 10**6]), 1, SamplingParams(max_tokens=2)))
    with pytest.raises(DataError, match="max_model_len"):
        run(client.sample(ModelInput.from_ints([5] * 2048), 1, SamplingParams(max_tokens=2)))
    with pytest.raises(ConfigError, match="all strings or all token ids"):
        run(client.sample(engine.prompts[0], 1, SamplingParams(max_tokens=2, stop=cast(Any, ["a", 3]))))


def test_a_model_with_an_unsupported_head_size_is_a_config_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend = LocalBackend(tmp_path / "checkpoints", device="cpu", vllm=VllmSettings())
        try:
            await backend.create_sampling_client(base_model=TINY_MODEL_NAME)
        finally:
            await backend.close()

    with pytest.raises(ConfigError, match=r"head size.*24.*tiny32"):
        run(scenario())


def test_the_engine_logs_into_the_run_directory(engine: Engine) -> None:
    log = (engine.run_dir / "vllm" / "engine-0" / "engine.log").read_text()
    assert "starting the vLLM engine" in log and "vllm" in log.lower()


def test_a_dead_engine_fails_with_its_last_lines_then_restarts_within_max_restarts(engine: Engine) -> None:
    client, prompt = engine.sampler, engine.prompts[0]
    params = SamplingParams(max_tokens=5, seed=1)
    expected = _sample(client, prompt, 2, params)
    pid = client.engine.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(EngineDied, match=r"exited \(code -9\)[\s\S]*engine\.log") as died:
        run(client.sample(prompt, 2, params))
    assert "pid=" in str(died.value)  # the log's last lines are quoted
    assert _sample(client, prompt, 2, params) == expected  # restarted, with this client's weights again
    assert client.engine.pid not in (None, pid)
    os.kill(client.engine.pid or 0, signal.SIGKILL)
    with pytest.raises(EngineDied):
        run(client.sample(prompt, 2, params))
    with pytest.raises(EngineDied, match="restarted 1 time"):
        run(client.sample(prompt, 2, params))
