"""The tinker adapter on the real tinker SDK, against `kitchen serve --backend noop` on 127.0.0.1:
every port method, futures, order, checkpoints, sessions."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
import tinker
import torch

from adapters.tinker.availability import API_KEY_ENV
from adapters.tinker.backend import TinkerBackend
from adapters.tinker.redaction import Redactor
from adapters.tinker.retry import RetryPolicy
from adapters.tinker.training_client import TinkerTrainingClient
from kitchen.engine.backends import make_backend
from kitchen.engine.config.run import RunConfig
from kitchen.engine.errors import ConfigError, DataError
from kitchen.engine.ports import SamplingClient, ServiceBackend, TrainingClient
from tests.serve.server_process import API_KEY, shared_server
from train_core.errors import InvalidInputError
from train_core.types import AdamParams, Datum, ModelInput, SamplingParams, TensorData

BASE = "tiny"
TEXT = "the quick brown fox jumps over the lazy dog and the cat"
FAST_RETRY = RetryPolicy(max_retries=3, base_delay_s=0.0, max_delay_s=0.0)


def real_backend() -> TinkerBackend:
    """The adapter on a real `tinker.ServiceClient` talking to the shared local server."""
    url = shared_server().url
    return TinkerBackend(
        tinker.ServiceClient(base_url=url, api_key=API_KEY), retry=FAST_RETRY, redactor=Redactor(API_KEY), base_url=url
    )


def sft_datum(tokens_T: Sequence[int]) -> Datum:
    n = len(tokens_T) - 1
    return Datum(
        ModelInput.from_ints(tokens_T[:-1]),
        {
            "target_tokens": TensorData.from_list(tokens_T[1:], "int64"),
            "weights": TensorData.from_list([1.0] * n, "float32"),
        },
    )


async def new_client() -> tuple[TinkerBackend, TinkerTrainingClient, list[int]]:
    backend = real_backend()
    tc = await backend.create_training_client(BASE, lora_rank=8, seed=3)
    return backend, tc, list(tc.get_tokenizer().encode(TEXT))


async def logprobs_of(tc: TrainingClient, datum: Datum) -> list[float]:
    out = await (await tc.forward([datum], "cross_entropy"))
    return list(map(float, out.loss_fn_outputs[0]["logprobs"].data))


def test_backend_and_clients_satisfy_the_ports() -> None:
    async def main() -> None:
        backend, tc, _ = await new_client()
        assert isinstance(backend, ServiceBackend) and backend.name == "tinker"
        assert isinstance(tc, TrainingClient)
        assert isinstance(await tc.save_weights_and_get_sampling_client(), SamplingClient)
        await backend.close()

    asyncio.run(main())


def test_pipelined_requests_run_in_submission_order() -> None:
    async def main() -> None:
        backend, tc, tokens = await new_client()
        datum = sft_datum(tokens)
        before = await tc.forward([datum], "cross_entropy")
        fb = await tc.forward_backward([datum], "cross_entropy")
        opt = await tc.optim_step(AdamParams(learning_rate=0.05))
        fwd = await tc.forward([datum], "cross_entropy")
        after, _, first, trained = await fwd, await opt, await before, await fb
        assert trained.metrics["loss:sum"] == pytest.approx(first.metrics["loss:sum"])  # before the step
        assert after.loss_fn_outputs[0]["logprobs"].data != first.loss_fn_outputs[0]["logprobs"].data
        await backend.close()

    asyncio.run(main())


def test_forward_equals_compute_logprobs_and_sampled_logprobs_on_same_weights() -> None:
    async def main() -> None:
        backend, tc, tokens = await new_client()
        sampler = await tc.save_weights_and_get_sampling_client()
        prompt_lps = await sampler.compute_logprobs(ModelInput.from_ints(tokens))
        assert prompt_lps[0] is None
        assert prompt_lps[1:] == pytest.approx(await logprobs_of(tc, sft_datum(tokens)), abs=1e-6)
        result = await sampler.sample(ModelInput.from_ints(tokens), 2, SamplingParams(max_tokens=12, seed=5))
        for seq in result.sequences:
            scored = await sampler.compute_logprobs(ModelInput.from_ints(tokens + seq.tokens))
            assert seq.logprobs == pytest.approx(scored[len(tokens) :], abs=1e-6)
        await backend.close()

    asyncio.run(main())


def test_optim_step_changes_logprobs_but_not_earlier_sampler_snapshots() -> None:
    async def main() -> None:
        backend, tc, tokens = await new_client()
        datum, prompt = sft_datum(tokens), ModelInput.from_ints(tokens)
        frozen = await tc.save_weights_and_get_sampling_client()
        before = await frozen.compute_logprobs(prompt)
        await (await tc.forward_backward([datum], "cross_entropy"))
        await (await tc.optim_step(AdamParams(learning_rate=0.05)))
        assert await logprobs_of(tc, datum) != pytest.approx(before[1:])
        assert await frozen.compute_logprobs(prompt) == before
        await backend.close()

    asyncio.run(main())


def test_rl_losses_take_their_inputs_and_config() -> None:
    async def main() -> None:
        backend, tc, tokens = await new_client()
        n = len(tokens) - 1
        sampled = await logprobs_of(tc, sft_datum(tokens))
        datum = Datum(
            ModelInput.from_ints(tokens[:-1]),
            {
                "target_tokens": TensorData.from_list(tokens[1:], "int64"),
                "logprobs": TensorData.from_list(sampled, "float32"),
                "advantages": TensorData.from_list([1.0] * n, "float32"),
            },
        )
        is_out = await (await tc.forward_backward([datum], "importance_sampling"))
        assert is_out.metrics["loss:sum"] == pytest.approx(-n, rel=1e-5)  # ratio 1 on-policy
        config = {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}
        ppo_out = await (await tc.forward([datum], "ppo", config))
        assert ppo_out.loss_fn_outputs[0]["logprobs"].data == is_out.loss_fn_outputs[0]["logprobs"].data
        # kitchen's extension of the built-in (dual clip) is refused, not silently dropped
        with pytest.raises(ConfigError, match=r"loss_fn_config\['clip_ratio_c'\] is kitchen's extension of 'ppo'"):
            await tc.forward_backward([datum], "ppo", {"clip_ratio_c": 3.0})
        with pytest.raises(ConfigError, match="'decoupled_ppo' is not one the Tinker service runs"):
            await tc.forward_backward([datum], "decoupled_ppo")
        await backend.close()

    asyncio.run(main())


def test_loss_mistakes_fail_before_anything_is_sent() -> None:
    async def main() -> None:
        backend, tc, tokens = await new_client()
        with pytest.raises(InvalidInputError, match="'crossentropy'"):
            await tc.forward_backward([sft_datum(tokens)], "crossentropy")
        with pytest.raises(InvalidInputError, match="beta"):
            await tc.forward_backward([sft_datum(tokens)], "dro")
        with pytest.raises(InvalidInputError, match="datum 0: loss 'ppo' needs loss_fn_inputs\\['logprobs'\\]"):
            await tc.forward([sft_datum(tokens), sft_datum(tokens)], "ppo")
        with pytest.raises(DataError, match="at least one datum"):
            await tc.forward_backward_custom([], lambda data, lps: (lps[0].sum(), {}))
        await backend.close()

    asyncio.run(main())


def test_forward_backward_custom_sees_kitchen_data_and_runs_the_sdk_two_phase_way() -> None:
    seen: list[tuple[type, int]] = []

    def neg_logprob_sum(data: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        seen.extend((type(d), lp.numel()) for d, lp in zip(data, logprobs_D, strict=True))
        loss = -torch.stack([lp.sum() for lp in logprobs_D]).sum()
        return loss, {"custom/pairs": float(len(data))}

    async def main() -> int:
        backend, tc, tokens = await new_client()
        datum = sft_datum(tokens)
        before = await logprobs_of(tc, datum)
        out = await (await tc.forward_backward_custom([datum, datum], neg_logprob_sum))
        assert out.metrics["custom/pairs"] == 2.0
        assert out.metrics["loss:sum"] == pytest.approx(-2 * sum(before), rel=1e-5)
        # the SDK's second phase: cross_entropy with weights -dC/dlogprobs, reported as the surrogate
        assert out.metrics["surrogate_loss:sum"] == pytest.approx(out.metrics["loss:sum"], rel=1e-5)
        assert list(out.loss_fn_outputs[1]["logprobs"].data) == pytest.approx(before, abs=1e-6)
        await (await tc.optim_step(AdamParams(learning_rate=0.05)))
        assert await logprobs_of(tc, datum) != pytest.approx(before)
        await backend.close()
        return len(tokens) - 1

    n = asyncio.run(main())
    assert seen == [(Datum, n), (Datum, n)]


def test_state_checkpoints_resume_with_or_without_optimizer() -> None:
    async def main() -> None:
        backend, tc, tokens = await new_client()
        datum, adam = sft_datum(tokens), AdamParams(learning_rate=0.05)
        await (await tc.forward_backward([datum], "cross_entropy"))
        await (await tc.optim_step(adam))
        path = await (await tc.save_state("000001"))
        assert isinstance(path, str) and path.startswith("tinker://") and path.endswith("/weights/000001")
        saved = await logprobs_of(tc, datum)
        # the SDK's current form: one LoadWeights request that makes the new client
        resumed = await backend.create_training_client_from_state(path, with_optimizer=True)
        fresh = await backend.create_training_client_from_state(path, with_optimizer=False)
        assert await logprobs_of(resumed, datum) == saved == await logprobs_of(fresh, datum)
        await (await tc.forward_backward([datum], "cross_entropy"))
        await (await tc.optim_step(adam))
        assert await logprobs_of(tc, datum) != saved
        await (await tc.load_state(path, with_optimizer=False))  # the deprecated in-place form still works here
        assert await logprobs_of(tc, datum) == saved
        await backend.close()

    asyncio.run(main())


def test_sampler_checkpoints_reload_by_path() -> None:
    async def main() -> None:
        backend, tc, tokens = await new_client()
        await (await tc.forward_backward([sft_datum(tokens)], "cross_entropy"))
        await (await tc.optim_step(AdamParams(learning_rate=0.05)))
        path = await (await tc.save_weights_for_sampler("000001"))
        assert path.startswith("tinker://") and "sampler_weights" in path
        live = await tc.save_weights_and_get_sampling_client()
        reloaded = await backend.create_sampling_client(model_path=path)
        prompt = ModelInput.from_ints(tokens)
        assert await reloaded.compute_logprobs(prompt) == await live.compute_logprobs(prompt)
        await backend.close()

    asyncio.run(main())


def test_seeded_sampling_is_deterministic_and_honours_stop_ids() -> None:
    async def main() -> None:
        backend, tc, tokens = await new_client()
        sampler = await tc.save_weights_and_get_sampling_client()
        prompt = ModelInput.from_ints(tokens)
        params = SamplingParams(max_tokens=40, seed=11)
        first = await sampler.sample(prompt, 8, params)
        assert first == await sampler.sample(prompt, 8, params)
        assert first != await sampler.sample(prompt, 8, SamplingParams(max_tokens=40, seed=12))
        stop_id = first.sequences[0].tokens[2]
        stopped = await sampler.sample(prompt, 8, SamplingParams(max_tokens=40, seed=11, stop=[stop_id]))
        for seq in stopped.sequences:
            if seq.stop_reason == "stop":
                assert seq.tokens[-1] == stop_id and stop_id not in seq.tokens[:-1]
            else:
                assert len(seq.tokens) == 40 and stop_id not in seq.tokens
        assert stopped.sequences[0].stop_reason == "stop" and len(stopped.sequences[0].tokens) <= 3
        await backend.close()

    asyncio.run(main())


def test_tiny_tokenizer_loads_offline_and_other_names_fail_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect 5: `sdk_tokenizer("tiny")` raised a raw OSError offline."""
    from adapters.tinker.backend import sdk_tokenizer
    from kitchen.engine.errors import ConfigError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert sdk_tokenizer(BASE).decode(sdk_tokenizer(BASE).encode(TEXT)) == TEXT
    with pytest.raises(ConfigError, match="model_name 'no-org/no-such-model-xyz': the tinker SDK cannot load"):
        sdk_tokenizer("no-org/no-such-model-xyz")

    async def main() -> None:
        backend, tc, _ = await new_client()
        assert tc.get_tokenizer().encode(TEXT) == backend.get_tokenizer(BASE).encode(TEXT)
        await backend.close()

    asyncio.run(main())


