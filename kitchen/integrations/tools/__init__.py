"""Tools a model may call during RL: typed Python functions, and the env that runs the loop."""

from kitchen.integrations.tools.env import PARSE_ERROR_MESSAGE, Toolbox, ToolUseEnv
from kitchen.integrations.tools.tool import Tool, ToolResult, tool

__all__ = ["PARSE_ERROR_MESSAGE", "Tool", "ToolResult", "ToolUseEnv", "Toolbox", "tool"]
