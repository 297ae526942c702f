"""The backends every contract test runs against: a name -> factory(tmp_path) -> ServiceBackend.

Each test in `tests/contract/` runs once per entry of `BACKEND_FACTORIES`, always with base model
`"tiny"` (the embedded tiny model and tokenizer), so a backend must accept that name. To put a
new backend under the contract, add ONE line to the dict, e.g.

    "noop": lambda tmp_path: NoopBackend(checkpoint_dir=tmp_path),

Import heavy or optional adapters inside the factory (as `_local` does), so one backend's import
error fails only its own tests; marks for a backend's tests (slow, a skip) go in `BACKEND_MARKS`.
Run a single backend with `pytest tests/contract -k noop`.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

from adapters.noop import NoopBackend
from kitchen.engine.ports import ServiceBackend

if TYPE_CHECKING:
    from adapters.local.distributed import WorkerPool

BackendFactory = Callable[[Path], ServiceBackend]


def _local(tmp_path: Path) -> ServiceBackend:
    from adapters.local import LocalBackend

    return LocalBackend(checkpoint_dir=tmp_path)


_WORKER_POOLS: list[WorkerPool] = []
"""The distributed entry's one WorkerPool, made on first use: every contract test reuses its
worker processes (starting two takes seconds); `pytest_runtest_teardown` stops them at the end."""


def _distributed(tmp_path: Path) -> ServiceBackend:
    """The local backend on two FSDP2 workers (Ray actors, gloo on the cpu)."""
    from adapters.local import LocalBackend
    from adapters.local.distributed import DistributedOptions, WorkerPool

    if not _WORKER_POOLS:
        _WORKER_POOLS.append(WorkerPool())
    # The default 600 s per call: Ray's workers take minutes to start on 2 loaded cores.
    options = DistributedOptions(num_workers=2, cpu_threads=1)
    return LocalBackend(checkpoint_dir=tmp_path, distributed=options, worker_pool=_WORKER_POOLS[0])


def _tinker(tmp_path: Path) -> ServiceBackend:
    """The tinker adapter on the real tinker SDK, against `kitchen serve --backend noop` on 127.0.0.1
    (one server for the session)."""
    import tinker

    from adapters.tinker.backend import TinkerBackend
    from adapters.tinker.redaction import Redactor
    from adapters.tinker.retry import RetryPolicy
    from adapters.tinker.training_client import TinkerTrainingClient
    from tests.serve.server_process import API_KEY, shared_server

    class LoraForFullTinkerBackend(TinkerBackend):
        """The suite also exercises full fine-tuning (`lora_rank=None`), which the Tinker service
        does not offer; those cases train a LoRA of rank 4 here. The real refusal of
        `lora_rank=None` is tested in `tests/adapters/tinker/test_tinker_errors.py`."""

        async def create_training_client(
            self, base_model: str, lora_rank: int | None = None, seed: int = 0
        ) -> TinkerTrainingClient:
            return await super().create_training_client(base_model, lora_rank=lora_rank or 4, seed=seed)

    url = shared_server().url
    retry = RetryPolicy(max_retries=3, base_delay_s=0.0, max_delay_s=0.0)
    client = tinker.ServiceClient(base_url=url, api_key=API_KEY)
    return LoraForFullTinkerBackend(client, retry=retry, redactor=Redactor(API_KEY), base_url=url)


BACKEND_FACTORIES: dict[str, BackendFactory] = {
    "noop": lambda tmp_path: NoopBackend(checkpoint_dir=tmp_path),
    "local": _local,
    "distributed": _distributed,
    "tinker": _tinker,
}

_NO_RAY = importlib.util.find_spec("ray") is None
BACKEND_MARKS: dict[str, tuple[pytest.MarkDecorator, ...]] = {
    "distributed": (
        pytest.mark.slow,
        pytest.mark.skipif(
            _NO_RAY, reason="the distributed local backend needs Ray (pip install 'kitchen[distributed]')"
        ),
    ),
}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the last contract test (and its backend's teardown): stop the distributed entry's
    workers, and Ray, if they were started, so they do not idle through the rest of the suite."""
    try:
        yield
    finally:
        if _WORKER_POOLS and (nextitem is None or Path(__file__).parent not in nextitem.path.parents):
            import ray

            _WORKER_POOLS.pop().close()
            ray.shutdown()


@pytest.fixture(params=[pytest.param(name, marks=BACKEND_MARKS.get(name, ())) for name in sorted(BACKEND_FACTORIES)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServiceBackend]:
    """A fresh backend writing checkpoints under the test's tmp_path; closed after the test.

    Torch runs single-threaded meanwhile: the tiny model's ops are too small to gain from
    intra-op threads, and on a busy machine those threads contend (sampling ran 40x slower).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    service = BACKEND_FACTORIES[request.param](tmp_path)
    try:
        yield service
        asyncio.run(service.close())
    finally:
        torch.set_num_threads(threads)
