"""OpenAI chat completions on a kitchen renderer and sampler, with no HTTP in it.

A request's messages (OpenAI's shape: tool-call arguments as JSON text, `tool` messages with a
`tool_call_id`) become kitchen messages, its `tools` are declared in the renderer's native tool
format, the prompt is sampled `n` times, and each sample is parsed back into an assistant message
with tool calls. `stop` strings cut a completion at the first token whose text reaches one (the
tokens kept are the ones returned, so a trainer sees exactly what the caller saw).

`tool_choice` "required" or a named function (`{"type": "function", "function": {"name": ...}}`)
is forced by prefilling the generation prompt with the renderer's tool-call opener (and the
function's name): those tokens end the prompt, the sampler writes the rest, and prefill plus
sample is parsed as the reply, so the sampled tokens (all a trainer trains) stay the model's own.
"none" leaves the tools undeclared: without logit masking that is what keeps the model from
calling them.

Supported: `tools`, `tool_choice`, `n`, `logprobs` (of the sampled tokens; `top_logprobs` > 0 is
refused), `stop`, `max_tokens` / `max_completion_tokens`, `temperature`, `seed`, and `stream`
where the server serves it (`stream_events`: the finished completion as one delta per choice, for
clients that only stream, such as verifiers 0.4's harness programs)."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from train_core.errors import InvalidInputError
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message, ToolCall
from train_core.renderers.tool_declarations import ToolSpec
from train_core.types import EncodedTextChunk, ModelInput, SampleResult, SamplingParams, TokensWithLogprobs


class ChatRequestError(InvalidInputError):
    """A chat request kitchen cannot answer as asked (answered 400 with this message)."""


class FunctionModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None


class ToolModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    function: FunctionModel

    def spec(self) -> ToolSpec:
        function: dict[str, Any] = {"name": self.function.name}
        if self.function.description is not None:
            function["description"] = self.function.description
        function["parameters"] = self.function.parameters
        return ToolSpec(type="function", function=function)  # type: ignore[typeddict-item]


class ChatRequest(BaseModel):
    """The fields of an OpenAI chat completion request kitchen reads; others are ignored, as the
    official client sends fields a server may not use."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[ToolModel] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    n: int = Field(1, ge=1, le=64)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    stop: str | list[str] | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0, le=2)
    seed: int | None = None
    stream: bool = False
    mcp_servers: list[str] | None = None
    """kitchen's extension: which of the server's MCP servers (`kitchen serve --mcp-server`) offer
    their tools to this request; None (the field left out) offers all of them, [] none."""


Sample = Callable[[ModelInput, int, SamplingParams], Awaitable[SampleResult]]
"""Draws `n` completions of a prompt (a sampling client's `sample`, or an RL episode's bridge)."""


@dataclass(frozen=True)
class Prepared:
    """A request ready to sample: the prompt (ending in `prefill`, the tokens that force a tool
    call, which the reply is parsed from together with the sample) and the sampling settings."""

    prompt: ModelInput
    prefill: list[int]
    params: SamplingParams


@dataclass(frozen=True)
class Completion:
    """One choice as sampled: the prompt and the completion tokens kept (after any `stop` cut)."""

    prompt: ModelInput
    sampled: TokensWithLogprobs
    message: Message
    finish_reason: str


def to_messages(raw: Sequence[dict[str, Any]]) -> list[Message]:
    """OpenAI messages as kitchen messages; a malformed one is a ChatRequestError naming it."""
    messages: list[Message] = []
    for index, item in enumerate(raw):
        role = item.get("role")
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            raise ChatRequestError(f"messages[{index}]: unsupported role {role!r}")
        message = Message(role=role, content=_text(item.get("content"), index))
        if role == "assistant" and item.get("tool_calls"):
            message["tool_calls"] = [_tool_call(call, index) for call in item["tool_calls"]]
        if role == "tool":
            if isinstance(item.get("tool_call_id"), str):
                message["tool_call_id"] = item["tool_call_id"]
            name = item.get("name") or _called_name(messages, message.get("tool_call_id"))
            if name:
                message["name"] = name
        messages.append(message)
    return messages


