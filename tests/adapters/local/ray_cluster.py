"""A real Ray cluster for the tests: a head and worker nodes started with `ray start` on loopback.

Each node is its own set of Ray processes (GCS on the head, a raylet, agents) with its own
loopback address (127.0.0.2 for the head, .3, .4, ... for the others), ports and temp dir under
one root; they join as separate machines would, over TCP. (Ray takes "127.0.0.1" and "localhost"
to mean this machine's outward address, so the nodes use the rest of 127.0.0.0/8.) A node started
`isolated` runs in a mount namespace (bubblewrap) that shows it nothing of the driver's side: the
checkout (kitchen's source) and the whole /tmp (the driver's run directories) are hidden, and its
/tmp and working directory are its own folders. Only the Python environment is shared (as a
cluster's nodes share an image): kitchen's code must come through Ray. A node started with
`own_shared_memory` (isolated or not) has a /dev/shm of its own, as another machine has: nothing
the driver puts in shared memory reaches it except through Ray (its object store lives there).

Every process of the cluster carries `MARK` in its environment (the raylets pass their
environment on to the workers they start), and `stop` ends exactly those: `ray stop` would end
every Ray process on this machine, other test sessions' included, since it matches processes by
name. Nodes authenticate with a token of their own (Ray >= 2.5x turns token authentication on by
default); a driver needs `env`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARK = "KITCHEN_TEST_RAY_CLUSTER"
NODE_MARK = "KITCHEN_TEST_RAY_NODE"
CHECKOUT = Path(__file__).resolve().parents[3]
RAY = str(Path(sys.executable).with_name("ray"))
HEAD_IP = "127.0.0.2"
START_TIMEOUT_S = 300.0
"""`ray start` on 2 busy cores: 10-30 s each."""

HEALTH_CHECKS = {
    # a lost node is declared dead after ~3 s (Ray's default: 3 s x 5 misses, after a 5 s timeout each)
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def isolation_problem() -> str | None:
    """Why an isolated node cannot run here, or None."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed: scripts/setup.sh installs it as root"
    probe = subprocess.run(
        ["bwrap", "--dev-bind", "/", "/", "--tmpfs", "/tmp", "true"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        return f"bubblewrap cannot make a mount namespace here: {probe.stderr.strip()}"
    return None


@dataclass(frozen=True)
class Node:
    name: str
    resource: str
    """The custom resource (1 unit) the node declares: `{resource: 1}` places work on it."""
    ip: str
    root: Path
    """Its folder, as this process sees it (an isolated node sees its own /tmp and working dir there)."""


class RayCluster:
    """A head node (`start`) and worker nodes (`add_node`), all on 127.0.0.1."""

    def __init__(self) -> None:
        # short: Ray's unix sockets live under the temp dir (path limit 107 bytes)
        self.root = Path(tempfile.mkdtemp(prefix="kr-", dir="/tmp"))
        self.port = free_port()
        self.address = f"{HEAD_IP}:{self.port}"
        self.dashboard = free_port()
        self.nodes: dict[str, Node] = {}
        self._token = secrets.token_hex(32)

    @property
    def env(self) -> dict[str, str]:
        """The environment of a process that joins the cluster (a driver, a state query)."""
        env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self._token, RAY_USAGE_STATS_ENABLED="0")
        return env

    def _node_env(self, name: str) -> dict[str, str]:
        return {**self.env, **HEALTH_CHECKS, MARK: str(self.root), NODE_MARK: name}

    def start(self, resource: str = "kitchen_head") -> Node:
        """The head: GCS on `self.port`, the dashboard (Ray's state API) on `self.dashboard`."""
        node = Node("head", resource, HEAD_IP, self.root / "head")
        node.root.mkdir()
        self._ray_start(
            node,
            [
                "--head",
                f"--port={self.port}",
                f"--temp-dir={node.root}",
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={self.dashboard}",
                f"--ray-client-server-port={free_port()}",
            ],
            self._node_env("head"),
            node.root,
        )
        return node

    def add_node(self, name: str, resource: str, isolated: bool, own_shared_memory: bool = False) -> Node:
        """A worker node declaring `{resource: 1}`; `isolated`: it sees neither the checkout nor the
        driver's /tmp; `own_shared_memory`: nor the driver's /dev/shm (see the module docstring)."""
        node = Node(name, resource, f"127.0.0.{len(self.nodes) + 2}", self.root / name)
        (node.root / "tmp").mkdir(parents=True)
        (node.root / "work").mkdir()
        temp, work, prefix = node.root / "tmp" / "ray", node.root / "work", []
        if isolated:
            temp, work = Path("/tmp/ray"), Path("/work-dir")
            prefix = ["bwrap", "--dev-bind", "/", "/", "--tmpfs", str(CHECKOUT)]
            prefix += ["--bind", str(node.root / "tmp"), "/tmp", "--bind", str(node.root / "work"), str(work)]
            environment = Path(sys.prefix)
            if environment.is_relative_to(CHECKOUT) or environment.is_relative_to("/tmp"):
                # the environment (as a node's image has it), shown again over what hid it: last
                prefix += ["--ro-bind", sys.prefix, sys.prefix]
            prefix += ["--chdir", str(work), "--"]
        if own_shared_memory:
            prefix = (prefix[:-1] if prefix else ["bwrap", "--dev-bind", "/", "/"]) + ["--tmpfs", "/dev/shm", "--"]
        args = [f"--address={self.address}", f"--temp-dir={temp}"]
        self._ray_start(node, args, self._node_env(name), node.root / "work", prefix)
        return node

    def _ray_start(
        self, node: Node, args: list[str], env: dict[str, str], cwd: Path, prefix: list[str] | None = None
    ) -> None:
        command = [
            *(prefix or []),
            RAY,
            "start",
            *args,
            f"--node-ip-address={node.ip}",
            "--num-cpus=1",
            f"--resources={json.dumps({node.resource: 1})}",
            f"--dashboard-agent-listen-port={free_port()}",
            "--object-store-memory=100000000",
            "--disable-usage-stats",
        ]
        log_path = self.root / f"{node.name}-start.log"
        with log_path.open("w") as log:  # not a pipe: the processes it starts would hold it open
            code = subprocess.run(
                command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, timeout=START_TIMEOUT_S, check=False
            ).returncode
        if code != 0:
            raise RuntimeError(f"ray start ({node.name}) failed:\n{log_path.read_text()}")
        self.nodes[node.name] = node

    def run(self, code: str, timeout_s: float = 120.0) -> Any:
        """`code` (Python printing one JSON value last) in a process joined to the cluster's env."""
        done = subprocess.run(
            [sys.executable, "-c", code], env=self.env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"cluster query failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    def processes(self, node: str | None = None) -> list[tuple[int, str]]:
        """(pid, name) of the cluster's processes (of one node's, given its name)."""
        wanted = [f"{MARK}={self.root}".encode()]
        if node is not None:
            wanted.append(f"{NODE_MARK}={node}".encode())
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                name = (entry / "comm").read_text().strip()
            except OSError:
                continue
            if all(item in environ for item in wanted):
                found.append((int(entry.name), name))
        return found

    def kill_raylet(self, node: str) -> int:
        """SIGKILL a node's raylet (as a machine that drops off would); its pid."""
        pids = [pid for pid, name in self.processes(node) if name == "raylet"]
        assert len(pids) == 1, pids
        os.kill(pids[0], signal.SIGKILL)
        return pids[0]

    def stop(self) -> None:
        """End every process of this cluster (SIGTERM, then SIGKILL after 10 s) and remove its files."""
        for signum, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            for pid, _ in self.processes():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)
            deadline = time.monotonic() + wait_s
            while self.processes() and time.monotonic() < deadline:
                time.sleep(0.2)
        shutil.rmtree(self.root, ignore_errors=True)
