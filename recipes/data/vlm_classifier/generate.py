"""Generate the shipped image-classification-by-chat data (`train.jsonl`, `test.jsonl`), deterministically.

Each record is a 32x32 picture of one shape (circle, square or triangle, of random size and place)
in one of three colours on a white ground; the user asks its colour, the assistant answers it.
Records are prompt-completion conversations with the class as `answer`: chat_sl-style training
reads `prompt` + `completion`, the `jsonl` eval task samples a reply to `prompt` and grades it
against `answer`.
Images are base64 PNG `data:` URLs inside the JSONL (about 200 bytes each), so the data ships as
two small text files. Run: `python recipes/data/vlm_classifier/generate.py`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from train_core.renderers.images import data_url

SEED = 28
OUT = Path(__file__).parent
SIZE = 32
COLOURS = {"red": (220, 30, 30), "green": (30, 170, 40), "blue": (30, 60, 220)}
SHAPES = ("circle", "square", "triangle")
QUESTION = "What colour is the shape?"
COUNTS = {"train": 96, "test": 30}


def picture(rng: random.Random, colour: str) -> Image.Image:
    image = Image.new("RGB", (SIZE, SIZE), "white")
    draw = ImageDraw.Draw(image)
    side = rng.randint(12, 24)
    x, y = rng.randint(0, SIZE - side), rng.randint(0, SIZE - side)
    fill = COLOURS[colour]
    shape = rng.choice(SHAPES)
    if shape == "circle":
        draw.ellipse((x, y, x + side, y + side), fill=fill)
    elif shape == "square":
        draw.rectangle((x, y, x + side, y + side), fill=fill)
    else:
        draw.polygon([(x, y + side), (x + side, y + side), (x + side // 2, y)], fill=fill)
    return image


def record(rng: random.Random, colour: str) -> dict[str, Any]:
    image = {"type": "image", "image": data_url(picture(rng, colour))}
    user = {"role": "user", "content": [image, {"type": "text", "text": QUESTION}]}
    return {"prompt": [user], "completion": [{"role": "assistant", "content": colour}], "answer": colour}


def main() -> None:
    rng = random.Random(SEED)
    for split, count in COUNTS.items():
        colours = [list(COLOURS)[i % len(COLOURS)] for i in range(count)]
        rng.shuffle(colours)
        lines = [json.dumps(record(rng, colour)) for colour in colours]
        (OUT / f"{split}.jsonl").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
