"""With distributed trainers (`local.num_workers=2`: FSDP2 workers as Ray actors, gloo, cpu) the
vLLM engine is a Ray actor too: the gathered weights go into it after each step, the sampler stays
on-policy, and a dead actor fails the request with the engine log's last lines. One Ray instance
and one engine (an actor) serve the module."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the distributed local backend needs Ray (pip install 'kitchen[distributed]')")

from adapters.common.tiny import TINY32_MODEL_NAME
from adapters.local.backend import LocalBackend
from adapters.local.distributed import DistributedOptions, ensure_ray
from adapters.local.vllm_engine import EngineDied
from adapters.local.vllm_ray import RayEngine
from adapters.local.vllm_sampling_client import VllmSamplingClient
from adapters.local.vllm_settings import VllmSettings
from tests.adapters.vllm_engine.engine_checks import SKIP_REASON, run, sample_and_compare, sampled_datum
from train_core.types import AdamParams, ModelInput, SamplingParams

pytest.importorskip("vllm", reason=SKIP_REASON)


@pytest.fixture(scope="module", autouse=True)
def ray_session() -> Iterator[None]:
    ray = ensure_ray(None)
    yield
    ray.shutdown()


def test_the_engine_is_a_ray_actor_beside_the_workers_and_stays_on_policy(tmp_path: Path) -> None:
    backend = LocalBackend(
        tmp_path / "checkpoints",
        device="cpu",
        distributed=DistributedOptions(2, None, 300.0, 1),
        vllm=VllmSettings(max_restarts=0),
    )

    async def scenario() -> None:
        training = await backend.create_training_client(TINY32_MODEL_NAME)
        tokenizer = training.get_tokenizer()
        prompts = [ModelInput.from_ints(tokenizer.encode(t, add_special_tokens=False)) for t in ("What is 2 + 3?",)]
        sampler = await training.save_weights_and_get_sampling_client()
        assert isinstance(sampler, VllmSamplingClient)
        assert isinstance(sampler.engine.transport, RayEngine)
        assert (await sample_and_compare(sampler, training, prompts, 4, 8))["optim/kl_sample_train_v2"] < 1e-3
        sequence = (await sampler.sample(prompts[0], 1, SamplingParams(max_tokens=8, seed=0))).sequences[0]
        datum = sampled_datum(prompts[0], sequence)
        await (await training.forward_backward([datum], "cross_entropy"))
        await (await training.optim_step(AdamParams(learning_rate=1e-2)))
        updated = await training.save_weights_and_get_sampling_client()
        assert isinstance(updated, VllmSamplingClient) and (updated.weight_sync_s or 0) > 0
        assert (await sample_and_compare(updated, training, prompts, 4, 8))["optim/kl_sample_train_v2"] < 1e-3
        pid = updated.engine.pid
        assert pid is not None and pid != os.getpid()
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(EngineDied, match=r"actor died[\s\S]*engine\.log"):
            await updated.sample(prompts[0], 1, SamplingParams(max_tokens=4))
        await training.close()

    try:
        run(scenario())
    finally:
        run(backend.close())
    assert "starting the vLLM engine" in (tmp_path / "vllm" / "engine-0" / "engine.log").read_text()
