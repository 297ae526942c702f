"""The real tinker SDK (unmodified) against `kitchen serve --backend noop` on 127.0.0.1.

One server for the module. Each test drives the SDK the way a user's program does and checks
what comes back: training in order, every built-in loss, custom losses the SDK's way,
checkpoints by tinker:// path, samplers, REST listing and deleting, capabilities and info.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tinker
import torch
from tinker import types
from transformers import AutoTokenizer

from kitchen.engine.losses import get_loss_fn
from tests.serve.server_process import API_KEY, ServerProcess, shared_server
from train_core.errors import InvalidInputError

BASE = "tiny"


@pytest.fixture(scope="module")
def server() -> ServerProcess:
    """The session's shared noop server (these tests make their own clients and sessions)."""
    return shared_server()


def sft_datum(tokens_T: list[int]) -> types.Datum:
    n = len(tokens_T) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens_T[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=tokens_T[1:], dtype="int64", shape=[n]),
            "weights": types.TensorData(data=[1.0] * n, dtype="float32", shape=[n]),
        },
    )


def rl_datum(tokens_T: list[int], sampled_T: list[float], advantage: float) -> types.Datum:
    n = len(tokens_T) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens_T[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=tokens_T[1:], dtype="int64", shape=[n]),
            "logprobs": types.TensorData(data=sampled_T, dtype="float32", shape=[n]),
            "advantages": types.TensorData(data=[advantage] * n, dtype="float32", shape=[n]),
            # read by gspo only (its sequence-level ratio's tokens); the other losses ignore it
            "sequence_ratio_mask": types.TensorData(data=[1.0] * n, dtype="float32", shape=[n]),
        },
    )


TOKENS = [5, 17, 99, 230, 41, 8, 77, 300, 12, 64]


def logprobs(training: tinker.TrainingClient, datum: types.Datum) -> list[float]:
    out = training.forward([datum], "cross_entropy").result()
    return [float(x) for x in out.loss_fn_outputs[0]["logprobs"].data]


def test_pipelined_training_runs_in_submission_order(service: tinker.ServiceClient) -> None:
    training = service.create_lora_training_client(BASE, rank=4, seed=1).result()
    datum = sft_datum(TOKENS)
    before = training.forward([datum], "cross_entropy")
    fb = training.forward_backward([datum], "cross_entropy")
    opt = training.optim_step(types.AdamParams(learning_rate=0.01))
    after = training.forward([datum], "cross_entropy")
    first, last = before.result(), after.result()
    assert fb.result().metrics["loss:sum"] == pytest.approx(first.metrics["loss:sum"])
    assert opt.result().metrics is not None
    assert last.loss_fn_outputs[0]["logprobs"].tolist() != first.loss_fn_outputs[0]["logprobs"].tolist()
    assert len(last.loss_fn_outputs[0]["logprobs"].tolist()) == len(TOKENS) - 1


