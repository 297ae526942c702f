"""How an RL update reaches the backend: the objective's route (a built-in loss on datums with the
aggregation folded in, or `forward_backward_custom` for a KL term, an entropy bonus, or a loss or
config key the Tinker service does not run), the off-policy correction (TIS / MIS folded into the
datums after one `forward` for the proximal policy's logprobs; decoupled PPO, AReaL's loss for
async training, reads the same logprobs as its proximal policy), and the metrics of the sampler /
trainer mismatch, which are logged whether or not a correction is on.

Sync and async mode run it once per step over `num_substeps` chunks (each chunk an optimizer step,
so each is aggregated alone); stream-minibatch mode once per minibatch (see `PolicyObjective`'s
`minibatches`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kitchen.engine.ports import TrainingClient
from kitchen.families.rl.algorithm_settings import AlgorithmSettings
from train_core.losses import PROXIMAL_LOGPROBS, get_loss_fn
from train_core.rl.metrics import training_logprobs
from train_core.rl.off_policy import RolloutCorrection, correct_off_policy, mismatch_metrics
from train_core.rl.policy_objective import PolicyObjective
from train_core.rl.types import Metrics
from train_core.types import Datum, ForwardBackwardOutput, TensorData

if TYPE_CHECKING:
    import torch

PROXIMAL_LOSS = "importance_sampling"
"""The built-in loss a `forward` for the proximal logprobs names (every backend runs it; its value
is not used)."""


@dataclass(frozen=True)
class PolicyUpdate:
    objective: PolicyObjective
    custom: bool
    """Route through `forward_backward_custom` (else the built-in loss on folded datums)."""
    correction: RolloutCorrection | None

    @property
    def corrects(self) -> bool:
        return self.correction is not None and bool(self.correction.tis or self.correction.mis)

    @property
    def needs_proximal(self) -> bool:
        """A correction, or a loss that keeps the update near the proximal policy (decoupled PPO)."""
        return self.corrects or PROXIMAL_LOGPROBS in get_loss_fn(self.objective.loss_fn).input_keys

    async def prepare(self, client: TrainingClient, data_D: Sequence[Datum]) -> tuple[list[Datum], Metrics]:
        """When the update needs them: the proximal logprobs from one `forward` on the current
        weights, a correction folded into the datums (with the mismatch metrics it measured), and
        for decoupled PPO the logprobs as `proximal_logprobs`. Else the datums unchanged (their
        mismatch is measured from the update's own logprobs)."""
        if not self.needs_proximal or not data_D:
            return list(data_D), {}
        inputs = get_loss_fn(PROXIMAL_LOSS).required_inputs
        scored_D = [Datum(d.model_input, {k: d.loss_fn_inputs[k] for k in inputs}) for d in data_D]
        proximal_D = training_logprobs([await (await client.forward(scored_D, PROXIMAL_LOSS))])
        metrics: Metrics = {}
        prepared_D = list(data_D)
        if self.correction is not None and self.corrects:
            prepared_D, metrics = correct_off_policy(prepared_D, proximal_D, self.correction, self.objective.loss_fn)
        if PROXIMAL_LOGPROBS in get_loss_fn(self.objective.loss_fn).input_keys:
            prepared_D = [
                Datum(d.model_input, {**d.loss_fn_inputs, PROXIMAL_LOGPROBS: TensorData.from_torch(lp_T.float())})
                for d, lp_T in zip(prepared_D, proximal_D, strict=True)
            ]
        return prepared_D, metrics

    async def submit(self, client: TrainingClient, data_D: Sequence[Datum]) -> Awaitable[ForwardBackwardOutput]:
        """One forward_backward of the objective over `data_D` (one optimizer step's worth, or a
        stream minibatch); the datums still hold their masks."""
        if self.custom:
            return await client.forward_backward_custom(data_D, self.objective.custom_loss_fn())
        loss_config = dict(self.objective.loss_fn_config) if self.objective.loss_fn_config else None
        return await client.forward_backward(self.objective.builtin_data(data_D), self.objective.loss_fn, loss_config)

    def metrics(self, data_D: Sequence[Datum], fb_outputs: Sequence[ForwardBackwardOutput]) -> Metrics:
        """The mismatch between the sampler's logprobs and the trainer's as the update computed them
        (unless `prepare` measured it against the proximal policy already), and the policy's mean
        token entropy over action tokens where the backend returned it (`optim/token_entropy`)."""
        trainer_D = training_logprobs(fb_outputs)
        metrics = {} if self.corrects else mismatch_metrics(data_D, trainer_D)
        entropy = action_token_entropy(data_D, fb_outputs)
        if entropy is not None:
            metrics["optim/token_entropy"] = entropy
        return metrics


def policy_update(algorithm: AlgorithmSettings, max_tokens: int, backend: str, minibatches: int = 1) -> PolicyUpdate:
    """The update the `algorithm` section asks for, routed for `backend`."""
    custom = bool(algorithm.custom_route_reasons(backend, max_tokens))
    return PolicyUpdate(algorithm.policy_objective(max_tokens, minibatches), custom, algorithm.correction())


def action_token_entropy(data_D: Sequence[Datum], fb_outputs: Sequence[ForwardBackwardOutput]) -> float | None:
    """The mean of the per-token entropies a backend returned (`entropy` outputs, the local
    backend's policy-gradient losses) over action tokens; None when it returned none."""
    entropies: list[torch.Tensor] = []
    for datum, out in zip(data_D, [out for fb in fb_outputs for out in fb.loss_fn_outputs], strict=True):
        if "entropy" not in out:
            return None
        entropies.append(out["entropy"].to_torch()[datum.loss_fn_inputs["mask"].to_torch() > 0])
    if not entropies:
        return None
    import torch

    values_N = torch.cat(entropies)
    return float(values_N.double().mean()) if values_N.numel() else None
