"""Generate the reasoning traces of the `distill_reasoning` recipe: two-digit additions answered by
a teacher that reasons column by column (ones, carry, tens) in its thinking and then states the sum
alone. Train and test use disjoint operand pairs, so held-out NLL is measured on additions never
trained on.

    python -m recipes.data.reasoning.generate_traces
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAIN_RECORDS = 400
TEST_RECORDS = 40


def trace(x: int, y: int) -> dict[str, object]:
    """One conversation: the question, then the teacher's reasoning and answer."""
    ones, carry = (x % 10 + y % 10) % 10, (x % 10 + y % 10) // 10
    tens = x // 10 + y // 10 + carry
    thinking = (
        f"Ones: {x % 10} + {y % 10} = {x % 10 + y % 10}, write {ones} carry {carry}. "
        f"Tens: {x // 10} + {y // 10} + {carry} = {tens}. So {x} + {y} = {x + y}."
    )
    return {
        "messages": [
            {"role": "user", "content": f"What is {x} + {y}?"},
            {"role": "assistant", "thinking": thinking, "content": str(x + y)},
        ]
    }


def main() -> None:
    rng = random.Random("reasoning-traces/0")
    pairs = [(x, y) for x in range(10, 50) for y in range(10, 50)]
    rng.shuffle(pairs)
    test, train = pairs[:TEST_RECORDS], pairs[TEST_RECORDS : TEST_RECORDS + TRAIN_RECORDS]
    for name, chosen in (("train", train), ("test", test)):
        lines = [json.dumps(trace(x, y)) for x, y in chosen]
        (HERE / f"{name}.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")


if __name__ == "__main__":
    main()