@pytest.mark.parametrize(
    ("loss_fn", "config"),
    [
        ("importance_sampling", None),
        ("ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}),
        ("cispo", {"clip_low_threshold": 0.5, "clip_high_threshold": 2.0}),
        ("dro", {"beta": 0.05}),
        ("gspo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}),
    ],
)
def test_every_builtin_rl_loss_with_its_config(
    service: tinker.ServiceClient, loss_fn: str, config: dict[str, float] | None
) -> None:
    training = service.create_lora_training_client(BASE, rank=4).result()
    sampled = logprobs(training, sft_datum(TOKENS))
    out = training.forward_backward([rl_datum(TOKENS, sampled, 1.0)], loss_fn, config).result()  # type: ignore[arg-type]
    assert "loss:sum" in out.metrics
    assert out.loss_fn_outputs[0]["logprobs"].tolist() == pytest.approx(sampled, abs=1e-6)
    if loss_fn == "importance_sampling":  # on-policy the ratio is 1: loss = -sum(A)
        assert out.metrics["loss:sum"] == pytest.approx(-(len(TOKENS) - 1), rel=1e-5)


def test_dro_without_its_beta_fails_naming_it(service: tinker.ServiceClient) -> None:
    training = service.create_lora_training_client(BASE, rank=4).result()
    sampled = logprobs(training, sft_datum(TOKENS))
    with pytest.raises(tinker.RequestFailedError, match="beta"):
        training.forward_backward([rl_datum(TOKENS, sampled, 1.0)], "dro").result()


def test_unsupported_loss_is_a_400_naming_the_loss(service: tinker.ServiceClient) -> None:
    training = service.create_lora_training_client(BASE, rank=4).result()
    sampled = logprobs(training, sft_datum(TOKENS))
    with pytest.raises(tinker.BadRequestError) as info:
        training.forward_backward([rl_datum(TOKENS, sampled, 1.0)], "stable_reinforce").result()
    assert info.value.status_code == 400
    assert "stable_reinforce" in str(info.value) and "cross_entropy" in str(info.value)
    # the refusal `kitchen validate ... loss_fn=stable_reinforce` gives locally, word for word
    with pytest.raises(InvalidInputError) as local:
        get_loss_fn("stable_reinforce")
    assert str(local.value) in str(info.value)


def test_custom_loss_runs_the_sdk_way_two_phases(service: tinker.ServiceClient) -> None:
    training = service.create_lora_training_client(BASE, rank=4).result()
    datum = sft_datum(TOKENS)
    before = logprobs(training, datum)
    seen: list[int] = []

    def loss_fn(data: list[types.Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        seen.extend(lp.numel() for lp in logprobs_D)
        loss = -torch.stack([lp.sum() for lp in logprobs_D]).sum()
        return loss, {"custom/pairs": float(len(data))}

    out = training.forward_backward_custom([datum, datum], loss_fn).result()
    assert seen == [len(TOKENS) - 1] * 2
    assert out.metrics["custom/pairs"] == 2.0
    assert out.metrics["loss:sum"] == pytest.approx(-2 * sum(before), rel=1e-5)
    # the linearised backward: cross_entropy with weights = -dC/dlogprobs = 1, so the surrogate equals C here
    assert out.metrics["surrogate_loss:sum"] == pytest.approx(out.metrics["loss:sum"], rel=1e-5)
    training.optim_step(types.AdamParams(learning_rate=0.01)).result()
    assert logprobs(training, datum) != before


def test_state_checkpoints_resume_through_load_weights(service: tinker.ServiceClient) -> None:
    training = service.create_lora_training_client(BASE, rank=4).result()
    datum = sft_datum(TOKENS)
    training.forward_backward([datum], "cross_entropy").result()
    training.optim_step(types.AdamParams(learning_rate=0.01)).result()
    path = training.save_state("step1").result().path
    assert path == f"tinker://{training.model_id}/weights/step1"
    saved = logprobs(training, datum)
    resumed = service.create_training_client_from_state_with_optimizer(path).result()
    fresh = service.create_training_client_from_state(path).result()
    assert logprobs(resumed, datum) == saved == logprobs(fresh, datum)
    assert resumed.model_id != training.model_id
    info = resumed.get_info()
    assert info.model_data.model_name == BASE and info.lora_rank == 4


def test_samplers_from_paths_and_live_weights(service: tinker.ServiceClient) -> None:
    training = service.create_lora_training_client(BASE, rank=4).result()
    sampler_path = training.save_weights_for_sampler("s1").result().path
    assert sampler_path.endswith("/sampler_weights/s1")
    live = training.save_weights_and_get_sampling_client()
    by_path = service.create_sampling_client(model_path=sampler_path).result()
    prompt = types.ModelInput.from_ints(TOKENS)
    assert live.result().compute_logprobs(prompt).result() == by_path.compute_logprobs(prompt).result()
    scored = by_path.compute_logprobs(prompt).result()
    assert scored[0] is None and len(scored) == len(TOKENS)
    params = types.SamplingParams(max_tokens=6, seed=3, temperature=1.0)
    result = by_path.sample(prompt, 3, params).result()
    assert len(result.sequences) == 3
    for sequence in result.sequences:
        assert 1 <= len(sequence.tokens) <= 6 and sequence.logprobs is not None
        assert len(sequence.logprobs) == len(sequence.tokens)
    assert by_path.sample(prompt, 3, params).result().sequences[0].tokens == result.sequences[0].tokens
    base = service.create_sampling_client(base_model=BASE).result()
    assert base.compute_logprobs(prompt).result()[0] is None


def test_rest_lists_and_deletes_checkpoints(service: tinker.ServiceClient, server: ServerProcess) -> None:
    training = service.create_lora_training_client(BASE, rank=4).result()
    training.save_state("a").result()
    sampler = training.save_weights_for_sampler("b").result().path
    rest = tinker.RestClient(base_url=server.url, api_key=API_KEY)
    listed = rest.list_checkpoints(training.model_id).result().checkpoints
    assert sorted(c.checkpoint_id for c in listed) == ["sampler_weights/b", "weights/a"]
    run = rest.get_training_run(training.model_id).result()
    assert run.base_model == BASE and run.lora_rank == 4 and run.last_checkpoint is not None
    assert training.model_id in [r.training_run_id for r in rest.list_training_runs(limit=100).result().training_runs]
    rest.delete_checkpoint(training.model_id, "sampler_weights/b").result()
    assert [c.checkpoint_id for c in rest.list_checkpoints(training.model_id).result().checkpoints] == ["weights/a"]
    with pytest.raises(Exception, match=r"404|no checkpoint"):
        service.create_sampling_client(model_path=sampler).result()


def test_capabilities_and_a_tokenizer_that_loads_offline(
    service: tinker.ServiceClient, server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    rest = tinker.RestClient(base_url=server.url, api_key=API_KEY)
    names = [m.model_name for m in rest.get_server_capabilities().result().supported_models]
    assert names == [BASE]
    training = service.create_lora_training_client(BASE, rank=4).result()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = training.get_tokenizer()
    folder = Path(training.get_info().model_data.tokenizer_id or "")
    assert folder.is_dir()
    assert tokenizer.encode("hello world") == AutoTokenizer.from_pretrained(folder).encode("hello world")


def test_unknown_model_is_a_400_listing_the_served_ones(service: tinker.ServiceClient) -> None:
    with pytest.raises(tinker.BadRequestError, match=r"unknown base model 'no/such-model'.*tiny"):
        service.create_lora_training_client("no/such-model", rank=4).result()


def test_lora_clients_on_one_base_are_isolated(service: tinker.ServiceClient) -> None:
    one = service.create_lora_training_client(BASE, rank=4, seed=0).result()
    two = service.create_lora_training_client(BASE, rank=4, seed=0).result()
    datum = sft_datum(TOKENS)
    two_before = logprobs(two, datum)
    for _ in range(2):
        one.forward_backward([datum], "cross_entropy").result()
        one.optim_step(types.AdamParams(learning_rate=0.05)).result()
    assert logprobs(one, datum) != two_before
    assert logprobs(two, datum) == two_before
