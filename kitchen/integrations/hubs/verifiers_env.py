"""`verifiers` 0.4 tasksets as a kitchen RL environment (`env: verifiers`).

verifiers 0.4's API is `verifiers.v1`: a taskset (an installed package, by id) yields tasks, and a
harness program plays each one as an episode, its model calls relayed by verifiers' own
interception server; the task's `@vf.reward`/`@vf.metric` methods score the finished trace. Here
each kitchen episode is one verifiers episode of the `null` harness (verifiers' chat program: the
task's prompt, then the model's replies and the calls of the task's MCP tools, if any) run in the
`subprocess` runtime on this machine (no container, no tunnel). The relay's upstream is the
rollouts' per-episode endpoint (`kitchen.integrations.agents`), its key read from an environment
variable named for that episode alone: every model call is a turn sampled from the policy, so what
is trained is exactly what was sampled. The trace's rewards and metrics are logged as
`verifiers/NAME`.

verifiers installs the harness program with uv (its packages from PyPI, on first use).
`package_index` names a local PEP 503 index to install them from instead (what an offline
machine needs; scripts/setup_hubs.sh builds one). An episode that fails (the program, the relay,
the task's scoring) stops the run with verifiers' error.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from kitchen.families.rl.envs import EnvSettings, EnvSpec
from kitchen.families.rl.settings import RLSettings
from kitchen.integrations.agents import AgentEndpoint, AgentGroupBuilder
from kitchen.integrations.agents.env import AgentError
from kitchen.integrations.hubs import require
from train_core.renderers.base import Renderer
from train_core.rl.task import RLTask
from train_core.rl.types import EnvGroupBuilder, Metrics, RLDataset

SUPPORTED = "verifiers>=0.4,<0.5"


def check_version(installed: str) -> None:
    """A ValueError naming `installed` unless it is the 0.4 line, whose `verifiers.v1` API this env
    runs (a config error before the run, not an AttributeError inside it)."""
    found = re.match(r"(\d+)\.(\d+)", installed)
    if found is None or (int(found[1]), int(found[2])) != (0, 4):
        raise ValueError(
            f"env verifiers runs verifiers 0.4 tasksets (verifiers.v1); verifiers {installed} is installed: "
            f"pip install '{SUPPORTED}' (the hubs extra)"
        )


class VerifiersSettings(EnvSettings):
    name: Literal["verifiers"] = Field("verifiers", description="a verifiers 0.4 taskset")
    taskset: str = Field(
        min_length=1,
        description="a verifiers taskset id: the installed package (dashes as underscores, an 'owner/' "
        "prefix dropped) exporting its Taskset subclass",
    )
    taskset_args: dict[str, Any] = Field(default_factory=dict, description="fields of the taskset's config")
    package_index: Path | None = Field(
        None,
        description="a local PEP 503 package index (a folder) uv installs the harness program's packages "
        "from instead of PyPI (scripts/setup_hubs.sh builds one in .venv/verifiers-index)",
    )
    num_eval_examples: int = Field(0, ge=0, description="tasks (the taskset's first) scored every eval.every steps")

    @field_validator("taskset")
    @classmethod
    def _installed(cls, taskset_id: str) -> str:
        require("verifiers", "verifiers")
        check_version(version("verifiers"))
        if shutil.which("uv", path=uv_environment(None).get("PATH")) is None:
            raise ValueError("env verifiers runs verifiers' chat program with uv, not installed: pip install uv")
        import verifiers.v1 as vf

        try:
            vf.import_taskset(taskset_id)
        except ModuleNotFoundError as exc:
            raise ValueError(f"no verifiers taskset {taskset_id!r}: {exc}") from None
        return taskset_id

    @model_validator(mode="after")
    def _taskset_args(self) -> VerifiersSettings:
        import verifiers.v1 as vf

        try:
            vf.taskset_config_type(self.taskset).model_validate({**self.taskset_args, "id": self.taskset})
        except ValidationError as exc:
            why = "; ".join(f"{'.'.join(map(str, error['loc']))}: {error['msg']}" for error in exc.errors())
            raise ValueError(f"taskset_args do not fit taskset {self.taskset!r}'s config: {why}") from None
        return self

    @field_validator("package_index")
    @classmethod
    def _index(cls, index: Path | None) -> Path | None:
        if index is not None and not index.is_dir():
            raise ValueError(f"package_index {str(index)!r} is not a folder (run scripts/setup_hubs.sh)")
        return index


def uv_environment(index: Path | None) -> dict[str, str]:
    """The harness program's variables for uv: the uv installed beside this Python first on PATH
    and, with a local `index`, packages from there only, on this Python (no download at all)."""
    env: dict[str, str] = {}
    here = Path(sys.executable).parent
    if (here / "uv").exists():
        env["PATH"] = f"{here}{os.pathsep}{os.environ.get('PATH', '')}"
    if index is not None:
        env |= {
            "UV_DEFAULT_INDEX": index.resolve().as_uri(),
            "UV_PYTHON": sys.executable,
            "UV_PYTHON_DOWNLOADS": "never",
        }
    return env


def build_env(settings: VerifiersSettings) -> Any:
    """The verifiers env the taskset pairs with (its package's exported Env, else the single-agent
    one), each of its agents on the null harness (unless the env pins one) in a subprocess."""
    import verifiers.v1 as vf
    from verifiers.v1.harnesses.null import NullHarnessConfig

    uv = uv_environment(settings.package_index)
    config = vf.resolve_env_config({"taskset": {**settings.taskset_args, "id": settings.taskset}})
    for role in type(config).model_fields:
        agent = getattr(config, role)
        if isinstance(agent, vf.AgentConfig):
            harness = agent.harness or NullHarnessConfig(id="null")
            harness = harness.model_copy(update={"env": {**uv, **harness.env}})
            setattr(config, role, agent.model_copy(update={"harness": harness, "runtime": vf.SubprocessConfig()}))
    return vf.load_environment(config)


def episode_agent(env: Any) -> Any:
    """The agent of one kitchen episode: one verifiers episode of `task`, its model the endpoint; an
    episode verifiers marks failed (or one of several agents) raises AgentError with its error."""
    import verifiers.v1 as vf

    async def run(endpoint: AgentEndpoint, task: Any) -> Any:
        key_var = f"KITCHEN_VERIFIERS_API_KEY_{secrets.token_hex(8)}"  # this episode's alone
        os.environ[key_var] = endpoint.api_key
        try:
            client = vf.EvalClientConfig(base_url=endpoint.base_url, api_key_var=key_var)
            async with env.serving():
                episode = await env.run_episode(task, vf.ModelContext(model=endpoint.model, client=client))
        finally:
            del os.environ[key_var]
        errors = [*episode.errors, *(error for trace in episode.traces for error in trace.errors)]
        if errors:
            raise AgentError(f"the verifiers episode failed: {errors[-1].type}: {errors[-1].message}")
        if len(episode.traces) != 1:
            raise AgentError(f"the verifiers episode ran {len(episode.traces)} agents; kitchen trains episodes of one")
        return episode

    return run


def grade(task: Any, episode: Any) -> tuple[float, Metrics]:
    """The trace's reward, its rewards and metrics by name."""
    (trace,) = episode.traces
    values = {**trace.metrics, **{name: reward.value if reward else None for name, reward in trace.rewards.items()}}
    metrics = {f"verifiers/{name}": float(value) for name, value in values.items() if value is not None}
    metrics["verifiers/num_turns"] = float(trace.num_turns)
    return float(trace.reward), metrics


