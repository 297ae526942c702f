"""Failures as the real tinker SDK meets them, from a misbehaving local endpoint (`faulty_server`):
a 4xx while a result is fetched, an answer lost on the way back (the SDK resubmits), and an
endpoint that only ever answers 503 (issue 29: progress lines and a total deadline)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import tinker

from adapters.tinker.backend import TinkerBackend
from adapters.tinker.errors import TinkerCallError
from adapters.tinker.redaction import Redactor
from adapters.tinker.retry import RetryPolicy
from kitchen.engine.secrets import install_logging_filter
from tests.serve.faulty_server import Fault, faulty_server
from tests.serve.server_process import API_KEY
from train_core.types import AdamParams, Datum, ModelInput, TensorData

TOKENS = [5, 17, 99, 230, 41, 8, 77, 300]


def datum() -> Datum:
    n = len(TOKENS) - 1
    return Datum(
        ModelInput.from_ints(TOKENS[:-1]),
        {
            "target_tokens": TensorData.from_list(TOKENS[1:], "int64"),
            "weights": TensorData.from_list([1.0] * n, "float32"),
        },
    )


def backend_on(url: str, policy: RetryPolicy | None = None) -> TinkerBackend:
    policy = policy or RetryPolicy(max_retries=2, base_delay_s=0.0, max_delay_s=0.0)
    return TinkerBackend(tinker.ServiceClient(base_url=url, api_key=API_KEY), retry=policy, redactor=Redactor(API_KEY))


def test_a_4xx_while_fetching_a_result_is_named(tmp_path: Path) -> None:
    """Defect 1: the SDK raises ValueError for a 4xx during polling; it must become a named call error."""
    with faulty_server(tmp_path / "store", [Fault("/retrieve_future", 404, times=-1)]) as (url, _):

        async def main() -> None:
            backend = backend_on(url)
            with pytest.raises(TinkerCallError, match=r"^tinker create_training_client failed: ValueError: .*404"):
                await backend.create_training_client("tiny", lora_rank=4)

        asyncio.run(main())


def test_a_lost_answer_is_resubmitted_and_runs_once(tmp_path: Path) -> None:
    """Defect 2: the SDK resubmits after a 5xx; the server runs the request once and answers both."""
    faults = [Fault("/optim_step", 500, times=1, after=True)]
    with faulty_server(tmp_path / "store", faults) as (url, injector):

        async def main() -> tuple[list[float], list[float]]:
            backend = backend_on(url)
            lossy = await backend.create_training_client("tiny", lora_rank=4, seed=1)
            clean = await backend.create_training_client("tiny", lora_rank=4, seed=1)
            for client in (lossy, clean):
                await (await client.forward_backward([datum()], "cross_entropy"))
                await (await client.optim_step(AdamParams(learning_rate=0.05)))
            outs = [await (await c.forward([datum()], "cross_entropy")) for c in (lossy, clean)]
            await backend.close()
            lossy_lps, clean_lps = (list(map(float, o.loss_fn_outputs[0]["logprobs"].data)) for o in outs)
            return lossy_lps, clean_lps

        lossy_lps, clean_lps = asyncio.run(main())
        assert injector.seen["/api/v1/optim_step"] == 3  # lossy: sent twice; clean: once
        assert lossy_lps == clean_lps  # one step, not two


@pytest.mark.slow
def test_a_broken_endpoint_says_so_and_gives_up_at_the_deadline(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 29: an endpoint that answers only 503 is reported while the SDK retries, and the call
    fails after `tinker.request_timeout_s` instead of staying silent for many minutes."""
    caplog.set_level(logging.WARNING, logger="kitchen.tinker")
    # As in any run: kitchen's redaction formats each log record when it is made (it used to hide
    # the SDK's answers from the watch when an earlier test in the process had run a recipe).
    install_logging_filter()
    # A deadline long enough that even a loaded machine sees the SDK's first 503s before it.
    policy = RetryPolicy(max_retries=0, request_timeout_s=20.0, progress_interval_s=1.0)
    with faulty_server(tmp_path / "store", [Fault("/api/v1/", 503, times=-1)]) as (url, _):

        async def main() -> None:
            backend = backend_on(url, policy)
            with pytest.raises(TinkerCallError) as info:
                await backend.create_training_client("tiny", lora_rank=4)
            assert "tinker.request_timeout_s=20 s" in str(info.value)
            assert "503 Service Unavailable" in str(info.value)

        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if r.name == "kitchen.tinker"]
    assert any(line.startswith("retrying create_training_client: 503 Service Unavailable, attempt") for line in lines)
