"""Tools a model may call during RL: typed Python functions, and the env that runs the loop."""

from kitchen.integrations.tools.env import Toolbox, ToolUseEnv
from kitchen.integrations.tools.tool import Tool, ToolResult, tool

__all__ = ["Tool", "ToolResult", "ToolUseEnv", "Toolbox", "tool"]