def test_close_finishes_the_session_on_the_server() -> None:
    """Defect 6: `close()` must finish the session (the server then answers its heartbeat 410)."""

    async def main() -> str:
        backend, tc, _ = await new_client()
        session_id = tc._sdk.holder.get_session_id()  # type: ignore[attr-defined]
        await backend.close()
        return str(session_id)

    session_id = asyncio.run(main())
    answer = httpx.post(
        f"{shared_server().url}/api/v1/session_heartbeat",
        json={"session_id": session_id, "type": "session_heartbeat"},
        headers={"X-API-Key": API_KEY},
    )
    assert answer.status_code == 410 and "finished (success)" in answer.json()["detail"]


def test_backend_tinker_runs_build_through_the_registry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`backend: tinker` with `tinker.base_url` pointing at kitchen serve, as a user configures it."""
    monkeypatch.setenv(API_KEY_ENV, API_KEY)
    url = shared_server().url
    backend = make_backend(RunConfig.model_validate({"backend": "tinker", "tinker": {"base_url": url}}), tmp_path)
    assert isinstance(backend, TinkerBackend)

    async def main() -> None:
        tc = await backend.create_training_client(BASE, lora_rank=4)
        datum = sft_datum(list(backend.get_tokenizer(BASE).encode(TEXT)))
        await (await tc.forward_backward([datum], "cross_entropy"))
        path = await (await tc.save_state("final"))
        saved = await logprobs_of(tc, datum)
        await backend.close()
        # a later run (a new session) resumes from the first one's tinker:// path and saves its own
        later = make_backend(RunConfig.model_validate({"backend": "tinker", "tinker": {"base_url": url}}), tmp_path)
        resumed = await later.create_training_client_from_state(path)
        assert await logprobs_of(resumed, datum) == saved
        assert await (await resumed.save_state("final")) != path
        await later.close()

    asyncio.run(main())
