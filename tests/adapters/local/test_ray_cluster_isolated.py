"""A cluster whose second node shares nothing with the driver but Ray and the Python environment
(tests/adapters/local/ray_cluster.py, `isolated`: a mount namespace hiding the checkout and the
driver's /tmp, its own working directory): the workers there get kitchen's code through Ray
(`py_modules`), rendezvous on the addresses Ray reports, the driver alone writes the checkpoints,
and a model folder only the driver has fails with an error naming the folder and the node.
Slow: starting two Ray nodes and the runs take a minute or more."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from adapters.common.tiny import TINY_DIR
from adapters.local.model_loading import load_base_model
from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from tests.adapters.local.ray_cluster import CHECKOUT, RayCluster, isolation_problem
from tests.adapters.local.test_ray_cluster import placements

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 900.0
"""Two workers' start-up (Ray ships kitchen's packages to the node first) and three steps, on 2 busy cores."""
METRIC = "train_mean_nll"


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    problem = isolation_problem()
    if problem is not None:
        pytest.skip(problem)
    ray_cluster = RayCluster()
    try:
        ray_cluster.start()
        ray_cluster.add_node("second", "kitchen_second", isolated=True)
        yield ray_cluster
    finally:
        ray_cluster.stop()


def kitchen_run(run_dir: Path, env: dict[str, str], *overrides: str) -> subprocess.CompletedProcess[str]:
    args = ["run", "sl_basic", f"log_path={run_dir}", "eval.every=0", "checkpoint.save_every=1"]
    return subprocess.run(
        [sys.executable, "-m", "kitchen", *args, "data.batch_size=8", "data.max_steps=3", *overrides],
        env={**env, "OMP_NUM_THREADS": "1"},
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def on_cluster(cluster: RayCluster) -> list[str]:
    return ["local.num_workers=2", f"local.ray_address={cluster.address}", "local.worker_timeout_s=300"]


def files_named(root: Path, names: set[str]) -> list[Path]:
    return [path for path in root.rglob("*") if path.name in names]


def test_workers_on_a_node_that_shares_no_disk_train_as_one_process_and_only_the_driver_writes(
    cluster: RayCluster, tmp_path: Path
) -> None:
    second = cluster.nodes["second"]
    assert not (second.root / "tmp" / tmp_path.relative_to("/tmp")).exists()  # the node's /tmp is its own
    before = placements(cluster)
    done = kitchen_run(tmp_path / "cluster", cluster.env, *on_cluster(cluster), "local.cpu_threads=1")
    assert done.returncode == 0, done.stderr[-4000:]
    assert placements(cluster) - before == Counter(node.ip for node in cluster.nodes.values())

    records = read_records(tmp_path / "cluster" / "checkpoints.jsonl")
    assert [r.step for r in records if r.state_path] == [1, 2, 3, 3]  # after each step, then "final"
    assert all((tmp_path / "cluster" / str(r.state_path)).is_dir() for r in records if r.state_path)
    # the checkpoints are the driver's: nothing of them on the node's own disk
    assert files_named(second.root, {"weights.safetensors", "optimizer.pt", "checkpoints.jsonl"}) == []

    alone = kitchen_run(tmp_path / "alone", dict(os.environ), "local.num_workers=1")
    assert alone.returncode == 0, alone.stderr[-4000:]
    ours, theirs = (
        [row[METRIC] for row in read_metrics(tmp_path / name / "metrics.jsonl") if METRIC in row]
        for name in ("cluster", "alone")
    )
    assert len(ours) == len(theirs) == 3
    assert ours == pytest.approx(theirs, rel=1e-5)  # the distributed docs' tolerance


def test_a_model_folder_only_the_driver_has_fails_naming_the_folder_and_the_node(
    cluster: RayCluster, tmp_path: Path
) -> None:
    folder = tmp_path / "model"  # the driver's /tmp: hidden from the isolated node
    model: Any = load_base_model("tiny", torch.float32)  # a transformers model: save_pretrained
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(TINY_DIR / name, folder / name)
    done = kitchen_run(tmp_path / "run", cluster.env, *on_cluster(cluster), f"model_name={folder}")
    assert done.returncode == 2, done.stderr[-4000:]
    second = cluster.nodes["second"].ip
    assert f"the folder {folder} is on the driver's machine but not on node {second}" in done.stderr, done.stderr[
        -4000:
    ]
    assert "Traceback" not in done.stderr
