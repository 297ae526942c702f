"""A Bradley-Terry reward model: a scalar score per (prompt, completion), trained so that
`P(chosen beats rejected) = sigma(s_c - s_r)`, as TRL's `RewardTrainer` trains a
sequence-classification model (`-log sigma(s_c - s_r)`, plus `center_rewards_coefficient *
(s_c + s_r)^2` when set, which pins the scores' scale near 0).

The score is a linear head on the final hidden state `h` at the conversation's last token:
`s = (w_pos - w_neg) . h`, with `w_pos`, `w_neg` the unembedding rows of two score tokens.
It is read from the language model as `log p(pos | x) - log p(neg | x)` at that position (the
softmax normaliser cancels), so it trains through any backend's `forward_backward_custom`;
a checkpoint exports as a Hugging Face sequence-classification model whose `score` weight is
that row difference (`kitchen.families.preference.reward_export`), with the same scores.

Data: each conversation (prompt + completion, rendered) becomes two datums with the same
input and weight only on one extra target after the last token, `pos` then `neg`; a pair is
`[c_pos, c_neg, r_pos, r_neg]`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from train_core.preference.dpo import sequence_logprobs
from train_core.preference.types import LabeledComparison
from train_core.renderers.base import Message, Renderer, TrainOnWhat
from train_core.supervised import datum_from_tokens_weights
from train_core.types import Datum

if TYPE_CHECKING:
    import torch

RewardCustomLossFn = Callable[[Sequence[Datum], list["torch.Tensor"]], tuple["torch.Tensor", dict[str, float]]]


def score_datums(tokens: Sequence[int], score_tokens: tuple[int, int], max_length: int | None) -> list[Datum]:
    """The two datums that read a conversation's score: its tokens (cut from the right to leave
    room for the score target within `max_length`) with target `pos`, then `neg`, after the last."""
    kept = list(tokens[: max_length - 1] if max_length is not None else tokens)
    weights = [0.0] * len(kept) + [1.0]
    return [datum_from_tokens_weights([*kept, token], weights) for token in score_tokens]


def conversation_tokens(renderer: Renderer, prompt: Sequence[Message], completion: Sequence[Message]) -> list[int]:
    """The rendered conversation whose last token the reward model scores."""
    model_input, _ = renderer.build_supervised_example([*prompt, *completion], TrainOnWhat.LAST_ASSISTANT_MESSAGE)
    return model_input.to_ints()


def reward_pair_datums(
    comparisons: Sequence[LabeledComparison], renderer: Renderer, score_tokens: tuple[int, int], max_length: int | None
) -> list[Datum]:
    """`[c_pos, c_neg, r_pos, r_neg]` per comparison (chosen first)."""
    data_D: list[Datum] = []
    for labeled in comparisons:
        prompt = labeled.comparison.prompt_conversation
        for completion in labeled.chosen_and_rejected():
            data_D += score_datums(conversation_tokens(renderer, prompt, completion), score_tokens, max_length)
    return data_D


def scores_from_token_logprobs(logprobs_D: Sequence[torch.Tensor], weights_D: Sequence[torch.Tensor]) -> torch.Tensor:
    """Scores of `[pos, neg]` datum pairs: `log p(pos) - log p(neg)` at the scored position."""
    if len(logprobs_D) % 2:
        raise ValueError(f"score datums come in (pos, neg) pairs, got {len(logprobs_D)}")
    sums_D = sequence_logprobs(logprobs_D, weights_D)
    return sums_D[0::2] - sums_D[1::2]


def bradley_terry_loss(
    chosen_P: torch.Tensor, rejected_P: torch.Tensor, center_rewards_coefficient: float = 0.0
) -> tuple[torch.Tensor, dict[str, float]]:
    """Mean `-log sigma(s_c - s_r) + coef * (s_c + s_r)^2` over P pairs, with metrics `rm_loss`,
    `accuracy` (share of pairs with `s_c > s_r`), `margin` (mean `s_c - s_r`), `chosen_score`,
    `rejected_score`, `num_pairs`."""
    import torch.nn.functional as F

    if chosen_P.shape != rejected_P.shape or chosen_P.dim() != 1 or chosen_P.numel() == 0:
        raise ValueError(f"bradley_terry_loss wants two non-empty 1-D tensors of one shape, got {chosen_P.shape}")
    loss = -F.logsigmoid(chosen_P - rejected_P).mean()
    if center_rewards_coefficient:
        loss = loss + center_rewards_coefficient * ((chosen_P + rejected_P) ** 2).mean()
    detached_c, detached_r = chosen_P.detach(), rejected_P.detach()
    return loss, {
        "rm_loss": loss.item(),
        "accuracy": (detached_c > detached_r).float().mean().item(),
        "margin": (detached_c - detached_r).mean().item(),
        "chosen_score": detached_c.mean().item(),
        "rejected_score": detached_r.mean().item(),
        "num_pairs": float(chosen_P.numel()),
    }


def reward_pair_loss(
    logprobs_D: Sequence[torch.Tensor], weights_D: Sequence[torch.Tensor], center_rewards_coefficient: float = 0.0
) -> tuple[torch.Tensor, dict[str, float]]:
    """`bradley_terry_loss` of `[c_pos, c_neg, r_pos, r_neg]` data from per-token logprobs."""
    if len(logprobs_D) == 0 or len(logprobs_D) % 4:
        raise ValueError(f"reward-model pairs are 4 datums each (c_pos, c_neg, r_pos, r_neg), got {len(logprobs_D)}")
    scores = scores_from_token_logprobs(logprobs_D, weights_D)
    return bradley_terry_loss(scores[0::2], scores[1::2], center_rewards_coefficient)


def make_reward_custom_loss(center_rewards_coefficient: float = 0.0) -> RewardCustomLossFn:
    """The custom loss for `forward_backward_custom` on a batch of reward-model pairs."""

    def reward_custom_loss(
        data: Sequence[Datum], logprobs_D: list[torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        weights_D = [
            d.loss_fn_inputs["weights"].to_torch().to(lp.device) for d, lp in zip(data, logprobs_D, strict=True)
        ]
        return reward_pair_loss(logprobs_D, weights_D, center_rewards_coefficient)

    return reward_custom_loss
