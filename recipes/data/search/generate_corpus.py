"""Generate the `search_tool` recipe's corpus and questions: 60 invented islands, each a short
document with its capital, its chief export and the year it was charted, and one question per
fact. The facts are invented, so only a search of the corpus can answer them.

    python -m recipes.data.search.generate_corpus
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
ISLANDS = 60
SYLLABLES = [
    "ab",
    "bel",
    "cor",
    "dun",
    "el",
    "fen",
    "gar",
    "hol",
    "is",
    "kel",
    "lor",
    "mar",
    "nor",
    "os",
    "pel",
    "quin",
]
MORE = ["ra", "sen", "tor", "ul", "ven", "wy", "xan", "yor", "zel", "ith", "ora", "une", "ast", "ire", "ond", "ey"]
EXPORTS = ["amber", "cedar", "copper", "cotton", "flax", "honey", "indigo", "marble", "pearls", "salt", "silk", "tin"]


def name(rng: random.Random, taken: set[str]) -> str:
    while True:
        word = (rng.choice(SYLLABLES) + rng.choice(MORE) + rng.choice(["", "a", "is", "on"])).capitalize()
        if word not in taken:
            taken.add(word)
            return word


def main() -> None:
    rng = random.Random("search-corpus/0")
    taken: set[str] = set()
    documents, questions = [], []
    for _ in range(ISLANDS):
        island, capital = name(rng, taken), name(rng, taken)
        export, year = rng.choice(EXPORTS), rng.randint(1500, 1899)
        text = (
            f"{island} is an island in the Outer Sea. Its capital is {capital}. "
            f"Its chief export is {export}. It was first charted in {year}."
        )
        documents.append({"title": island, "text": text})
        questions += [
            {"question": f"What is the capital of {island}?", "answer": capital, "title": island},
            {"question": f"What is the chief export of {island}?", "answer": export, "title": island},
            {"question": f"In which year was {island} first charted?", "answer": str(year), "title": island},
        ]
    for file, rows in (("corpus.jsonl", documents), ("questions.jsonl", questions)):
        (HERE / file).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


if __name__ == "__main__":
    main()
