"""Training agents written as ordinary code against the `openai` client: each episode's chat
completion calls are served from the policy being trained, and trained on as sampled."""

from kitchen.integrations.agents.env import Agent, AgentEndpoint, AgentEnv, AgentGrader, AgentGroupBuilder
from kitchen.integrations.agents.server import AgentServer

__all__ = ["Agent", "AgentEndpoint", "AgentEnv", "AgentGrader", "AgentGroupBuilder", "AgentServer"]
