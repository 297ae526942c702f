"""Rewards to datums: a step's trajectory groups become advantages (the configured estimator,
`train_core.rl.advantages`), then training datums for the policy-gradient losses.

Each datum carries, per target token, the sampling logprob, the advantage and a mask that is 1 on
action tokens; observation tokens get zeros, so only what the policy sampled is trained.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from train_core.errors import InvalidInputError
from train_core.losses import SEQUENCE_RATIO_MASK, get_loss_fn
from train_core.rl.advantages import estimator_options, get_advantage_estimator
from train_core.rl.types import Trajectory, TrajectoryGroup, Transition, has_reward_spread
from train_core.supervised import datum_from_tokens_weights
from train_core.types import Datum, TensorData

if TYPE_CHECKING:
    import torch

DatumMetadata = dict[str, int]


# -- advantages --------------------------------------------------------------------------------


def action_tokens(traj: Trajectory) -> int:
    """Sampled tokens over the trajectory's turns (what token-weighted estimators count)."""
    return sum(len(t.ac.tokens) for t in traj.transitions)


def compute_advantages(
    groups_P: Sequence[TrajectoryGroup], estimator: str = "dr_grpo", options: Mapping[str, object] | None = None
) -> list[torch.Tensor]:
    """One float64 advantage tensor per group from its trajectories' total rewards.

    The default, group-mean centring without std division, is the Python original's GRPO (and
    Dr. GRPO's estimator). Unknown options are an InvalidInputError naming the accepted ones.
    """
    import torch

    function = get_advantage_estimator(estimator)
    given = dict(options or {})
    unknown = sorted(set(given) - set(estimator_options(estimator)))
    if unknown:
        raise InvalidInputError(
            f"advantage_estimator {estimator!r} does not take options {unknown} "
            f"(it takes: {sorted(estimator_options(estimator))})"
        )
    rewards_P = [torch.tensor(group.get_total_rewards(), dtype=torch.float64) for group in groups_P]
    lengths_P = [
        torch.tensor([float(action_tokens(traj)) for traj in group.trajectories_G], dtype=torch.float64)
        for group in groups_P
    ]
    return function(rewards_P, lengths_P, **given)


# -- datums ------------------------------------------------------------------------------------


@dataclass
class _Sequence:
    """A running token sequence with per-token sampling logprob, advantage and action mask."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    mask: list[float] = field(default_factory=list)

    def extend(self, ob_tokens: Sequence[int], transition: Transition, advantage: float, masked: bool = False) -> None:
        """Append a turn; a `masked` turn's action tokens get advantage 0 and mask 0 (not trained)."""
        ac = transition.ac
        if len(ac.logprobs) != len(ac.tokens):
            raise ValueError(f"action has {len(ac.tokens)} tokens but {len(ac.logprobs)} logprobs")
        n_ob, n_ac = len(ob_tokens), len(ac.tokens)
        self.tokens += [*ob_tokens, *ac.tokens]
        self.logprobs += [0.0] * n_ob + [float(lp) for lp in ac.logprobs]
        self.advantages += [0.0] * n_ob + [0.0 if masked else advantage] * n_ac
        self.mask += [0.0] * n_ob + [0.0 if masked else 1.0] * n_ac

    def to_data(self) -> list[Datum]:
        """The sequence as a datum, shifted as supervised data is (the mask plays the weights).

        Fewer than 2 tokens have no (input, target) pair and so nothing to train: no datum.
        """
        if len(self.tokens) < 2:
            return []
        shifted = datum_from_tokens_weights(self.tokens, self.mask)
        return [
            Datum(
                model_input=shifted.model_input,
                loss_fn_inputs={
                    "target_tokens": shifted.loss_fn_inputs["target_tokens"],
                    "logprobs": TensorData.from_list(self.logprobs[1:], "float32"),
                    "advantages": TensorData.from_list(self.advantages[1:], "float32"),
                    "mask": shifted.loss_fn_inputs["weights"],
                },
            )
        ]


def trajectory_to_data(traj: Trajectory, advantage: float, mask_parse_errors: bool = False) -> list[Datum]:
    """One datum per run of turns whose observations extend the sequence so far.

    A multi-turn episode whose next observation starts with everything seen and sampled so far
    becomes a single datum (only the new observation suffix is appended); an observation that is
    not such an extension (e.g. a context that was rewritten) closes the datum and starts another.
    With `mask_parse_errors`, turns whose action failed to parse (`parse_ok=False`) are kept in
    the sequence but not trained (advantage and mask 0).
    """
    data: list[Datum] = []
    seq = _Sequence()
    for transition in traj.transitions:
        ob_tokens = transition.ob.to_ints()
        if not seq.tokens:
            new_ob_tokens = ob_tokens
        elif ob_tokens[: len(seq.tokens)] == seq.tokens:
            new_ob_tokens = ob_tokens[len(seq.tokens) :]
        else:
            data += seq.to_data()
            seq = _Sequence()
            new_ob_tokens = ob_tokens
        seq.extend(new_ob_tokens, transition, advantage, masked=mask_parse_errors and not transition.parse_ok)
    return data + seq.to_data()


