"""Model inputs holding images, on a vision-language model (Qwen-VL style): the forward pass that
training, `compute_logprobs` and sampling share.

An image chunk's positions hold the model's image placeholder token (`config.image_token_id`);
the model's image processor (read from the model's directory, `preprocessor_config.json`) turns
the chunk's pixels into patches, the vision encoder into one embedding per position. The
processor's token count must equal the chunk's `expected_tokens` (the renderer's count), else
the input is refused: a mismatch would silently shift every later position.

Positions are the model's multimodal rotary positions (`get_rope_index`), computed here and passed
explicitly, so a prompt scored whole and the same prompt prefilled then decoded one token at a
time see the same positions: their logprobs agree. Sequences with images run right-padded, never
packed (packing restarts positions per sequence, which the 3-D image positions do not allow).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from adapters.common.stop_matcher import StopMatcher
from adapters.common.training_batch import right_pad, row_slots
from adapters.local.mixed_precision import compute_dtype
from adapters.local.token_draw import next_tokens, top_logprobs
from adapters.local.token_scoring import Entropy, logits_scores
from kitchen.engine.errors import ConfigError, DataError
from train_core.types import ImageChunk, SamplingParams, TokensWithLogprobs


def base_config(model: torch.nn.Module) -> Any:
    """The model's own config (a LoRA wrapper's is its base model's)."""
    return getattr(model, "config", None)


def is_vision_model(model: torch.nn.Module) -> bool:
    config = base_config(model)
    return getattr(config, "vision_config", None) is not None and getattr(config, "image_token_id", None) is not None


def image_token_id(model: torch.nn.Module) -> int:
    """The placeholder id an image's positions hold; a model without a vision encoder refuses images."""
    if not is_vision_model(model):
        raise DataError(
            "the model input holds images, but this model has no vision encoder; use a vision-language model "
            "(e.g. model_name: tiny-vl, or a Qwen3-VL checkpoint)"
        )
    return int(base_config(model).image_token_id)


@lru_cache(maxsize=4)
def image_processor(source: str) -> Any:
    """The image processor saved beside the model (`preprocessor_config.json`), read once."""
    from transformers import AutoImageProcessor

    try:
        return AutoImageProcessor.from_pretrained(source)
    except OSError as exc:
        raise ConfigError(f"the vision-language model at {source!r} has no image processor config ({exc})") from exc


@dataclass(frozen=True)
class VisionInputs:
    """What a Qwen-VL model's forward takes for right-padded rows holding images."""

    input_ids_BL: torch.Tensor
    position_ids_3BL: torch.Tensor
    pixel_values: torch.Tensor
    image_grid_thw: torch.Tensor
    mm_token_type_ids_BL: torch.Tensor

    def model_kwargs(self) -> dict[str, torch.Tensor]:
        return {
            "input_ids": self.input_ids_BL,
            "position_ids": self.position_ids_3BL,
            "pixel_values": self.pixel_values,
            "image_grid_thw": self.image_grid_thw,
            "mm_token_type_ids": self.mm_token_type_ids_BL,
        }


def _rope_index_owner(model: torch.nn.Module) -> Any:
    for module in model.modules():
        if callable(getattr(module, "get_rope_index", None)):
            return module
    raise ConfigError(f"{type(model).__name__} has no multimodal rotary positions (get_rope_index)")


def vision_inputs(
    model: torch.nn.Module, ids_D: Sequence[Sequence[int]], images: Sequence[ImageChunk], pad_id: int
) -> VisionInputs:
    """The rows right-padded, the images (in row order) through the model's image processor, and
    the multimodal positions of every row."""
    from PIL import Image

    config = base_config(model)
    device = next(model.parameters()).device
    processor = image_processor(str(config.name_or_path))
    pil = [Image.open(io.BytesIO(image.data)).convert("RGB") for image in images]
    processed = processor(images=pil, return_tensors="pt")
    grid_thw = processed["image_grid_thw"]
    merge = int(config.vision_config.spatial_merge_size)
    for index, (image, grid) in enumerate(zip(images, grid_thw.tolist(), strict=True)):
        tokens = grid[0] * grid[1] * grid[2] // merge**2
        if tokens != image.expected_tokens:
            raise DataError(
                f"image {index}: the model's image processor makes {tokens} tokens of it, the renderer counted "
                f"{image.expected_tokens}; the renderer's vision settings do not match this model's processor"
            )
    input_ids_BL = right_pad(ids_D, pad_id, device)
    mm_types_BL = (input_ids_BL == int(config.image_token_id)).to(torch.int32)
    grid_thw = grid_thw.to(device)
    positions_3BL, _ = _rope_index_owner(model).get_rope_index(
        input_ids_BL, mm_token_type_ids=mm_types_BL, image_grid_thw=grid_thw
    )
    dtype = compute_dtype(model)
    return VisionInputs(
        input_ids_BL,
        positions_3BL,
        processed["pixel_values"].to(device, dtype),
        grid_thw,
        mm_types_BL,
    )


