"""An agent written against the official `openai` client, trained by RL: its calls go over HTTP
to the rollouts' server on 127.0.0.1, and every call's sampled tokens are exactly what is trained.

On noop the fake model's replies are scripted (a tool call, then the answer after the tool's
result), so the episode's path is known; on local (slow) the tiny model's own samples are used."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageFunctionToolCall
from pydantic import Field

from kitchen import CheckpointSettings, HeldOutEval, SamplingSettings
from kitchen.engine.config.loading import defaults, load_config
from kitchen.engine.context import Context
from kitchen.engine.hooks import Hooks
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import Recipe
from kitchen.engine.runs.metrics import read_metrics
from kitchen.engine.stage import Stage
from kitchen.families.rl import RLLoopSettings, RLSettings, rl_workflow_for
from kitchen.integrations.agents import AgentEndpoint, AgentGroupBuilder
from kitchen.testing import run_on_noop
from train_core.renderers.base import Renderer
from train_core.rl.task import RLTask
from train_core.rl.types import EnvGroupBuilder, RLDataset

CAPITALS = {"France": "Paris", "Peru": "Lima"}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "The capital of a country.",
            "parameters": {"type": "object", "properties": {"country": {"type": "string"}}, "required": ["country"]},
        },
    }
]


def function_calls(message: ChatCompletionMessage) -> list[ChatCompletionMessageFunctionToolCall]:
    return [c for c in message.tool_calls or [] if isinstance(c, ChatCompletionMessageFunctionToolCall)]


def run_tools(messages: list[Any], calls: list[ChatCompletionMessageFunctionToolCall]) -> None:
    for call in calls:
        country = json.loads(call.function.arguments)["country"]
        messages.append({"role": "tool", "tool_call_id": call.id, "content": CAPITALS.get(country, "?")})


async def assembled(chunks: Any) -> ChatCompletionMessage:
    """A streamed reply's message: its content and tool call deltas joined, as a client joins them."""
    content = ""
    calls: dict[int, dict[str, Any]] = {}
    async for chunk in chunks:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                empty = {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                call = calls.setdefault(delta.index, empty)
                call["id"] += delta.id or ""
                call["function"]["name"] += delta.function.name or ""
                call["function"]["arguments"] += delta.function.arguments or ""
    return ChatCompletionMessage.model_validate(
        {"role": "assistant", "content": content or None, "tool_calls": [calls[i] for i in sorted(calls)] or None}
    )


async def capital_agent(endpoint: AgentEndpoint, country: str, first_choice: Any = "auto", stream: bool = False) -> str:
    """Asks (with `first_choice` as the first call's tool_choice), runs the lookup tool for every
    call the model makes, asks again; at most 3 calls. With `stream`, each reply is read as the
    SDK reads a stream (server-sent chunks, tool call deltas included)."""
    client = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
    messages: list[Any] = [{"role": "user", "content": f"What is the capital of {country}?"}]
    for turn in range(3):
        choice: Any = first_choice if turn == 0 else "auto"
        if stream:
            chunks = await client.chat.completions.create(
                model=endpoint.model, messages=messages, tools=TOOLS, tool_choice=choice, stream=True
            )
            message = await assembled(chunks)
        else:
            reply = await client.chat.completions.create(
                model=endpoint.model, messages=messages, tools=TOOLS, tool_choice=choice
            )
            message = reply.choices[0].message
        if not (calls := function_calls(message)):
            return message.content or ""
        messages.append(message.model_dump(include={"role", "content", "tool_calls"}))
        run_tools(messages, calls)
    return ""


def edited_history_agent(endpoint: AgentEndpoint, country: str) -> str:
    """A plain function with the sync client (run in a worker thread) that edits its history."""
    client = openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
    messages: list[Any] = [{"role": "user", "content": f"What is the capital of {country}?"}]
    for _ in range(3):
        reply = client.chat.completions.create(model=endpoint.model, messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        if not (calls := function_calls(message)):
            return message.content or ""
        edited = [c.model_dump(include={"id", "type", "function"}) for c in calls]
        messages.append({"role": "assistant", "content": "I will look it up.", "tool_calls": edited})
        run_tools(messages, calls)
    return ""


def grade(country: str, answer: str) -> float:
    return float(CAPITALS[country] in answer)


@defaults(
    sampling=SamplingSettings(max_tokens=48),
    rl=RLLoopSettings(group_size=2, groups_per_batch=2, num_batches=2),
    eval=HeldOutEval(every=0),
    checkpoint=CheckpointSettings(save_every=0),
)
class AgentConfig(RLSettings):
    edit_history: bool = Field(False, description="the agent rewrites its own earlier replies")
    first_tool_choice: str = Field("auto", description="the first call's tool_choice: auto, required or a tool name")
    stream: bool = Field(False, description="the agent reads its replies as streams")


class Countries(RLDataset):
    def __init__(self, config: AgentConfig, renderer: Renderer) -> None:
        self.config, self.renderer = config, renderer

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        choice: Any = self.config.first_tool_choice
        if choice not in ("auto", "required", "none"):
            choice = {"type": "function", "function": {"name": choice}}
        agent = (
            edited_history_agent
            if self.config.edit_history
            else functools.partial(capital_agent, first_choice=choice, stream=self.config.stream)
        )
        countries = sorted(CAPITALS)
        return [
            AgentGroupBuilder(agent, countries[(index + g) % 2], grade, self.renderer, self.config.rl.group_size)
            for g in range(self.config.rl.groups_per_batch)
        ]

    def __len__(self) -> int:
        return self.config.rl.num_batches


RECIPE = Recipe(
    "capital_agent", "an openai-client agent", AgentConfig, rl_workflow_for(lambda c, r: RLTask(Countries(c, r)))
)


def scripted_model(prompt: str) -> str:
    """The fake model: a lookup call for the question, then the tool's answer as its reply. When
    the prompt already opens the call (a forced tool_choice), the rest of it."""
    if "<tool_response>" in prompt:
        return prompt.split("<tool_response>\n")[-1].split("\n</tool_response>")[0]
    country = next(c for c in CAPITALS if f"capital of {c}" in prompt)
    call = f'<tool_call>\n{{"name": "lookup", "arguments": {{"country": "{country}"}}}}\n</tool_call>'
    opened = next((k for k in range(len(call), 0, -1) if prompt.endswith(call[:k])), 0)
    return call[opened:]


class Captured(Hooks):
    """Each step's sampled groups (with their builders, which hold the envs) and trained datums."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []

    def after_stage(self, ctx: Context, stage: Stage, seconds: float) -> None:
        if stage.name == "do_rollouts":
            self.steps.append({"groups": ctx.state["sampled_groups"]})
        if stage.name == "assemble_data":
            self.steps[-1]["data"] = ctx.state["rl_data"]


def trained_action_tokens(datum: Any) -> list[int]:
    targets = datum.loss_fn_inputs["target_tokens"].to_torch().tolist()
    mask = datum.loss_fn_inputs["mask"].to_torch().tolist()
    return [int(t) for t, m in zip(targets, mask, strict=True) if m > 0]


def check_trained_equals_sampled(captured: Captured, datums_per_episode: int | None) -> int:
    """For every episode: the env's served calls are the trajectory's turns, and the trained
    action tokens are exactly the sampled ones, call by call. Returns the episodes seen."""
    episodes = 0
    for step in captured.steps:
        expected: list[list[int]] = []
        for group in step["groups"]:
            envs = group.builder.envs
            for env, traj in zip(envs, group.trajectories.trajectories_G, strict=True):
                assert [c.sampled for c in env.calls] == [t.ac.tokens for t in traj.transitions]
                assert [c.prompt for c in env.calls] == [t.ob.to_ints() for t in traj.transitions]
                expected += [[tok for c in env.calls for tok in c.sampled]]
                episodes += 1
        trained = [trained_action_tokens(d) for d in step["data"]]
        if datums_per_episode == 1:
            assert trained == expected
        else:
            assert [t for d in trained for t in d] == [t for e in expected for t in e]
    return episodes


def test_an_openai_client_agent_trains_on_exactly_its_sampled_tokens(tmp_path: Path) -> None:
    captured = Captured()
    result = run_on_noop(
        RECIPE, "renderer=qwen3_instruct", log_path=tmp_path / "run", replies=scripted_model, hooks=[captured]
    )
    assert result.column("env/all/reward/total") == [1.0, 1.0]
    assert result.column("env/all/agent/calls") == [2.0, 2.0]
    assert check_trained_equals_sampled(captured, datums_per_episode=1) == 8  # each episode merged into one datum


def test_a_streaming_agent_gets_the_same_replies_as_server_sent_events(tmp_path: Path) -> None:
    """`stream=true` (as verifiers 0.4's chat program asks): the tool call and the answer arrive as
    chunks the SDK assembles, and what is trained is still exactly what was sampled."""
    captured = Captured()
    result = run_on_noop(
        RECIPE,
        "renderer=qwen3_instruct",
        "stream=true",
        log_path=tmp_path / "run",
        replies=scripted_model,
        hooks=[captured],
    )
    assert result.column("env/all/reward/total") == [1.0, 1.0]
    assert result.column("env/all/agent/calls") == [2.0, 2.0]
    assert check_trained_equals_sampled(captured, datums_per_episode=1) == 8


def test_an_edited_history_is_a_new_observation_never_trained(tmp_path: Path) -> None:
    """The agent rewrites the content of the model's tool-call reply before sending it back: the
    next prompt no longer extends the sampled tokens, so each call trains as its own datum, and
    the rewritten text appears in no action."""
    captured = Captured()
    result = run_on_noop(
        RECIPE, "renderer=qwen3_instruct", "edit_history=true", log_path=tmp_path / "run",
        replies=scripted_model, hooks=[captured],
    )  # fmt: skip
    assert result.column("env/all/reward/total") == [1.0, 1.0]
    check_trained_equals_sampled(captured, datums_per_episode=None)
    data = captured.steps[0]["data"]
    assert len(data) == 2 * 4  # two calls, two datums, per episode
    step = captured.steps[0]
    tokenizer_decode = step["groups"][0].builder.renderer.tokenizer.decode
    assert all("I will look it up." not in tokenizer_decode(trained_action_tokens(d)) for d in data)


@pytest.mark.parametrize(("choice", "prefill"), [("required", "<tool_call>\n"), ("lookup", '"arguments": ')])
def test_a_forced_tool_choice_trains_only_the_sampled_tokens(tmp_path: Path, choice: str, prefill: str) -> None:
    """The first call forces a tool call (`required`, or the `lookup` function by name): the
    renderer's tool-call opener ends that call's prompt, the model samples only the rest, the
    agent still gets the parsed call, and the trained tokens are exactly the sampled ones."""
    captured = Captured()
    result = run_on_noop(
        RECIPE, "renderer=qwen3_instruct", f"first_tool_choice={choice}", log_path=tmp_path / "run",
        replies=scripted_model, hooks=[captured],
    )  # fmt: skip
    assert result.column("env/all/reward/total") == [1.0, 1.0]  # the call was parsed from prefill + sample
    assert check_trained_equals_sampled(captured, datums_per_episode=None) == 8
    decode = captured.steps[0]["groups"][0].builder.renderer.tokenizer.decode
    for step in captured.steps:
        for group in step["groups"]:
            for env in group.builder.envs:
                first = env.calls[0]
                assert decode(first.prompt).endswith(prefill)
                assert decode(first.sampled).startswith('{"country": ' if choice == "lookup" else '{"name": "lookup"')
        assert all("<tool_call>" not in decode(trained_action_tokens(d)) for d in step["data"])


def test_an_agent_with_a_renderer_without_tools_is_refused_with_a_400(tmp_path: Path) -> None:
    """role_colon cannot declare tools: the agent's call gets a 400, the agent raises, the
    rollout fails with the reason."""
    with pytest.raises(Exception, match="no native tool format"):
        run_on_noop(RECIPE, "renderer=role_colon", log_path=tmp_path / "run", replies=scripted_model)


@pytest.mark.slow
def test_on_the_local_backend_the_trained_tokens_are_the_sampled_ones(tmp_path: Path) -> None:
    """The tiny model's own samples (random-init: mostly not tool calls, so often one call an
    episode), two RL steps on the local backend."""
    captured = Captured()
    args = [
        "backend=local",
        "model_name=tiny",
        "renderer=qwen3_instruct",
        "sampling.max_tokens=16",
        f"log_path={tmp_path}",
    ]
    config = load_config(AgentConfig, None, args)
    metrics = read_metrics(run_recipe(RECIPE, config, hooks=[captured], progress=False).metrics)
    assert [row["step"] for row in metrics if "env/all/reward/total" in row] == [0, 1]
    assert check_trained_equals_sampled(captured, datums_per_episode=None) == 8
