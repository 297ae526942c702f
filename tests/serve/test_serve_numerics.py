"""rl_numerics_check through `kitchen serve --backend local` with the real tinker SDK
(`backend=tinker`): the trainer's logprobs over HTTP equal the sampler's on every turn of a
multi-thousand-token episode on `tiny64k` (served by name from a models file), within the local
backend's float32 tolerance."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.metrics import read_metrics
from kitchen.families.rl.numerics import FP32_LOGPROB_TOLERANCE
from tests.serve.server_process import API_KEY, ServerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("numerics")
    models = folder / "models.yaml"
    models.write_text("tiny64k: tiny64k\n", encoding="utf-8")
    process = ServerProcess(folder / "store", backend="local", extra=["--models", str(models)]).start()
    yield process
    process.stop()


def test_served_trainer_agrees_with_the_served_sampler_on_every_turn(
    server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINKER_API_KEY", API_KEY)
    recipe = get_recipe("rl_numerics_check")
    overrides = ["backend=tinker", f"tinker.base_url={server.url}", "model_name=tiny64k", f"log_path={tmp_path}"]
    overrides += ["lora_rank=4", "env.num_pages=3", "env.page_words=420", "rl.group_size=2", "checkpoint.save_every=0"]
    rows = read_metrics(run_recipe(recipe, load_config(recipe.config_cls, None, overrides), progress=False).metrics)
    assert len(rows) == 2
    for row in rows:
        assert row["env/all/episode_tokens"] > 2048
        assert row["numerics/turns"] == 4
        assert row["num_datums"] == 2  # one per episode
        assert row["numerics/max_abs_diff"] <= FP32_LOGPROB_TOLERANCE
