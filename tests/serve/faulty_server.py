"""A misbehaving Tinker endpoint on 127.0.0.1 for failure tests: the real `kitchen serve` app (noop
backend) in a thread of the test process, behind a middleware that answers chosen requests with
an error status. `after=True` lets the request reach the server first and then loses its answer,
as a proxy failing on the way back would; the SDK then resubmits what the server already has.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kitchen.apps.serve.app import create_app
from kitchen.apps.serve.server import ServeSettings, build_service
from tests.serve.server_process import free_port


@dataclass
class Fault:
    path: str
    status: int
    times: int
    after: bool = False


@dataclass
class FaultInjector:
    app: ASGIApp
    faults: list[Fault] = field(default_factory=list)
    seen: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        self.seen[path] += 1
        fault = next((f for f in self.faults if f.times != 0 and f.path in path), None)
        if fault is None:
            await self.app(scope, receive, send)
            return
        fault.times -= 1
        if fault.after:

            async def swallow(_message: Message) -> None:
                return None

            await self.app(scope, receive, swallow)
        body = b'{"detail": "injected failure"}'
        await send(
            {"type": "http.response.start", "status": fault.status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": body})


@contextmanager
def faulty_server(store: Path, faults: list[Fault]) -> Iterator[tuple[str, FaultInjector]]:
    """(base URL, injector) of a server running until the block ends."""
    service, keys = build_service(ServeSettings(backend="noop", store=store, long_poll_s=2.0))
    injector = FaultInjector(create_app(service, keys), faults)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(injector, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/api/v1/healthz", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.05)
    try:
        yield url, injector
    finally:
        server.should_exit = True
        thread.join(30)
