"""lm-evaluation-harness through kitchen against the harness's own Hugging Face backend, on the same
model and a local multiple-choice task: accuracy (must be equal) and wall / cpu time of each.

    bash scripts/setup_lm_eval.sh
    PYTHONPATH=. python benchmarks/lm_eval_vs_hf.py RUN_DIR [--questions 200] [--batch-size 8]

RUN_DIR is a local-backend run (e.g. `kitchen run math_rl`); its last checkpoint is exported with
`kitchen export` for the HF side, and kitchen evaluates the run directory itself. The task asks
"What is x + y?" with four choices, as the arithmetic recipes prompt (`User: ...\\n\\nAssistant:`).
Both run one torch thread. The last line is the ratio kitchen time / HF time.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any


def write_task(folder: Path, questions: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    lines = []
    for _ in range(questions):
        x, y = rng.randint(0, 4), rng.randint(0, 4)
        choices = [str(x + y + d) for d in (-1, 0, 1, 2)]
        rng.shuffle(choices)
        lines.append(
            json.dumps({"question": f"What is {x} + {y}?", "choices": choices, "label": choices.index(str(x + y))})
        )
    data = folder / "sums.jsonl"
    data.write_text("\n".join(lines) + "\n")
    task = folder / "sums_mc.yaml"
    task.write_text(
        f"task: sums_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\ntest_split: test\n"
        'output_type: multiple_choice\ndoc_to_text: "User: {{question}}\\n\\nAssistant:"\n'
        "doc_to_choice: choices\ndoc_to_target: label\nmetric_list:\n  - metric: acc\n"
    )
    return task


def timed(fn: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=8, help="the HF backend's batch size")
    args = parser.parse_args()

    import lm_eval
    import torch
    from lm_eval.tasks import TaskManager

    from kitchen.apps.cli import main as kitchen

    torch.set_num_threads(1)
    folder = Path(tempfile.mkdtemp(prefix="lm_eval_vs_hf-"))
    task = write_task(folder, args.questions)
    assert kitchen(["export", str(args.run_dir), "--out", str(folder / "hf")]) == 0

    def ours() -> float:
        assert (
            kitchen(
                ["eval", str(args.run_dir), "--harness", "lm-eval", "--tasks", str(task), "--out", str(folder / "k")]
            )
            == 0
        )
        results = json.loads((folder / "k" / "results.json").read_text())
        return float(next(r["value"] for r in results["results"] if r["metric"] == "acc"))

    def theirs() -> float:
        results = lm_eval.simple_evaluate(
            model="hf",
            model_args=f"pretrained={folder / 'hf'},dtype=float32,device=cpu",
            tasks=["sums_mc"],
            task_manager=TaskManager(include_path=str(folder)),
            batch_size=args.batch_size,
        )
        return float(results["results"]["sums_mc"]["acc,none"])

    kitchen_acc, kitchen_wall, kitchen_cpu = timed(ours)
    hf_acc, hf_wall, hf_cpu = timed(theirs)
    print(f"questions: {args.questions} (4 choices each: {4 * args.questions} loglikelihood requests)")
    print(f"kitchen (local backend): acc {kitchen_acc:.4f}  wall {kitchen_wall:.1f} s  cpu {kitchen_cpu:.1f} s")
    print(f"lm-eval hf backend:      acc {hf_acc:.4f}  wall {hf_wall:.1f} s  cpu {hf_cpu:.1f} s")
    print(f"accuracy equal: {kitchen_acc == hf_acc}")
    print(f"ratio kitchen/hf: wall {kitchen_wall / hf_wall:.2f}, cpu {kitchen_cpu / hf_cpu:.2f}")


if __name__ == "__main__":
    main()
