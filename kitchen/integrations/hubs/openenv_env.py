"""OpenEnv environments as a kitchen RL environment (`env: openenv`).

An OpenEnv environment is a gym-style server class (`reset(seed) -> Observation`,
`step(Action) -> Observation`, the reward and `done` on the observation). Each episode resets one
instance with its group's seed (a group's episodes share it, so they are compared on the same
start) and plays it as a conversation: each observation is a user message, the model's reply
fills the action's text field, the environment's reward for that step is the step's reward,
until it says `done` or `max_turns` runs out.

`mode: in_process` builds the environment in the rollouts' process; `mode: server` serves it as
OpenEnv serves it (`create_app`, HTTP and WebSocket, on 127.0.0.1 while episodes run) and plays
each episode through OpenEnv's own client (`GenericEnvClient`), one WebSocket session each.

A reply that is not a valid action (the action model rejects it) is answered with the reason and
counted in `openenv/invalid_actions`; it uses a turn.
"""

from __future__ import annotations

import asyncio
import json
import random
import typing
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from kitchen.apps.serve.loopback import LoopbackServer
from kitchen.engine.callables import import_callable
from kitchen.families.rl.envs import EnvSettings, EnvSpec
from kitchen.families.rl.settings import RLLoopSettings, RLSettings
from kitchen.integrations.hubs import require
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.task import RLTask
from train_core.rl.types import Action, Env, EnvGroupBuilder, Metrics, RLDataset, StepResult
from train_core.types import ModelInput, StopCondition

OBSERVATION_META = ("done", "reward", "metadata")


class OpenEnvSettings(EnvSettings):
    name: Literal["openenv"] = Field("openenv", description="an OpenEnv environment")
    environment: str = Field(
        min_length=1, description="the OpenEnv Environment class (or a factory of one) as 'module:Class'"
    )
    env_kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of its constructor")
    action: str | None = Field(
        None, description="its Action model as 'module:Class' (default: the annotation of its step's action)"
    )
    observation: str | None = Field(
        None, description="its Observation model as 'module:Class' (default: the annotation of its step's return)"
    )
    action_field: str | None = Field(
        None, description="the action field the model's reply fills (default: the action's one required field)"
    )
    observation_field: str | None = Field(
        None, description="the observation field shown to the model (default: all but done/reward/metadata)"
    )
    mode: Literal["in_process", "server"] = Field(
        "in_process", description="in_process, or server: OpenEnv's own server on 127.0.0.1 and its client"
    )
    system_prompt: str | None = Field(None, description="a system message before the first observation")
    max_turns: int = Field(8, ge=1, description="model turns per episode")
    num_eval_episodes: int = Field(0, ge=0, description="episodes (seeds 0..n-1) scored every eval.every steps")

    @field_validator("environment")
    @classmethod
    def _installed(cls, spec: str) -> str:
        require("openenv", "openenv")
        return spec

    @model_validator(mode="after")
    def _resolves(self) -> OpenEnvSettings:
        OpenEnvModels.resolve(self)  # its classes and fields, before any work
        return self


