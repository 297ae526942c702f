"""Environments from outside kitchen: agents written against the `openai` client, environment hubs
(verifiers, OpenEnv) and typed tool calling. RL recipes train on them; no training code imports them."""
