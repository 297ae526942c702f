"""Generate the stepwise-supervision files shipped for the `prm` recipe (deterministic), in
trl-lib/math_shepherd's layout: `prompt`, `completions` (the steps), `labels` (one bool per step).

Each prompt asks to count up by one three times from a small number; each step `n + 1 = m` slips
with probability 0.3 (m off by one) and the next step goes on from the written m. A step is
labelled by its own correctness (PRM800K's convention; Math-Shepherd's would also fail every step
after a slip), so a tiny model can learn the labels on a CPU in a minute.

    python recipes/data/stepwise/generate_count_up.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent
STEPS = 3
SLIP = 0.3


def solution(rng: random.Random) -> dict[str, object]:
    """One prompt and a (possibly slipping) solution with its step labels."""
    start = rng.randint(1, 5)
    steps, labels, value = [], [], start
    for _ in range(STEPS):
        slipped = rng.random() < SLIP
        written = value + 1 + (rng.choice([-1, 1]) if slipped else 0)
        steps.append(f"{value} + 1 = {written}")
        labels.append(not slipped)
        value = written
    return {"prompt": f"Count up by one from {start}, three times.", "completions": steps, "labels": labels}


def main() -> None:
    for name, seed, count in (("count_up_train.jsonl", 0, 600), ("count_up_test.jsonl", 1, 100)):
        rng = random.Random(seed)
        lines = [json.dumps(solution(rng)) for _ in range(count)]
        (HERE / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


if __name__ == "__main__":
    main()
