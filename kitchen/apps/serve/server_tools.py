"""Tools the server runs itself in `/v1/chat/completions` (MCP servers named by
`kitchen serve --mcp-server NAME=TARGET`), as OpenAI-compatible servers with server-side tools do.

The servers start with `kitchen serve` (one that cannot start stops it, naming the server) and
reach this module only as `kitchen.engine.tool_servers.ToolServer`s, opened through that
registry's `mcp` kind: the apps layer never imports the MCP integration.

A request is offered every server's tools, or those of the servers its `mcp_servers` field
names ([] for none), declared after its own `tools` (a name in both is a 400); `tool_choice`
"none" declares neither. When a reply calls server tools, the server runs them, appends the
assistant message and one `tool` message per result (a failed call's error text is its result,
as MCP clients give it to the model), and samples again, for at most `max_rounds` rounds per
choice. The reply returned is the last one; the calls run on the way are listed in its message's
`server_tool_calls` (each an OpenAI tool call plus `server` and `output`). A reply that calls
the request's own tools too ends the loop: its server calls are run and listed, its `tool_calls`
are the request's own for the client to run. A reply still calling server tools after
`max_rounds` is returned without those calls, `finish_reason` "length". `usage` counts every
round's prompt and completion tokens; `logprobs` are those of the returned reply's tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kitchen.apps.serve.openai_chat import (
    ChatRequest,
    ChatRequestError,
    Completion,
    FunctionModel,
    Sample,
    ToolModel,
    assistant_message,
    complete,
    finish,
    prepare,
    response,
    stop_strings,
    tool_call_dict,
)
from kitchen.engine.errors import ConfigError, KitchenError
from kitchen.engine.tool_servers import TOOL_SERVERS, ToolServer
from train_core.renderers.base import Renderer
from train_core.renderers.messages import ToolCall


class ServerTools:
    """The tool servers `kitchen serve` runs, by name, and which server runs each tool."""

    def __init__(self, servers: Mapping[str, ToolServer], max_rounds: int) -> None:
        self.servers = dict(servers)
        self.max_rounds = max_rounds
        self.tools: dict[str, tuple[str, ToolModel]] = {}
        for server, opened in self.servers.items():
            for spec in opened.specs():
                name = spec["function"]["name"]
                if name in self.tools:
                    raise ConfigError(f"MCP servers {self.tools[name][0]!r} and {server!r} both offer a tool {name!r}")
                self.tools[name] = (server, ToolModel(type="function", function=FunctionModel(**spec["function"])))

    @classmethod
    def open(cls, targets: Mapping[str, str], max_rounds: int, kind: str = "mcp") -> ServerTools:
        """Start each server (`name -> command line or URL`); one that cannot start is a
        ConfigError naming it, and those already started are stopped."""
        factory = TOOL_SERVERS.get(kind)
        opened: dict[str, ToolServer] = {}
        try:
            for name, target in targets.items():
                try:
                    opened[name] = factory(target)
                except KitchenError as error:
                    raise ConfigError(f"--mcp-server {name}={target}: {error}") from None
            return cls(opened, max_rounds)
        except BaseException:
            for server in opened.values():
                server.close()
            raise

    def close(self) -> None:
        for server in self.servers.values():
            server.close()

    def offered(self, request: ChatRequest) -> dict[str, tuple[str, ToolModel]]:
        """The server tools `request` is offered (by tool name: its server and declaration)."""
        if request.tool_choice == "none" or request.mcp_servers == []:
            return {}
        wanted = set(self.servers) if request.mcp_servers is None else set(request.mcp_servers)
        if unknown := sorted(wanted - set(self.servers)):
            raise ChatRequestError(
                f"mcp_servers names {', '.join(map(repr, unknown))}: this server runs "
                f"{', '.join(map(repr, sorted(self.servers))) or 'no MCP servers'}"
            )
        own = {tool.function.name for tool in request.tools or []}
        offered = {name: entry for name, entry in self.tools.items() if entry[0] in wanted}
        if clash := sorted(own & set(offered)):
            raise ChatRequestError(f"tools {', '.join(map(repr, clash))} are also MCP tools of this server")
        return offered

    async def complete(
        self,
        request: ChatRequest,
        renderer: Renderer,
        sample: Sample,
        decode: Callable[[list[int]], str],
        default_max_tokens: int = 512,
    ) -> dict[str, Any]:
        """Answer `request`, running the server tools its replies call (see the module)."""
        offered = self.offered(request)
        if not offered:
            return (await complete(request, renderer, sample, decode, default_max_tokens))[0]
        declared = request.model_copy(update={"tools": [*(request.tools or []), *(t for _, t in offered.values())]})
        prepared = prepare(declared, renderer, default_max_tokens)
        first = await sample(prepared.prompt, request.n, prepared.params)
        stops = stop_strings(request)
        started = [finish(prepared.prompt, s, renderer, stops, decode, prepared.prefill) for s in first.sequences]
        loop = _Loop(self, offered, declared, renderer, sample, decode, default_max_tokens)
        ended = await asyncio.gather(*(loop.run(completion) for completion in started))
        body = response(request, [completion for completion, _, _ in ended], lambda token: decode([token]))
        prompt_tokens = prepared.prompt.length + sum(extra for _, _, (extra, _) in ended)
        completion_tokens = sum(len(c.sampled.tokens) for c in started) + sum(more for _, _, (_, more) in ended)
        for choice, (_, calls, _) in zip(body["choices"], ended, strict=True):
            choice["message"]["server_tool_calls"] = calls
        body["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        return body


@dataclasses.dataclass
class _Loop:
    """The tool rounds of one request, run for each of its choices."""

    tools: ServerTools
    offered: dict[str, tuple[str, ToolModel]]
    request: ChatRequest
    renderer: Renderer
    sample: Sample
    decode: Callable[[list[int]], str]
    default_max_tokens: int

    async def run(self, completion: Completion) -> tuple[Completion, list[dict[str, Any]], tuple[int, int]]:
        """The last reply, the server calls run on the way, and the extra (prompt, completion)
        tokens of the rounds after the first."""
        history = list(self.request.messages)
        ran: list[dict[str, Any]] = []
        extra_prompt = extra_completion = 0
        for rounds in range(self.tools.max_rounds + 1):
            calls = [_with_id(call) for call in completion.message.get("tool_calls") or []]
            server_calls = [call for call in calls if call["name"] in self.offered]
            own_calls = [call for call in calls if call["name"] not in self.offered]
            if not server_calls:
                break
            if rounds == self.tools.max_rounds:
                return _keeping(completion, own_calls, "length"), ran, (extra_prompt, extra_completion)
            results = await asyncio.gather(*(self._run(call) for call in server_calls))
            ran += results
            if own_calls:
                return _keeping(completion, own_calls), ran, (extra_prompt, extra_completion)
            history.append(assistant_message({**completion.message, "tool_calls": calls}))
            history += [{"role": "tool", "tool_call_id": r["id"], "content": r["output"]} for r in results]
            follow = self.request.model_copy(update={"messages": history, "n": 1, "tool_choice": "auto"})
            prepared = prepare(follow, self.renderer, self.default_max_tokens)
            sampled = (await self.sample(prepared.prompt, 1, prepared.params)).sequences[0]
            completion = finish(prepared.prompt, sampled, self.renderer, stop_strings(follow), self.decode)
            extra_prompt += prepared.prompt.length
            extra_completion += len(sampled.tokens)
        return completion, ran, (extra_prompt, extra_completion)

    async def _run(self, call: ToolCall) -> dict[str, Any]:
        server = self.offered[call["name"]][0]
        try:
            output = await self.tools.servers[server].run(call["name"], dict(call["arguments"]))
        except Exception as error:  # a tool server's own bug still answers the model, never a 500
            output = f"Error: {call['name']} failed: {type(error).__name__}: {error}"
        return {**tool_call_dict(call), "server": server, "output": output}


def _keeping(completion: Completion, calls: list[ToolCall], finish_reason: str | None = None) -> Completion:
    """`completion` with only `calls` (the request's own) left in its reply."""
    message = completion.message.copy()
    message["tool_calls"] = calls
    reason = finish_reason or ("tool_calls" if calls else completion.finish_reason)
    return dataclasses.replace(completion, message=message, finish_reason=reason)


def _with_id(call: ToolCall) -> ToolCall:
    """`call` with an id (the tool message that answers it refers to it)."""
    return call if call.get("id") else ToolCall(**call, id=tool_call_dict(call)["id"])


def parse_targets(entries: Sequence[str]) -> dict[str, str]:
    """`NAME=TARGET` entries (`--mcp-server`) by name; a malformed or repeated one is a ConfigError."""
    targets: dict[str, str] = {}
    for entry in entries:
        name, equals, target = entry.partition("=")
        if not equals or not name.strip() or not target.strip():
            raise ConfigError(f"--mcp-server {entry!r}: expected NAME=COMMAND or NAME=URL")
        if name.strip() in targets:
            raise ConfigError(f"--mcp-server {name.strip()!r} is given twice")
        targets[name.strip()] = target.strip()
    return targets
