"""Self-distillation fine-tuning (SDFT, Shenfeld et al. 2026): the model, shown a demonstration
of the answer in its prompt, is the teacher of itself without it.

The student samples a reply to the plain question; the teacher (a frozen copy of the model as
training begins) reads the same reply after a prompt that holds the question *and* a golden
answer (`DEFAULT_DEMO_TEMPLATE`), and its top-K next-token distribution at each of the reply's
positions, renormalised over the K, becomes that position's soft target. The student is trained
with cross-entropy against the [T, K] targets (`train_core.topk_targets`):

    L = sum_t sum_k q_t(x_k) * -log p_student(x_k | student prompt, reply_<t)

with `q_t` the teacher's renormalised top-K, which is the forward KL(q_t || p_student) over the
top-K up to the teacher's (constant) entropy. The first `skip_first` reply positions of each
datum carry no target (the reference implementation skips 3).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from train_core.renderers.messages import Message
from train_core.rl.kl_penalty import logprob_input
from train_core.rl.types import EnvGroupBuilder, WrappedGroupBuilder
from train_core.topk_targets import TARGETS, WEIGHTS
from train_core.types import Datum, TensorData

if TYPE_CHECKING:  # torch loads where the math runs: the recipe (and `kitchen ls`) import this module
    import torch

DEFAULT_DEMO_TEMPLATE = (
    "{question}\n\n"
    "This is an example for a response to the question:\n"
    "{golden_answer}\n\n"
    "Now answer with a response of your own, including the thinking process."
)
"""The teacher's user message (the SDFT paper's and tinker-cookbook's): `{question}` and
`{golden_answer}` are filled in."""


@dataclass(frozen=True)
class DemonstratedGroupBuilder(WrappedGroupBuilder):
    """A group of episodes of `inner` whose question has a golden answer: the student plays
    `inner`'s envs (their rewards are still measured), the teacher is shown `demonstration`."""

    inner: EnvGroupBuilder
    question: str
    demonstration: str

    def teacher_messages(
        self, template: str = DEFAULT_DEMO_TEMPLATE, system_prompt: str | None = None
    ) -> list[Message]:
        """The conversation the teacher reads before the student's reply."""
        content = template.format(question=self.question, golden_answer=self.demonstration)
        system: list[Message] = [Message(role="system", content=system_prompt)] if system_prompt else []
        return [*system, Message(role="user", content=content)]


@dataclass(frozen=True)
class TeacherView:
    """Where a student datum's reply sits in the teacher's sequence."""

    tokens: list[int]
    """The teacher prompt, then the student's sequence from its first action token on."""
    offset: int
    """Teacher row (of `PromptScores`' rows 1..len-1) = student target index + offset."""


def teacher_view(datum: Datum, teacher_prompt: Sequence[int]) -> TeacherView | None:
    """The student's reply (everything from its first action token, later observations included,
    so a multi-turn datum keeps its context) after the teacher's prompt; None for a datum with no
    action token."""
    import torch

    mask_T = datum.loss_fn_inputs["mask"].to_torch()
    actions = torch.nonzero(mask_T > 0)
    if actions.numel() == 0:
        return None
    first = int(actions[0, 0])
    student = logprob_input(datum).to_ints()
    # target index i predicts student[i + 1]; that token sits at teacher position P + i - first,
    # whose distribution is PromptScores row P + i - first - 1.
    return TeacherView([*teacher_prompt, *student[first + 1 :]], len(teacher_prompt) - first - 1)


@dataclass(frozen=True)
class TopKTargets:
    """A student datum as [T, K] cross-entropy targets, and what they hold."""

    datum: Datum
    positions: int
    """Positions given a target."""
    teacher_entropy: float
    """Sum over those positions of the renormalised top-K's entropy."""


def topk_target_datum(
    datum: Datum,
    view: TeacherView | None,
    topk_rows: Sequence[Sequence[tuple[int, float]]],
    k: int,
    skip_first: int = 0,
) -> TopKTargets:
    """`datum`'s input with [T, K] targets: at each action position after the first `skip_first`,
    the teacher's top-K tokens (from `topk_rows`, the teacher sequence's `PromptScores.topk`) with
    their probabilities renormalised over the K as weights; elsewhere target -1 and weight 0."""
    import torch

    length = datum.model_input.length
    targets_TK = torch.full((length, k), -1, dtype=torch.long)
    weights_TK = torch.zeros((length, k), dtype=torch.float32)
    positions, entropy = 0, 0.0
    if view is not None:
        actions = torch.nonzero(datum.loss_fn_inputs["mask"].to_torch() > 0)[:, 0].tolist()
        for index in actions[skip_first:]:
            row = topk_rows[index + view.offset][:k]
            if not row:
                continue
            logprobs_K = torch.tensor([lp for _, lp in row], dtype=torch.float64)
            logprobs_K = logprobs_K - torch.logsumexp(logprobs_K, dim=0)
            probs_K = logprobs_K.exp()
            targets_TK[index, : len(row)] = torch.tensor([token for token, _ in row])
            weights_TK[index, : len(row)] = probs_K.float()
            positions += 1
            entropy -= float((probs_K * logprobs_K).sum())
    inputs = {TARGETS: TensorData.from_torch(targets_TK), WEIGHTS: TensorData.from_torch(weights_TK)}
    return TopKTargets(Datum(datum.model_input, inputs), positions, entropy)


def topk_forward_kl(targets: Sequence[TopKTargets], logprobs_D: Sequence[torch.Tensor]) -> float:
    """Mean over target positions of KL(q || p) restricted to the teacher's top-K: the
    cross-entropy `-sum_k q_k log p_k` less the teacher's entropy, from the student's [T, K]
    logprobs of the targets (NaN at padded cells) as a forward pass returned them."""

    positions = sum(t.positions for t in targets)
    if positions == 0:
        return math.nan
    cross_entropy = 0.0
    for target, logprobs_TK in zip(targets, logprobs_D, strict=True):
        weights_TK = target.datum.loss_fn_inputs[WEIGHTS].to_torch().double()
        cells = weights_TK > 0
        cross_entropy -= float((weights_TK[cells] * logprobs_TK.double()[cells]).sum())
    return (cross_entropy - sum(t.teacher_entropy for t in targets)) / positions
