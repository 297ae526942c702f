"""The process reward model's data processing and math (`train_core.preference.process_reward`):
TRL `PRMTrainer.tokenize_row`'s label positions and truncation rules, the label-token datums, the
two-class loss and its metrics, and the step aggregations.

TRL 1.16 (the installed test extra) no longer ships `PRMTrainer` (0.19.1 was checked to have
it), so its tokenisation is pinned here by its rules on a character tokenizer, where every
position can be counted by hand, and on the tiny model's tokenizer against the separator's
positions. (Checked once outside the suite: equal to TRL 0.19.1's `tokenize_row` on 2,400 cases
of the shipped data with random limits, separators, BOS and `train_on_last_step_only`.)"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from adapters.common.tokenizer import load_tokenizer
from train_core.errors import InvalidInputError
from train_core.preference.process_reward import (
    IGNORE,
    StepLimits,
    StepwiseExample,
    aggregate_steps,
    parse_stepwise,
    process_reward_loss,
    process_reward_metrics,
    split_steps,
    step_datums,
    step_margins,
    step_probability,
    tokenize_stepwise,
)

NO_LIMITS = StepLimits(None, None, None)
EXAMPLE = StepwiseExample("Qq", ["ab", "cde"], [True, False])


def chars(text: str) -> list[int]:
    """One token per character (its code point)."""
    return [ord(c) for c in text]


def test_labels_sit_on_each_step_separator_and_the_rest_is_ignored() -> None:
    ids, labels = tokenize_stepwise(EXAMPLE, chars, 1, "|", NO_LIMITS)
    assert ids == [1, *chars("Qq"), *chars("ab|"), *chars("cde|")]
    #              bos  Q q        a b |          c d e |
    assert labels == [IGNORE] * 3 + [IGNORE, IGNORE, 1] + [IGNORE, IGNORE, IGNORE, 0]


def test_a_multi_token_separator_labels_its_last_token_and_no_bos_without_one() -> None:
    ids, labels = tokenize_stepwise(EXAMPLE, chars, None, "##", NO_LIMITS)
    assert ids == chars("Qqab##cde##")
    assert [i for i, label in enumerate(labels) if label != IGNORE] == [5, 10]


def test_train_on_last_step_only_keeps_the_last_label() -> None:
    example = StepwiseExample("P", ["a", "b", "c"], [False, True, True])
    _, labels = tokenize_stepwise(example, chars, None, "|", NO_LIMITS, last_step_only=True)
    assert [label for label in labels if label != IGNORE] == [1]
    assert labels[-1] == 1


def test_truncation_cuts_the_prompt_from_the_left_then_completion_and_whole_from_the_right() -> None:
    ids, labels = tokenize_stepwise(EXAMPLE, chars, 1, "|", StepLimits(None, 2, None))
    assert ids[:2] == chars("Qq")  # bos and nothing else dropped: the prompt's last 2 tokens
    ids, _ = tokenize_stepwise(EXAMPLE, chars, 1, "|", StepLimits(None, 0, None))
    assert ids[:3] == [1, *chars("Qq")]  # TRL slices prompt_ids[-0:]: 0 keeps it all (config refuses 0)
    ids, labels = tokenize_stepwise(EXAMPLE, chars, 1, "|", StepLimits(None, None, 5))
    assert ids == [1, *chars("Qqab|cd")] and labels[-1] == IGNORE  # the second step lost its label
    ids, labels = tokenize_stepwise(EXAMPLE, chars, 1, "|", StepLimits(6, None, None))
    assert ids == [1, *chars("Qqab|")] and labels == [IGNORE] * 5 + [1]


def test_label_positions_on_the_tiny_tokenizer_are_the_separator_tokens_after_the_prompt() -> None:
    tokenizer = load_tokenizer("tiny")

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    example = StepwiseExample("Count up by one from 3.", ["3 + 1 = 4", "4 + 1 = 6", "6 + 1 = 7"], [True, False, True])
    bos = getattr(tokenizer, "bos_token_id", None)
    ids, labels = tokenize_stepwise(example, encode, bos, "\n", NO_LIMITS)
    newline = encode("\n")
    assert len(newline) == 1
    prompt_len = len(encode(example.prompt)) + (bos is not None)
    separators = [i for i, token in enumerate(ids) if token == newline[0] and i >= prompt_len]
    assert [i for i, label in enumerate(labels) if label != IGNORE] == separators
    assert [labels[i] for i in separators] == [1, 0, 1]
    assert tokenizer.decode(ids[prompt_len:]) == "3 + 1 = 4\n4 + 1 = 6\n6 + 1 = 7\n"


def test_step_datums_target_the_correct_label_token_then_the_wrong_one() -> None:
    ids, labels = tokenize_stepwise(EXAMPLE, chars, None, "|", NO_LIMITS)
    correct, wrong = step_datums(ids, labels, (43, 45))  # "+", "-"
    for datum in (correct, wrong):
        assert datum.model_input.to_ints() == ids
        assert datum.loss_fn_inputs["weights"].to_torch().tolist() == [float(x != IGNORE) for x in labels]
    ends = [i for i, x in enumerate(labels) if x != IGNORE]
    assert [correct.loss_fn_inputs["target_tokens"].to_torch()[i].item() for i in ends] == [43, 45]
    assert [wrong.loss_fn_inputs["target_tokens"].to_torch()[i].item() for i in ends] == [45, 43]
    assert step_datums(ids[:2], labels[:2], (43, 45)) == []  # truncation left no label


def test_the_loss_is_trl_two_class_cross_entropy_on_the_label_tokens_logits() -> None:
    """TRL: `CrossEntropyLoss` over a 2-logit head at each labelled token. Here: the head's logits
    are the LM's logits of the two label tokens; margin = logit(correct) - logit(wrong)."""
    generator = torch.Generator().manual_seed(0)
    logits_TV = torch.randn(6, 10, generator=generator, dtype=torch.float64, requires_grad=True)
    pos, neg = 3, 7
    labels = [IGNORE, 1, IGNORE, 0, 1, IGNORE]
    logprobs_TV = logits_TV.log_softmax(-1)
    weights = torch.tensor([float(x != IGNORE) for x in labels], dtype=torch.float64)
    correct = torch.tensor([pos if x == 1 else neg for x in labels])
    wrong = torch.tensor([neg if x == 1 else pos for x in labels])
    lp_correct = logprobs_TV.gather(1, correct[:, None])[:, 0]
    lp_wrong = logprobs_TV.gather(1, wrong[:, None])[:, 0]
    loss, metrics = process_reward_loss(step_margins([lp_correct, lp_wrong], [weights, weights]))
    (grad,) = torch.autograd.grad(loss, logits_TV)

    where = [i for i, x in enumerate(labels) if x != IGNORE]
    head_logits = logits_TV[where][:, [neg, pos]]  # TRL's classes: 0 = wrong step, 1 = right step
    expected = F.cross_entropy(head_logits, torch.tensor([labels[i] for i in where]))
    (expected_grad,) = torch.autograd.grad(expected, logits_TV)
    assert loss.item() == pytest.approx(expected.item(), abs=1e-12)
    assert torch.allclose(grad, expected_grad, atol=1e-12)
    predicted = head_logits.argmax(-1).tolist()
    assert metrics["step_accuracy"] == pytest.approx(
        sum(p == labels[i] for p, i in zip(predicted, where, strict=True)) / 3
    )


