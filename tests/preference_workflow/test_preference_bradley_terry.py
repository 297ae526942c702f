"""The Bradley-Terry reward model's score datums, its loss on per-token logprobs, and the online
DPO pair builder."""

from __future__ import annotations

import math

import pytest
import torch

from kitchen.engine.errors import ConfigError
from kitchen.families.preference.bradley_terry import score_token_ids
from kitchen.families.preference.online_dpo import judged_pair
from train_core.preference.bradley_terry import bradley_terry_loss, make_reward_custom_loss, score_datums


def test_score_datums_read_two_tokens_after_the_whole_conversation() -> None:
    pos, neg = score_datums([5, 6, 7, 8], (90, 91), max_length=None)
    for datum, token in ((pos, 90), (neg, 91)):
        assert datum.model_input.to_ints() == [5, 6, 7, 8]
        assert datum.loss_fn_inputs["target_tokens"].to_torch().tolist() == [6, 7, 8, token]
        assert datum.loss_fn_inputs["weights"].to_torch().tolist() == [0.0, 0.0, 0.0, 1.0]
    cut, _ = score_datums([5, 6, 7, 8], (90, 91), max_length=3)
    assert cut.model_input.to_ints() == [5, 6] and cut.loss_fn_inputs["target_tokens"].to_torch().tolist() == [6, 90]


def test_the_score_is_the_logprob_difference_and_the_loss_is_bradley_terry() -> None:
    data = [d for tokens in ([1, 2], [1, 3]) for d in score_datums(tokens, (8, 9), None)]
    # chosen: log p(pos) = -0.5, log p(neg) = -2.5 -> s_c = 2; rejected: -1.0, -0.5 -> s_r = -0.5
    logprobs = [torch.tensor([-9.0, lp], requires_grad=True) for lp in (-0.5, -2.5, -1.0, -0.5)]
    loss, metrics = make_reward_custom_loss()(data, logprobs)
    assert loss.item() == pytest.approx(math.log1p(math.exp(-2.5)))
    assert metrics["accuracy"] == 1.0 and metrics["margin"] == pytest.approx(2.5)
    loss.backward()
    assert logprobs[0].grad is not None and logprobs[0].grad[0] == 0  # only the scored position counts
    assert logprobs[0].grad[1] < 0 < logprobs[1].grad[1]  # type: ignore[index]
    with pytest.raises(ValueError, match="4 datums each"):
        make_reward_custom_loss()(data[:2], logprobs[:2])


def test_centering_adds_the_squared_score_sum() -> None:
    chosen, rejected = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 1.0])
    plain, _ = bradley_terry_loss(chosen, rejected)
    centred, _ = bradley_terry_loss(chosen, rejected, 0.1)
    assert centred.item() == pytest.approx(plain.item() + 0.1 * (1.0 + 9.0) / 2)


class _Tokenizer:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]


def test_score_tokens_must_be_single_distinct_tokens() -> None:
    assert score_token_ids(_Tokenizer(), ("a", "b")) == (97, 98)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'ab' is 2 tokens"):
        score_token_ids(_Tokenizer(), ("ab", "b"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="the same token"):
        score_token_ids(_Tokenizer(), ("a", "a"))  # type: ignore[arg-type]


def test_online_pairs_put_the_judged_winner_first_and_drop_ties() -> None:
    replies = [[7, 8], [9]]
    chosen, rejected = judged_pair([1, 2, 3], replies, 1.0, None)
    assert chosen.loss_fn_inputs["target_tokens"].to_torch().tolist() == [2, 3, 9]
    assert chosen.loss_fn_inputs["weights"].to_torch().tolist() == [0.0, 0.0, 1.0]
    assert rejected.loss_fn_inputs["target_tokens"].to_torch().tolist() == [2, 3, 7, 8]
    first, _ = judged_pair([1, 2, 3], replies, -0.4, None)
    assert first.loss_fn_inputs["target_tokens"].to_torch().tolist() == [2, 3, 7, 8]
    assert judged_pair([1, 2, 3], replies, 0.0, None) == []
