"""Reinforcement learning (GRPO-style): settings, stages grouped by phase (sampling, update,
stream-minibatch and async modes, warm start) and the workflow builder with its slots."""
