"""Tool servers: tools that `kitchen serve` runs itself while answering a chat request (MCP
servers, through `kitchen.integrations.tools`), found by kind in the `kitchen.tool_servers`
entry-point group.

Why a registry: the apps layer (the server) may not import the integrations (which bring the
MCP client), so the server asks this group for a kind by name ("mcp") and gets a factory; the
integration registers itself in `pyproject.toml` as any third party would. The server sees only
`ToolServer`: the tools' declarations and a call that answers text, errors included.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from kitchen.engine.plugins import ExtensionPoint
from train_core.renderers.tool_declarations import ToolSpec


@runtime_checkable
class ToolServer(Protocol):
    """An open connection to something that runs tools for the model."""

    def specs(self) -> list[ToolSpec]:
        """The tools, declared as the model sees them (name, description, JSON schema)."""
        ...

    async def run(self, name: str, arguments: dict[str, Any]) -> str:
        """Call tool `name`; its result as text. A failed or invalid call answers its error text
        (the model reads it and may try again), never raises."""
        ...

    def close(self) -> None:
        """End the connection and stop what was started for it."""
        ...


ToolServerFactory = Callable[[str], ToolServer]
"""Opens a tool server from its target (a command line or a URL); raises a KitchenError saying
why it could not start."""


def _check(name: str, obj: Any) -> ToolServerFactory:
    if not callable(obj):
        raise TypeError(f"a tool server kind must be a factory `target -> ToolServer`, not {type(obj).__name__}")
    return obj


TOOL_SERVERS: ExtensionPoint[ToolServerFactory] = ExtensionPoint("kitchen.tool_servers", "tool server kind", _check)
"""The `kitchen.tool_servers` group: kind name -> factory."""
