"""Generate the prompt sets of the `distill_prompt` recipe: addition questions in the arithmetic
teacher's range (operands 0..4), the train and test sets on disjoint operand pairs (so held-out
NLL is measured on questions never trained on).

    python -m recipes.data.distill.generate_prompts
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_OPERAND = 4
TEST_PAIRS = 5
TRAIN_RECORDS = 320
TEST_RECORDS = 40


def main() -> None:
    rng = random.Random("distill-prompts/0")
    pairs = [(x, y) for x in range(MAX_OPERAND + 1) for y in range(MAX_OPERAND + 1)]
    rng.shuffle(pairs)
    test_pairs, train_pairs = pairs[:TEST_PAIRS], pairs[TEST_PAIRS:]
    for name, pool, count in (("train", train_pairs, TRAIN_RECORDS), ("test", test_pairs, TEST_RECORDS)):
        lines = [json.dumps({"prompt": f"What is {x} + {y}?"}) for x, y in (rng.choice(pool) for _ in range(count))]
        (HERE / f"prompts_{name}.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")


if __name__ == "__main__":
    main()