def _text(content: Any, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise ChatRequestError(f"messages[{index}].content: only text content is supported")


def _tool_call(call: Any, index: int) -> ToolCall:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ChatRequestError(f"messages[{index}].tool_calls: each needs a function with a name")
    arguments = function.get("arguments", "{}")
    try:
        decoded = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError as error:
        raise ChatRequestError(f"messages[{index}].tool_calls: arguments are not JSON: {error}") from None
    if not isinstance(decoded, dict):
        raise ChatRequestError(f"messages[{index}].tool_calls: arguments must be a JSON object")
    result = ToolCall(name=function["name"], arguments=decoded)
    if isinstance(call.get("id"), str):
        result["id"] = call["id"]
    return result


def _called_name(messages: Sequence[Message], call_id: str | None) -> str | None:
    for message in reversed(messages):
        for call in message.get("tool_calls") or []:
            if call_id is None or call.get("id") == call_id:
                return call["name"]
    return None


def prepare(request: ChatRequest, renderer: Renderer, default_max_tokens: int) -> Prepared:
    """The prompt (tools declared unless `tool_choice` is "none", a call forced when it is
    "required" or names a function) and the sampling settings."""
    if request.top_logprobs:
        raise ChatRequestError("top_logprobs > 0 is not supported: kitchen returns the sampled tokens' logprobs")
    forced = forced_call(request)
    messages = to_messages(request.messages)
    if request.tools and request.tool_choice != "none":
        if not renderer.declares_tools:
            raise ChatRequestError(f"this model's renderer ({type(renderer).__name__}) has no native tool format")
        messages = renderer.declare_tools(messages, [tool.spec() for tool in request.tools])
    try:
        prompt = renderer.build_generation_prompt(messages)
        prefill: list[int] = []
        if forced is not None:
            plain_length = prompt.length
            prompt = renderer.build_generation_prompt(messages, prefill=renderer.tool_call_prefill(forced or None))
            prefill = _last_tokens(prompt, prompt.length - plain_length)
    except InvalidInputError as error:
        raise ChatRequestError(f"messages cannot be rendered: {error}") from None
    max_tokens = request.max_completion_tokens or request.max_tokens or default_max_tokens
    params = SamplingParams(
        max_tokens=max_tokens, seed=request.seed, stop=renderer.get_stop_sequences(), temperature=request.temperature
    )
    return Prepared(prompt, prefill, params)


def forced_call(request: ChatRequest) -> str | None:
    """None when the model may answer in text; "" when it must call some tool ("required");
    else the name of the function it must call (one of `tools`, else a ChatRequestError)."""
    choice = request.tool_choice
    if choice in (None, "auto", "none"):
        return None
    names = [tool.function.name for tool in request.tools or []]
    if not names:
        raise ChatRequestError(f"tool_choice {choice!r} needs tools: the request declares none")
    if choice == "required":
        return ""
    function = choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise ChatRequestError(
            f"tool_choice {choice!r} is not supported: use 'auto', 'none', 'required' or "
            '{"type": "function", "function": {"name": ...}}'
        )
    if name not in names:
        raise ChatRequestError(f"tool_choice names function {name!r}, which is not among tools ({', '.join(names)})")
    return name


def _last_tokens(prompt: ModelInput, count: int) -> list[int]:
    """The last `count` tokens of `prompt` (a prefill is text, so they are in its last chunk)."""
    last = prompt.chunks[-1] if prompt.chunks else None
    if count <= 0 or not isinstance(last, EncodedTextChunk) or len(last.tokens) < count:
        raise ChatRequestError("the tool-call prefill did not render as text at the end of the prompt")
    return list(last.tokens[-count:])


def finish(
    prompt: ModelInput,
    sampled: TokensWithLogprobs,
    renderer: Renderer,
    stop: Sequence[str],
    decode: Callable[[list[int]], str],
    prefill: Sequence[int] = (),
) -> Completion:
    """One sample as a choice: cut at the first `stop` string, parsed (after `prefill`, the
    prompt's tokens that forced a tool call) into a message."""
    tokens, logprobs = sampled.tokens, sampled.maybe_logprobs
    for k in range(1, len(tokens) + 1 if stop else 0):
        text = decode(tokens[:k])
        hit = min((text.find(s) for s in stop if s in text), default=-1)
        if hit >= 0:
            kept = TokensWithLogprobs(tokens[:k], None if logprobs is None else logprobs[:k], "stop")
            content = decode(list(prefill)) + text[:hit] if prefill else text[:hit]
            return Completion(prompt, kept, Message(role="assistant", content=content), "stop")
    message, ok = renderer.parse_response([*prefill, *tokens])
    if sampled.stop_reason == "length" and not ok:
        reason = "length"
    else:
        reason = "tool_calls" if message.get("tool_calls") else "stop"
    return Completion(prompt, sampled, message, reason)


def stop_strings(request: ChatRequest) -> list[str]:
    if request.stop is None:
        return []
    return [request.stop] if isinstance(request.stop, str) else list(request.stop)


def response(
    request: ChatRequest, completions: Sequence[Completion], token_text: Callable[[int], str]
) -> dict[str, Any]:
    """The OpenAI `chat.completion` object for `completions`."""
    choices = []
    for index, completion in enumerate(completions):
        message = assistant_message(completion.message)
        choice: dict[str, Any] = {"index": index, "message": message, "finish_reason": completion.finish_reason}
        choice["logprobs"] = _logprobs(completion.sampled, token_text) if request.logprobs else None
        choices.append(choice)
    prompt_tokens = completions[0].prompt.length if completions else 0
    completion_tokens = sum(len(c.sampled.tokens) for c in completions)
    return {
        "id": f"chatcmpl-{secrets.token_hex(12)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stream_events(completion: dict[str, Any]) -> list[str]:
    """A `chat.completion` (from `response`) as the server-sent events a streaming client reads:
    each choice's whole message as one delta, its finish reason, the usage, then `[DONE]`."""
    head = {key: completion[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    chunks = []
    for choice in completion["choices"]:
        delta = dict(choice["message"])
        if "tool_calls" in delta:
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(delta["tool_calls"])]
        first = {"index": choice["index"], "delta": delta, "logprobs": choice["logprobs"], "finish_reason": None}
        last = {"index": choice["index"], "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}
        chunks += [head | {"choices": [first]}, head | {"choices": [last]}]
    chunks.append(head | {"choices": [], "usage": completion["usage"]})
    return [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks] + ["data: [DONE]\n\n"]


def assistant_message(message: Message) -> dict[str, Any]:
    """A parsed reply as an OpenAI assistant message (a call without an id is given one)."""
    out: dict[str, Any] = {"role": "assistant", "content": message["content"] or None}
    if calls := message.get("tool_calls"):
        out["tool_calls"] = [tool_call_dict(call) for call in calls]
    if thinking := message.get("thinking"):
        out["reasoning_content"] = thinking
    return out


def tool_call_dict(call: ToolCall) -> dict[str, Any]:
    """A tool call in OpenAI's shape (arguments as JSON text)."""
    return {
        "id": call.get("id") or f"call_{secrets.token_hex(8)}",
        "type": "function",
        "function": {"name": call["name"], "arguments": json.dumps(call["arguments"], ensure_ascii=False)},
    }


def _logprobs(sampled: TokensWithLogprobs, token_text: Callable[[int], str]) -> dict[str, Any]:
    logprobs = sampled.maybe_logprobs or [0.0] * len(sampled.tokens)
    content = []
    for token, logprob in zip(sampled.tokens, logprobs, strict=True):
        text = token_text(token)
        content.append({"token": text, "logprob": logprob, "bytes": list(text.encode()), "top_logprobs": []})
    return {"content": content}


async def complete(
    request: ChatRequest,
    renderer: Renderer,
    sample: Sample,
    decode: Callable[[list[int]], str],
    default_max_tokens: int = 512,
) -> tuple[dict[str, Any], list[Completion]]:
    """Answer `request`: the response object, and each choice as sampled (for a trainer)."""
    prepared = prepare(request, renderer, default_max_tokens)
    result = await sample(prepared.prompt, request.n, prepared.params)
    stops = stop_strings(request)
    completions = [
        finish(prepared.prompt, sequence, renderer, stops, decode, prepared.prefill) for sequence in result.sequences
    ]
    return response(request, completions, lambda token: decode([token])), completions
