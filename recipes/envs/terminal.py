"""Terminal tasks as a multi-turn RL env: the policy works in a shell in kitchen's sandbox.

Each turn the reply holds one shell command in a ```bash block; the observation is its exit
code and output. The episode ends when a reply says DONE without a command, at `max_turns`, or
when the commands have used the task's agent time (task.toml `[agent] timeout_sec`). Then the
task's own tests/test.sh runs in the same environment and its reward file is the reward.

Runs need the bubblewrap sandbox: a Harbor task uses fixed absolute paths (its WORKDIR,
/tests, /logs/verifier), which only bubblewrap's mount namespace can show (see
`sandbox.types.Program.mounts`). How each run replays the episode is in `terminal_runner`.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from kitchen import Count, DataError, Section
from recipes.envs.harbor_tasks import REWARD_FILES, HarborTask, load_harbor_tasks, read_reward
from sandbox import Program, Sandbox, make_sandbox
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.task import RLTask
from train_core.rl.types import Action, Env, EnvGroupBuilder, Metrics, RLDataset, StepResult
from train_core.types import ModelInput, StopCondition

RUNNER = Path(__file__).with_name("terminal_runner.py").read_text(encoding="utf-8")
COMMAND_BLOCK = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)```", re.S)
DONE_WORD = "DONE"
DONE = re.compile(rf"\b{DONE_WORD}\b")
PROTOCOL = (
    "You are in a Linux shell, in {workdir}. Reply with one shell command in a ```bash block; you will see "
    "its exit code and output. When the task is complete, reply {done} (no command)."
)
NO_COMMAND = f"No command found: put one command in a ```bash block, or reply {DONE_WORD} when the task is complete."


class TerminalSettings(Section):
    """Config section `env` of terminal_rl: the tasks and the episode's limits."""

    tasks: str = Field(..., description="a Harbor task dir, or a dir of them")
    eval_tasks: str | None = Field(None, description="held-out Harbor tasks; none = no eval")
    max_turns: Count = Field(6, description="replies per episode; the tests run after the last")
    command_timeout_s: float = Field(10.0, gt=0, description="wall-clock limit of one command")
    output_chars: Count = Field(800, description="the first this many characters of a command's output are shown")
    unsupported: Literal["error", "skip"] = Field(
        "error", description="a task that needs a Docker build: error (stop) | skip (warn, leave it out)"
    )
    concurrency: Count = Field(8, description="sandbox runs at once (bubblewrap)")
    eval_episodes: Count = Field(8, description="episodes per held-out task at each evaluation")
    teacher_match_rate: float = Field(
        1.0,
        ge=0,
        le=1,
        description="share of warm-start episodes sending the task's own reference solution (else another task's)",
    )


def read_command(text: str) -> str | None:
    """The last fenced shell block's command, or None."""
    blocks = COMMAND_BLOCK.findall(text)
    return blocks[-1].strip() or None if blocks else None


@dataclass(frozen=True)
class TerminalSession:
    """How one task's episodes run in the sandbox."""

    task: HarborTask
    sandbox: Sandbox
    settings: TerminalSettings

    def mounts(self) -> dict[str, str]:
        return {self.task.workdir: "work", "/tests": "tests", "/logs": "logs", "/tmp": "tmp"}

    async def run(self, history: Sequence[str], command: str | None, grade: bool) -> dict[str, Any]:
        """Replay `history`, run `command`, and with `grade` the tests: the runner's answer, or
        `{"sandbox_error": why}`."""
        task, settings = self.task, self.settings
        spec = {
            "workdir": task.workdir,
            "files": {name: content.hex() for name, content in task.files.items()},
            "setup": list(task.setup),
            "env": dict(task.env),
            "history": list(history),
            "command": command,
            "grade": grade,
            "tests": {name: content.hex() for name, content in task.tests.items()} if grade else {},
            "verifier_env": dict(task.verifier_env),
            "verifier_timeout_s": task.verifier_timeout_s,
            "reward_files": list(REWARD_FILES),
            "command_timeout_s": settings.command_timeout_s,
            "cap": settings.output_chars,
        }
        commands = len(task.setup) + len(history) + (command is not None)
        budget = commands * settings.command_timeout_s + (task.verifier_timeout_s if grade else 0) + 30
        result = await self.sandbox.run(Program(RUNNER, {"spec.json": json.dumps(spec)}, mounts=self.mounts()), budget)
        try:
            answer: dict[str, Any] = json.loads(result.stdout)
        except json.JSONDecodeError:
            why = result.detail or result.stderr.strip()[-400:] or f"exit code {result.exit_code}"
            return {"sandbox_error": f"{result.status}: {why}"}
        return answer


