"""`algorithm: NAME` presets: each published RL algorithm's documented settings, as data over the
RL settings keys (`RLSettings` and `RLAlgorithmSettings`); any key can still be overridden. Clip
ranges are verl's `clip_ratio_low` / `clip_ratio_high` (epsilons), so overriding one keeps the other.

    grpo          group mean / group std; ppo (0.8, 1.2); seq_mean_token_mean; k3 KL in the loss 0.04
                  (DeepSeekMath, arXiv:2402.03300)
    dr_grpo       group mean; ppo (0.8, 1.2); seq_mean_token_sum_norm over max_tokens; no KL
                  (Dr. GRPO, arXiv:2503.20783)
    dapo          group mean / group std; ppo (0.8, 1.28), clip-higher; token_mean; no KL; dynamic
                  sampling (at most 10 rounds, as verl's recipe); overlong buffer max_tokens / 5
                  (DAPO, arXiv:2503.14476)
    gspo          group mean / group std; gspo (1 - 3e-4, 1 + 4e-4); seq_mean_token_mean; no KL
                  (GSPO, arXiv:2507.18071)
    rloo          leave-one-out; importance_sampling (REINFORCE); seq_mean_token_sum; KL in the reward
                  (RLOO, arXiv:2402.14740)
    reinforce_pp  batch whitening; ppo (0.8, 1.2); token_mean; KL in the reward
                  (REINFORCE++, arXiv:2501.03262)
    bnpo          group mean / group std; ppo (0.8, 1.2); token_mean; no KL (TRL's loss_type bnpo)
    cispo         group mean / group std; cispo (ratio capped at 5, no gradient through it);
                  token_mean; no KL (MiniMax-M1, arXiv:2506.13585; cap 5 as ScaleRL, arXiv:2510.13786)
    luspo         group mean / group std; gspo (1 - 3e-4, 1 + 4e-4); seq_mean_token_sum; no KL
                  (LUSPO, arXiv:2602.05261: GSPO with each sequence's loss scaled by its length)
    sapo          group mean / group std; sapo (temperatures 1.0 / 1.05); seq_mean_token_mean; no KL
                  (SAPO, arXiv:2511.20347: a sigmoid gate in place of the clip)
    vespo         group mean / group std; vespo (gamma weights k 2 / 3, lambda 3 / 2); token_mean; no KL
                  (VESPO, arXiv:2602.10693: a gamma function of the sequence weight in place of the clip)

RLOO and REINFORCE++ put the KL in the reward, whose coefficient the papers tune per task: their
presets leave kitchen's `kl_penalty_coef` to the recipe. REINFORCE++'s group variant is
`advantage_estimator: reinforce_pp_baseline`. Applying a preset (recipe defaults < preset < YAML <
`key=value`) is the config loader's job, not this table's.

TRL 1.16's eight `GRPOConfig.loss_type` names are presets here, and their policy loss
(clip, ratio level, aggregation) is what TRL's `GRPOTrainer._compute_loss` computes for that
name with the preset's clip settings (`tests/rl_workflow/test_grpo_loss_types_vs_trl.py`): `grpo`,
`dr_grpo`, `dapo`, `bnpo`, `cispo`, `sapo`, `vespo` and `luspo` (TRL's `importance_sampling_level="sequence"`, as
TRL requires for it). The presets follow the papers beyond the loss: `grpo` keeps DeepSeekMath's
KL term (TRL's `beta` defaults to 0; kitchen's k3 clamps each token's value at 10 as verl does,
TRL's does not), `dapo` adds DAPO's dynamic sampling and overlong shaping
(TRL's `dapo` is the aggregation only). TRL's `bnpo` differs from `dapo` only in normalising by
a device's local batch; one optimizer step over the whole batch makes both `token_mean`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

AlgorithmName = Literal[
    "grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "bnpo", "cispo", "luspo", "sapo", "vespo"
]
ALGORITHM_NAMES: tuple[AlgorithmName, ...] = get_args(AlgorithmName)


@dataclass(frozen=True)
class AlgorithmPreset:
    """One algorithm's settings and where they come from."""

    name: AlgorithmName
    source: str
    settings: Mapping[str, object]


_PPO = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2}

