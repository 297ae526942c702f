"""Generate the small instruction datasets shipped for sl_basic and chat_sl (deterministic).

Short, rule-governed tasks (arithmetic, word games, a few facts) that a tiny model can learn on
a CPU in a minute, so the recipes demonstrate real learning offline.

    python recipes/data/generate_supervised.py
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).parent
WORDS = [
    "apple",
    "river",
    "stone",
    "cloud",
    "tiger",
    "green",
    "light",
    "music",
    "table",
    "water",
    "bread",
    "chair",
    "dream",
    "earth",
    "flame",
    "grape",
    "house",
    "juice",
    "lemon",
    "mouse",
    "night",
    "ocean",
    "piano",
    "queen",
    "robot",
    "sugar",
    "train",
    "voice",
    "whale",
    "zebra",
]
OPPOSITES = {
    "hot": "cold",
    "big": "small",
    "up": "down",
    "fast": "slow",
    "light": "dark",
    "old": "new",
    "happy": "sad",
    "early": "late",
    "open": "closed",
    "full": "empty",
    "hard": "soft",
    "high": "low",
}
CAPITALS = {
    "France": "Paris",
    "Japan": "Tokyo",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Egypt": "Cairo",
    "Peru": "Lima",
    "Kenya": "Nairobi",
    "Canada": "Ottawa",
    "Norway": "Oslo",
    "Greece": "Athens",
    "Chile": "Santiago",
    "India": "New Delhi",
    "Cuba": "Havana",
    "Ireland": "Dublin",
}
Task = Callable[[random.Random], tuple[str, str]]


def add(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(0, 50), rng.randint(0, 49)
    return f"What is {a} + {b}?", str(a + b)


def reverse(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(WORDS)
    return f"Reverse the word {word}.", word[::-1]


def upper(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(WORDS)
    return f"Write {word} in capital letters.", word.upper()


def opposite(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(sorted(OPPOSITES))
    return f"What is the opposite of {word}?", OPPOSITES[word]


def capital(rng: random.Random) -> tuple[str, str]:
    country = rng.choice(sorted(CAPITALS))
    return f"What is the capital of {country}?", CAPITALS[country]


def successor(rng: random.Random) -> tuple[str, str]:
    n = rng.randint(0, 98)
    return f"Which number comes after {n}?", str(n + 1)


TASKS: list[Task] = [add, reverse, upper, opposite, capital, successor]


def examples(count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [rng.choice(TASKS)(rng) for _ in range(count)]


def prompt_completion(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"prompt": f"Question: {q}\nAnswer:", "completion": f" {a}"} for q, a in pairs]


def conversations(pairs: list[tuple[str, str]], seed: int) -> list[dict[str, object]]:
    """One to three question/answer turns per conversation, sometimes with a system message."""
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    index = 0
    while index < len(pairs):
        turns = pairs[index : index + rng.randint(1, 3)]
        index += len(turns)
        messages: list[dict[str, str]] = []
        if rng.random() < 0.3:
            messages.append({"role": "system", "content": "Answer briefly."})
        for question, answer in turns:
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        out.append({"messages": messages})
    return out


def write_jsonl(path: Path, rows: list[dict[str, object]] | list[dict[str, str]]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def main() -> None:
    train, test = examples(3000, seed=1), examples(200, seed=2)
    write_jsonl(HERE / "sl_basic" / "train.jsonl", prompt_completion(train))
    write_jsonl(HERE / "sl_basic" / "test.jsonl", prompt_completion(test))
    write_jsonl(HERE / "chat_sl" / "train.jsonl", conversations(examples(3000, seed=3), seed=3))
    write_jsonl(HERE / "chat_sl" / "test.jsonl", conversations(examples(200, seed=4), seed=4))


if __name__ == "__main__":
    main()