@dataclass(frozen=True)
class OpenEnvModels:
    """The environment factory and its typed action and observation, as the settings resolve them."""

    factory: Callable[[], Any]
    env_class: Any
    action: type[BaseModel]
    observation: type[BaseModel]
    action_field: str
    observation_field: str | None

    @classmethod
    def resolve(cls, settings: OpenEnvSettings) -> OpenEnvModels:
        from openenv.core.env_server.interfaces import Environment

        target = import_callable(settings.environment, "my_env.server:MyEnvironment")
        env_class: Any = target if isinstance(target, type) else None
        if env_class is not None and not issubclass(env_class, Environment):
            raise ValueError(f"{settings.environment!r} is not an openenv Environment subclass")
        hints = typing.get_type_hints(env_class.step) if env_class is not None else {}
        action = _model(settings.action, hints.get("action"), "action", settings.environment)
        observation = _model(settings.observation, hints.get("return"), "observation", settings.environment)
        required = [n for n, f in action.model_fields.items() if f.is_required() and n != "metadata"]
        action_field = settings.action_field or (required[0] if len(required) == 1 else "")
        if action_field not in action.model_fields:
            raise ValueError(
                f"action_field: {action.__name__} fields are {sorted(action.model_fields)}; "
                "name the one the model's reply fills"
            )
        if settings.observation_field and settings.observation_field not in observation.model_fields:
            raise ValueError(f"observation_field: {observation.__name__} has no field {settings.observation_field!r}")
        if settings.mode == "server" and not getattr(env_class, "SUPPORTS_CONCURRENT_SESSIONS", False):
            raise ValueError(
                f"mode: server runs a batch's episodes at once, one session each, but {settings.environment!r} "
                "does not set SUPPORTS_CONCURRENT_SESSIONS = True; use mode: in_process"
            )
        kwargs = dict(settings.env_kwargs)
        return cls(lambda: target(**kwargs), env_class, action, observation, action_field, settings.observation_field)

    def to_action(self, text: str) -> BaseModel:
        return self.action.model_validate({self.action_field: text})

    def to_text(self, observation: dict[str, Any]) -> str:
        if self.observation_field is not None:
            return _as_text(observation.get(self.observation_field))
        shown = {k: v for k, v in observation.items() if k not in OBSERVATION_META}
        if len(shown) == 1:
            return _as_text(next(iter(shown.values())))
        return "\n".join(f"{name}: {_as_text(value)}" for name, value in shown.items())


def _model(spec: str | None, hint: Any, what: str, environment: str) -> type[BaseModel]:
    model = import_callable(spec, f"my_env.models:My{what.title()}") if spec else hint
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ValueError(
            f"{what}: {environment!r} does not annotate its step's {what} with a pydantic model; "
            f"name it as 'module:Class'"
        )
    return model


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


Payload = dict[str, Any]
"""A step's result as OpenEnv serialises it: {"observation": {...}, "reward": r, "done": d}."""


class Session(Protocol):
    async def reset(self, seed: int) -> Payload: ...
    async def step(self, action: BaseModel) -> Payload: ...
    async def close(self) -> None: ...


class InProcessSession:
    def __init__(self, models: OpenEnvModels) -> None:
        self.env = models.factory()

    async def reset(self, seed: int) -> Payload:
        from openenv.core.env_server.serialization import serialize_observation

        return serialize_observation(await self.env.reset_async(seed=seed))

    async def step(self, action: BaseModel) -> Payload:
        from openenv.core.env_server.serialization import serialize_observation

        return serialize_observation(await self.env.step_async(action))

    async def close(self) -> None:
        self.env.close()


class ServerSession:
    """One WebSocket session of OpenEnv's client with the environment's server."""

    def __init__(self, server: LoopbackServer) -> None:
        from openenv.core.generic_client import GenericEnvClient

        self.server = server
        self.client = GenericEnvClient(base_url=server.base_url)

    async def reset(self, seed: int) -> Payload:
        return _payload(await self.client.reset(seed=seed))

    async def step(self, action: BaseModel) -> Payload:
        return _payload(await self.client.step(action.model_dump()))

    async def close(self) -> None:
        try:
            await self.client.close()
        finally:
            await self.server.release()


def _payload(result: Any) -> Payload:
    return {"observation": result.observation, "reward": result.reward, "done": result.done}


@dataclass
class OpenEnvSource:
    """Opens sessions: in-process instances, or sessions of the server it runs per event loop."""

    models: OpenEnvModels
    mode: str
    max_sessions: int
    _servers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopbackServer] = field(
        default_factory=weakref.WeakKeyDictionary
    )

    async def open(self) -> Session:
        if self.mode == "in_process":
            return InProcessSession(self.models)
        loop = asyncio.get_running_loop()
        if loop not in self._servers:
            # critical: OpenEnv 0.3's WebSocket endpoint raises when it closes a session its client
            # already closed, which uvicorn logs as an ASGI error per episode; the server's real
            # errors reach the client as error messages, and the client raises them
            self._servers[loop] = LoopbackServer(self._app, log_level="critical")
        server = self._servers[loop]
        await server.hold()
        return ServerSession(server)

    def _app(self) -> Any:
        from openenv.core.env_server.http_server import create_app

        return create_app(
            self.models.factory, self.models.action, self.models.observation, max_concurrent_envs=self.max_sessions
        )


