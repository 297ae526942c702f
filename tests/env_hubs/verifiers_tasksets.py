"""A small verifiers 0.4 taskset, of verifiers' own classes, for tests/env_hubs/test_verifiers_env.py:
this module is the taskset package (`vf.import_taskset("verifiers_tasksets")` imports it and takes
the Taskset subclass its `__all__` exports), imported only by the tests that run it (verifiers takes
seconds to import). Two tasks made here; no hub downloads. With `tools=true` the taskset serves an
`add` tool (an MCP server verifiers starts as `python -m verifiers_tasksets`); with `hints=true`
its env (`HintEnv`, which verifiers pairs with the taskset as the package's exported Env) answers
a wrong reply with a hint ("Hint: it is ...") and the model answers again; with `broken=true` its
reward raises."""

from __future__ import annotations

from collections.abc import Iterable

import verifiers.v1 as vf

ROWS = [("What is 12 + 30?", "42"), ("What is 7 + 9?", "16")]


class SumData(vf.TaskData):
    answer: str
    broken: bool = False


class SumTask(vf.Task[SumData, vf.State]):
    @vf.reward
    async def exact_answer(self, task: SumData, trace: vf.Trace) -> float:
        if task.broken:
            raise RuntimeError("this task's scoring is broken")
        return float(trace.last_reply.strip() == task.answer)


class AddToolset(vf.Toolset[vf.SharedToolsetConfig, vf.State]):
    TOOL_PREFIX = None  # the tool is `add`, not `add_toolset_add`

    @vf.tool
    async def add(self, a: int, b: int) -> int:
        """Adds two integers."""
        return a + b


class SumTasksetConfig(vf.TasksetConfig):
    tools: bool = False
    hints: bool = False
    broken: bool = False


class SumTaskset(vf.Taskset[SumTask, SumTasksetConfig]):
    def load(self) -> Iterable[SumTask]:
        for question, answer in ROWS:
            yield SumTask(SumData(prompt=question, answer=answer, broken=self.config.broken), self.config.task)

    @classmethod
    def toolsets(cls, config: SumTasksetConfig) -> list[vf.Toolset]:
        return [AddToolset(vf.SharedToolsetConfig())] if config.tools else []


class HintEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig()


class HintEnv(vf.Env[HintEnvConfig]):
    """The task's prompt, then (with `hints`) a hint after a wrong reply and the model's second
    reply: one agent, one trace, scored by the task's rewards on its last reply."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        async with agents.agent.interaction(task) as chat:
            reply = await chat.turn()
            answer = task.data.answer
            if self.taskset.config.hints and not reply.terminated and reply.last_reply != answer:
                await chat.turn(f"Hint: it is {answer}.")


__all__ = ["HintEnv", "SumTaskset"]

if __name__ == "__main__":  # verifiers runs the tool server so
    AddToolset.run()
