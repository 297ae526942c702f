"""The OpenAI-compatible face of `kitchen serve`: `/v1/models` and `/v1/chat/completions`, for
the base models of the models file and the caller's own sampler checkpoints (`tinker://` paths),
on the same service, backend and API keys as the Tinker API.

The official `openai` client sends its key as `Authorization: Bearer ...`; `X-API-Key` works too.
Each model's renderer is the server's `--renderer`, else the one recommended for its name (a
request with `tools` needs a renderer with a native tool format: otherwise a 400 naming it).
With `server_tools` (the `--mcp-server`s), replies that call those tools are continued on the
server (`kitchen.apps.serve.server_tools`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from kitchen.apps.serve.http_basics import WireError, bearer_or_header, openai_error, parse
from kitchen.apps.serve.keys import KeyCheck
from kitchen.apps.serve.openai_chat import ChatRequest, complete
from kitchen.apps.serve.records import TINKER_SCHEME
from kitchen.apps.serve.server_tools import ServerTools
from kitchen.apps.serve.service import ServeError, TinkerService
from train_core.errors import InvalidInputError
from train_core.renderers import get_renderer, recommended_renderer
from train_core.renderers.base import Renderer
from train_core.types import ModelInput, SampleResult, SamplingParams


@dataclass
class ChatModel:
    """What answers chat requests for one model name."""

    renderer: Renderer
    decode: Callable[[list[int]], str]
    sample: Callable[[ModelInput, int, SamplingParams], Any]


class ChatModels:
    """Chat models by name, made on first use: a sampling client, the tokenizer and a renderer."""

    def __init__(self, service: TinkerService, renderer: str | None) -> None:
        self.service = service
        self.renderer = renderer
        self._models: dict[tuple[str, str], ChatModel] = {}

    def names(self) -> list[str]:
        return sorted(self.service.catalog.models)

    async def get(self, owner: str, name: str) -> ChatModel:
        key = (owner if name.startswith(TINKER_SCHEME) else "", name)
        if key not in self._models:
            backend = self.service.backend
            if name.startswith(TINKER_SCHEME):
                record = self.service.checkpoint(owner, name, "sampler")
                base_model = self.service.store.data.runs[record.training_run_id].base_model
                client = await backend.create_sampling_client(model_path=record.backend_path)
            else:
                base_model = name
                client = await backend.create_sampling_client(base_model=self.service.catalog.backend_model(name))
            tokenizer: Any = backend.get_tokenizer(self.service.catalog.backend_model(base_model))
            renderer = get_renderer(self.renderer or recommended_renderer(base_model), tokenizer)

            def decode(tokens: list[int], tokenizer: Any = tokenizer) -> str:
                return str(tokenizer.decode(tokens))

            async def sample(prompt: ModelInput, n: int, params: SamplingParams) -> SampleResult:
                return await client.sample(prompt, n, params)

            self._models[key] = ChatModel(renderer, decode, sample)
        return self._models[key]


def openai_router_for(
    renderer: str | None = None, server_tools: ServerTools | None = None
) -> Callable[[TinkerService, KeyCheck], APIRouter]:
    """A router builder for `create_app(routers=...)`; `renderer` overrides the recommended one,
    `server_tools` are run for the model when its replies call them."""

    def build(service: TinkerService, keys: KeyCheck) -> APIRouter:
        models = ChatModels(service, renderer)

        def owner(request: Request) -> str:
            return keys.owner(bearer_or_header(request))

        router = APIRouter(prefix="/v1")
        Owner = Depends(owner)

        @router.get("/models")
        async def list_models(_owner: str = Owner) -> dict[str, Any]:
            data = [{"id": name, "object": "model", "created": 0, "owned_by": "kitchen"} for name in models.names()]
            return {"object": "list", "data": data}

        @router.post("/chat/completions", response_model=None)
        async def chat_completions(request: Request, who: str = Owner) -> dict[str, Any] | JSONResponse:
            try:
                chat = parse(ChatRequest, await request.body())
                model = await models.get(who, chat.model)
                if server_tools is None:
                    body, _completions = await complete(chat, model.renderer, model.sample, model.decode)
                else:
                    body = await server_tools.complete(chat, model.renderer, model.sample, model.decode)
            except (InvalidInputError, ServeError, WireError) as error:
                return openai_error(error)
            return body

        return router

    return build