@dataclass(frozen=True)
class VerifiersDataset(RLDataset):
    """Batch i: `groups_per_batch` consecutive tasks (wrapping around), `group_size` episodes each."""

    agent: Any
    tasks: list[Any]
    renderer: Renderer
    tag: str
    num_batches: int
    groups_per_batch: int
    group_size: int

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        start = index * self.groups_per_batch
        return [
            AgentGroupBuilder(
                self.agent, self.tasks[(start + g) % len(self.tasks)], grade, self.renderer, self.group_size, self.tag
            )
            for g in range(self.groups_per_batch)
        ]

    def __len__(self) -> int:
        return self.num_batches


def build_verifiers_task(settings: VerifiersSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    rl = config.rl
    env = build_env(settings)
    tasks = list(env.taskset.take(rl.num_batches * rl.groups_per_batch) if env.taskset.INFINITE else env.taskset)
    if not tasks:
        raise ValueError(f"verifiers taskset {settings.taskset!r} has no tasks")
    agent = episode_agent(env)
    tag = settings.taskset.split("/")[-1]
    return RLTask(
        train=VerifiersDataset(agent, tasks, renderer, tag, rl.num_batches, rl.groups_per_batch, rl.group_size),
        eval_builders=[
            AgentGroupBuilder(agent, task, grade, renderer, rl.group_size, tag)
            for task in tasks[: settings.num_eval_examples]
        ],
    )


ENV = EnvSpec(
    "a verifiers 0.4 taskset (its tasks as prompts, played by verifiers' chat program; its rewards)",
    VerifiersSettings,
    build_verifiers_task,
)
