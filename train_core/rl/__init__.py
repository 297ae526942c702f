"""The pure RL core: envs and rollouts (and their metrics), rewards to datums (advantages,
assembly), KL terms, and the policy update (objective, aggregation, route, metrics)."""

from train_core.rl.data_processing import (
    DatumMetadata,
    assemble_training_data,
    compute_advantages,
    remove_constant_reward_groups,
    remove_mask,
    trajectory_to_data,
)
from train_core.rl.kl_penalty import (
    discounted_future_sum,
    incorporate_kl_penalty,
    logprob_input,
    target_logprobs,
)
from train_core.rl.policy_objective import compute_kl_sample_train
from train_core.rl.preference_pairs import all_pairs_both_ways, all_pairs_one_way
from train_core.rl.problem_env import ProblemEnv, ProblemGroupBuilder
from train_core.rl.rollouts import (
    Sampler,
    TokenPolicy,
    compute_trajectory_metrics,
    do_group_rollout,
    do_single_rollout,
    sampling_policy,
)
from train_core.rl.types import (
    Action,
    Env,
    EnvGroupBuilder,
    Metrics,
    RLDataset,
    StepResult,
    Trajectory,
    TrajectoryGroup,
    Transition,
)

__all__ = [
    "Action",
    "DatumMetadata",
    "Env",
    "EnvGroupBuilder",
    "Metrics",
    "ProblemEnv",
    "ProblemGroupBuilder",
    "RLDataset",
    "Sampler",
    "StepResult",
    "TokenPolicy",
    "Trajectory",
    "TrajectoryGroup",
    "Transition",
    "all_pairs_both_ways",
    "all_pairs_one_way",
    "assemble_training_data",
    "compute_advantages",
    "compute_kl_sample_train",
    "compute_trajectory_metrics",
    "discounted_future_sum",
    "do_group_rollout",
    "do_single_rollout",
    "incorporate_kl_penalty",
    "logprob_input",
    "remove_constant_reward_groups",
    "remove_mask",
    "sampling_policy",
    "target_logprobs",
    "trajectory_to_data",
]
