"""Failures of the tinker backend: up-front checks, retries, named final errors, a key that never leaks.

These run on the fake SDK (`fake_sdk`) where the behaviour needs an exact sequence of injected
failures per SDK method (two different errors, then success; a 429 three times), counted per
call, or an SDK client that echoes the API key inside an error: a local server cannot produce
those at one chosen call. What the real SDK does with failures is in
`test_tinker_real_failures.py` (against a misbehaving local endpoint)."""

from __future__ import annotations

import asyncio
import logging
import sys
import traceback
from pathlib import Path

import httpx
import pytest
import tinker
from hypothesis import given
from hypothesis import strategies as st

import adapters.tinker as tinker_adapter
from adapters.tinker.availability import API_KEY_ENV, check_available
from adapters.tinker.backend import TinkerBackend
from adapters.tinker.errors import TinkerCallError
from adapters.tinker.redaction import REDACTED
from adapters.tinker.registration import TinkerSettings, create
from adapters.tinker.retry import RetryPolicy
from kitchen.engine.errors import ConfigError, StageError
from kitchen.engine.usage import TokenPrices, backend_prices
from tests.adapters.tinker.fake_sdk import FAST_RETRY, FakeServiceClient, make_fake_backend, service_error
from train_core.losses import LOSS_SPECS
from train_core.types import Datum, ModelInput, SamplingParams, TensorData

BASE = "Qwen/Qwen3-8B"
PLANTED_KEY = "tml-PLANTED-0123456789abcdef"


def sft_datum(tokens_T: list[int]) -> Datum:
    return Datum(
        ModelInput.from_ints(tokens_T[:-1]),
        {
            "target_tokens": TensorData.from_list(tokens_T[1:], "int64"),
            "weights": TensorData.from_list([1.0] * (len(tokens_T) - 1), "float32"),
        },
    )


def connection_error() -> tinker.APIConnectionError:
    return tinker.APIConnectionError(request=httpx.Request("POST", "https://fake-tinker.invalid"))


# --- before any work starts ---


def test_missing_api_key_is_one_config_error_and_builds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    built: list[str | None] = []

    def factory(*, base_url: str | None, api_key: str) -> FakeServiceClient:
        built.append(base_url)
        return FakeServiceClient()

    with pytest.raises(ConfigError, match=API_KEY_ENV):
        TinkerBackend.from_env(service_client_factory=factory)
    assert built == []


def test_missing_sdk_is_one_config_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "tinker", None)  # makes `import tinker` fail
    with pytest.raises(ConfigError) as info:
        check_available()
    assert "kitchen[tinker]" in str(info.value) and API_KEY_ENV in str(info.value)
    with pytest.raises(ConfigError, match=r"kitchen\[tinker\]"):
        _ = tinker_adapter.TinkerBackend


def test_check_available_passes_with_sdk_and_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, PLANTED_KEY)
    check_available()


def test_lora_rank_is_required() -> None:
    async def main() -> None:
        backend, service = make_fake_backend()
        with pytest.raises(ConfigError, match="LoRA") as info:
            await backend.create_training_client(BASE)
        assert "lora_rank" in str(info.value)
        with pytest.raises(ConfigError, match="lora_rank"):
            await backend.create_training_client(BASE, lora_rank=0)
        assert service.submitted == []

    asyncio.run(main())


def test_only_tinker_paths_load() -> None:
    async def main() -> None:
        backend, service = make_fake_backend()
        tc = await backend.create_training_client(BASE, lora_rank=4)
        for attempt in (
            backend.create_training_client_from_state("runs/x/ckpt/000010"),
            backend.create_sampling_client(model_path="/tmp/sampler"),
            tc.load_state("runs/x/ckpt/000010"),
        ):
            with pytest.raises(ConfigError, match="tinker://"):
                await attempt
        with pytest.raises(ConfigError, match="model_path or a base_model"):
            await backend.create_sampling_client()
        assert service.submitted == ["create_lora_training_client"]

    asyncio.run(main())


# --- retries ---


@given(st.integers(0, 60), st.floats(0, 5), st.floats(0, 60))
def test_backoff_doubles_up_to_its_cap(attempt: int, base: float, cap: float) -> None:
    policy = RetryPolicy(base_delay_s=base, max_delay_s=cap)
    assert policy.delay_s(attempt) == min(base * 2**attempt, cap)
    assert policy.delay_s(attempt) <= policy.delay_s(attempt + 1) <= cap


def test_negative_retry_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="max_retries"):
        RetryPolicy(max_retries=-1)


def test_client_creation_retries_retryable_errors_then_succeeds() -> None:
    async def main() -> None:
        backend, service = make_fake_backend()
        service.fail_next("create_lora_training_client", service_error(500, "busy"), connection_error())
        await backend.create_training_client(BASE, lora_rank=4)
        assert service.attempts["create_lora_training_client"] == 3

    asyncio.run(main())


