"""Generate the `search_tool` recipe's corpus and questions: 60 invented islands, each a short
document with its capital and its chief export, and one question per fact. The facts are drawn at
random, so only a search of the corpus can answer them.

Every island's name, capital and export is one token of the embedded tiny model's tokenizer, in
the place it stands (the name quoted in the question and the query, the answer after a space), so
the tiny model answers by copying a token: from the question into its query, and from the search
result into its answer.

    python -m recipes.data.search.generate_corpus
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
ISLANDS = 60
NAMES = [
    "aby",
    "ack",
    "alk",
    "alt",
    "ame",
    "ank",
    "ant",
    "ark",
    "arn",
    "ath",
    "ator",
    "ave",
    "ber",
    "che",
    "cher",
    "cro",
    "dge",
    "ech",
    "eak",
    "ear",
    "eek",
    "ell",
    "ember",
    "ess",
    "est",
    "ester",
    "gan",
    "gin",
    "idi",
    "iel",
    "ild",
    "ile",
    "ilm",
    "ime",
    "ine",
    "ink",
    "irl",
    "ith",
    "kel",
    "kes",
    "lain",
    "lim",
    "mall",
    "mer",
    "ner",
    "oud",
    "ound",
    "ost",
    "orth",
    "ove",
    "ower",
    "pon",
    "pul",
    "rat",
    "ree",
    "rol",
    "rong",
    "rug",
    "sid",
    "sin",
    "son",
    "tain",
    "tor",
    "ude",
    "uge",
    "ull",
    "umn",
    "unch",
    "urn",
    "uth",
    "van",
    "vel",
    "ward",
    "ype",
]
CAPITALS = [
    "river",
    "garden",
    "bridge",
    "forest",
    "mountain",
    "ocean",
    "street",
    "market",
    "college",
    "court",
    "north",
    "star",
    "snow",
    "rain",
    "wind",
    "green",
    "white",
    "red",
    "blue",
    "road",
    "town",
    "city",
    "house",
    "window",
    "door",
    "field",
    "light",
]
EXPORTS = ["flower", "sugar", "oil", "tea", "salt", "cheese", "apple", "paper", "water", "music"]


def main() -> None:
    rng = random.Random("search-corpus/1")
    documents, questions = [], []
    for island in rng.sample(NAMES, ISLANDS):
        capital, export = rng.choice(CAPITALS), rng.choice(EXPORTS)
        text = f"{island} is an island. Its capital is {capital}. Its chief export is {export}."
        documents.append({"title": island, "text": text})
        questions += [
            {"question": f'What is the capital of "{island}"?', "answer": capital, "title": island},
            {"question": f'What is the chief export of "{island}"?', "answer": export, "title": island},
        ]
    for file, rows in (("corpus.jsonl", documents), ("questions.jsonl", questions)):
        (HERE / file).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


if __name__ == "__main__":
    main()