class OpenEnvEpisode(Env):
    def __init__(self, source: OpenEnvSource, seed: int, settings: OpenEnvSettings, renderer: Renderer) -> None:
        self.source = source
        self.seed = seed
        self.settings = settings
        self.renderer = renderer
        self.messages: list[Message] = []
        self.turns = 0
        self.invalid = 0
        self.total = 0.0
        self.session: Session | None = None

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        self.session = await self.source.open()
        payload = await self.session.reset(self.seed)
        if self.settings.system_prompt:
            self.messages.append(Message(role="system", content=self.settings.system_prompt))
        self.messages.append(Message(role="user", content=self.source.models.to_text(payload["observation"])))
        return self.renderer.build_generation_prompt(self.messages), self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        assert self.session is not None, "step() before initial_observation()"
        message, parsed = self.renderer.parse_response(action)
        self.turns += 1
        self.messages.append(Message(role="assistant", content=message["content"]))
        try:
            typed = self.source.models.to_action(message["content"])
        except ValidationError as exc:
            self.invalid += 1
            reply, reward, done = f"Error: not a valid action: {exc.errors()[0]['msg']}", 0.0, False
        else:
            payload = await self.session.step(typed)
            reply = self.source.models.to_text(payload["observation"])
            reward, done = float(payload["reward"] or 0.0), bool(payload["done"])
        self.total += reward
        stop = self.renderer.get_stop_sequences()
        if done or self.turns >= self.settings.max_turns:
            await self.close()
            metrics: Metrics = {
                "openenv/turns": float(self.turns),
                "openenv/invalid_actions": float(self.invalid),
                "openenv/done": float(done),
                "openenv/return": self.total,
            }
            return StepResult(reward, True, ModelInput.empty(), stop, metrics, parsed)
        self.messages.append(Message(role="user", content=reply))
        return StepResult(reward, False, self.renderer.build_generation_prompt(self.messages), stop, {}, parsed)

    async def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            await session.close()


@dataclass(frozen=True)
class OpenEnvGroupBuilder(EnvGroupBuilder):
    """`group_size` episodes from one seed."""

    source: OpenEnvSource
    seed: int
    settings: OpenEnvSettings
    renderer: Renderer
    group_size: int
    envs: list[OpenEnvEpisode] = field(default_factory=list, compare=False, repr=False)

    async def make_envs(self) -> list[OpenEnvEpisode]:
        fresh = [OpenEnvEpisode(self.source, self.seed, self.settings, self.renderer) for _ in range(self.group_size)]
        self.envs.extend(fresh)
        return fresh

    def logging_tags(self) -> list[str]:
        return ["openenv"]

    async def cleanup(self) -> None:
        for env in self.envs:
            await env.close()


@dataclass(frozen=True)
class OpenEnvDataset(RLDataset):
    source: OpenEnvSource
    settings: OpenEnvSettings
    renderer: Renderer
    rl: RLLoopSettings
    seed: int

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        rng = random.Random(f"openenv/{self.seed}/{index}")
        return [
            OpenEnvGroupBuilder(self.source, rng.randrange(2**31), self.settings, self.renderer, self.rl.group_size)
            for _ in range(self.rl.groups_per_batch)
        ]

    def __len__(self) -> int:
        return self.rl.num_batches


def build_openenv_task(settings: OpenEnvSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    models = OpenEnvModels.resolve(settings)
    rl = config.rl
    episodes = rl.group_size * (rl.groups_per_batch + settings.num_eval_episodes)  # at most at once
    source = OpenEnvSource(models, settings.mode, episodes)
    return RLTask(
        train=OpenEnvDataset(source, settings, renderer, rl, config.seed),
        eval_builders=[
            OpenEnvGroupBuilder(source, seed, settings, renderer, rl.group_size)
            for seed in range(settings.num_eval_episodes)
        ],
    )


ENV = EnvSpec(
    "an OpenEnv environment (in-process or behind its own server on 127.0.0.1); needs kitchen[hubs]",
    OpenEnvSettings,
    build_openenv_task,
)
