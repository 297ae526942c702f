"""What the tinker backend supports, for `kitchen validate RECIPE backend=tinker` (no network, no SDK);
its registration hands these to kitchen's backend registry.

Calls are named `<Port>.<method>` after the protocols in `kitchen.engine.ports`. The service runs every
port call; what it does not do is full fine-tuning, so a training client needs `lora_rank`.
"""

from __future__ import annotations

from train_core.losses import BUILTIN_LOSS_NAMES

SUPPORTED_CALLS: frozenset[str] = frozenset(
    {
        "ServiceBackend.create_training_client",
        "ServiceBackend.create_training_client_from_state",
        "ServiceBackend.create_sampling_client",
        "ServiceBackend.get_tokenizer",
        "ServiceBackend.close",
        "TrainingClient.forward",
        "TrainingClient.forward_backward",
        "TrainingClient.forward_backward_custom",
        "TrainingClient.optim_step",
        "TrainingClient.save_state",
        "TrainingClient.load_state",
        "TrainingClient.save_weights_for_sampler",
        "TrainingClient.save_weights_and_get_sampling_client",
        "TrainingClient.get_tokenizer",
        "SamplingClient.sample",
        "SamplingClient.compute_logprobs",
        "SamplingClient.score_prompt",  # optional (ScoresPromptDetail): top-k prompt logprobs only
    }
)

SUPPORTED_LOSS_FNS: frozenset[str] = BUILTIN_LOSS_NAMES
"""The losses of kitchen's table the service runs itself, each under the same name (kitchen's own
losses, such as decoupled_ppo, are not among them)."""

REQUIRES_LORA_RANK = True
"""The service trains LoRA adapters only: `create_training_client` needs a `lora_rank`."""
