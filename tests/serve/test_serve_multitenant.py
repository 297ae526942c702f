"""Several SDK clients training LoRAs on one base at once through `kitchen serve --backend local`:
every request answered once (no future lost or crossed between tenants), and each tenant's
training exactly what it is alone (losses and logprobs within 1e-5, relative, of a solo run with
the same seed). `benchmarks/serve_multitenant.py` runs the long version (8 tenants, 100 steps,
with the server's memory and throughput). Tenants in an RL-like loop (sample, then train on the
samples) sample together what they sample alone.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.serve.multitenant import max_relative_difference, rl_tenant, train_tenant, train_together
from tests.serve.server_process import ServerProcess

pytestmark = pytest.mark.slow  # a local server and 4 tenants training the tiny model

TENANTS, STEPS = 4, 4


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("tenants") / "store", backend="local").start()
    yield process
    process.stop()


def test_concurrent_tenants_train_as_they_would_alone(server: ServerProcess) -> None:
    together = train_together(server.url, TENANTS, STEPS)
    for result in together:
        alone = train_tenant(server.url, result.tenant, STEPS)
        assert len(result.losses) == STEPS and result.losses == pytest.approx(alone.losses, rel=1e-5)
        assert max_relative_difference(result.logprobs, alone.logprobs) <= 1e-5
        assert result.losses[-1] < result.losses[0]  # each learned its own batch
    distinct = {tuple(r.logprobs[0]) for r in together}
    assert len(distinct) == TENANTS  # no tenant got another's answers


def test_concurrent_tenants_sample_as_they_would_alone(server: ServerProcess) -> None:
    """Two RL steps: the second samples each tenant's trained adapters (the first, untrained ones
    all alike); its samples decode with the other tenants' when they wait together."""
    together = train_together(server.url, TENANTS, 2, None, "tiny", rl_tenant)
    for result in together:
        alone = rl_tenant(server.url, result.tenant, 2)
        assert [len(row) for row in result.logprobs] == [len(row) for row in alone.logprobs]
        # float rounding of the first step's joint decode, carried through one Adam step
        assert max_relative_difference(result.logprobs, alone.logprobs) <= 1e-4
    assert len({tuple(r.logprobs[0]) for r in together}) == TENANTS  # each its own adapters
