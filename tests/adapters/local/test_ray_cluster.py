"""kitchen joining a Ray cluster it did not start: a head and a second node started with
`ray start` (tests/adapters/local/ray_cluster.py), `kitchen run sl_basic` and `dpo` with two FSDP2
workers and `local.ray_address`, one worker placed on each node (read back from Ray's own state),
and the losses of the one-process run. Slow: starting two Ray nodes and the run take a minute or more."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from kitchen.engine.runs.metrics import read_metrics
from tests.adapters.local.ray_cluster import CHECKOUT, RayCluster

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 900.0
"""Two workers' start-up and three steps, on 2 busy cores."""
ACTORS = """
import json
from ray.util.state import list_actors, list_nodes
address = "http://127.0.0.1:{port}"
nodes = {{n.node_id: n.node_ip for n in list_nodes(address=address)}}
actors = list_actors(address=address, filters=[("class_name", "=", "TrainingWorker")], detail=True, limit=1000)
print(json.dumps([nodes[a.node_id] for a in actors]))
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    ray_cluster = RayCluster()
    try:
        ray_cluster.start()
        ray_cluster.add_node("second", "kitchen_second", isolated=False)
        yield ray_cluster
    finally:
        ray_cluster.stop()


def kitchen_run(recipe: str, run_dir: Path, env: dict[str, str], *overrides: str) -> None:
    args = ["run", recipe, f"log_path={run_dir}", "eval.every=0", "checkpoint.save_every=0"]
    args += ["data.batch_size=8", "data.max_steps=3", *overrides]
    done = subprocess.run(
        [sys.executable, "-m", "kitchen", *args],
        env={**env, "OMP_NUM_THREADS": "1"},
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]


def losses(run_dir: Path, metric: str) -> list[float]:
    return [row[metric] for row in read_metrics(run_dir / "metrics.jsonl") if metric in row]


def placements(cluster: RayCluster) -> Counter[str]:
    """The node address of every training worker the cluster has run (dead ones included)."""
    return Counter(cluster.run(ACTORS.format(port=cluster.dashboard)))


@pytest.mark.parametrize(("recipe", "metric"), [("sl_basic", "train_mean_nll"), ("dpo", "dpo_loss")])
def test_a_run_on_a_joined_cluster_puts_one_worker_on_each_node_and_matches_one_process(
    cluster: RayCluster, tmp_path: Path, recipe: str, metric: str
) -> None:
    before = placements(cluster)
    kitchen_run(
        recipe,
        tmp_path / "cluster",
        cluster.env,
        "local.num_workers=2",
        f"local.ray_address={cluster.address}",
        "local.worker_timeout_s=300",
        "local.cpu_threads=1",
    )
    assert placements(cluster) - before == Counter(node.ip for node in cluster.nodes.values())

    kitchen_run(recipe, tmp_path / "alone", dict(os.environ), "local.num_workers=1")
    on_cluster, alone = losses(tmp_path / "cluster", metric), losses(tmp_path / "alone", metric)
    assert len(on_cluster) == len(alone) == 3
    # the distributed docs: losses agree with one process to ~1e-7 relative
    assert on_cluster == pytest.approx(alone, rel=1e-5)