def test_trajectory_accuracy_needs_every_step_right() -> None:
    margins = [torch.tensor([1.0, 2.0]), torch.tensor([1.0, -0.5, 3.0]), torch.tensor([-1.0])]
    metrics = process_reward_metrics(margins)
    assert metrics["step_accuracy"] == pytest.approx(4 / 6)
    assert metrics["trajectory_accuracy"] == pytest.approx(1 / 3)
    assert metrics["num_steps"] == 6 and metrics["num_trajectories"] == 3
    with pytest.raises(ValueError, match="no labelled step"):
        process_reward_metrics([torch.zeros(0)])


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6))
def test_aggregations(probabilities: list[float]) -> None:
    assert aggregate_steps(probabilities, "min") == min(probabilities)
    assert aggregate_steps(probabilities, "last") == probabilities[-1]
    product = aggregate_steps(probabilities, "product")
    assert product == pytest.approx(math.prod(probabilities))
    assert product <= aggregate_steps(probabilities, "min") + 1e-12
    assert aggregate_steps([], "min") == 0.0


@given(st.floats(-50, 50), st.floats(-50, 50))
def test_step_probability_is_the_sigmoid_of_the_margin(pos: float, neg: float) -> None:
    assert step_probability(pos, neg) == pytest.approx(
        torch.sigmoid(torch.tensor(pos - neg, dtype=torch.float64)).item()
    )


def test_split_steps_drops_blank_pieces() -> None:
    assert split_steps("3 + 1 = 4\n\n4 + 1 = 5\n", "\n") == ["3 + 1 = 4", "4 + 1 = 5"]
    assert split_steps("  ", "\n") == []


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"completions": ["a"], "labels": [True]}, "missing key 'prompt'"),
        ({"prompt": "p", "completions": [], "labels": []}, "non-empty list of strings"),
        ({"prompt": "p", "completions": ["a"], "labels": [1]}, "list of booleans"),
        ({"prompt": "p", "completions": ["a", "b"], "labels": [True]}, "2 steps but 1 labels"),
        ({"prompt": 3, "completions": ["a"], "labels": [True]}, "'prompt' must be a string"),
    ],
)
def test_bad_records_say_what_is_wrong(record: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        parse_stepwise(record)
