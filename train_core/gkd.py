"""Generalized knowledge distillation (GKD, Agarwal et al. 2024, as TRL 1.16's `GKDTrainer` runs
it): the student is trained on the generalized Jensen-Shannon divergence to the teacher's
next-token distribution at every completion position, on completions drawn per batch from one of
three sources.

The divergence (TRL's `generalized_jsd_loss`, the paper's Eq. 1) at one position, with student
`p`, teacher `q` (both softmaxed after dividing the logits by `temperature`) and the mixture
`m = (1 - beta) p + beta q` built in log space:

    JSD_beta = beta KL(q || m) + (1 - beta) KL(p || m)

except that `beta = 0` is the forward KL(q || p) and `beta = 1` the reverse KL(p || q) (at the
ends the formula above is 0, so TRL special-cases them, and so does this). The reduction is
`batchmean`: the sum over unmasked positions divided by their count (at least 1).

On the teacher's top-K support (a backend that reports only the teacher's K likeliest tokens per
position), both distributions are renormalised over those K tokens before the same formula: the
divergence of the two conditional distributions given the next token is among the K, not the
full-vocabulary one. It is 0 exactly when the two agree in shape on the K (the student may put
any mass outside them), and equals the full-vocabulary value when the K cover the vocabulary.

The sources (TRL's `training_step`): with probability `lmbda` a batch's completions are the
student's own samples (on-policy); otherwise the teacher's samples when `seq_kd`, else the data
set's completions.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from train_core.renderers.messages import Message
from train_core.rl.types import EnvGroupBuilder, WrappedGroupBuilder
from train_core.topk_targets import TARGETS, WEIGHTS, Expanded
from train_core.types import Datum, ModelInput, TensorData

if TYPE_CHECKING:  # torch loads where the math runs: the recipe (and `kitchen ls`) import this module
    import torch

Source = Literal["student", "teacher", "dataset"]

# The shape of `kitchen.engine.ports.CustomLossFn`, restated so train_core does not import kitchen.
GkdCustomLossFn = Callable[[Sequence[Datum], list["torch.Tensor"]], tuple["torch.Tensor", dict[str, float]]]


@dataclass(frozen=True)
class CompletionGroupBuilder(WrappedGroupBuilder):
    """One data-set example of GKD: the student plays `inner`'s envs (its samples, and their
    rewards, are the on-policy source), `prompt` is what the teacher answers (`seq_kd`), and
    `completion` is the data set's reply to it."""

    inner: EnvGroupBuilder
    prompt: tuple[Message, ...]
    completion: str


def batch_source(seed: int, step: int, lmbda: float, seq_kd: bool) -> Source:
    """Where batch `step`'s completions come from: the student's samples with probability `lmbda`
    (TRL draws `random() <= lmbda`), else the teacher's with `seq_kd`, else the data set's; seeded
    by (seed, step) so a resumed run draws the same sources."""
    if random.Random(f"gkd/{seed}/{step}").random() <= lmbda:
        return "student"
    return "teacher" if seq_kd else "dataset"


def _kl(log_p: torch.Tensor, log_q: torch.Tensor, support: torch.Tensor | None) -> torch.Tensor:
    """KL(p || q) per position over the last dimension, from log-probabilities; cells outside
    `support` count 0 (their log-probabilities must be finite: see `generalized_jsd_per_token`)."""
    import torch

    terms = log_p.exp() * (log_p - log_q)
    if support is not None:
        terms = torch.where(support, terms, torch.zeros_like(terms))
    return terms.sum(dim=-1)


def _log_softmax(logits: torch.Tensor, support: torch.Tensor | None) -> torch.Tensor:
    """log_softmax over the last dimension, restricted to `support` (cells outside it set to 0, a
    finite stand-in that `_kl` ignores; a row with no support normalises by 0)."""
    import torch

    if support is None:
        return torch.log_softmax(logits, dim=-1)
    filled = torch.where(support, logits, torch.zeros_like(logits))
    lse = torch.logsumexp(filled.masked_fill(~support, float("-inf")), dim=-1, keepdim=True)
    lse = torch.where(support.any(dim=-1, keepdim=True), lse, torch.zeros_like(lse))
    return torch.where(support, filled - lse, torch.zeros_like(filled))


def generalized_jsd_per_token(
    student: torch.Tensor,
    teacher: torch.Tensor,
    beta: float,
    temperature: float = 1.0,
    support: torch.Tensor | None = None,
) -> torch.Tensor:
    """The generalized JSD at each position ([..., V] logits or logprobs in, [...] out; see the
    module). `support` ([..., V] bool) restricts both distributions to its cells, renormalised."""
    import torch

    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    log_p = _log_softmax(student / temperature, support)
    log_q = _log_softmax(teacher / temperature, support)
    if beta == 0:
        return _kl(log_q, log_p, support)
    if beta == 1:
        return _kl(log_p, log_q, support)
    beta_t = torch.tensor(beta, dtype=log_p.dtype, device=log_p.device)
    log_m = torch.logsumexp(torch.stack([log_p + torch.log1p(-beta_t), log_q + torch.log(beta_t)]), dim=0)
    return beta * _kl(log_q, log_m, support) + (1 - beta) * _kl(log_p, log_m, support)


