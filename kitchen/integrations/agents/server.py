"""The OpenAI-compatible server RL rollouts give agents: uvicorn on 127.0.0.1 (a free port,
`kitchen.apps.serve.loopback`), in the rollouts' own event loop, routing each request by its API
key (one key per episode) to that episode (an `Episode`: `Episode` is one). It runs while any
episode is live and stops when the last one ends, so a run leaves no server behind; episodes of one
step share it."""

from __future__ import annotations

import asyncio
import secrets
import weakref
from typing import Any, ClassVar, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from kitchen.apps.serve.http_basics import WireError, bearer_or_header, openai_error, parse
from kitchen.apps.serve.loopback import LoopbackServer
from kitchen.apps.serve.openai_chat import ChatRequest, ChatRequestError, stream_events

KEY_PREFIX = "kitchen-episode-"


class UnknownEpisode(ChatRequestError):
    status = 401


class Episode(Protocol):
    """What the server routes one key's requests to."""

    async def answer(self, request: ChatRequest) -> dict[str, Any]:
        """The chat completion for `request`; a ChatRequestError is answered as a 4xx."""
        ...


class AgentServer:
    """One per event loop (`for_running_loop`); episodes `open` and `close` their keys."""

    _by_loop: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AgentServer]] = weakref.WeakKeyDictionary()

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.episodes: dict[str, Episode] = {}
        self._server = LoopbackServer(self._app)

    @classmethod
    def for_running_loop(cls, model_name: str = "policy") -> AgentServer:
        loop = asyncio.get_running_loop()
        if loop not in cls._by_loop:
            cls._by_loop[loop] = cls(model_name)
        return cls._by_loop[loop]

    @property
    def base_url(self) -> str:
        return f"{self._server.base_url}/v1"

    async def open(self, env: Episode) -> str:
        """A fresh key routed to `env`; starts the server if it is not running."""
        key = KEY_PREFIX + secrets.token_hex(12)
        self.episodes[key] = env
        await self._server.hold()
        return key

    async def close(self, key: str) -> None:
        """Forget `key`; the last episode out stops the server."""
        if self.episodes.pop(key, None) is not None:
            await self._server.release()

    def _app(self) -> FastAPI:
        app = FastAPI(title="kitchen agent rollouts", docs_url=None, redoc_url=None, openapi_url=None)

        def episode(request: Request) -> Episode:
            key = bearer_or_header(request) or ""
            env = self.episodes.get(key)
            if env is None:
                raise UnknownEpisode("unknown or finished episode key")
            return env

        @app.get("/v1/models", response_model=None)
        async def models(request: Request) -> dict[str, Any] | JSONResponse:
            try:
                episode(request)
            except ChatRequestError as error:
                return openai_error(error)
            return {
                "object": "list",
                "data": [{"id": self.model_name, "object": "model", "created": 0, "owned_by": "kitchen"}],
            }

        @app.post("/v1/chat/completions", response_model=None)
        async def chat(request: Request) -> dict[str, Any] | JSONResponse | StreamingResponse:
            try:
                env = episode(request)
                body = parse(ChatRequest, await request.body())
                completion = await env.answer(body)
            except (ChatRequestError, WireError) as error:
                return openai_error(error)
            if body.stream:
                return StreamingResponse(iter(stream_events(completion)), media_type="text/event-stream")
            return completion

        return app
