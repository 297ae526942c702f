"""Rebuild the shipped arithmetic teacher: the embedded tiny model after 500 supervised steps on
correct additions (`math_rl`'s warm start with no slips, and one RL step), as sampler weights; its
held-out reward is about 1.0 and it ends its replies properly.

    python -m recipes.data.teachers.build_arithmetic_teacher

The distillation recipes use it as their offline teacher: better at the task than a student that
only had the sloppy warm start (held-out reward about 0.35).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from kitchen import get_recipe, load_config, resolve_sampler_path, run_recipe

TEACHER_DIR = Path(__file__).resolve().parent / "arithmetic"


def main() -> None:
    recipe = get_recipe("math_rl")
    with tempfile.TemporaryDirectory() as work:
        overrides = ["env.teacher_error_rate=0", "warm_start.steps=500", "rl.num_batches=2", "eval.every=1"]
        config = load_config(recipe.config_cls, None, [*overrides, f"log_path={work}/run", "backend=local", "seed=0"])
        run_dir = run_recipe(recipe, config)
        sampler = Path(resolve_sampler_path(str(run_dir.path)))
        TEACHER_DIR.mkdir(exist_ok=True)
        for name in ("metadata.json", "weights.safetensors"):
            shutil.copyfile(sampler / name, TEACHER_DIR / name)
    print(f"teacher written to {TEACHER_DIR}")


if __name__ == "__main__":
    main()
