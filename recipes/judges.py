"""Judges recipes can name: offline preference models that compare two completions (the
`kitchen.families.preference.stages.Judge` protocol), for DPO's win-rate evaluator and other evaluators.

A judge answers in [-1, 1]: -1 prefers completion A, +1 prefers B, 0 is a tie. The evaluator
asks in both orderings, which cancels a judge's position bias (the rule judge here has none, so
its two answers mirror each other; a learned or LLM judge would not).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence

from kitchen import ConfigError, DataError
from kitchen.families.preference import LEARNED_JUDGES, Judge
from recipes.data.preference.generate_polite_arithmetic import POLITE_CLOSINGS, RUDE_CLOSINGS
from train_core.renderers.base import Message

_QUESTIONS: tuple[tuple[re.Pattern[str], Callable[[int, int], int]], ...] = (
    (re.compile(r"What is (\d+) \+ (\d+)\?"), lambda a, b: a + b),
    (re.compile(r"Can you add (\d+) and (\d+)\?"), lambda a, b: a + b),
    (re.compile(r"What is (\d+) - (\d+)\?"), lambda a, b: a - b),
    (re.compile(r"Which is larger, (\d+) or (\d+)\?"), max),
)
_STATED_ANSWER = re.compile(r"answer is (-?\d+)")


class PoliteArithmeticJudge:
    """The rule behind the shipped `polite_arithmetic` comparison set, as a judge.

    A completion scores +1 for stating the correct result as "answer is N", +1 for a polite
    closing and -1 for a rude one (the closings the data generator uses); the higher score wins.
    It knows only that set's four question forms and refuses other prompts rather than guess.
    """

    def answer(self, prompt: Sequence[Message]) -> int:
        question = prompt[-1]["content"] if prompt else ""
        for pattern, solve in _QUESTIONS:
            match = pattern.search(question)
            if match:
                return solve(int(match.group(1)), int(match.group(2)))
        raise DataError(f"the polite_arithmetic judge cannot read the question {question!r}")

    def score(self, correct: int, completion: Message) -> int:
        text = completion["content"]
        stated = _STATED_ANSWER.search(text)
        points = int(stated is not None and int(stated.group(1)) == correct)
        points += int(any(closing in text for closing in POLITE_CLOSINGS))
        points -= int(any(closing in text for closing in RUDE_CLOSINGS))
        return points

    def __call__(self, prompt: Sequence[Message], completion_A: Message, completion_B: Message) -> float:
        correct = self.answer(prompt)
        difference = self.score(correct, completion_B) - self.score(correct, completion_A)
        return float((difference > 0) - (difference < 0))


class ShorterJudge:
    """The shorter reply wins, by characters (tinker-cookbook's `shorter` preference); equal
    lengths tie. It reads no prompt, so it judges any data set's replies."""

    def __call__(self, prompt: Sequence[Message], completion_A: Message, completion_B: Message) -> float:
        difference = len(completion_A["content"]) - len(completion_B["content"])
        return float((difference > 0) - (difference < 0))


JUDGES: dict[str, Callable[[], Judge]] = {"polite_arithmetic": PoliteArithmeticJudge, "shorter": ShorterJudge}


def check_judge_name(name: str) -> str:
    """`name` if a judge is registered under it, else a ConfigError with a "did you mean"."""
    if name not in JUDGES:
        close = difflib.get_close_matches(name, JUDGES, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown judge {name!r}{hint} (available: {', '.join(sorted(JUDGES))})")
    return name


def get_judge(name: str) -> Judge:
    return JUDGES[check_judge_name(name)]()


def check_any_judge(name: str | None, learned: tuple[str, ...] = LEARNED_JUDGES) -> str | None:
    """A config's judge name: none, a learned judge (`learned`), or a rule judge registered here."""
    return name if name is None or name in learned else check_judge_name(name)
