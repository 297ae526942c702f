"""Tools a model may call during RL: typed Python functions, the env that runs the loop, and
retrieval over a user corpus (a cached BM25 index and its `search` tool)."""

from kitchen.integrations.tools.env import Toolbox, ToolUseEnv
from kitchen.integrations.tools.search import Document, SearchIndex, search_tool
from kitchen.integrations.tools.tool import Tool, ToolResult, tool

__all__ = ["Document", "SearchIndex", "Tool", "ToolResult", "ToolUseEnv", "Toolbox", "search_tool", "tool"]
