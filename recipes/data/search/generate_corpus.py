"""Generate the `search_tool` recipe's corpus and questions: 60 invented islands with two facts
each (a `land` and an `art`, drawn at random, so only a search of the corpus can answer), one
document per fact (title `land-aby`, text `land-aby road`) and one question per fact (`land-aby?`).

Built so that every token the model writes is a copy from a fixed distance back: the island's
name and the kind word are one tiny-tokenizer token each, in the same order in the question, the
query (the document's title) and the result, and the answer is one token ending the result, so
the query copies the question and the answer the result's last token across constant template
tokens. 24 questions of 24 different islands are held out (held_out.jsonl), each island's other
question staying in training and each held-out answer being a training answer: a held-out reply
writes only tokens that training replies write.

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
    "house",
    "window",
    "door",
    "field",
    "light",
]
EXPORTS = ["flower", "sugar", "oil", "tea", "salt", "cheese", "apple", "paper", "water", "music"]


KINDS = {"land": CAPITALS, "art": EXPORTS}
"""Each island's facts: a question's kind word and the answers its fact is drawn from."""
HELD_OUT = 24


def main() -> None:
    rng = random.Random("search-corpus/2")
    documents, questions = [], []
    for island in rng.sample(NAMES, ISLANDS):
        for kind, answers in KINDS.items():
            answer = rng.choice(answers)
            title = f"{kind}-{island}"
            documents.append({"title": title, "text": f"{title} {answer}"})
            questions.append({"question": f"{title}?", "answer": answer, "title": title})
    held_out = held_out_questions(questions, rng)
    train = [q for q in questions if q not in held_out]
    for file, rows in (("corpus.jsonl", documents), ("questions.jsonl", train), ("held_out.jsonl", held_out)):
        (HERE / file).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def held_out_questions(questions: list[dict[str, str]], rng: random.Random) -> list[dict[str, str]]:
    """One question of each of `HELD_OUT` islands whose answer is also a training answer, so every
    token a held-out reply must write (the island's name, its answer) is one the model writes in
    training."""
    while True:
        held_out = [
            rng.choice(questions[i : i + len(KINDS)])
            for i in rng.sample(range(0, len(questions), len(KINDS)), HELD_OUT)
        ]
        trained = {q["answer"] for q in questions if q not in held_out}
        if all(q["answer"] in trained for q in held_out):
            return held_out


if __name__ == "__main__":
    main()