def vision_logprobs(
    model: torch.nn.Module,
    inputs_D: Sequence[Sequence[int]],
    targets_D: Sequence[Sequence[int]],
    images: Sequence[ImageChunk],
    pad_id: int,
    entropy: Entropy = "none",
) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """Each sequence's target logprobs [L_d] (gradients flow when enabled), and unless `entropy`
    is "none" each position's entropy [L_d], from the whole logits through `log_softmax_f32`, the
    one path sampling uses too."""
    batch = vision_inputs(model, inputs_D, images, pad_id)
    logits_BLV = model(**batch.model_kwargs(), use_cache=False).logits
    slots_N = row_slots([len(inputs) for inputs in inputs_D], logits_BLV.shape[1], torch.device("cpu"))
    targets_N = torch.tensor([t for targets in targets_D for t in targets], dtype=torch.long)
    device = logits_BLV.device
    logprobs_N, entropy_N = logits_scores(
        logits_BLV.flatten(0, 1).index_select(0, slots_N.to(device)), targets_N.to(device), entropy
    )
    lengths_D = [len(inputs) for inputs in inputs_D]
    return list(logprobs_N.split(lengths_D)), None if entropy_N is None else list(entropy_N.split(lengths_D))


@torch.inference_mode()
def sample_with_images(
    model: torch.nn.Module,
    prompt: Sequence[int],
    images: Sequence[ImageChunk],
    num_samples: int,
    max_tokens: int,
    params: SamplingParams,
    stop: StopMatcher,
    uniforms_NT: torch.Tensor | None,
    pad_id: int,
) -> list[TokensWithLogprobs]:
    """`num_samples` continuations of one prompt holding images: the prompt (and its images) runs
    once, its KV cache is copied to every sample row, then all rows decode together, each new
    token at the position after the prompt's last multimodal position."""
    batch = vision_inputs(model, [prompt], images, pad_id)
    output = model(**batch.model_kwargs(), use_cache=True, logits_to_keep=1)
    cache = output.past_key_values
    cache.batch_repeat_interleave(num_samples)
    logits_NV = output.logits[:, -1, :].expand(num_samples, -1)
    next_position = int(batch.position_ids_3BL[:, 0].max()) + 1
    top_k_asked = params.topk_logprobs > 0
    tokens_N: list[list[int]] = [[] for _ in range(num_samples)]
    logprobs_N: list[list[float]] = [[] for _ in range(num_samples)]
    topk_N: list[list[list[tuple[int, float]]]] = [[] for _ in range(num_samples)]
    reasons: list[str | None] = [None] * num_samples
    for step in range(max_tokens):
        uniforms_N = None if uniforms_NT is None else uniforms_NT[:, step]
        new_N, new_logprobs_N, distribution_NV = next_tokens(logits_NV, params, uniforms_N)
        top_N = top_logprobs(distribution_NV, params.topk_logprobs) if top_k_asked else None
        for row, (token, logprob) in enumerate(zip(new_N.tolist(), new_logprobs_N.tolist(), strict=True)):
            if reasons[row] is None:
                tokens_N[row].append(token)
                logprobs_N[row].append(logprob)
                if top_N is not None:
                    topk_N[row].append(top_N[row])
                if stop.is_done(tokens_N[row]):
                    reasons[row] = "stop"
        if all(reason is not None for reason in reasons) or step == max_tokens - 1:
            break
        positions_3N1 = torch.full((3, num_samples, 1), next_position + step, device=new_N.device)
        output = model(input_ids=new_N[:, None], position_ids=positions_3N1, cache=cache, use_cache=True)
        logits_NV, cache = output.logits[:, -1, :], output.past_key_values
    return [
        TokensWithLogprobs(tokens, logprobs, "stop" if reason else "length", None, topk if top_k_asked else None)
        for tokens, logprobs, reason, topk in zip(tokens_N, logprobs_N, reasons, topk_N, strict=True)
    ]
