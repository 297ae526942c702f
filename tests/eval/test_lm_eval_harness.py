"""lm-evaluation-harness on kitchen's sampler: local task YAMLs over local JSONL (offline), the
three request kinds, and a cross-check against the harness's own Hugging Face backend on the same
exported model: same accuracy, same log-likelihoods. Needs the optional stack:
`bash scripts/setup_lm_eval.sh`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow
lm_eval = pytest.importorskip(
    "lm_eval", reason="lm-evaluation-harness is not installed (bash scripts/setup_lm_eval.sh)"
)

from kitchen.apps.cli import main  # noqa: E402
from kitchen.engine.config.loading import load_config  # noqa: E402
from kitchen.engine.launch import run_recipe  # noqa: E402
from kitchen.engine.recipe import get_recipe  # noqa: E402

QUESTIONS = [(x, y) for x in range(6) for y in range(4)]


def write_tasks(folder: Path) -> dict[str, Path]:
    """Three task YAMLs over one local JSONL of addition questions: multiple choice, rolling
    log-likelihood, and generation."""
    data = folder / "sums.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {
                    "question": f"What is {x} + {y}?",
                    "choices": [str(x + y + d) for d in (-1, 0, 1, 2)],
                    "label": 1,
                    "text": f"{x} plus {y} is {x + y}.",
                }
            )
            + "\n"
            for x, y in QUESTIONS
        )
    )
    common = f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\ntest_split: test\n"
    tasks = {
        "sums_mc": 'output_type: multiple_choice\ndoc_to_text: "User: {{question}}\\n\\nAssistant:"\n'
        "doc_to_choice: choices\ndoc_to_target: label\nmetric_list:\n  - metric: acc\n",
        "sums_rolling": 'output_type: loglikelihood_rolling\ndoc_to_text: ""\ndoc_to_target: "{{text}}"\n'
        "metric_list:\n  - metric: word_perplexity\n  - metric: bits_per_byte\n",
        "sums_gen": 'output_type: generate_until\ndoc_to_text: "User: {{question}}\\n\\nAssistant:"\n'
        'doc_to_target: "{{choices[1]}}"\ngeneration_kwargs:\n  until: ["\\n"]\n  max_gen_toks: 6\n  do_sample: false\n'
        "metric_list:\n  - metric: exact_match\n",
    }
    paths = {}
    for name, body in tasks.items():
        paths[name] = folder / f"{name}.yaml"
        paths[name].write_text(f"task: {name}\n{common}{body}")
    return paths


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A run of the tiny model (a few supervised steps) and its `kitchen export`."""
    root = tmp_path_factory.mktemp("lm_eval")
    recipe = get_recipe("sl_basic")
    config = load_config(
        recipe.config_cls, None, [f"log_path={root / 'run'}", "data.max_steps=3", "checkpoint.save_every=100"]
    )
    run = run_recipe(recipe, config, progress=False).path
    assert main(["export", str(run), "--out", str(root / "hf")]) == 0
    return run, root / "hf"


def kitchen_harness(target: Path, tasks: list[Path], out: Path, *extra: str) -> dict[str, Any]:
    spec = ",".join(str(t) for t in tasks)
    assert main(["eval", str(target), "--harness", "lm-eval", "--tasks", spec, "--out", str(out), *extra]) == 0
    return json.loads((out / "results.json").read_text())


def hf_harness(model_dir: Path, tasks: list[Path]) -> dict[str, Any]:
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(tasks[0].parent))
    return lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={model_dir},dtype=float32,device=cpu",
        tasks=[t.stem for t in tasks],
        task_manager=manager,
        batch_size=8,
        log_samples=True,
        random_seed=0,
        numpy_random_seed=0,
        torch_random_seed=0,
        fewshot_random_seed=0,
    )


def rows(results: dict[str, Any]) -> dict[tuple[str, str], float]:
    return {(r["task"], r["metric"]): r["value"] for r in results["results"]}


def test_same_accuracy_and_loglikelihoods_as_the_hf_backend(
    exported: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, model_dir = exported
    tasks = write_tasks(tmp_path)
    started = time.perf_counter()
    ours = kitchen_harness(run, [tasks["sums_mc"], tasks["sums_rolling"]], tmp_path / "ours")
    kitchen_s = time.perf_counter() - started
    started = time.perf_counter()
    theirs = hf_harness(model_dir, [tasks["sums_mc"], tasks["sums_rolling"]])
    hf_s = time.perf_counter() - started
    ours_rows = rows(ours)
    assert ours_rows[("sums_mc", "acc")] == theirs["results"]["sums_mc"]["acc,none"]
    assert ours_rows[("sums_rolling", "word_perplexity")] == pytest.approx(
        theirs["results"]["sums_rolling"]["word_perplexity,none"], rel=1e-4
    )
    ours_samples = [json.loads(line) for line in (tmp_path / "ours" / "samples" / "sums_mc.jsonl").open()]
    assert len(ours_samples) == len(QUESTIONS) == len(theirs["samples"]["sums_mc"])
    with capsys.disabled():
        ratio = kitchen_s / hf_s
        print(f"\nlm-eval sums_mc + sums_rolling: kitchen {kitchen_s:.1f} s, hf {hf_s:.1f} s, ratio {ratio:.2f}")


def test_generation_is_seeded_and_chat_prompts_use_the_renderer(exported: tuple[Path, Path], tmp_path: Path) -> None:
    run, _ = exported
    tasks = write_tasks(tmp_path)
    first = kitchen_harness(run, [tasks["sums_gen"]], tmp_path / "a", "--limit", "6")
    again = kitchen_harness(run, [tasks["sums_gen"]], tmp_path / "b", "--limit", "6")
    assert rows(first) == rows(again) and ("sums_gen", "exact_match") in rows(first)
    read = [json.loads(line) for line in (tmp_path / "a" / "samples" / "sums_gen.jsonl").open()]
    assert len(read) == 6 and all("\n" not in s["response"] for s in read)
    chat = kitchen_harness(run, [tasks["sums_gen"]], tmp_path / "chat", "--limit", "2", "chat_template=true")
    prompts = [json.loads(line)["prompt"] for line in (tmp_path / "chat" / "samples" / "sums_gen.jsonl").open()]
    assert chat["config"]["tasks"]["sums_gen"]["chat_template"] is True
    assert all(p.startswith("User: User: What is") for p in prompts)  # role_colon around the task's text


def test_an_unknown_harness_task_is_a_clear_error(
    exported: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run, _ = exported
    assert main(["eval", str(run), "--harness", "lm-eval", "--tasks", "no_such_task_xyz"]) == 2
    assert "unknown lm-eval task 'no_such_task_xyz'" in capsys.readouterr().err