def test_client_creation_gives_up_after_max_retries_naming_the_call() -> None:
    async def main() -> None:
        backend, service = make_fake_backend(retry=RetryPolicy(max_retries=1, base_delay_s=0.0))
        service.fail_next("create_sampling_client", *(service_error(429, "slow down") for _ in range(3)))
        with pytest.raises(TinkerCallError) as info:
            await backend.create_sampling_client(base_model=BASE)
        assert str(info.value).startswith("tinker create_sampling_client failed after 2 attempts: RateLimitError")
        assert isinstance(info.value, StageError) and info.value.call == "create_sampling_client"
        assert isinstance(info.value.__cause__, tinker.RateLimitError)
        assert service.attempts["create_sampling_client"] == 2

    asyncio.run(main())


def test_non_retryable_errors_are_not_retried() -> None:
    async def main() -> None:
        backend, service = make_fake_backend()
        service.fail_next("create_lora_training_client", service_error(400, "unknown base model"))
        with pytest.raises(TinkerCallError, match="create_training_client failed: BadRequestError: unknown base"):
            await backend.create_training_client("no/such-model", lora_rank=4)
        assert service.attempts["create_lora_training_client"] == 1

    asyncio.run(main())


def test_sampling_is_retried_by_the_sdk_with_our_backoff() -> None:
    async def main() -> None:
        policy = RetryPolicy(base_delay_s=0.001, max_delay_s=0.002)
        backend, service = make_fake_backend(retry=policy)
        sampler = await backend.create_sampling_client(base_model=BASE)
        service.fail_next("sample", service_error(503, "overloaded"), connection_error())
        result = await sampler.sample(ModelInput.from_ints([5, 6, 7]), 2, SamplingParams(max_tokens=4, seed=1))
        assert len(result.sequences) == 2
        assert service.attempts["sample"] == 3
        assert service.retry_configs == [policy.sdk_retry_config()]
        service.fail_next("compute_logprobs", service_error(400, "prompt too long"))
        with pytest.raises(TinkerCallError, match="tinker compute_logprobs failed: BadRequestError"):
            await sampler.compute_logprobs(ModelInput.from_ints([5, 6, 7]))

    asyncio.run(main())


# --- the API key never leaks ---


def test_api_key_stays_out_of_reprs_logs_and_errors(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(API_KEY_ENV, PLANTED_KEY)
    caplog.set_level(logging.DEBUG)
    services: list[FakeServiceClient] = []

    def factory(*, base_url: str | None, api_key: str) -> FakeServiceClient:
        services.append(FakeServiceClient(base_url=base_url, api_key=api_key))
        return services[-1]

    async def main() -> list[str]:
        backend = TinkerBackend.from_env("https://tinker.example", retry=FAST_RETRY, service_client_factory=factory)
        tc = await backend.create_training_client(BASE, lora_rank=4)
        sampler = await tc.save_weights_and_get_sampling_client()
        echo = f"invalid credentials: Authorization: Bearer {PLANTED_KEY}"
        services[0].fail_next("forward_backward", service_error(500, echo))
        services[0].fail_next("create_lora_training_client", *(service_error(503, echo) for _ in range(4)))
        texts = [repr(backend), repr(tc), repr(sampler)]
        for failing in (
            (await tc.forward_backward([sft_datum([5, 6, 7])], "cross_entropy")),
            backend.create_training_client(BASE, lora_rank=4),
        ):
            with pytest.raises(TinkerCallError) as info:
                await failing
            assert REDACTED in str(info.value) and info.value.__cause__ is None
            texts.append("".join(traceback.format_exception(info.value)))
        await backend.close()
        return texts

    texts = asyncio.run(main())
    assert services[0]._api_key == PLANTED_KEY  # the SDK client did receive it
    captured = capsys.readouterr()
    everything = "\n".join([*texts, caplog.text, captured.out, captured.err])
    assert "tinker forward_backward failed" in everything
    assert PLANTED_KEY not in everything


def test_real_sdk_client_from_env_hides_the_key_without_any_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, PLANTED_KEY)
    backend = tinker_adapter.TinkerBackend.from_env(base_url="https://tinker.example")
    assert PLANTED_KEY not in repr(backend) and "tinker.example" in repr(backend)
    asyncio.run(backend.close())  # no session was opened, so closing needs no request


def test_the_price_table_of_the_config_reaches_the_backend(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(API_KEY_ENV, PLANTED_KEY)
    settings = TinkerSettings.model_validate({"prices": {"prompt": 0.1, "sampled": 0.3, "trained": 0.3}})
    backend = create(None, settings, tmp_path, LOSS_SPECS)
    assert backend_prices(backend) == TokenPrices(prompt=0.1, sampled=0.3, trained=0.3)
    assert backend_prices(create(None, TinkerSettings(), tmp_path, LOSS_SPECS)) is None
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        TinkerSettings.model_validate({"prices": {"prompt": -1, "sampled": 0, "trained": 0}})