def shared_prompt_tokens(traj: Trajectory) -> int:
    """Observation tokens of the episode's turns that repeat what earlier turns already showed and
    sampled (the prefix a multi-turn observation extends): merged into one datum, they are
    computed once, not once per turn."""
    shared = 0
    seq: list[int] = []
    for transition in traj.transitions:
        ob_tokens = transition.ob.to_ints()
        if seq and ob_tokens[: len(seq)] == seq:
            shared += len(seq)
            seq = [*ob_tokens, *transition.ac.tokens]
        else:
            seq = [*ob_tokens, *transition.ac.tokens]
    return shared


def assemble_training_data(
    groups_P: Sequence[TrajectoryGroup], advantages_P: Sequence[torch.Tensor], mask_parse_errors: bool = False
) -> tuple[list[Datum], list[DatumMetadata]]:
    """Datums for a batch, with the `group_idx` and `traj_idx` each came from.

    Every group contributes, including those whose advantages are all zero (singletons, constant
    rewards): a KL penalty, or a loss with a drift term such as `dro`, still trains on them, and
    they count in the batch's `kl_policy_base`. Drop them beforehand with
    `remove_constant_reward_groups` when that is wanted.
    """
    data_D: list[Datum] = []
    metadata_D: list[DatumMetadata] = []
    for group_idx, (group, advantages_G) in enumerate(zip(groups_P, advantages_P, strict=True)):
        for traj_idx, (traj, advantage) in enumerate(zip(group.trajectories_G, advantages_G.tolist(), strict=True)):
            new_data = trajectory_to_data(traj, float(advantage), mask_parse_errors)
            data_D += new_data
            metadata_D += [{"group_idx": group_idx, "traj_idx": traj_idx} for _ in new_data]
    return data_D, metadata_D


def remove_constant_reward_groups(groups_P: Sequence[TrajectoryGroup]) -> list[TrajectoryGroup]:
    """Drop groups whose members all got the same total reward (nothing to learn from them).

    If every group is constant, the first is kept so a batch is never empty.
    """
    kept = [g for g in groups_P if has_reward_spread(g.get_total_rewards())]
    return kept if kept else list(groups_P[:1])


def remove_mask(datum: Datum, loss_fn: str | None = None) -> Datum:
    """The datum as `loss_fn` reads it: without its `mask`, which is for metrics only, except that
    a loss reading a `sequence_ratio_mask` (gspo) gets the mask under that name (the action tokens
    make up the sequence ratio)."""
    inputs = {k: v for k, v in datum.loss_fn_inputs.items() if k != "mask"}
    if loss_fn is not None and SEQUENCE_RATIO_MASK in get_loss_fn(loss_fn).input_keys:
        inputs[SEQUENCE_RATIO_MASK] = datum.loss_fn_inputs["mask"]
    return Datum(datum.model_input, inputs)


def action_token_logprobs(
    data_D: Sequence[Datum], logprobs_D: Sequence[torch.Tensor], what: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampling logprobs and `logprobs_D` (another policy's, per target token, described by
    `what` in errors) over every action token (mask > 0) of the batch, flattened, float64.
    `data_D` must still hold its mask; a datum whose logprobs do not line up is a ValueError."""
    import torch

    for i, (datum, other_T) in enumerate(zip(data_D, logprobs_D, strict=True)):
        shape = datum.loss_fn_inputs["logprobs"].shape
        if tuple(other_T.shape) != shape:
            raise ValueError(f"datum {i}: {tuple(other_T.shape)} {what} logprobs for {shape} sampling logprobs")
    if not data_D:
        empty = torch.empty(0, dtype=torch.float64)
        return empty, empty
    # one concatenation per input, then one mask: a batch of many short datums costs a few tensor
    # operations instead of several per datum
    sampling_N = TensorData.concat([datum.loss_fn_inputs["logprobs"] for datum in data_D], "float32")
    action_N = TensorData.concat([datum.loss_fn_inputs["mask"] for datum in data_D], "float32") > 0
    other_N = torch.cat([other_T.detach().reshape(-1) for other_T in logprobs_D])
    return sampling_N.double()[action_N], other_N.double()[action_N]