def opening(task: HarborTask) -> Message:
    """The first prompt: the task's instruction and the protocol."""
    protocol = PROTOCOL.format(workdir=task.workdir, done=DONE_WORD)
    return Message(role="user", content=f"{task.instruction}\n\n{protocol}")


def fenced(command: str) -> str:
    return f"```bash\n{command}\n```"


def describe(result: dict[str, Any], cap: int) -> str:
    """What the policy sees of a command: its exit code (or timeout) and output."""
    ending = "timed out" if result["exit_code"] is None else f"exit code {result['exit_code']}"
    output = result["output"]
    more = "\n[output truncated]" if len(output) > cap else ""
    return f"{ending}\n{output[:cap]}{more}".rstrip()


class TerminalEnv(Env):
    """One episode of one task; the conversation so far is the observation at every turn."""

    def __init__(self, session: TerminalSession, renderer: Renderer) -> None:
        self.session = session
        self.renderer = renderer
        self.messages: list[Message] = [opening(session.task)]
        self.history: list[str] = []
        self.turns = 0
        self.agent_seconds = 0.0
        self.metrics: Metrics = {"invalid_replies": 0.0, "command_timeouts": 0.0, "sandbox_error": 0.0}

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        return self.renderer.build_generation_prompt(self.messages), self.renderer.get_stop_sequences()

    def _reply(self, content: str, reward: float, done: bool, parse_ok: bool) -> StepResult:
        if done:
            observation = ModelInput.empty()
        else:
            self.messages.append(Message(role="user", content=content))
            observation = self.renderer.build_generation_prompt(self.messages)
        return StepResult(
            reward=reward,
            episode_done=done,
            next_observation=observation,
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics=dict(self.metrics) if done else {},
            parse_ok=parse_ok,
        )

    async def _finish(self, parse_ok: bool) -> StepResult:
        answer = await self.session.run(self.history, None, grade=True)
        reward = None
        if "grade" in answer:
            reward = read_reward(answer["grade"]["rewards"])
        self.metrics.update(
            {
                "turns": float(self.turns),
                "commands": float(len(self.history)),
                "sandbox_error": max(self.metrics["sandbox_error"], float("grade" not in answer)),
                "verifier_error": float("grade" in answer and reward is None),
                "solved": float(reward is not None and reward >= 1.0),
            }
        )
        return self._reply("", reward or 0.0, done=True, parse_ok=parse_ok)

    async def step(self, action: Action) -> StepResult:
        message, parsed = self.renderer.parse_response(action)
        text = message["content"]
        self.messages.append(Message(role="assistant", content=text))
        self.turns += 1
        command = read_command(text)
        last_turn = self.turns >= self.session.settings.max_turns
        if command is None:
            if DONE.search(text) or last_turn:
                return await self._finish(parsed)
            self.metrics["invalid_replies"] += 1
            return self._reply(NO_COMMAND, 0.0, done=False, parse_ok=False)
        if last_turn:  # the tests replay it
            self.history.append(command)
            return await self._finish(parsed)
        answer = await self.session.run(self.history, command, grade=False)
        self.history.append(command)
        if "command" not in answer:
            self.metrics["sandbox_error"] = 1.0
            return await self._finish(parsed)
        result = answer["command"]
        self.agent_seconds += result["seconds"]
        self.metrics["command_timeouts"] += float(result["exit_code"] is None)
        if self.agent_seconds >= self.session.task.agent_timeout_s:
            return await self._finish(parsed)
        return self._reply(describe(result, self.session.settings.output_chars), 0.0, done=False, parse_ok=parsed)


def solution_command(task: HarborTask) -> str | None:
    """The task's reference solution (solution/solve.sh) as one command, or None."""
    if task.solution is None:
        return None
    return "\n".join(line for line in task.solution.splitlines() if not line.startswith("#!")).strip() or None


