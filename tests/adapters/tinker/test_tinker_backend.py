"""The tinker adapter on the in-process fake SDK: every port method, futures, order, checkpoints."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from adapters.tinker.backend import TinkerBackend
from adapters.tinker.training_client import TinkerTrainingClient
from kitchen.backends import make_backend
from kitchen.config import RunConfig
from kitchen.errors import ConfigError, DataError
from kitchen.ports import SamplingClient, ServiceBackend, TrainingClient
from tests.adapters.tinker.fake_sdk import FakeServiceClient, install_fake_sdk, make_fake_backend
from train_core.errors import InvalidInputError
from train_core.types import AdamParams, Datum, ModelInput, SamplingParams, TensorData

BASE = "Qwen/Qwen3-8B"
TEXT = "the quick brown fox jumps over the lazy dog and the cat"


def sft_datum(tokens_T: Sequence[int]) -> Datum:
    n = len(tokens_T) - 1
    return Datum(
        ModelInput.from_ints(tokens_T[:-1]),
        {
            "target_tokens": TensorData.from_list(tokens_T[1:], "int64"),
            "weights": TensorData.from_list([1.0] * n, "float32"),
        },
    )


async def new_client(
    latency_s: float = 0.0,
) -> tuple[TinkerBackend, FakeServiceClient, TinkerTrainingClient, list[int]]:
    backend, service = make_fake_backend(latency_s=latency_s)
    tc = await backend.create_training_client(BASE, lora_rank=8, seed=3)
    return backend, service, tc, list(tc.get_tokenizer().encode(TEXT))


async def logprobs_of(tc: TrainingClient, datum: Datum) -> list[float]:
    out = await (await tc.forward([datum], "cross_entropy"))
    return list(map(float, out.loss_fn_outputs[0]["logprobs"].data))


def test_backend_and_clients_satisfy_the_ports() -> None:
    async def main() -> None:
        backend, _, tc, _ = await new_client()
        assert isinstance(backend, ServiceBackend) and backend.name == "tinker"
        assert isinstance(tc, TrainingClient)
        assert isinstance(await tc.save_weights_and_get_sampling_client(), SamplingClient)

    asyncio.run(main())


def test_submission_returns_pending_futures_that_resolve() -> None:
    async def main() -> None:
        _, service, tc, tokens = await new_client(latency_s=0.2)
        start = time.perf_counter()
        future = await tc.forward_backward([sft_datum(tokens)], "cross_entropy")
        assert time.perf_counter() - start < 0.15  # submitting does not wait for the service
        assert not asyncio.ensure_future(future).done()
        out = await future
        assert len(out.loss_fn_outputs[0]["logprobs"].data) == len(tokens) - 1
        assert service.executed[-1] == "forward_backward"

    asyncio.run(main())


def test_pipelined_requests_run_in_submission_order() -> None:
    async def main() -> None:
        _, service, tc, tokens = await new_client(latency_s=0.02)
        datum = sft_datum(tokens)
        fb = await tc.forward_backward([datum], "cross_entropy")
        opt = await tc.optim_step(AdamParams(learning_rate=0.05))
        fwd = await tc.forward([datum], "cross_entropy")
        after, _, before = await fwd, await opt, await fb
        assert service.executed[-3:] == ["forward_backward", "optim_step", "forward"]
        assert after.metrics["loss:sum"] < before.metrics["loss:sum"]  # the step landed between them

    asyncio.run(main())


def test_forward_equals_compute_logprobs_and_sampled_logprobs_on_same_weights() -> None:
    async def main() -> None:
        _, _, tc, tokens = await new_client()
        sampler = await tc.save_weights_and_get_sampling_client()
        prompt_lps = await sampler.compute_logprobs(ModelInput.from_ints(tokens))
        assert prompt_lps[0] is None
        assert prompt_lps[1:] == await logprobs_of(tc, sft_datum(tokens))
        result = await sampler.sample(ModelInput.from_ints(tokens), 2, SamplingParams(max_tokens=12, seed=5))
        for seq in result.sequences:
            scored = await sampler.compute_logprobs(ModelInput.from_ints(tokens + seq.tokens))
            assert seq.logprobs == scored[len(tokens) :]

    asyncio.run(main())


def test_a_fresh_lora_client_matches_its_base_model_sampler() -> None:
    async def main() -> None:
        backend, _, tc, tokens = await new_client()
        base = await backend.create_sampling_client(base_model=BASE)
        other = await backend.create_sampling_client(base_model="meta-llama/Llama-3.1-8B")
        base_lps = await base.compute_logprobs(ModelInput.from_ints(tokens))
        assert base_lps[1:] == await logprobs_of(tc, sft_datum(tokens))
        assert await other.compute_logprobs(ModelInput.from_ints(tokens)) != base_lps

    asyncio.run(main())


def test_optim_step_changes_logprobs_but_not_earlier_sampler_snapshots() -> None:
    async def main() -> None:
        _, _, tc, tokens = await new_client()
        datum, prompt = sft_datum(tokens), ModelInput.from_ints(tokens)
        frozen = await tc.save_weights_and_get_sampling_client()
        before = await frozen.compute_logprobs(prompt)
        await (await tc.forward_backward([datum], "cross_entropy"))
        step = await (await tc.optim_step(AdamParams(learning_rate=0.05)))
        assert step.metrics == {}
        after = await logprobs_of(tc, datum)
        assert after != before[1:]
        assert sum(after) > sum(x for x in before[1:] if x is not None)  # cross-entropy raised them
        assert await frozen.compute_logprobs(prompt) == before

    asyncio.run(main())


def test_rl_losses_take_their_inputs_and_config() -> None:
    async def main() -> None:
        _, _, tc, tokens = await new_client()
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

    asyncio.run(main())


def test_loss_mistakes_fail_before_anything_is_sent() -> None:
    async def main() -> None:
        _, service, tc, tokens = await new_client()
        sent = list(service.submitted)
        with pytest.raises(InvalidInputError, match="'crossentropy'"):
            await tc.forward_backward([sft_datum(tokens)], "crossentropy")
        with pytest.raises(InvalidInputError, match="beta"):
            await tc.forward_backward([sft_datum(tokens)], "dro")
        with pytest.raises(InvalidInputError, match="datum 0: loss 'ppo' needs loss_fn_inputs\\['logprobs'\\]"):
            await tc.forward([sft_datum(tokens), sft_datum(tokens)], "ppo")
        with pytest.raises(DataError, match="at least one datum"):
            await tc.forward_backward_custom([], lambda data, lps: (lps[0].sum(), {}))
        assert service.submitted == sent

    asyncio.run(main())


def test_forward_backward_custom_sees_kitchen_data_and_trains() -> None:
    seen: list[tuple[type, int]] = []

    def neg_logprob_sum(data: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        seen.extend((type(d), lp.numel()) for d, lp in zip(data, logprobs_D, strict=True))
        loss = -torch.stack([lp.sum() for lp in logprobs_D]).sum()
        return loss, {"custom/pairs": float(len(data))}

    async def main() -> int:
        _, _, tc, tokens = await new_client()
        datum = sft_datum(tokens)
        before = await logprobs_of(tc, datum)
        out = await (await tc.forward_backward_custom([datum, datum], neg_logprob_sum))
        assert out.metrics["custom/pairs"] == 2.0
        assert out.metrics["loss:sum"] == pytest.approx(-2 * sum(before), rel=1e-5)
        assert list(out.loss_fn_outputs[1]["logprobs"].data) == before
        await (await tc.optim_step(AdamParams(learning_rate=0.05)))
        assert sum(await logprobs_of(tc, datum)) > sum(before)
        return len(tokens) - 1

    n = asyncio.run(main())
    assert seen == [(Datum, n), (Datum, n)]


def test_state_checkpoints_resume_with_or_without_optimizer() -> None:
    async def main() -> None:
        backend, _, tc, tokens = await new_client()
        datum, adam = sft_datum(tokens), AdamParams(learning_rate=0.05)
        await (await tc.forward_backward([datum], "cross_entropy"))
        await (await tc.optim_step(adam))
        path = await (await tc.save_state("000001"))
        assert isinstance(path, str) and path.startswith("tinker://")
        saved = await logprobs_of(tc, datum)

        resumed = await backend.create_training_client_from_state(path, with_optimizer=True)
        fresh = await backend.create_training_client_from_state(path, with_optimizer=False)
        assert await logprobs_of(resumed, datum) == saved == await logprobs_of(fresh, datum)
        for client in (resumed, fresh, tc):
            await (await client.forward_backward([datum], "cross_entropy"))
            await (await client.optim_step(adam))
        # the restored Adam moments make the resumed step the continuation of the original
        assert await logprobs_of(resumed, datum) == await logprobs_of(tc, datum)
        assert await logprobs_of(fresh, datum) != await logprobs_of(tc, datum)

        await (await tc.load_state(path, with_optimizer=False))
        assert await logprobs_of(tc, datum) == saved

    asyncio.run(main())


def test_sampler_checkpoints_reload_by_path() -> None:
    async def main() -> None:
        backend, _, tc, tokens = await new_client()
        await (await tc.forward_backward([sft_datum(tokens)], "cross_entropy"))
        await (await tc.optim_step(AdamParams(learning_rate=0.05)))
        path = await (await tc.save_weights_for_sampler("000001"))
        assert path.startswith("tinker://") and "sampler_weights" in path
        live = await tc.save_weights_and_get_sampling_client()
        reloaded = await backend.create_sampling_client(model_path=path)
        prompt = ModelInput.from_ints(tokens)
        assert await reloaded.compute_logprobs(prompt) == await live.compute_logprobs(prompt)

    asyncio.run(main())


def test_seeded_sampling_is_deterministic_and_honours_stop_ids() -> None:
    async def main() -> None:
        _, service, tc, tokens = await new_client()
        sampler = await tc.save_weights_and_get_sampling_client()
        prompt, stop_id = ModelInput.from_ints(tokens), service.end_token_ids[0]
        params = SamplingParams(max_tokens=40, seed=11, stop=[stop_id])
        first = await sampler.sample(prompt, 8, params)
        assert first == await sampler.sample(prompt, 8, params)
        assert first != await sampler.sample(prompt, 8, SamplingParams(max_tokens=40, seed=12, stop=[stop_id]))
        reasons = set()
        for seq in first.sequences:
            reasons.add(seq.stop_reason)
            if seq.stop_reason == "stop":
                assert seq.tokens[-1] == stop_id and stop_id not in seq.tokens[:-1]
            else:
                assert len(seq.tokens) == 40 and stop_id not in seq.tokens
        assert reasons == {"stop", "length"}

    asyncio.run(main())


def test_tokenizers_come_from_the_sdk_clients() -> None:
    async def main() -> None:
        backend, service, tc, _ = await new_client()
        assert tc.get_tokenizer() is service.tokenizer
        assert backend.get_tokenizer(BASE) is service.tokenizer
        assert backend.get_tokenizer(BASE).decode(backend.get_tokenizer(BASE).encode(TEXT)) == TEXT

    asyncio.run(main())


def test_close_ends_the_session() -> None:
    async def main() -> None:
        backend, service, _, _ = await new_client()
        await backend.close()
        assert service.closed_with == "success"

    asyncio.run(main())


def test_backend_tinker_runs_build_on_the_installed_fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The hook end-to-end tests use: the registry's `backend: tinker` path, on the fake SDK."""
    services = install_fake_sdk(monkeypatch)
    backend = make_backend(
        RunConfig.model_validate({"backend": "tinker", "tinker": {"base_url": "https://tinker.example"}}), tmp_path
    )
    assert isinstance(backend, TinkerBackend)

    async def main() -> None:
        tc = await backend.create_training_client("tiny", lora_rank=4)
        datum = sft_datum(list(backend.get_tokenizer("tiny").encode(TEXT)))
        await (await tc.forward_backward([datum], "cross_entropy"))
        path = await (await tc.save_state("final"))
        saved = await logprobs_of(tc, datum)
        await backend.close()
        # a later run (a new session) resumes from the first one's tinker:// path and saves its own
        later = make_backend(RunConfig.model_validate({"backend": "tinker"}), tmp_path)
        resumed = await later.create_training_client_from_state(path)
        assert await logprobs_of(resumed, datum) == saved
        assert await (await resumed.save_state("final")) != path
        await later.close()

    asyncio.run(main())
    assert [s.base_url for s in services] == ["https://tinker.example", None]
    assert services[0].executed == ["create_lora_training_client", "forward_backward", "save_state", "forward", "close"]
