"""Tools a model may call during RL: typed Python functions, the env that runs the loop,
retrieval over a user corpus (a cached BM25 index and its `search` tool), and any MCP server's
tools (`McpToolset`)."""

from kitchen.integrations.tools.env import PARSE_ERROR_MESSAGE, Toolbox, ToolUseEnv
from kitchen.integrations.tools.mcp import McpServerError, McpServerSettings, McpToolError, McpToolset
from kitchen.integrations.tools.search import Document, SearchIndex, search_tool
from kitchen.integrations.tools.tool import Tool, ToolResult, tool

__all__ = [
    "PARSE_ERROR_MESSAGE",
    "Document",
    "McpServerError",
    "McpServerSettings",
    "McpToolError",
    "McpToolset",
    "SearchIndex",
    "Tool",
    "ToolResult",
    "ToolUseEnv",
    "Toolbox",
    "search_tool",
    "tool",
]
