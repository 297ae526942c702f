"""Small verifiers environments, of verifiers' own classes, for tests/env_hubs/test_verifiers_env.py:
this module is the environment module (`vf.load_environment("verifiers_envs", kind=...)` imports it
and calls its `load_environment`), imported only by the tests that run it (verifiers takes
seconds to import). Two rows made here; no hub downloads."""

from __future__ import annotations

from typing import Any

import verifiers as vf
from datasets import Dataset

ROWS = [{"question": "What is 12 + 30?", "answer": "42"}, {"question": "What is 7 + 9?", "answer": "16"}]


def exact_answer(parser: Any, completion: Any, answer: str) -> float:
    return float((parser.parse_answer(completion) or "").strip() == answer)


def add(a: int, b: int) -> int:
    """Adds two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


class HintEnv(vf.MultiTurnEnv):
    """A wrong first answer gets a hint ("Hint: ..."), then the model answers again; a right
    answer ends the episode."""

    @vf.stop
    async def answered(self, state: Any) -> bool:
        trajectory = state["trajectory"]
        return bool(trajectory) and self.parser.parse_answer(trajectory[-1]["completion"]) == state["answer"]

    async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
        return [{"role": "user", "content": f"Hint: it is {state['answer']}."}]


def load_environment(kind: str = "single") -> Any:
    rubric = vf.Rubric(funcs=[exact_answer])
    dataset = Dataset.from_list(ROWS)
    if kind == "single":
        return vf.SingleTurnEnv(dataset=dataset, rubric=rubric)
    if kind == "multi":
        return HintEnv(dataset=dataset, rubric=rubric, max_turns=2)
    return vf.ToolEnv(dataset=dataset, rubric=rubric, tools=[add], max_turns=3)
