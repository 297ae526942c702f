"""tinker-cookbook's own recipes, unmodified, against `kitchen serve` (optional stack).

Needs `bash scripts/setup_cookbook.sh` (tinker-cookbook 0.6.1 and what it imports). The recipes
read their data from the Hugging Face hub (`HuggingFaceH4/no_robots` for sl_loop, `openai/gsm8k`
for rl_loop) and pick a renderer from the model name, so they also need those data sets in the
local HF cache and a model folder whose name the cookbook recognises; each missing piece is a
skip that says which.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path

import pytest

COOKBOOK = importlib.util.find_spec("tinker_cookbook") is not None
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not COOKBOOK, reason="tinker-cookbook is not installed (bash scripts/setup_cookbook.sh)"),
]


def _cached_dataset(name: str, config: str | None = None) -> bool:
    import datasets

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        datasets.load_dataset(name, config)
    except Exception:
        return False
    return True


def _model_folder() -> Path:
    folder = os.environ.get("KITCHEN_COOKBOOK_MODEL")
    if not folder or not Path(folder).is_dir():
        pytest.skip(
            "set KITCHEN_COOKBOOK_MODEL to a local Qwen3 model folder (the cookbook picks its renderer by name)"
        )
    return Path(folder)


@pytest.mark.parametrize(
    ("recipe", "dataset"), [("sl_loop", ("HuggingFaceH4/no_robots", None)), ("rl_loop", ("openai/gsm8k", "main"))]
)
def test_cookbook_recipe_runs_against_kitchen_serve(
    recipe: str, dataset: tuple[str, str | None], tmp_path: Path
) -> None:
    if not _cached_dataset(*dataset):
        pytest.skip(f"the cookbook's {recipe} reads {dataset[0]} from the hub; it is not in the local HF cache")
    import chz

    from tests.serve.server_process import API_KEY, ServerProcess

    model = _model_folder()
    models_file = tmp_path / "models.yaml"
    models_file.write_text(f"{model}: {model}\n")
    server = ServerProcess(tmp_path / "store", backend="local", extra=["--models", str(models_file)]).start()
    try:
        os.environ["TINKER_API_KEY"] = API_KEY
        module = importlib.import_module(f"tinker_cookbook.recipes.{recipe}")
        config = (
            chz.Blueprint(module.Config)
            .apply(
                {"base_url": server.url, "model_name": str(model), "log_path": str(tmp_path / "run"), "lora_rank": 4}
            )
            .make()
        )
        if recipe == "rl_loop":
            config = chz.replace(config, loss_fn="importance_sampling")
        module.main(config)
        assert (tmp_path / "run" / "metrics.jsonl").read_text().strip()
    finally:
        server.stop()
