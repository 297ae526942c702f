"""The local backend on a vision-language model (the embedded random-init `tiny-vl`, a Qwen3-VL):
training, scoring and sampling with images in the prompt, on one logprob path."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image, ImageDraw

from adapters.common.tiny import TINY_VL_MODEL_NAME
from adapters.local import LocalBackend
from kitchen.engine.errors import DataError
from train_core.renderers.images import VisionSpec
from train_core.renderers.registry import get_renderer
from train_core.supervised import datum_from_model_input
from train_core.types import AdamParams, Datum, ImageChunk, ModelInput, SamplingParams

pytestmark = pytest.mark.slow  # builds a random-init Qwen3-VL (vision encoder and language model)


def picture(colour: str, size: tuple[int, int]) -> Image.Image:
    image = Image.new("RGB", size, "white")
    ImageDraw.Draw(image).rectangle((4, 4, size[0] - 5, size[1] - 5), fill=colour)
    return image


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBackend]:
    service = LocalBackend(checkpoint_dir=tmp_path_factory.mktemp("vl"), device="cpu")
    yield service
    asyncio.run(service.close())


def conversation(colour: str, size: tuple[int, int], answer: str | None = None) -> list[Any]:
    question = [{"type": "image", "image": picture(colour, size)}, {"type": "text", "text": "Colour?"}]
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer or colour}]


@pytest.fixture(scope="module")
def data(backend: LocalBackend) -> list[Datum]:
    """Two examples whose images differ in size (so their rows differ in length and pad)."""
    renderer = get_renderer("qwen3_vl_instruct", backend.get_tokenizer(TINY_VL_MODEL_NAME))
    examples = [
        renderer.build_supervised_example(conversation(c, s)) for c, s in (("red", (40, 40)), ("blue", (90, 50)))
    ]
    return [datum_from_model_input(model_input, weights) for model_input, weights in examples]


def test_training_with_images_lowers_the_loss_and_sampler_logprobs_equal_training_logprobs(
    backend: LocalBackend, data: list[Datum]
) -> None:
    async def run() -> tuple[list[float], list[float], list[float], list[float | None]]:
        client = await backend.create_training_client(TINY_VL_MODEL_NAME, lora_rank=None)
        losses = []
        for _ in range(3):
            output = await (await client.forward_backward(data, "cross_entropy"))
            losses.append(output.metrics["loss:sum"])
            await (await client.optim_step(AdamParams(learning_rate=3e-3)))
        sampler = await client.save_weights_and_get_sampling_client()
        renderer = get_renderer("qwen3_vl_instruct", backend.get_tokenizer(TINY_VL_MODEL_NAME))
        prompt = renderer.build_generation_prompt(conversation("red", (40, 40))[:1])
        (sequence,) = (await sampler.sample(prompt, 1, SamplingParams(max_tokens=6, seed=5))).sequences
        full = ModelInput((*prompt.chunks, *ModelInput.from_ints(sequence.tokens).chunks))
        scored = await sampler.compute_logprobs(full)
        # the training pass on the same sequence: its last len(tokens) targets are the sample
        target = datum_from_model_input(full, [1.0] * full.length)
        output = await (await client.forward([target], "cross_entropy"))
        trained = [float(x) for x in output.loss_fn_outputs[0]["logprobs"].tolist()]
        return losses, sequence.logprobs, trained[-len(sequence.tokens) :], scored[-len(sequence.tokens) :]

    losses, sampled, trained, scored = asyncio.run(run())
    assert losses[-1] < losses[0]
    assert torch.allclose(torch.tensor(sampled), torch.tensor(trained), atol=1e-4)
    assert torch.allclose(torch.tensor(sampled), torch.tensor(scored, dtype=torch.float32), atol=1e-4)


def test_the_image_changes_the_logprobs(backend: LocalBackend, data: list[Datum]) -> None:
    """The vision encoder's outputs reach the language model: another picture, other logprobs."""

    async def run() -> tuple[list[float], list[float]]:
        client = await backend.create_training_client(TINY_VL_MODEL_NAME, lora_rank=4)
        renderer = get_renderer("qwen3_vl_instruct", backend.get_tokenizer(TINY_VL_MODEL_NAME))
        other = renderer.build_supervised_example(conversation("green", (40, 40), answer="red"))
        pair = [data[0], datum_from_model_input(*other)]
        assert pair[0].model_input.token_ids(0) == pair[1].model_input.token_ids(0)  # only the pixels differ
        outputs = (await (await client.forward(pair, "cross_entropy"))).loss_fn_outputs
        return [float(x) for x in outputs[0]["logprobs"].tolist()[-3:]], [
            float(x) for x in outputs[1]["logprobs"].tolist()[-3:]
        ]

    red_picture, green_picture = asyncio.run(run())
    assert red_picture != green_picture


def test_a_token_count_the_processor_disagrees_with_is_refused(backend: LocalBackend, data: list[Datum]) -> None:
    chunks = tuple(
        replace(c, expected_tokens=c.length + 1) if isinstance(c, ImageChunk) else c for c in data[0].model_input.chunks
    )
    weights = [1.0] * sum(c.length for c in chunks)
    wrong = datum_from_model_input(ModelInput(chunks), weights)

    async def run() -> None:
        client = await backend.create_training_client(TINY_VL_MODEL_NAME, lora_rank=None)
        await (await client.forward([wrong], "cross_entropy"))

    tokens = VisionSpec().image_tokens(40, 40)
    with pytest.raises(DataError, match=f"processor makes {tokens} tokens of it, the renderer counted {tokens + 1}"):
        asyncio.run(run())


def test_a_text_model_refuses_images(backend: LocalBackend, data: list[Datum], tmp_path: Path) -> None:
    async def run() -> None:
        sampler = await backend.create_sampling_client(base_model="tiny")
        await sampler.sample(data[0].model_input, 1, SamplingParams(max_tokens=2))

    with pytest.raises(DataError, match="this model has no vision encoder"):
        asyncio.run(run())
