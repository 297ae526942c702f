"""`kill -9` the server and start it again on the same store: every saved path still loads, the
records still list, and a client that retries through the outage carries on."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import tinker
from tinker import types

from tests.serve.server_process import API_KEY, ServerProcess

TOKENS = [5, 17, 99, 230, 41, 8, 77, 300]


def datum() -> types.Datum:
    n = len(TOKENS) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=TOKENS[1:], dtype="int64", shape=[n]),
            "weights": types.TensorData(data=[1.0] * n, dtype="float32", shape=[n]),
        },
    )


def logprobs(training: tinker.TrainingClient) -> list[float]:
    return [float(x) for x in training.forward([datum()], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].data]


@pytest.mark.slow
def test_saved_paths_load_after_kill_9_and_a_retrying_client_continues(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "store", backend="local").start()
    port = server.port
    try:
        client = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
        training = client.create_lora_training_client("tiny", rank=4, seed=2).result()
        training.forward_backward([datum()], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=0.01)).result()
        state = training.save_state("before-kill").result().path
        sampler = training.save_weights_for_sampler("before-kill").result().path
        trained = logprobs(training)
        prompt = types.ModelInput.from_ints(TOKENS)
        sampled = client.create_sampling_client(model_path=sampler).result().compute_logprobs(prompt).result()
        run_id = training.model_id

        server.kill9()
        # a request sent while the server is down: the SDK retries it until the server is back
        late: dict[str, object] = {}
        thread = threading.Thread(
            target=lambda: late.update(sampler=client.create_sampling_client(model_path=sampler).result())
        )
        thread.start()
        time.sleep(1.0)
        server = ServerProcess(tmp_path / "store", backend="local", port=port).start()
        thread.join(120)
        retried = late["sampler"]
        assert isinstance(retried, tinker.SamplingClient)
        assert retried.compute_logprobs(prompt).result() == sampled

        resumed = client.create_training_client_from_state_with_optimizer(state).result()
        assert logprobs(resumed) == pytest.approx(trained, abs=1e-6)
        rest = tinker.RestClient(base_url=server.url, api_key=API_KEY)
        assert {c.tinker_path for c in rest.list_checkpoints(run_id).result().checkpoints} == {state, sampler}
        # the old live client's run is gone with the process: a clear answer naming its last state
        with pytest.raises(Exception, match=r"no longer live.*before-kill"):
            training.forward([datum()], "cross_entropy").result()
        client.close("success").result()
    finally:
        server.stop()
