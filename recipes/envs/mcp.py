"""The tools of any MCP server as an RL environment: `kitchen run env_rl env=mcp
env.server.command='[python, my_server.py]' env.tasks=tasks.jsonl`.

The run starts the server (stdio, or streamable HTTP with `env.server.url`) and the model sees its
tools, as `list_tools` declares them, in the renderer's native tool format; calls go through the
official MCP client (`kitchen.integrations.tools.mcp`). Each task is a `{"prompt", "answer"}`
line; the final reply's text after `Answer:` must equal the answer (SQuAD's normalisation), and a
reply without `Answer:` costs `format_coef`: reward = format_coef * (format - 1) + correct.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from kitchen import DataError
from kitchen.families.rl import EnvSettings, EnvSpec, RLSettings
from kitchen.integrations.tools import McpServerSettings, McpToolset, Toolbox, ToolUseEnv
from recipes.envs.search import normalize
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.task import RLTask
from train_core.rl.types import EnvGroupBuilder, Metrics, RLDataset


class McpSettings(EnvSettings):
    name: Literal["mcp"] = Field("mcp", description="tasks answered with an MCP server's tools")
    server: McpServerSettings = Field(default_factory=McpServerSettings, description="the MCP server the run starts")
    tasks: str = Field("", description='JSONL of {"prompt", "answer"}: the training tasks')
    eval_tasks: str | None = Field(None, description="held-out tasks, same format")
    max_turns: int = Field(4, ge=1, description="model turns per episode (tool calls plus the answer)")
    format_coef: float = Field(0.1, ge=0, description="what a final reply without 'Answer:' costs")


@dataclass(frozen=True)
class Task:
    prompt: str
    answer: str


def load_tasks(path: str) -> list[Task]:
    """The tasks of a JSONL file; a bad line is a DataError naming the file and line."""
    if not path:
        raise DataError('env.tasks: a JSONL of {"prompt", "answer"} is needed')
    tasks = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            tasks.append(Task(str(row["prompt"]), str(row["answer"])))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise DataError(f'{path} line {number}: a task is {{"prompt", "answer"}} ({exc})') from None
    if not tasks:
        raise DataError(f"{path}: no tasks")
    return tasks


def grade(task: Task, format_coef: float) -> Callable[[list[Message]], tuple[float, Metrics]]:
    def grader(messages: list[Message]) -> tuple[float, Metrics]:
        reply = messages[-1]["content"] if messages[-1]["role"] == "assistant" else ""
        _, marked, answer = reply.partition("Answer:")
        correct = float(bool(marked) and normalize(answer) == normalize(task.answer))
        return format_coef * (float(bool(marked)) - 1) + correct, {
            "mcp/correct": correct,
            "mcp/format": float(bool(marked)),
        }

    return grader


@dataclass(frozen=True)
class McpGroupBuilder(EnvGroupBuilder):
    task: Task
    renderer: Renderer
    toolbox: Toolbox
    settings: McpSettings
    group_size: int

    async def make_envs(self) -> list[ToolUseEnv]:
        ask = [Message(role="user", content=self.task.prompt)]
        grader = grade(self.task, self.settings.format_coef)
        return [
            ToolUseEnv(self.renderer, self.toolbox, ask, grader, self.settings.max_turns)
            for _ in range(self.group_size)
        ]

    def logging_tags(self) -> list[str]:
        return ["mcp"]


class Tasks(RLDataset):
    """Each step, `groups` tasks drawn from the file (a pure function of seed and step)."""

    def __init__(
        self, make: Callable[[Task], EnvGroupBuilder], tasks: Sequence[Task], groups: int, batches: int, seed: int
    ) -> None:
        self.make, self.tasks, self.groups, self.batches, self.seed = make, tasks, groups, batches, seed

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        rng = random.Random(f"mcp/{self.seed}/{index}")
        return [self.make(task) for task in rng.sample(list(self.tasks), min(self.groups, len(self.tasks)))]

    def __len__(self) -> int:
        return self.batches


def build_mcp_task(settings: McpSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    """Start the server (it runs until the process exits or the toolset is closed), list its tools."""
    tasks = load_tasks(settings.tasks)
    eval_tasks = load_tasks(settings.eval_tasks) if settings.eval_tasks else []
    toolbox = Toolbox(McpToolset.open(settings.server).tools)

    def make(task: Task) -> EnvGroupBuilder:
        return McpGroupBuilder(task, renderer, toolbox, settings, config.rl.group_size)

    return RLTask(
        train=Tasks(make, tasks, config.rl.groups_per_batch, config.rl.num_batches, config.seed),
        eval_builders=[make(task) for task in eval_tasks],
    )


def check_mcp(settings: McpSettings, roles: frozenset[str]) -> None:
    """The server settings and the task files, before anything starts."""
    settings.server.check()
    load_tasks(settings.tasks)
    if settings.eval_tasks:
        load_tasks(settings.eval_tasks)


ENV = EnvSpec("tasks answered with the tools of an MCP server the run starts", McpSettings, build_mcp_task, check_mcp)
