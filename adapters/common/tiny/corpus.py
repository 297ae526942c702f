"""The deterministic text corpus the tiny tokenizer is trained on.

It mixes the kinds of text kitchen's tests and recipes feed the tiny model (plain sentences,
arithmetic, chat turns, JSON tool calls) so the learned merges cover them compactly.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path

_NAMES = ("Alice", "Bob", "Carol", "Dave", "Eve", "Frank", "Grace", "Heidi", "Ivan", "Judy")
_NOUNS = (
    "cat",
    "dog",
    "bird",
    "house",
    "tree",
    "river",
    "book",
    "apple",
    "car",
    "city",
    "garden",
    "teacher",
    "student",
    "computer",
    "question",
    "answer",
    "number",
    "story",
    "friend",
    "road",
    "window",
    "table",
    "water",
    "music",
    "school",
    "problem",
    "model",
    "word",
    "letter",
    "game",
)
_VERBS = (
    "sees",
    "likes",
    "reads",
    "finds",
    "makes",
    "takes",
    "wants",
    "needs",
    "helps",
    "opens",
    "writes",
    "builds",
    "counts",
    "moves",
    "calls",
    "knows",
    "loves",
    "brings",
    "holds",
    "keeps",
)
_ADJECTIVES = (
    "big",
    "small",
    "red",
    "blue",
    "green",
    "happy",
    "quick",
    "slow",
    "old",
    "new",
    "good",
    "bright",
    "quiet",
    "warm",
    "cold",
    "long",
    "short",
    "simple",
    "clever",
    "kind",
)
_QUESTIONS = (
    "What is {a} + {b}?",
    "What is {a} - {b}?",
    "What is {a} times {b}?",
    "Can you add {a} and {b}?",
    "How many {noun}s are there if I have {a} and get {b} more?",
    "Please write a short story about a {adj} {noun}.",
    "Tell me something about the {noun}.",
    "Is the {noun} {adj}?",
    "Which is larger, {a} or {b}?",
)
_ROLES = ("system", "user", "assistant", "tool")
# Common English words (one per line) for free text, so the tokenizer learns general merges.
_WORDS = tuple((Path(__file__).parent / "words.txt").read_text(encoding="utf-8").split())
_TOOLS = ("get_weather", "search", "calculator", "lookup", "send_email")


def _noun_phrase(rng: random.Random) -> str:
    return f"The {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}"


def _sentence(rng: random.Random) -> str:
    subject = rng.choice(_NAMES) if rng.random() < 0.5 else _noun_phrase(rng)
    obj = f"{rng.choice(('a', 'the'))} {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}"
    end = rng.choice((".", ".", ".", "!", "?"))
    return f"{subject} {rng.choice(_VERBS)} {obj}{end}"


def _free_text(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 16))]
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice((".", ",", "!", "?", ":", ";"))


def _arithmetic(rng: random.Random) -> str:
    a, b = rng.randint(0, 999), rng.randint(0, 999)
    op = rng.choice(("+", "-", "*"))
    result = a + b if op == "+" else a - b if op == "-" else a * b
    return rng.choice((f"{a} {op} {b} = {result}", f"{a}{op}{b}={result}", f"The answer is {result}."))


def _question(rng: random.Random) -> str:
    return rng.choice(_QUESTIONS).format(
        a=rng.randint(0, 99), b=rng.randint(0, 99), noun=rng.choice(_NOUNS), adj=rng.choice(_ADJECTIVES)
    )


def _chat(rng: random.Random) -> str:
    turns = []
    for _ in range(rng.randint(1, 3)):
        turns.append(f"User: {_question(rng)}\n\nAssistant: {_sentence(rng)} {_arithmetic(rng)}")
    return "\n\n".join(turns)


def _chatml(rng: random.Random) -> str:
    role = rng.choice(_ROLES)
    return f"<|im_start|>{role}\n{_sentence(rng)}<|im_end|>\n"


def _tool_call(rng: random.Random) -> str:
    call = {"name": rng.choice(_TOOLS), "arguments": {"query": _question(rng), "limit": rng.randint(1, 20)}}
    indent = rng.choice((None, 2))
    return f"<tool_call>\n{json.dumps(call, indent=indent)}\n</tool_call>"


def _json_result(rng: random.Random) -> str:
    result = {"result": _sentence(rng), "value": rng.randint(-500, 500), "ok": rng.random() < 0.8}
    return f"<tool_response>\n{json.dumps(result)}\n</tool_response>"


def _thinking(rng: random.Random) -> str:
    return f"<think>\n{_question(rng)} {_arithmetic(rng)}\n</think>\n\n{_sentence(rng)}"


_GENERATORS: tuple[Callable[[random.Random], str], ...] = (
    _sentence,
    _free_text,
    _free_text,
    _arithmetic,
    _question,
    _chat,
    _chatml,
    _tool_call,
    _json_result,
    _thinking,
)


def iter_corpus(num_lines: int, seed: int = 0) -> Iterator[str]:
    """Yield `num_lines` pseudo-random texts; the same (num_lines, seed) always gives the same texts."""
    rng = random.Random(seed)
    for _ in range(num_lines):
        yield rng.choice(_GENERATORS)(rng)
