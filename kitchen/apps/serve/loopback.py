"""A uvicorn server on 127.0.0.1 (a free port) inside the running event loop, up while anyone
holds it: rollouts start one on their first episode and the last episode out stops it, so a run
leaves no server behind (the agents' OpenAI endpoint, an OpenEnv environment's server)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import Any


class LoopbackServer:
    def __init__(self, app: Callable[[], Any], log_level: str = "warning") -> None:
        self._app = app
        self._log_level = log_level
        self.port = 0
        self._holders = 0
        self._task: asyncio.Task[None] | None = None
        self._starting: asyncio.Future[None] | None = None
        self._server: Any = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def hold(self) -> None:
        """Starts the server if it is not running; `release` once for each `hold`."""
        self._holders += 1
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        await asyncio.shield(self._starting)

    async def release(self) -> None:
        """The last holder out stops the server."""
        self._holders = max(0, self._holders - 1)
        if not self._holders and self._task is not None:
            task, self._task, self._starting = self._task, None, None
            self._server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _start(self) -> None:
        import uvicorn

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            self._app(), host="127.0.0.1", port=self.port, log_level=self._log_level, access_log=False
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises why it could not start
                raise RuntimeError("the loopback server stopped before it started")
            await asyncio.sleep(0.01)
