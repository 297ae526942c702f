"""A toy MCP server for the tests, on the official SDK: `python toy_mcp_server.py` serves stdio,
`python toy_mcp_server.py --http PORT` streamable HTTP at http://127.0.0.1:PORT/mcp. Its tools:
`add` (two integers), `capital` (a fact table) and `broken` (always fails)."""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

CAPITALS = {"Belyoron": "Keltora", "Abvenon": "Eley"}

server = MCPServer("toy", log_level="CRITICAL")


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers exactly."""
    return a + b


@server.tool()
def capital(island: str) -> str:
    """The capital of an island."""
    return CAPITALS.get(island, f"no island called {island}")


@server.tool()
def broken() -> str:
    """Always fails."""
    raise RuntimeError("the broken tool broke")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
