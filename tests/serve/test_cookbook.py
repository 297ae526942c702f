"""tinker-cookbook's own recipes, unmodified, against `kitchen serve` (an optional stack:
`bash scripts/setup_cookbook.sh`).

The cookbook loads the tokenizer itself from `model_name`, so the model is named by a local
folder: kitchen's embedded tiny model (`adapters/common/tiny`), mapped to `tiny` in the server's
models file. Its renderer is given explicitly (`renderer_name=role_colon`: the cookbook picks one
from hub names only). The data are offline: `chat_sl` trains on the conversations file the
cookbook ships, `math_rl` on its generated arithmetic problems; `math_rl`'s default loss,
`stable_reinforce`, needs sampling-time data only the Tinker service records, so the run names
`importance_sampling` (kitchen serve refuses `stable_reinforce` with a 400 naming the losses it
runs).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serve.server_process import API_KEY, ROOT, ServerProcess

COOKBOOK = importlib.util.find_spec("tinker_cookbook") is not None
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not COOKBOOK, reason="tinker-cookbook is not installed (bash scripts/setup_cookbook.sh)"),
]
TINY = ROOT / "adapters" / "common" / "tiny"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("cookbook_serve")
    models = folder / "models.yaml"
    models.write_text(f"{TINY}: tiny\n", encoding="utf-8")
    process = ServerProcess(folder / "store", backend="local", extra=["--models", str(models)]).start()
    yield process
    process.stop()


def run_cookbook(module: str, server: ServerProcess, log_path: Path, *args: str) -> list[dict[str, float]]:
    """`python -m tinker_cookbook.<module> ARGS` against the server, offline; its metrics rows."""
    env = {**os.environ, "TINKER_API_KEY": API_KEY, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    command = [sys.executable, "-m", f"tinker_cookbook.{module}", f"base_url={server.url}", f"model_name={TINY}"]
    command += ["renderer_name=role_colon", f"log_path={log_path}", "behavior_if_log_dir_exists=delete", *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = (log_path / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_the_cookbooks_chat_sl_recipe_trains_through_kitchen_serve(server: ServerProcess, tmp_path: Path) -> None:
    import tinker_cookbook

    conversations = Path(tinker_cookbook.__file__).parent / "example_data" / "conversations.jsonl"
    rows = run_cookbook(
        "recipes.chat_sl.train",
        server,
        tmp_path / "chat_sl",
        f"dataset={conversations}",
        "lora_rank=8",
        "batch_size=16",
        "max_length=256",
        "learning_rate=1e-3",
        "num_epochs=2",
    )
    nll = [row["train_mean_nll"] for row in rows if "train_mean_nll" in row]
    assert len(nll) >= 10
    assert sum(nll[-3:]) / 3 < sum(nll[:3]) / 3  # it learns, through the server


def test_the_cookbooks_math_rl_recipe_runs_through_kitchen_serve(server: ServerProcess, tmp_path: Path) -> None:
    rows = run_cookbook(
        "recipes.math_rl.train",
        server,
        tmp_path / "math_rl",
        "env=arithmetic",
        "loss_fn=importance_sampling",
        "lora_rank=8",
        "group_size=2",
        "groups_per_batch=4",
        "max_tokens=8",
        "learning_rate=1e-3",
        "eval_every=0",
        "save_every=50",
    )
    rewards = [row["env/all/reward/total"] for row in rows if "env/all/reward/total" in row]
    assert len(rewards) == 100  # the recipe's 100 batches of generated problems, every one trained
    assert all(key in rows[0] for key in ("optim/kl_sample_train_v1", "env/all/correct"))
