"""`verifiers` environments as a kitchen RL environment (`env: verifiers`).

The environment is loaded as verifiers loads it (`vf.load_environment(id, **load_args)`: the
installed module named by the id, its `load_environment()`); its dataset rows are the prompts and
its rubric the reward. Each episode is verifiers' own rollout (`env.rollout`, then
`rubric.score_rollout`), single-turn, multi-turn or with tools alike, made through its OpenAI
chat client against the rollouts' per-episode endpoint (`kitchen.integrations.agents`): every model call is a
turn sampled from the policy, so what is trained is exactly what was sampled, whatever the
environment does with the replies. The rubric's metrics are logged as `verifiers/NAME`.

A reply the environment cannot use (empty, unparseable) ends the episode as verifiers ends it,
scored by the rubric and counted in `verifiers/model_errors`; an error anywhere else (the
endpoint refused a request, the environment raised) stops the run with its message.

This is verifiers 0.3's API. verifiers 0.4 (the `hubs` extra's line) replaced it: no
`load_environment` or rubrics, but `verifiers.v1` tasksets played by harness programs that it
installs with uv and runs in a runtime, their model calls relayed by its own proxy. Running those
is a different integration, not yet written; until then a 0.4 install is refused by version.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, Literal

from pydantic import Field, field_validator

from kitchen.families.rl.envs import EnvSettings, EnvSpec
from kitchen.families.rl.settings import RLSettings
from kitchen.integrations.agents import AgentEndpoint, AgentGroupBuilder
from kitchen.integrations.agents.env import AgentError
from kitchen.integrations.hubs import require
from train_core.renderers.base import Renderer
from train_core.rl.task import RLTask
from train_core.rl.types import EnvGroupBuilder, Metrics, RLDataset

SUPPORTED = "verifiers>=0.3.1,<0.4"


def check_version(installed: str) -> None:
    """A ValueError naming `installed` when it is the 0.4 line or later, whose API this env does not
    run (a config error before the run, not an AttributeError inside it)."""
    found = re.match(r"(\d+)\.(\d+)", installed)
    if found is not None and (int(found[1]), int(found[2])) >= (0, 4):
        raise ValueError(
            f"env verifiers runs verifiers 0.3 environments (load_environment, rubrics); verifiers {installed} "
            f"is installed, whose verifiers.v1 tasksets and harnesses kitchen does not run yet: "
            f"pip install '{SUPPORTED}' (it pins mcp<2, so keep it apart from the mcp and hubs extras)"
        )


class VerifiersSettings(EnvSettings):
    name: Literal["verifiers"] = Field("verifiers", description="a verifiers environment")
    environment: str = Field(
        min_length=1,
        description="a verifiers environment id: the installed module (dashes as underscores, "
        "an 'owner/' prefix dropped) whose load_environment() builds it",
    )
    load_args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of its load_environment()")
    num_eval_examples: int = Field(
        0, ge=0, description="rows of its eval dataset (its dataset when it has none) scored every eval.every steps"
    )

    @field_validator("environment")
    @classmethod
    def _installed(cls, env_id: str) -> str:
        require("verifiers", "verifiers")
        check_version(version("verifiers"))
        module = env_id.replace("-", "_").split("/")[-1]  # as vf.load_environment names it
        if module not in sys.modules and importlib.util.find_spec(module) is None:
            raise ValueError(
                f"no verifiers environment {env_id!r}: module {module!r} is not installed "
                "(install the environment's package, or put its module on PYTHONPATH)"
            )
        return env_id


def rollout_agent(env: Any) -> Any:
    """The agent of one episode: verifiers' rollout of `row`, scored by its rubric."""
    import verifiers as vf
    from openai import AsyncOpenAI

    async def run(endpoint: AgentEndpoint, row: dict[str, Any]) -> Any:
        client = vf.OpenAIChatCompletionsClient(
            AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
        )
        try:
            state = await env.rollout(row, client, endpoint.model, {})
            await env.rubric.score_rollout(state)
            await env.rubric.cleanup(state)
        finally:
            await client.close()
        return state

    return run


def grade(row: dict[str, Any], state: Any) -> tuple[float, Metrics]:
    """The rubric's reward and metrics; an error that is not the model's stops the run."""
    import verifiers as vf

    error = state.get("error")
    model_error = isinstance(error, vf.InvalidModelResponseError | vf.OverlongPromptError)
    if error is not None and not model_error:
        cause = error.__cause__ or error
        raise AgentError(f"the verifiers rollout failed: {type(cause).__name__}: {cause}") from error
    metrics = {
        f"verifiers/{name}": float(value)
        for name, value in (state.get("metrics") or {}).items()
        if isinstance(value, int | float)
    }
    metrics["verifiers/model_errors"] = float(model_error)
    return float(state.get("reward") or 0.0), metrics


@dataclass(frozen=True)
class VerifiersDataset(RLDataset):
    """Batch i: `groups_per_batch` consecutive rows (wrapping around), `group_size` episodes each."""

    agent: Any
    rows: list[dict[str, Any]]
    renderer: Renderer
    tag: str
    num_batches: int
    groups_per_batch: int
    group_size: int

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        start = index * self.groups_per_batch
        return [
            AgentGroupBuilder(
                self.agent, self.rows[(start + g) % len(self.rows)], grade, self.renderer, self.group_size, self.tag
            )
            for g in range(self.groups_per_batch)
        ]

    def __len__(self) -> int:
        return self.num_batches


def build_verifiers_task(settings: VerifiersSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    import verifiers as vf

    rl = config.rl
    env = vf.load_environment(settings.environment, **settings.load_args)
    try:
        dataset = env.get_dataset(seed=config.seed)
    except ValueError as exc:
        raise ValueError(f"verifiers environment {settings.environment!r} has no training dataset: {exc}") from None
    rows = [dict(row) for row in dataset]
    if not rows:
        raise ValueError(f"verifiers environment {settings.environment!r} has an empty dataset")
    agent = rollout_agent(env)
    tag = settings.environment.split("/")[-1]
    evals = env.get_eval_dataset(n=settings.num_eval_examples) if settings.num_eval_examples else []
    return RLTask(
        train=VerifiersDataset(agent, rows, renderer, tag, rl.num_batches, rl.groups_per_batch, rl.group_size),
        eval_builders=[AgentGroupBuilder(agent, dict(row), grade, renderer, rl.group_size, tag) for row in evals],
    )


ENV = EnvSpec(
    "a verifiers 0.3 environment (its dataset as prompts, its rubric as the reward); the hubs extra's 0.4 is refused",
    VerifiersSettings,
    build_verifiers_task,
)
