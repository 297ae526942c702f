"""The local backend's prompt detail (top-k, targets, alternative draws), top-k sample logprobs
and LoRA layer choice, on the tiny model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.local import LocalBackend
from adapters.local.checkpoint_io import read_identity
from kitchen.engine.ports import ScoresPromptDetail
from train_core.types import LoraLayers, ModelInput, PromptDetail, PromptScores, SampleResult, SamplingParams

PROMPT = ModelInput.from_ints([5, 17, 99, 230, 41, 8])


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBackend]:
    service = LocalBackend(checkpoint_dir=tmp_path_factory.mktemp("detail"), device="cpu")
    yield service
    asyncio.run(service.close())


def test_prompt_detail_is_the_models_distribution(backend: LocalBackend) -> None:
    async def main() -> tuple[list[float | None], PromptScores, PromptScores]:
        sampler = await backend.create_sampling_client(base_model="tiny")
        tokens = PROMPT.to_ints()
        detail = PromptDetail(topk=3, targets=[[t, -1] for t in tokens[1:]], alt_k=4, temperature=1.0, seed=7)
        assert isinstance(sampler, ScoresPromptDetail)
        scores = await sampler.score_prompt(PROMPT, detail)
        return await sampler.compute_logprobs(PROMPT), scores, await sampler.score_prompt(PROMPT, detail)

    logprobs, scores, again = asyncio.run(main())
    assert scores == again  # the alternatives are seeded
    assert scores.logprobs == pytest.approx(logprobs, abs=1e-5)
    assert scores.targets is not None and scores.topk is not None
    assert scores.alt_tokens is not None and scores.alt_logprobs is not None
    assert [row[0] for row in scores.targets] == pytest.approx(logprobs[1:], abs=1e-5)
    assert all(row[1] is None for row in scores.targets)
    for row, actual in zip(scores.topk, logprobs[1:], strict=True):
        assert [lp for _, lp in row] == sorted((lp for _, lp in row), reverse=True) and row[0][1] >= (
            actual or 0.0
        ) - 1e-5
    assert all(len(row) == 4 for row in scores.alt_tokens) and all(lp <= 0 for row in scores.alt_logprobs for lp in row)


def test_greedy_samples_report_their_tokens_as_the_top_one(backend: LocalBackend) -> None:
    async def main() -> SampleResult:
        sampler = await backend.create_sampling_client(base_model="tiny")
        return await sampler.sample(PROMPT, 2, SamplingParams(max_tokens=5, temperature=0.0, topk_logprobs=2))

    result = asyncio.run(main())
    for sequence in result.sequences:
        assert sequence.maybe_topk is not None
        assert [row[0][0] for row in sequence.maybe_topk] == sequence.tokens


@pytest.mark.parametrize(
    ("layers", "wanted"),
    [
        (LoraLayers(attn=True, mlp=False, unembed=False), {"q_proj", "k_proj", "v_proj", "o_proj"}),
        (LoraLayers(attn=False, mlp=True, unembed=True), {"gate_proj", "up_proj", "down_proj", "lm_head"}),
    ],
)
def test_lora_layers_are_the_chosen_ones_and_survive_a_checkpoint(
    backend: LocalBackend, layers: LoraLayers, wanted: set[str]
) -> None:
    async def main() -> tuple[set[str], str]:
        client = await backend.create_lora_training_client("tiny", 4, 0, layers)
        trained = {
            name.split(".lora_A")[0].split(".")[-1]
            for name, p in client._model.named_parameters()
            if p.requires_grad and ".lora_A" in name
        }
        return trained, await (await client.save_state("layers"))

    trained, path = asyncio.run(main())
    assert trained == wanted
    assert read_identity(Path(path)).layers == layers
