"""The sampler's KV cache: a packed prefill and in-place decode (rows leaving the batch) compute
what the padded prefill and Hugging Face's dynamic cache compute; models with sliding-window layers
keep the dynamic path."""

from __future__ import annotations

from typing import cast

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from adapters.common.stop_matcher import StopMatcher
from adapters.common.tiny import TINY_DIR
from adapters.local.forward_pass import left_pad, takes_packed_mask
from adapters.local.kv_cache import packed_inputs, unpacked_cache
from adapters.local.model_loading import load_base_model
from adapters.local.sampler import PACK_TOKENS, SampleRequest, sample_batch
from kitchen.engine.ports import Tokenizer
from train_core.types import SamplingParams

PROMPTS = [[8, 685, 245, 377, 325, 267], [12, 40], [900, 31, 77, 5, 1200, 64, 3, 88, 402]]
PAD_ID = 46
CPU = torch.device("cpu")


@torch.inference_mode()
def test_packed_prefill_and_in_place_decode_give_the_padded_dynamic_cache_logits() -> None:
    model = load_base_model("tiny", torch.float32)
    input_ids, mask, positions = left_pad(PROMPTS, PAD_ID, CPU)
    reference = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True)
    ids, packed_positions, block_mask, ends = packed_inputs(PROMPTS, torch.float32, CPU)
    packed = model(
        input_ids=ids, attention_mask=block_mask, position_ids=packed_positions, use_cache=True, logits_to_keep=ends
    )
    assert torch.allclose(packed.logits[0], reference.logits[:, -1], atol=1e-5)

    starts = torch.tensor([0, len(PROMPTS[0]), len(PROMPTS[0]) + len(PROMPTS[1])])
    # room for one decode position: the buffers must grow during the five steps below
    cache = unpacked_cache([packed.past_key_values], starts[:, None] + positions, mask, room=1)
    dynamic = reference.past_key_values
    step_tokens = torch.tensor([[3, 17, 250], [99, 4, 1400], [7, 7, 7], [1000, 2, 60], [45, 45, 45]])
    rows = torch.arange(len(PROMPTS))
    for step, tokens in enumerate(step_tokens):
        if step == 3:  # the middle row finishes: both caches drop it
            rows = cast(torch.LongTensor, torch.tensor([0, 2]))
            cache.reorder_cache(rows)
            dynamic.reorder_cache(rows)
        mask = torch.cat([mask, mask.new_ones(len(PROMPTS), 1)], dim=-1)
        position = positions[:, -1:] + step + 1
        inputs = {
            "input_ids": tokens[rows, None],
            "attention_mask": mask[rows],
            "position_ids": position[rows],
            "use_cache": True,
        }
        expected = model(**inputs, past_key_values=dynamic)
        got = model(**inputs, past_key_values=cache)
        assert torch.allclose(got.logits, expected.logits, atol=1e-5), f"step {step}"
        dynamic = expected.past_key_values
    assert cache.get_seq_length() == dynamic.get_seq_length() == input_ids.shape[1] + len(step_tokens)


def test_a_model_with_sliding_window_layers_samples_as_its_full_attention_twin(tokenizer: Tokenizer) -> None:
    """With a window wider than any sequence, sliding layers attend to everything: the model with
    them (decoded through its own, dynamic cache) must sample what its full-attention twin does."""
    config = AutoConfig.from_pretrained(TINY_DIR)
    full = load_base_model("tiny", torch.float32)
    config.use_sliding_window, config.sliding_window = True, 4096
    config.layer_types = ["sliding_attention", "full_attention", "sliding_attention"]
    sliding = AutoModelForCausalLM.from_config(config).eval()
    sliding.load_state_dict(full.state_dict())
    assert not takes_packed_mask(sliding)  # a packed prefill's mask would override the window
    params = SamplingParams(max_tokens=12, temperature=1.0)
    requests = [SampleRequest(p, 2, 12, seed, params, StopMatcher(None, tokenizer)) for seed, p in enumerate(PROMPTS)]
    expected = sample_batch(full, requests, PAD_ID)
    got = sample_batch(sliding, requests, PAD_ID)
    for want_rows, got_rows in zip(expected, got, strict=True):
        for want, have in zip(want_rows, got_rows, strict=True):
            assert have.tokens == want.tokens
            assert torch.allclose(torch.tensor(have.logprobs), torch.tensor(want.logprobs), atol=1e-5)


def test_prompts_longer_together_than_one_packed_row_sample_as_each_alone(tokenizer: Tokenizer) -> None:
    """Prompts of PACK_TOKENS tokens in all and more prefill in several packed rows, whose caches are
    laid out together: each request still samples what it samples alone (its prompt in one row)."""
    model = load_base_model("tiny", torch.float32)
    lengths = [PACK_TOKENS // 2 + 9, PACK_TOKENS // 3, PACK_TOKENS // 2 + 3, 5]
    prompts = [[(7 * i + 31 * j) % 1400 + 50 for j in range(n)] for i, n in enumerate(lengths)]
    params = SamplingParams(max_tokens=6, temperature=1.0)
    stop = StopMatcher(None, tokenizer)
    requests = [SampleRequest(p, 2, 6, seed, params, stop) for seed, p in enumerate(prompts)]
    together = sample_batch(model, requests, PAD_ID)
    for request, rows in zip(requests, together, strict=True):
        for alone, batched in zip(sample_batch(model, [request], PAD_ID)[0], rows, strict=True):
            assert batched.tokens == alone.tokens
            assert torch.allclose(torch.tensor(batched.logprobs), torch.tensor(alone.logprobs), atol=1e-5)
