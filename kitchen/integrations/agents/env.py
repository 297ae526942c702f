"""An agent written against the `openai` client as an RL env.

The agent is an ordinary function, `agent(endpoint, task)`, sync or async, that makes chat
completion calls to `endpoint.base_url` with `endpoint.api_key` (one key per episode) and returns
its result; `grader(task, result)` gives the episode's reward. Each call is one turn: its prompt
(the request's messages rendered, tools declared natively) is the observation, the policy's
sample the action, and the reply the agent gets is that sample parsed (tool calls included). A
`tool_choice` that forces a call ends the prompt with the renderer's tool-call opener: those
tokens are observation, never action, and the reply is parsed from them and the sample. The
trained tokens are therefore the sampled ones: whatever the agent sends back next is only a new
observation, and when it re-renders to something other than the tokens sampled (an edited
history), the next turn simply does not merge with the last (two datums instead of one); no token
the model did not sample is ever trained as an action.

While training, the run's sampling settings apply (`temperature`, `max_tokens` per turn), `n`
must be 1 and `stop` is refused (a cut sample would train tokens the agent never saw); the reply
carries no logprobs."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kitchen.apps.serve.openai_chat import ChatRequest, ChatRequestError, finish, prepare, response
from kitchen.integrations.agents.server import AgentServer
from train_core.renderers.base import Renderer
from train_core.rl.types import Action, Env, EnvGroupBuilder, Metrics, StepResult
from train_core.types import ModelInput, StopCondition, TokensWithLogprobs


@dataclass(frozen=True)
class AgentEndpoint:
    """What an agent is given to reach the policy: an OpenAI-compatible base URL, its episode's
    API key, and the model name to ask for."""

    base_url: str
    api_key: str
    model: str


Agent = Callable[[AgentEndpoint, Any], Any]
"""`agent(endpoint, task) -> result`, a plain or async function."""
AgentGrade = float | tuple[float, Metrics]
AgentGrader = Callable[[Any, Any], AgentGrade | Awaitable[AgentGrade]]
"""`grader(task, result) -> reward`, or `(reward, metrics)` with metrics that explain it."""


class AgentError(RuntimeError):
    """The agent failed, or finished without making a single call."""


@dataclass
class _Call:
    request: ChatRequest
    prompt: ModelInput
    prefill: list[int]
    reply: asyncio.Future[dict[str, Any]]


@dataclass
class _Finished:
    result: Any = None
    error: BaseException | None = None


@dataclass
class AgentCall:
    """One served call, as the env recorded it: the prompt tokens and the tokens sampled."""

    prompt: list[int]
    sampled: list[int]


class AgentEnv(Env):
    def __init__(self, agent: Agent, task: Any, grader: AgentGrader, renderer: Renderer, model: str = "policy") -> None:
        self.agent = agent
        self.task = task
        self.grader = grader
        self.renderer = renderer
        self.model = model
        self.calls: list[AgentCall] = []
        self._events: asyncio.Queue[_Call | _Finished] = asyncio.Queue()
        self._pending: _Call | None = None
        self._server: AgentServer | None = None
        self._key = ""
        self._runner: asyncio.Task[None] | None = None

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        self._server = AgentServer.for_running_loop(self.model)
        self._key = await self._server.open(self)
        endpoint = AgentEndpoint(self._server.base_url, self._key, self.model)
        self._runner = asyncio.create_task(self._run(endpoint))
        event = await self._events.get()
        if isinstance(event, _Finished):
            await self.close()
            why = f": it raised {type(event.error).__name__}: {event.error}" if event.error else ""
            raise AgentError(f"the agent finished without a chat completion call{why}") from event.error
        self._pending = event
        return event.prompt, self.renderer.get_stop_sequences()

    async def answer(self, request: ChatRequest) -> dict[str, Any]:
        """Serve one of the agent's calls (the server's handler awaits this)."""
        if request.n != 1:
            raise ChatRequestError("n must be 1 while training: each call is one sampled action")
        if request.stop:
            raise ChatRequestError("stop is not supported while training: a cut sample would train unseen tokens")
        if self._pending is not None:
            raise ChatRequestError("one chat completion at a time per episode key")
        prepared = prepare(request, self.renderer, default_max_tokens=1)
        call = _Call(request, prepared.prompt, prepared.prefill, asyncio.get_running_loop().create_future())
        self._pending = call
        await self._events.put(call)
        return await call.reply

    async def step(self, action: Action) -> StepResult:
        call, self._pending = self._pending, None
        if call is None:
            raise AgentError("step() without a pending chat completion call")
        sampled = TokensWithLogprobs(list(action), None)
        completion = finish(call.prompt, sampled, self.renderer, [], self._decode, call.prefill)
        self.calls.append(AgentCall(call.prompt.to_ints(), list(action)))
        if not call.reply.done():
            call.reply.set_result(response(call.request, [completion], lambda token: self._decode([token])))
        _, parse_ok = self.renderer.parse_response([*call.prefill, *action])
        event = await self._events.get()
        stop = self.renderer.get_stop_sequences()
        if isinstance(event, _Call):
            self._pending = event
            return StepResult(0.0, False, event.prompt, stop, parse_ok=parse_ok)
        if event.error is not None:
            raise AgentError(f"the agent raised {type(event.error).__name__}: {event.error}") from event.error
        graded = self.grader(self.task, event.result)
        grade = await graded if inspect.isawaitable(graded) else graded
        reward, metrics = (grade[0], dict(grade[1])) if isinstance(grade, tuple) else (grade, {})
        metrics["agent/calls"] = float(len(self.calls))
        return StepResult(float(reward), True, ModelInput.empty(), stop, metrics, parse_ok)

    async def close(self) -> None:
        """End the episode: a call still waiting is refused, the agent stopped, the key closed."""
        if self._pending is not None and not self._pending.reply.done():
            self._pending.reply.set_exception(ChatRequestError("the episode is over"))
        if self._runner is not None and not self._runner.done():
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
        if self._server is not None:
            await self._server.close(self._key)
            self._server = None

    async def _run(self, endpoint: AgentEndpoint) -> None:
        try:
            if inspect.iscoroutinefunction(self.agent):
                result = await self.agent(endpoint, self.task)
            else:  # a plain function (the sync client blocks): in a worker thread
                result = await asyncio.to_thread(self.agent, endpoint, self.task)
                if inspect.isawaitable(result):  # a wrapper that returned a coroutine
                    result = await result
        except Exception as error:
            await self._events.put(_Finished(error=error))
            return
        await self._events.put(_Finished(result=result))

    def _decode(self, tokens: list[int]) -> str:
        return str(self.renderer.tokenizer.decode(tokens))


@dataclass(frozen=True)
class AgentGroupBuilder(EnvGroupBuilder):
    """`group_size` episodes of `agent` on one `task`."""

    agent: Agent
    task: Any
    grader: AgentGrader
    renderer: Renderer
    group_size: int
    tag: str = "agent"
    envs: list[AgentEnv] = field(default_factory=list, compare=False, repr=False)

    async def make_envs(self) -> list[AgentEnv]:
        fresh = [AgentEnv(self.agent, self.task, self.grader, self.renderer) for _ in range(self.group_size)]
        self.envs.extend(fresh)
        return fresh

    def logging_tags(self) -> list[str]:
        return [self.tag]

    async def cleanup(self) -> None:
        for env in self.envs:
            await env.close()