ALGORITHM_PRESETS: dict[str, AlgorithmPreset] = {
    preset.name: preset
    for preset in (
        AlgorithmPreset(
            "grpo",
            "Shao et al. 2024, DeepSeekMath (arXiv:2402.03300): GRPO's objective, eps 0.2, "
            "beta 0.04 with the k3 estimator",
            {
                "advantage_estimator": "grpo",
                "scale_rewards": "group",
                "loss_fn": "ppo",
                **_PPO,
                "loss_aggregation": "seq_mean_token_mean",
                "kl_loss_coef": 0.04,
                "kl_loss_estimator": "k3",
            },
        ),
        AlgorithmPreset(
            "dr_grpo",
            "Liu et al. 2025, Understanding R1-Zero-Like Training (arXiv:2503.20783): no std, no length normalisation",
            {
                "advantage_estimator": "dr_grpo",
                "loss_fn": "ppo",
                **_PPO,
                "loss_aggregation": "seq_mean_token_sum_norm",
                "kl_loss_coef": 0.0,
            },
        ),
        AlgorithmPreset(
            "dapo",
            "Yu et al. 2025, DAPO (arXiv:2503.14476): clip-higher 0.2 / 0.28, dynamic sampling, token-level loss, "
            "overlong reward shaping (L_cache 4096 of 20480), no KL; max 10 generation rounds as verl's DAPO recipe",
            {
                "advantage_estimator": "grpo",
                "scale_rewards": "group",
                "loss_fn": "ppo",
                "clip_ratio_low": 0.2,
                "clip_ratio_high": 0.28,
                "loss_aggregation": "token_mean",
                "kl_loss_coef": 0.0,
                "dynamic_sampling": {"max_rounds": 10},
                "overlong_buffer": {"penalty_factor": 1.0},
            },
        ),
        AlgorithmPreset(
            "gspo",
            "Zheng et al. 2025, Group Sequence Policy Optimization (arXiv:2507.18071): "
            "sequence-level ratio, clip 3e-4 / 4e-4",
            {
                "advantage_estimator": "grpo",
                "scale_rewards": "group",
                "loss_fn": "gspo",
                "clip_ratio_low": 3e-4,
                "clip_ratio_high": 4e-4,
                "loss_aggregation": "seq_mean_token_mean",
                "kl_loss_coef": 0.0,
            },
        ),
        AlgorithmPreset(
            "rloo",
            "Ahmadian et al. 2024, Back to Basics (arXiv:2402.14740): leave-one-out baseline, "
            "the completion as one action",
            {
                "advantage_estimator": "rloo",
                "loss_fn": "importance_sampling",
                "loss_aggregation": "seq_mean_token_sum",
                "kl_loss_coef": 0.0,
            },
        ),
        AlgorithmPreset(
            "reinforce_pp",
            "Hu et al. 2025, REINFORCE++ (arXiv:2501.03262): global advantage normalisation, "
            "PPO clip 0.2, token-level loss",
            {
                "advantage_estimator": "reinforce_pp",
                "loss_fn": "ppo",
                **_PPO,
                "loss_aggregation": "token_mean",
                "kl_loss_coef": 0.0,
            },
        ),
        AlgorithmPreset(
            "bnpo",
            "TRL's loss_type bnpo: GRPO's clipped surrogate with DAPO's token-level loss (arXiv:2503.14476), "
            "normalised over the batch's tokens",
            {
                "advantage_estimator": "grpo",
                "scale_rewards": "group",
                "loss_fn": "ppo",
                **_PPO,
                "loss_aggregation": "token_mean",
                "kl_loss_coef": 0.0,
            },
        ),
        AlgorithmPreset(
            "cispo",
            "MiniMax-M1 (arXiv:2506.13585): the clipped importance weight as a coefficient only; "
            "cap 5 as ScaleRL (arXiv:2510.13786) and TRL's docs recommend; token-level loss",
            {
                "advantage_estimator": "grpo",
                "scale_rewards": "group",
                "loss_fn": "cispo",
                "loss_fn_config": {"clip_low_threshold": 0.0, "clip_high_threshold": 5.0},
                "loss_aggregation": "token_mean",
                "kl_loss_coef": 0.0,
            },
        ),
        AlgorithmPreset(
            "luspo",
            "LUSPO (arXiv:2602.05261): GSPO's sequence-level ratio and clip (3e-4 / 4e-4), each sequence's "
            "loss times its length (token sums, averaged over sequences)",
            {
                "advantage_estimator": "grpo",
                "scale_rewards": "group",
                "loss_fn": "gspo",
                "clip_ratio_low": 3e-4,
                "clip_ratio_high": 4e-4,
                "loss_aggregation": "seq_mean_token_sum",
                "kl_loss_coef": 0.0,
            },
        ),
        AlgorithmPreset(
            "sapo",
            "Gao et al. 2025, Soft Adaptive Policy Optimization (arXiv:2511.20347): a temperature-controlled "
            "sigmoid gate (1.0 for positive advantages, 1.05 for negative) instead of the hard clip",
            {
                "advantage_estimator": "grpo",
                "scale_rewards": "group",
                "loss_fn": "sapo",
                "loss_aggregation": "seq_mean_token_mean",
                "kl_loss_coef": 0.0,
            },
        ),
        AlgorithmPreset(
            "vespo",
            "VESPO (arXiv:2602.10693): the policy gradient weighted by a gamma function of the sequence's "
            "importance weight (k 2, lambda 3 for A >= 0; k 3, lambda 2 below), TRL's defaults; token-level loss",
            {
                "advantage_estimator": "grpo",
                "scale_rewards": "group",
                "loss_fn": "vespo",
                "loss_aggregation": "token_mean",
                "kl_loss_coef": 0.0,
            },
        ),
    )
}
