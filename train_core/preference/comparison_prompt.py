"""A comparison shown to a preference model: the conversation, completions A and B, and the
question which is better, answered with a single label (`A`, `B`, optionally `Tie`).

The pure parts of a learned pairwise judge: the prompt, the supervised examples (each labeled
comparison in both orderings, so the model cannot learn a position bias from the data), and the
judge's score from the model's log-probabilities of the answer labels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from train_core.preference.types import LabeledComparison, PreferenceLabel
from train_core.renderers.base import Message

QUESTION = "Which reply is better? Answer A or B."
QUESTION_WITH_TIE = "Which reply is better? Answer A, B or Tie."


def message_text(messages: Sequence[Message]) -> str:
    """Messages as plain text; one message is its content, several are `role: content` lines."""
    if len(messages) == 1:
        return messages[0]["content"]
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


def comparison_prompt(
    prompt: Sequence[Message], completion_A: Sequence[Message], completion_B: Sequence[Message], allow_tie: bool = False
) -> list[Message]:
    """One user message that shows the conversation and both replies and asks which is better."""
    text = (
        f"Question: {message_text(prompt)}\n"
        f"Reply A: {message_text(completion_A)}\n"
        f"Reply B: {message_text(completion_B)}\n"
        f"{QUESTION_WITH_TIE if allow_tie else QUESTION}"
    )
    return [{"role": "user", "content": text}]


def answer_labels(allow_tie: bool = False) -> tuple[PreferenceLabel, ...]:
    return ("A", "B", "Tie") if allow_tie else ("A", "B")


def comparison_example(labeled: LabeledComparison, allow_tie: bool = False) -> list[Message]:
    """The conversation a preference model is trained on: the comparison prompt, then the label."""
    c = labeled.comparison
    return [
        *comparison_prompt(c.prompt_conversation, c.completion_A, c.completion_B, allow_tie),
        {"role": "assistant", "content": labeled.label},
    ]


def both_orderings(labeled: Sequence[LabeledComparison]) -> list[LabeledComparison]:
    """Each comparison as given and swapped (label flipped), interleaved."""
    return [item for comparison in labeled for item in (comparison, comparison.swap())]


def parse_label(text: str, allow_tie: bool = False) -> PreferenceLabel | None:
    """The label a reply states (its first word, case and punctuation ignored), or None."""
    words = text.strip().split()
    if not words:
        return None
    word = words[0].strip(".,:;!\"'()").lower()
    for label in answer_labels(allow_tie):
        if word == label.lower():
            return label
    return None


def label_probabilities(logprobs: Mapping[str, float]) -> dict[str, float]:
    """The answer labels' probabilities renormalised over the labels (a softmax of their logprobs)."""
    if not logprobs:
        raise ValueError("no label logprobs")
    top = max(logprobs.values())
    if top == -math.inf:
        return {label: 1.0 / len(logprobs) for label in logprobs}
    weights = {label: math.exp(lp - top) for label, lp in logprobs.items()}
    total = sum(weights.values())
    return {label: w / total for label, w in weights.items()}


def judge_score(logprobs: Mapping[str, float]) -> float:
    """A judge's answer in [-1, 1] from the label logprobs: P(B) - P(A) over the labels (+1 prefers
    B, -1 prefers A; a `Tie` label's mass pulls the score towards 0)."""
    probs = label_probabilities(logprobs)
    return max(-1.0, min(1.0, probs.get("B", 0.0) - probs.get("A", 0.0)))