@dataclass
class TerminalDemonstrations:
    """Teacher episodes for the warm start: one command, the observation it really gets in a
    sandbox of its own, then DONE; with `settings.max_turns` 1 the episode ends at the command
    (the tests grade it), so a demonstration is the command alone. With probability
    `settings.teacher_match_rate` the command is the task's own reference solution
    (solution/solve.sh), else another task's: the imitating model learns the protocol and the
    commands, but not which command fits which task, and RL is left to learn that. Only
    solutions their own task's tests score 1 are used. Recorded once, on first use."""

    tasks: Sequence[HarborTask]
    settings: TerminalSettings
    episodes: dict[str, tuple[list[Message], list[list[Message]]]] | None = None
    """Per task: its own solution's episode, and the other solutions' episodes in it."""

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        if self.episodes is None:
            with ThreadPoolExecutor(1) as pool:  # the caller may be inside the run's event loop
                self.episodes = pool.submit(asyncio.run, self._record()).result()
        names = sorted(self.episodes)
        picked = []
        for _ in range(count):
            own, others = self.episodes[rng.choice(names)]
            matched = not others or rng.random() < self.settings.teacher_match_rate
            picked.append(own if matched else rng.choice(others))
        return picked

    async def _record(self) -> dict[str, tuple[list[Message], list[list[Message]]]]:
        sandbox = make_sandbox("bubblewrap", concurrency=self.settings.concurrency)
        sessions = {task.name: TerminalSession(task, sandbox, self.settings) for task in self.tasks}

        async def solves(task: HarborTask) -> str | None:
            command = solution_command(task)
            if command is None:
                return None
            graded = await sessions[task.name].run([command], None, grade=True)
            return command if "grade" in graded and read_reward(graded["grade"]["rewards"]) == 1.0 else None

        commands = dict(zip(sessions, await asyncio.gather(*(solves(task) for task in self.tasks)), strict=True))
        solutions = {name: command for name, command in commands.items() if command is not None}
        if not solutions:
            raise DataError("warm start: no task has a solution/solve.sh that its tests score 1")

        async def episode(task: HarborTask, command: str) -> list[Message] | None:
            if self.settings.max_turns == 1:
                return [opening(task), Message(role="assistant", content=fenced(command))]
            answer = await sessions[task.name].run([], command, grade=False)
            if "command" not in answer:
                return None
            observation = describe(answer["command"], self.settings.output_chars)
            return [
                opening(task),
                Message(role="assistant", content=fenced(command)),
                Message(role="user", content=observation),
                Message(role="assistant", content=DONE_WORD),
            ]

        pairs = [(task, name) for task in self.tasks if task.name in solutions for name in solutions]
        recorded = await asyncio.gather(*(episode(task, solutions[name]) for task, name in pairs))
        own: dict[str, list[Message]] = {}
        others: dict[str, list[list[Message]]] = {name: [] for name in solutions}
        for (task, name), messages in zip(pairs, recorded, strict=True):
            if messages is not None and name == task.name:
                own[task.name] = messages
            elif messages is not None:
                others[task.name].append(messages)
        return {name: (messages, others[name]) for name, messages in own.items()}


@dataclass(frozen=True)
class TerminalGroupBuilder(EnvGroupBuilder):
    """`group_size` episodes of one task."""

    session: TerminalSession
    renderer: Renderer
    group_size: int

    async def make_envs(self) -> list[TerminalEnv]:
        return [TerminalEnv(self.session, self.renderer) for _ in range(self.group_size)]

    def logging_tags(self) -> list[str]:
        return ["terminal"]


class TerminalDataset(RLDataset):
    """`num_batches` batches of `groups_per_batch` tasks, drawn in a seeded shuffled cycle."""

    def __init__(self, groups: Sequence[TerminalGroupBuilder], num_batches: int, per_batch: int, seed: int) -> None:
        self.groups = groups
        self.num_batches = num_batches
        self.per_batch = per_batch
        self.seed = seed

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        picked: list[EnvGroupBuilder] = []
        position = index * self.per_batch
        while len(picked) < self.per_batch:
            cycle, offset = divmod(position, len(self.groups))
            order = list(range(len(self.groups)))
            random.Random(f"terminal/{self.seed}/{cycle}").shuffle(order)
            picked.append(self.groups[order[offset]])
            position += 1
        return picked

    def __len__(self) -> int:
        return self.num_batches


def terminal_task(
    settings: TerminalSettings,
    sandbox: Sandbox,
    renderer: Renderer,
    *,
    group_size: int,
    groups_per_batch: int,
    num_batches: int,
    seed: int,
) -> RLTask:
    """The tasks' envs in `sandbox`; tasks skipped for needing a Docker build are warnings."""
    skip = settings.unsupported == "skip"
    tasks, refused = load_harbor_tasks(settings.tasks, skip)
    held_out, refused_eval = load_harbor_tasks(settings.eval_tasks, skip) if settings.eval_tasks else ([], [])
    group = partial(TerminalGroupBuilder, renderer=renderer, group_size=group_size)
    return RLTask(
        train=TerminalDataset(
            [group(TerminalSession(task, sandbox, settings)) for task in tasks], num_batches, groups_per_batch, seed
        ),
        eval_builders=[
            TerminalGroupBuilder(TerminalSession(task, sandbox, settings), renderer, settings.eval_episodes)
            for task in held_out
        ],
        demonstrations=TerminalDemonstrations(tasks, settings),
        warnings=[f"terminal task skipped: {why}" for why in [*refused, *refused_eval]],
    )
