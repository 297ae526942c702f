"""A small verifiers 0.4 taskset, of verifiers' own classes, for tests/env_hubs/test_verifiers_env.py:
this module is the taskset package (`vf.import_taskset("verifiers_tasksets")` imports it and takes
the Taskset subclass its `__all__` exports), imported only by the tests that run it (verifiers takes
seconds to import). Two tasks made here; no hub downloads."""

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


class SumTaskset(vf.Taskset[SumTask]):
    def load(self) -> Iterable[SumTask]:
        for question, answer in ROWS:
            yield SumTask(SumData(prompt=question, answer=answer), self.config.task)


__all__ = ["SumTaskset"]
