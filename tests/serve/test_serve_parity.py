"""One RL and one DPO recipe give the same per-step metrics through `kitchen serve --backend local`
(`backend=tinker`: the real tinker SDK over HTTP) as with `backend=local` in-process.

Same keys, and every value within 1e-5. What this pins down: LoRA init from the client's seed,
sampling seeds carried in the request, the SDK's two-phase custom loss (DPO) against the local
backend's one-pass one (same `loss:sum`, `surrogate_loss:sum`, `padding_fraction:mean`), the RL
warm start's new client from state, and DPO's step-0 accuracy, which used to count float32 ties
that the server's batching of reference requests broke otherwise than in-process batching.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.metrics import read_metrics
from tests.rl_workflow.runs import without_times
from tests.serve.server_process import API_KEY, ServerProcess

pytestmark = pytest.mark.slow

RECIPES = {
    "math_rl": [
        "lora_rank=4",
        "rl.num_batches=2",
        "rl.groups_per_batch=2",
        "rl.group_size=4",
        "warm_start.steps=1",
        "eval.every=0",
        "checkpoint.save_every=0",
        "rl.transcript_groups=0",
    ],
    "dpo": [
        "lora_rank=4",
        "data.max_steps=2",
        "data.batch_size=4",
        "data.max_length=64",
        "eval.every=0",
        "checkpoint.save_every=0",
        "data.eval_dataset=null",
        "renderer=role_colon",
    ],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("parity") / "store", backend="local").start()
    yield process
    process.stop()


def run(name: str, log_path: Path, *backend: str) -> list[dict[str, Any]]:
    recipe = get_recipe(name)
    config = load_config(recipe.config_cls, None, [*backend, f"log_path={log_path}", *RECIPES[name]])
    return without_times(read_metrics(run_recipe(recipe, config, progress=False).metrics))


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_serve_local_logs_what_backend_local_logs(
    name: str, server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINKER_API_KEY", API_KEY)
    local = run(name, tmp_path / "local", "backend=local")
    served = run(name, tmp_path / "served", "backend=tinker", f"tinker.base_url={server.url}")
    assert len(served) == len(local) >= 2
    for step, (got, want) in enumerate(zip(served, local, strict=True)):
        assert sorted(got) == sorted(want), f"step {step}: metric keys differ"
        assert got == pytest.approx(want, rel=1e-5, abs=1e-5), f"step {step}"
