"""Writes `feedback.jsonl`: short questions graded by a score rubric, in the Feedback-Collection
format (prometheus-eval/Feedback-Collection: one record per graded response, with the instruction,
the rubric's criteria and five score descriptions, a reference answer that scores 5, the response,
its score, and the grader's output `Feedback: ... [RESULT] N`).

Every question gets five responses, one per score, so a warm start on all of them imitates a
replier who is exactly right a fifth of the time; the rubric is the one the `reference_match`
rule grader applies. Run `python -m recipes.data.rubric.generate_feedback` to rewrite the file.
"""

from __future__ import annotations

import json
from pathlib import Path

QUESTIONS = (
    ("What colour is a ripe banana?", "yellow", "green"),
    ("What colour is a clear sky at noon?", "blue", "red"),
    ("What colour is fresh grass?", "green", "purple"),
    ("What colour is fresh snow?", "white", "black"),
    ("Which animal says moo?", "cow", "pig"),
    ("Which animal barks?", "dog", "cat"),
    ("Which animal meows?", "cat", "dog"),
    ("How many legs does a spider have?", "eight", "six"),
    ("How many days are in a week?", "seven", "five"),
    ("How many sides does a triangle have?", "three", "four"),
    ("What is frozen water called?", "ice", "steam"),
    ("What do bees make?", "honey", "milk"),
    ("Which planet do we live on?", "earth", "mars"),
    ("What is the opposite of hot?", "cold", "warm"),
    ("Which star does the Earth orbit?", "sun", "moon"),
    ("Which season comes after winter?", "spring", "autumn"),
)
CRITERIA = "Does the response give the correct answer, in one word and nothing else?"
DESCRIPTIONS = (
    "The response does not answer the question.",
    "The response is one or two words, but not the correct answer.",
    "The response contains the correct answer among other candidates or much extra text.",
    "The response gives the correct answer with a few extra words.",
    "The response is exactly the correct answer, in one word.",
)
FEEDBACK = (
    "The response gives no answer at all.",
    "The response is short but names the wrong thing.",
    "The correct answer appears, but hedged among other words.",
    "The answer is correct, with a few unneeded words.",
    "The response is the correct answer alone, as asked.",
)


def responses(answer: str, wrong: str) -> tuple[str, ...]:
    """One response per score, 1 to 5."""
    return (
        "I do not know.",
        f"{wrong.capitalize()}.",
        f"It might be {answer}, or maybe {wrong}.",
        f"{answer.capitalize()}, I think.",
        f"{answer.capitalize()}.",
    )


def records() -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for question, answer, wrong in QUESTIONS:
        for score, response in enumerate(responses(answer, wrong), start=1):
            record: dict[str, object] = {
                "orig_instruction": f"{question} Answer in one word.",
                "orig_criteria": CRITERIA,
                **{f"orig_score{i}_description": text for i, text in enumerate(DESCRIPTIONS, start=1)},
                "orig_reference_answer": f"{answer.capitalize()}.",
                "orig_response": response,
                "orig_score": score,
                "output": f"Feedback: {FEEDBACK[score - 1]} [RESULT] {score}",
            }
            out.append(record)
    return out


if __name__ == "__main__":
    path = Path(__file__).with_name("feedback.jsonl")
    path.write_text("".join(json.dumps(record) + "\n" for record in records()))