def generalized_jsd(
    student: torch.Tensor,
    teacher: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
    temperature: float = 1.0,
    support: torch.Tensor | None = None,
) -> torch.Tensor:
    """TRL's `batchmean`: the per-position generalized JSD summed over `mask`'s positions and
    divided by their count (at least 1, so an empty mask gives 0 with a gradient path)."""
    jsd = generalized_jsd_per_token(student, teacher, beta, temperature, support)
    picked = mask.bool()
    return jsd[picked].sum() / picked.sum().clamp_min(1)


@dataclass(frozen=True)
class TopKTeacher:
    """A completion as [T, K] targets (the teacher's top-K tokens at each trained position, -1
    elsewhere) and the teacher's logprobs of them."""

    datum: Datum
    """Inputs and `target_tokens` [T, K] with `weights` 1 on the cells asked (what
    `expand_2d_targets` runs as K datums)."""
    teacher_logprobs_TK: torch.Tensor
    positions: int


def topk_teacher_targets(
    tokens: Sequence[int], mask_T: Sequence[float], topk_rows: Sequence[Sequence[tuple[int, float]]], k: int
) -> TopKTeacher:
    """The sequence `tokens` (inputs `tokens[:-1]`, target i is `tokens[i + 1]`) with, at each
    target where `mask_T` is positive, the teacher's top-K of row i of `topk_rows` (the
    `PromptScores.topk` of `tokens`, row i predicting `tokens[i + 1]`)."""
    import torch

    length = len(tokens) - 1
    if len(mask_T) != length:
        raise ValueError(f"{len(mask_T)} mask values for {length} targets")
    targets_TK = torch.full((length, k), -1, dtype=torch.long)
    teacher_TK = torch.zeros((length, k), dtype=torch.float64)
    positions = 0
    for index in range(length):
        row = topk_rows[index][:k] if mask_T[index] > 0 else []
        if not row:
            continue
        targets_TK[index, : len(row)] = torch.tensor([token for token, _ in row])
        teacher_TK[index, : len(row)] = torch.tensor([lp for _, lp in row], dtype=torch.float64)
        positions += 1
    weights_TK = (targets_TK >= 0).float()
    inputs = {TARGETS: TensorData.from_torch(targets_TK), WEIGHTS: TensorData.from_torch(weights_TK)}
    return TopKTeacher(Datum(ModelInput.from_ints(list(tokens[:-1])), inputs), teacher_TK, positions)


def student_topk_logprobs(expanded: Expanded, logprobs_D: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The student's [T, K] logprobs of each original datum's targets, from the expanded datums'
    per-target logprobs (kept differentiable: `Expanded.regroup` is for reported outputs)."""
    import torch

    return [
        torch.stack([logprobs_D[first + k].reshape(-1) for k in range(count)], dim=-1)
        for first, count, _ in expanded.spans
    ]


def topk_jsd(
    targets: Sequence[TopKTeacher], student_TK: Sequence[torch.Tensor], beta: float, temperature: float = 1.0
) -> tuple[torch.Tensor, int]:
    """The batchmean generalized JSD over every trained position of `targets`, on the teacher's
    top-K support, and the number of positions."""
    import torch

    support = torch.cat([t.datum.loss_fn_inputs[WEIGHTS].to_torch().bool() for t in targets])
    student = torch.cat([s.double() for s in student_TK])
    teacher = torch.cat([t.teacher_logprobs_TK.to(student.device) for t in targets])
    support = support.to(student.device)
    mask = support.any(dim=-1)
    return generalized_jsd(student, teacher, mask, beta, temperature, support), int(mask.sum())


def gkd_loss_fn(
    targets: Sequence[TopKTeacher], expanded: Expanded, beta: float, temperature: float = 1.0
) -> GkdCustomLossFn:
    """The custom loss for `forward_backward_custom` on `expanded` (the targets' datums run as K
    each): the batchmean top-K generalized JSD; reports `gkd/jsd` and `gkd/positions`."""

    def loss(data: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        if len(data) != len(expanded.data):
            raise ValueError(f"the GKD loss was built for {len(expanded.data)} datums, got {len(data)}")
        value, positions = topk_jsd(targets, student_topk_logprobs(expanded, logprobs_D), beta, temperature)
        return value, {"gkd/jsd": float(value.detach()), "gkd/positions": float(positions)}

    return loss
