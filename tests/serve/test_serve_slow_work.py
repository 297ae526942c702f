"""Slow work and full fine-tunes through the real tinker SDK: `kitchen serve --backend noop
--full-finetune --long-poll-s 0.2` with every forward_backward taking 1 s (the noop backend's
simulated latency), so a result fetch outlasts several long polls."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import tinker
from tinker import types

from tests.serve.server_process import API_KEY, ServerProcess
from tests.serve.test_serve_sdk import TOKENS, sft_datum

pytestmark = pytest.mark.slow

LONG_POLL_S = 0.2
STEP_S = 1.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    extra = ["--full-finetune", "--long-poll-s", str(LONG_POLL_S), f"noop.latency={{forward_backward: {STEP_S}}}"]
    process = ServerProcess(tmp_path_factory.mktemp("slow") / "store", backend="noop", extra=extra).start()
    yield process
    process.stop()


def test_a_step_longer_than_the_long_poll_is_answered_try_again_then_its_result(
    service: tinker.ServiceClient, server: ServerProcess
) -> None:
    training = service.create_lora_training_client("tiny", rank=4).result()
    pending = training.forward_backward([sft_datum(TOKENS)], "cross_entropy")
    # the server names a training request by model and seq_id: the first one of a client is 1
    answer = httpx.post(
        f"{server.url}/api/v1/retrieve_future",
        json={"request_id": f"{training.model_id}#1"},
        headers={"X-API-Key": API_KEY},
        timeout=10,
    )
    assert answer.status_code == 200 and answer.json()["type"] == "try_again"
    assert "loss:sum" in pending.result(timeout=60).metrics
    training.optim_step(types.AdamParams(learning_rate=0.01)).result(timeout=60)


def test_full_finetune_trains_all_weights_whatever_rank_is_asked(
    service: tinker.ServiceClient, server: ServerProcess
) -> None:
    training = service.create_lora_training_client("tiny", rank=4).result()
    info = training.get_info()
    assert info.is_lora is False and info.lora_rank is None
    run = tinker.RestClient(base_url=server.url, api_key=API_KEY).get_training_run(training.model_id).result()
    assert run.is_lora is False
