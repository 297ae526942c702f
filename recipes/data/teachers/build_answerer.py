"""Rebuild the shipped twenty-questions answerer: the embedded tiny model after supervised
training (`chat_sl`) on every question of the shipped noun list answered for every secret, as
sampler weights. It answers the list's questions like the list (yes / no) and is the default
`env.answerer` of `twenty_questions`.

    python -m recipes.data.teachers.build_answerer
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from kitchen import get_recipe, load_config, resolve_sampler_path, run_recipe
from recipes.envs.twenty_questions import DEFAULT_NOUNS, answerer_prompt, load_nouns

ANSWERER_DIR = Path(__file__).resolve().parent / "answerer"


def conversations() -> list[dict[str, object]]:
    """One conversation per (secret, question): the answerer's prompt and the list's answer."""
    out: list[dict[str, object]] = []
    for noun in load_nouns(DEFAULT_NOUNS):
        for question, answer in noun.answers.items():
            reply = {"role": "assistant", "content": "Yes." if answer else "No."}
            out.append({"messages": [*answerer_prompt(noun.noun, question), reply]})
    return out


def main() -> None:
    recipe = get_recipe("chat_sl")
    with tempfile.TemporaryDirectory() as work:
        data = Path(work) / "answers.jsonl"
        data.write_text("".join(json.dumps(c) + "\n" for c in conversations()))
        overrides = [
            f"data.dataset={data}",
            "data.eval_dataset=null",
            "data.num_epochs=60",
            "data.batch_size=8",
            "optimizer.learning_rate=0.003",
            f"log_path={work}/run",
            "backend=local",
            "seed=0",
        ]
        run_dir = run_recipe(recipe, load_config(recipe.config_cls, None, overrides))
        sampler = Path(resolve_sampler_path(str(run_dir.path)))
        ANSWERER_DIR.mkdir(exist_ok=True)
        for name in ("metadata.json", "weights.safetensors"):
            shutil.copyfile(sampler / name, ANSWERER_DIR / name)
    print(f"answerer written to {ANSWERER_DIR}")


if __name__ == "__main__":
    main()
