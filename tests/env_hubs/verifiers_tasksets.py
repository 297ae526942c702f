"""A small verifiers 0.4 taskset, of verifiers' own classes, for tests/env_hubs/test_verifiers_env.py:
this module is the taskset package (`vf.import_taskset("verifiers_tasksets")` imports it and takes
the Taskset subclass its `__all__` exports), imported only by the tests that run it (verifiers takes
seconds to import). Two tasks made here; no hub downloads. With `tools=true` the taskset serves an
`add` tool (an MCP server verifiers starts as `python -m verifiers_tasksets`)."""

from __future__ import annotations

from collections.abc import Iterable

import verifiers.v1 as vf

ROWS = [("What is 12 + 30?", "42"), ("What is 7 + 9?", "16")]


class SumData(vf.TaskData):
    answer: str


class SumTask(vf.Task[SumData, vf.State]):
    @vf.reward
    async def exact_answer(self, task: SumData, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == task.answer)


class AddToolset(vf.Toolset[vf.SharedToolsetConfig, vf.State]):
    TOOL_PREFIX = None  # the tool is `add`, not `add_toolset_add`

    @vf.tool
    async def add(self, a: int, b: int) -> int:
        """Adds two integers."""
        return a + b


class SumTasksetConfig(vf.TasksetConfig):
    tools: bool = False


class SumTaskset(vf.Taskset[SumTask, SumTasksetConfig]):
    def load(self) -> Iterable[SumTask]:
        for question, answer in ROWS:
            yield SumTask(SumData(prompt=question, answer=answer), self.config.task)

    @classmethod
    def toolsets(cls, config: SumTasksetConfig) -> list[vf.Toolset]:
        return [AddToolset(vf.SharedToolsetConfig())] if config.tools else []


__all__ = ["SumTaskset"]

if __name__ == "__main__":  # verifiers runs the tool server so
    AddToolset.run()
