"""Any MCP server's tools as kitchen tools, through the official `mcp` client (the `mcp` extra).

The run starts the server: over stdio (`command`, the client spawns it and talks over its pipes)
or over streamable HTTP (`url`; with `command` too, kitchen starts that process and waits for the
endpoint to answer). The tools are the server's `list_tools`, each declared to the model with its
own input schema, validated against it before a call (a call that does not validate is
`invalid`, as for a Python tool) and called with `call_tool`; a result the server marks as an
error is a `failed` call.

The MCP session lives on its own thread and event loop for the whole run: its transports are
task-bound async context managers, while tools are called from whichever loop runs the rollouts.
`McpToolset.close` (also at interpreter exit) ends the session and stops what was started.

An open `McpToolset` is also a `kitchen.engine.tool_servers.ToolServer`: `open_tool_server` is
the `mcp` entry of the `kitchen.tool_servers` group, through which `kitchen serve` runs MCP tools
for its chat endpoint without importing this module.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shlex
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field

from kitchen.engine.config.sections import Section
from kitchen.engine.errors import ConfigError, KitchenError
from kitchen.integrations.tools.tool import Tool
from train_core.renderers.tool_declarations import ToolSpec


class McpServerError(KitchenError):
    """The MCP server could not be started or reached, or did not list its tools."""


class McpServerSettings(Section):
    """An MCP server whose tools the model may call: a command (stdio), a URL (streamable HTTP), or
    both (kitchen starts the command, then connects to the URL)."""

    command: list[str] = Field(default_factory=list, description="the server's command line, started by the run")
    url: str | None = Field(None, description="its streamable HTTP endpoint (e.g. http://127.0.0.1:8765/mcp)")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables of the command")
    startup_timeout_s: float = Field(30.0, gt=0, description="how long the server has to start and list its tools")
    call_timeout_s: float = Field(10.0, gt=0, description="how long one tool call may take")

    def check(self) -> None:
        if not self.command and not self.url:
            raise ConfigError("an MCP server needs a command (stdio) or a url (streamable HTTP), or both")


def result_text(result: Any) -> str:
    """A `CallToolResult` as the model sees it: its text blocks, or its structured content."""
    texts = [block.text for block in result.content if getattr(block, "type", None) == "text"]
    if texts:
        return "\n".join(texts)
    return "" if result.structured_content is None else str(result.structured_content)


class McpToolError(RuntimeError):
    """The server answered a call with an error result (the tool's own failure)."""


class McpToolset:
    """An open session with one MCP server, and its tools (`McpToolset.open(settings)`)."""

    def __init__(self, settings: McpServerSettings) -> None:
        settings.check()
        self.settings = settings
        self.tools: list[Tool] = []
        self._process: subprocess.Popen[bytes] | None = None
        self._loop = asyncio.new_event_loop()
        self._client: Any = None
        self._ready: Future[None] = Future()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name="mcp-session", daemon=True)

    @classmethod
    def open(cls, settings: McpServerSettings) -> McpToolset:
        """Start the server, connect, list its tools; a McpServerError says what failed."""
        toolset = cls(settings)
        atexit.register(toolset.close)
        try:
            if settings.url and settings.command:
                toolset._process = subprocess.Popen(
                    settings.command, env={**os.environ, **settings.env}, stdin=subprocess.DEVNULL
                )
            toolset._thread.start()
            toolset._ready.result(timeout=settings.startup_timeout_s + 5)
        except BaseException as error:
            toolset.close()
            if isinstance(error, McpServerError):
                raise
            raise McpServerError(f"MCP server {toolset.describe()}: {type(error).__name__}: {error}") from None
        return toolset

    def describe(self) -> str:
        return " ".join(self.settings.command) if not self.settings.url else self.settings.url

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._session())
        finally:
            self._loop.close()

    async def _session(self) -> None:
        settings = self.settings
        try:
            try:
                from mcp import Client, StdioServerParameters, stdio_client
            except ImportError:
                raise McpServerError(
                    "MCP tools need the mcp 2.x client (pip install 'mcp>=2.0', or kitchen[mcp]); "
                    "this environment's mcp is older or missing"
                ) from None
            target: Any = settings.url
            if not settings.url:
                command, *args = settings.command
                # a transport, not the parameters themselves: Client takes those only from mcp 2.3 on
                target = stdio_client(StdioServerParameters(command=command, args=args, env=settings.env or None))
            if self._process is not None:
                await asyncio.wait_for(self._endpoint_up(), settings.startup_timeout_s)
            async with Client(target, read_timeout_seconds=settings.call_timeout_s) as client:
                self._client = client
                listed = await client.list_tools()
                self.tools = [self._tool(t.name, t.description or "", t.input_schema) for t in listed.tools]
                self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as error:
            if not self._ready.done():
                message = f"MCP server {self.describe()} did not start: {type(error).__name__}: {error}"
                self._ready.set_exception(McpServerError(message))

    async def _endpoint_up(self) -> None:
        """Wait until the process kitchen started accepts connections at the URL's port."""
        url = urlsplit(self.settings.url or "")
        port = url.port or (443 if url.scheme == "https" else 80)
        while True:
            if self._process is not None and self._process.poll() is not None:
                raise McpServerError(f"the command exited with status {self._process.returncode}")
            try:
                _, writer = await asyncio.open_connection(url.hostname, port)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            writer.close()
            return

    def _tool(self, name: str, description: str, schema: dict[str, Any]) -> Tool:
        return Tool(name, description, self._caller(name), schema, timeout_s=self.settings.call_timeout_s)

    def _caller(self, name: str) -> Callable[..., str]:
        def call(**arguments: Any) -> str:
            future = asyncio.run_coroutine_threadsafe(self._client.call_tool(name, arguments), self._loop)
            result = future.result(timeout=self.settings.call_timeout_s)
            if result.is_error:
                raise McpToolError(result_text(result))
            return result_text(result)

        return call

    def specs(self) -> list[ToolSpec]:
        """The server's tools as declared to the model (`ToolServer`)."""
        return [tool.spec for tool in self.tools]

    async def run(self, name: str, arguments: dict[str, Any]) -> str:
        """Call a tool by name (`ToolServer`): its text, or its error text (an unknown tool, arguments
        that do not validate, a failure on the server), as MCP clients hand results to a model."""
        tool = next((tool for tool in self.tools if tool.name == name), None)
        if tool is None:
            return f"Error: no tool called {name!r} on MCP server {self.describe()}"
        return (await tool.call(arguments)).text

    def close(self) -> None:
        """End the session and stop the processes it started (idempotent)."""
        atexit.unregister(self.close)
        if self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the session ended meanwhile and closed its loop
                self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=10)
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


def open_tool_server(target: str) -> McpToolset:
    """An MCP server for `kitchen serve` (the `mcp` tool server kind): `target` is a URL
    (streamable HTTP, already running) or a command line (stdio, started and stopped by kitchen)."""
    if urlsplit(target).scheme in ("http", "https"):
        return McpToolset.open(McpServerSettings(url=target))
    return McpToolset.open(McpServerSettings(command=shlex.split(target)))
