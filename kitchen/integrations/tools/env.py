"""The tool-use loop as an RL env: the conversation is rendered with the tools declared in the
renderer's native format, the model's tool calls are parsed and run (concurrently, each with its
timeout, at most `max_concurrent_calls` at once across every env sharing the toolbox), their
results appended as `tool` messages, until the model answers without a call or `max_turns` runs
out; then a grader scores the final conversation.

A reply the renderer cannot parse (a malformed or cut-off call) is answered with an error
message, not a crash, and counted: per turn `tools/parse_errors`, and `tools/call_valid` on every
turn that attempted a call: 1 when the reply parsed and every call named a tool with arguments
that validate (so its mean is the rate of valid calls; a valid call whose tool then fails still
counts as valid). Per tool:
`tools/{name}/calls`, `tools/{name}/errors`, `tools/{name}/latency_s`.

Each observation re-renders the whole conversation; the renderers' prefix property makes it
extend the previous observation and action, so an episode trains as one datum."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from kitchen.integrations.tools.tool import Tool, ToolResult
from train_core.renderers.base import Renderer
from train_core.renderers.errors import RendererError
from train_core.renderers.messages import Message, ToolCall
from train_core.renderers.tool_declarations import ToolSpec
from train_core.rl.types import Action, Env, Metrics, StepResult
from train_core.types import ModelInput, StopCondition

Grade = float | tuple[float, Metrics]
Grader = Callable[[list[Message]], Grade | Awaitable[Grade]]
"""Scores a finished conversation (the last message is the model's answer, or its last turn):
the reward, or the reward and metrics that explain it (e.g. its parts)."""

PARSE_ERROR_MESSAGE = (
    "Error: your reply could not be read as a well-formed tool call or answer. "
    "Write each tool call exactly in the format the system prompt gives."
)


@dataclass
class Toolbox:
    """The tools of a task, by name, and the limit on calls running at once (shared by every env
    that holds this toolbox)."""

    tools: Sequence[Tool]
    max_concurrent_calls: int = 8
    _by_name: dict[str, Tool] = field(init=False, repr=False)
    _slots: asyncio.Semaphore = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name = {t.name: t for t in self.tools}
        if len(self._by_name) != len(self.tools):
            raise ValueError(f"tool names must be unique: {[t.name for t in self.tools]}")
        self._slots = asyncio.Semaphore(self.max_concurrent_calls)

    @property
    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self.tools]

    async def call(self, call: ToolCall) -> ToolResult:
        tool = self._by_name.get(call["name"])
        if tool is None:
            known = ", ".join(self._by_name)
            return ToolResult(f"Error: unknown tool {call['name']!r}; tools: {known}", "invalid", 0.0)
        async with self._slots:
            return await tool.call(call["arguments"])


class ToolUseEnv(Env):
    """One episode of tool use from `messages` (the task, e.g. a user question)."""

    def __init__(
        self,
        renderer: Renderer,
        toolbox: Toolbox,
        messages: Sequence[Message],
        grader: Grader,
        max_turns: int = 4,
    ) -> None:
        if not renderer.declares_tools:
            raise RendererError(f"{type(renderer).__name__} has no native tool format; a tool-use env needs one")
        self.renderer = renderer
        self.toolbox = toolbox
        self.grader = grader
        self.max_turns = max_turns
        self.messages: list[Message] = list(messages)
        self.turns = 0

    def _observation(self) -> ModelInput:
        declared = self.renderer.declare_tools(self.messages, self.toolbox.specs)
        return self.renderer.build_generation_prompt(declared)

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        return self._observation(), self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        message, parsed = self.renderer.parse_response(action)
        self.turns += 1
        self.messages.append(message)
        calls = message.get("tool_calls") or []
        metrics: Metrics = {"tools/parse_errors": float(not parsed)}
        metrics |= {f"tools/{t.name}/calls": 0.0 for t in self.toolbox.tools}
        metrics |= {f"tools/{t.name}/errors": 0.0 for t in self.toolbox.tools}
        if parsed and not calls:
            return await self._finish(metrics)
        if not parsed:
            metrics["tools/call_valid"] = 0.0
            self.messages.append(Message(role="user", content=PARSE_ERROR_MESSAGE))
        else:
            results = await asyncio.gather(*(self.toolbox.call(call) for call in calls))
            metrics["tools/call_valid"] = float(all(r.kind != "invalid" for r in results))
            for call, result in zip(calls, results, strict=True):
                self.messages.append(_tool_message(call, result))
                name = call["name"]
                if f"tools/{name}/calls" in metrics:
                    metrics[f"tools/{name}/calls"] += 1.0
                    metrics[f"tools/{name}/errors"] += float(result.error)
                    metrics[f"tools/{name}/latency_s"] = result.latency_s
                else:
                    metrics["tools/unknown_calls"] = metrics.get("tools/unknown_calls", 0.0) + 1.0
        if self.turns >= self.max_turns:
            metrics["tools/out_of_turns"] = 1.0
            return await self._finish(metrics)
        return StepResult(0.0, False, self._observation(), self.renderer.get_stop_sequences(), metrics, parsed)

    async def _finish(self, metrics: Metrics) -> StepResult:
        graded = self.grader(list(self.messages))
        grade = await graded if inspect.isawaitable(graded) else graded
        reward, parts = grade if isinstance(grade, tuple) else (grade, {})
        metrics = {**metrics, **parts, "tools/turns": float(self.turns)}
        parse_ok = metrics["tools/parse_errors"] == 0.0
        stop = self.renderer.get_stop_sequences()
        return StepResult(float(reward), True, ModelInput.empty(), stop, metrics, parse_ok)


def _tool_message(call: ToolCall, result: ToolResult) -> Message:
    message = Message(role="tool", content=result.text, name=call["name"])
    if "id" in call:
        message["tool_call_id"] = call["id"]
    return message
