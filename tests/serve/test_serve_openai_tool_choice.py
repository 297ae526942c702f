"""`tool_choice` "required" and a named function on `kitchen serve`'s `/v1/chat/completions`,
called by the official `openai` client over HTTP on 127.0.0.1.

The server runs in-process (the app `kitchen serve` builds, on uvicorn) so that its noop backend
can be scripted: the fake model answers a prompt that ends in the forced tool-call opener with the
rest of a call, and any other prompt with text, so a reply with `tool_calls` proves the call was
forced by the prompt and parsed from prefill plus sample."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessageFunctionToolCall

from kitchen.apps.serve.app import create_app
from kitchen.apps.serve.loopback import LoopbackServer
from kitchen.apps.serve.openai_router import openai_router_for
from kitchen.apps.serve.server import ServeSettings, build_service

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
    for name in ("calculator", "search")
]
QUESTION: list[Any] = [{"role": "user", "content": "What is 482 * 917?"}]


def scripted_model(prompt: str) -> str:
    """Text unless the prompt ends inside a tool call: then the rest of a call (to the named
    function when the prompt already wrote its name, else to `calculator`)."""
    arguments = '{"expression": "482 * 917"}'
    if prompt.endswith('"arguments": '):
        return f"{arguments}}}\n</tool_call>"
    if prompt.endswith("<tool_call>\n"):
        return f'{{"name": "calculator", "arguments": {arguments}}}\n</tool_call>'
    return "It is about 440000."


def served(tmp_path: Path, test: Callable[[openai.AsyncOpenAI], Awaitable[None]]) -> None:
    async def main() -> None:
        settings = ServeSettings(backend="noop", store=tmp_path / "store", renderer="qwen3_instruct")
        service, keys = build_service(settings)
        service.backend.script(replies=scripted_model)  # type: ignore[attr-defined]
        server = LoopbackServer(lambda: create_app(service, keys, routers=(openai_router_for(settings.renderer),)))
        await server.hold()
        try:
            client = openai.AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="tml-tool-choice", max_retries=0)
            async with client:
                await test(client)
        finally:
            await server.release()
            await service.backend.close()

    asyncio.run(main())


def calls(completion: ChatCompletion) -> list[ChatCompletionMessageFunctionToolCall]:
    message = completion.choices[0].message
    return [c for c in message.tool_calls or [] if isinstance(c, ChatCompletionMessageFunctionToolCall)]


def test_required_and_named_tool_choices_force_a_call_and_unknown_names_are_400(tmp_path: Path) -> None:
    async def test(client: openai.AsyncOpenAI) -> None:
        async def ask(**request: Any) -> ChatCompletion:
            return await client.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=40, **request)

        auto = await ask(tools=TOOLS, tool_choice="auto")
        assert calls(auto) == [] and auto.choices[0].message.content == "It is about 440000."

        required = await ask(tools=TOOLS, tool_choice="required")
        assert required.choices[0].finish_reason == "tool_calls"
        assert [(c.function.name, c.function.arguments) for c in calls(required)] == [
            ("calculator", '{"expression": "482 * 917"}')
        ]
        assert required.usage and auto.usage and required.usage.prompt_tokens > auto.usage.prompt_tokens

        named = await ask(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "search"}})
        assert [(c.function.name, c.function.arguments) for c in calls(named)] == [
            ("search", '{"expression": "482 * 917"}')
        ]

        with pytest.raises(openai.BadRequestError, match="names function 'lookup', which is not among tools"):
            await ask(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "lookup"}})
        with pytest.raises(openai.BadRequestError, match="tool_choice 'required' needs tools"):
            await ask(tool_choice="required")

    served(tmp_path, test)
