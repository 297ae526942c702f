"""Every public method of the real tinker SDK against `kitchen serve --backend noop` on 127.0.0.1:
each works as the SDK documents (sync, `await`, and the deprecated `_async` form), is answered
client-side, or is refused by name (see `tests/serve/conformance.py`). One server and one run of
every check for the module; each call is its own test, reading the run's answer.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import urllib.request
import warnings
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
import tinker
import torch
from tinker import types
from tinker.lib.api_future_impl import QueueState

from tests.serve.conformance import (
    TABLE,
    Answer,
    Check,
    cell_text,
    client_side,
    public_methods,
    read_table,
    refused,
    run_checks,
    works,
    write_table,
)
from tests.serve.server_process import API_KEY, OTHER_KEY, ServerProcess

BASE = "tiny"
TOKENS = [5, 17, 99, 230, 41, 8, 77, 300, 12, 64]
T = TypeVar("T")
CHECKS: dict[str, Check] = {}


def check(*names: str) -> Callable[[Check], Check]:
    """Register a check for the calls `names` (one check may cover a method and its forms)."""

    def register(function: Check) -> Check:
        for name in names:
            CHECKS[name] = function
        return function

    return register


def wait(awaitable: Any) -> Any:
    """`await` an SDK future (or coroutine) from a fresh event loop, as an async program does."""

    async def main() -> Any:
        return await awaitable

    return asyncio.run(main())


def deprecated(call: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a deprecated `_async` method, which must warn that it is deprecated."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = asyncio.run(call())
    assert any(issubclass(w.category, FutureWarning) for w in caught), "no deprecation warning"
    return result


def sft_datum(tokens: list[int]) -> types.Datum:
    n = len(tokens) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=tokens[1:], dtype="int64", shape=[n]),
            "weights": types.TensorData(data=[1.0] * n, dtype="float32", shape=[n]),
        },
    )


def logprobs_of(training: tinker.TrainingClient, datum: types.Datum) -> list[float]:
    return [float(x) for x in training.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].data]


@dataclass
class Context:
    """The module's server and clients; checks create what they change."""

    server: ServerProcess
    service: tinker.ServiceClient
    rest: tinker.RestClient
    admin: tinker.AdminClient
    training: tinker.TrainingClient
    state_path: str
    sampler_path: str
    sampler: tinker.SamplingClient
    made: dict[str, Any] = field(default_factory=dict)

    def fresh_training(self, **options: Any) -> tinker.TrainingClient:
        return self.service.create_lora_training_client(BASE, rank=4, seed=1, **options).result()

    def session_id(self) -> str:
        return self.service.holder.get_session_id()


# --- ServiceClient ---


@check("ServiceClient.create_lora_training_client", "ServiceClient.create_lora_training_client_async")
def _create_lora(ctx: Context) -> Answer:
    sync = ctx.service.create_lora_training_client(BASE, rank=4, seed=3, user_metadata={"k": "v"}).result()
    awaited = wait(ctx.service.create_lora_training_client(BASE, rank=4, seed=3))
    old = deprecated(lambda: ctx.service.create_lora_training_client_async(BASE, rank=4, seed=3))
    datum = sft_datum(TOKENS)
    assert logprobs_of(sync, datum) == logprobs_of(awaited, datum) == logprobs_of(old, datum)
    assert sync.get_info().lora_rank == 4
    assert ctx.rest.get_training_run(sync.model_id).result().user_metadata == {"k": "v"}
    return works("a LoRA client per call (same seed, same weights); user_metadata kept on the run")


@check("ServiceClient.create_training_client_from_state", "ServiceClient.create_training_client_from_state_async")
def _from_state(ctx: Context) -> Answer:
    datum = sft_datum(TOKENS)
    want = logprobs_of(ctx.training, datum)
    for client in (
        ctx.service.create_training_client_from_state(ctx.state_path).result(),
        wait(ctx.service.create_training_client_from_state(ctx.state_path)),
        deprecated(lambda: ctx.service.create_training_client_from_state_async(ctx.state_path)),
    ):
        assert logprobs_of(client, datum) == want
    with pytest.raises(tinker.BadRequestError) as info:
        ctx.service.create_training_client_from_state(ctx.state_path, optimizer=types.DimuonOptimizerConfig()).result()
    assert "Dimuon" in str(info.value)
    return works("the saved weights, in a new training run; optimizer=Dimuon refused by name")


@check(
    "ServiceClient.create_training_client_from_state_with_optimizer",
    "ServiceClient.create_training_client_from_state_with_optimizer_async",
)
def _from_state_optimizer(ctx: Context) -> Answer:
    datum = sft_datum(TOKENS)
    want = logprobs_of(ctx.training, datum)
    resumed = ctx.service.create_training_client_from_state_with_optimizer(ctx.state_path).result()
    old = deprecated(lambda: ctx.service.create_training_client_from_state_with_optimizer_async(ctx.state_path))
    assert logprobs_of(resumed, datum) == logprobs_of(old, datum) == want
    return works("weights and optimizer state, in a new training run")


@check("ServiceClient.create_sampling_client", "ServiceClient.create_sampling_client_async")
def _service_sampler(ctx: Context) -> Answer:
    prompt = types.ModelInput.from_ints(TOKENS)
    by_path = ctx.service.create_sampling_client(model_path=ctx.sampler_path).result()
    by_base = wait(ctx.service.create_sampling_client(base_model=BASE))
    old = deprecated(lambda: ctx.service.create_sampling_client_async(model_path=ctx.sampler_path))
    assert by_path.compute_logprobs(prompt).result() == old.compute_logprobs(prompt).result()
    assert by_base.get_base_model() == BASE
    return works("from a tinker:// sampler path or a base model")


@check("ServiceClient.copy_weights")
def _service_copy(ctx: Context) -> Answer:
    archive = tinker.ServiceClient(base_url=ctx.server.url, api_key=API_KEY, project_id="archive")
    try:
        copied = archive.copy_weights(ctx.state_path, ttl_seconds=7200).result()
    finally:
        archive.close("success").result()
    assert copied.startswith("tinker://") and copied.endswith("/weights/state") and copied != ctx.state_path
    run = ctx.rest.get_training_run_by_tinker_path(copied).result()
    assert run.base_model == BASE
    datum = sft_datum(TOKENS)
    assert logprobs_of(ctx.service.create_training_client_from_state(copied).result(), datum) == logprobs_of(
        ctx.training, datum
    )
    return works("a copy in a new training run of the client's project, sharing the files")


@check("ServiceClient.create_custom_loss")
def _custom_loss(ctx: Context) -> Answer:
    def neg_ll(logprobs: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        loss = -(logprobs * weights).sum()
        return loss, {"custom/neg_ll:sum": loss}

    handle = ctx.service.create_custom_loss(neg_ll, input_ranks={"logprobs": 1, "weights": 1}).result()
    training = ctx.fresh_training()
    datum = sft_datum(TOKENS)
    out = training.forward_backward_custom([datum], handle).result()
    assert out.metrics["loss:sum"] == pytest.approx(-sum(logprobs_of(training, datum)), rel=1e-5)
    return works("traced by the SDK and run client-side (the server asks for client-side custom losses)")


@check("ServiceClient.get_server_capabilities", "ServiceClient.get_server_capabilities_async")
def _service_capabilities(ctx: Context) -> Answer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        sync = ctx.service.get_server_capabilities()
    old = deprecated(lambda: ctx.service.get_server_capabilities_async())
    assert [m.model_name for m in sync.supported_models] == [m.model_name for m in old.supported_models] == [BASE]
    return works("the served model names")


@check("ServiceClient.create_rest_client")
def _create_rest(ctx: Context) -> Answer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        rest = ctx.service.create_rest_client()
    assert rest.get_session(ctx.session_id()).result().training_run_ids
    return works("a RestClient on the same server")


@check("ServiceClient.close")
def _close(ctx: Context) -> Answer:
    client = tinker.ServiceClient(base_url=ctx.server.url, api_key=API_KEY)
    client.create_lora_training_client(BASE, rank=4).result()
    session_id = client.holder.get_session_id()
    client.close("errored", detail="checked").result()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tinker.ExperimentalWarning)
        found = ctx.rest.search_sessions(types.SessionSearchRequest(session_id=session_id)).result().sessions
    statuses = [s.status for s in found]
    assert len(statuses) == 1 and isinstance(statuses[0], types.ClientSessionFinished)
    assert statuses[0].reason.type == "errored"
    return works("the session finishes with the reason given (first reason wins)")


@check("ServiceClient.holder")
def _holder(ctx: Context) -> Answer:
    assert ctx.service.holder.get_session_id().startswith("s")
    return client_side("the SDK's internal connection holder (deprecated)")


@check(
    "ServiceClient.get_console_url",
    "TrainingClient.get_console_url",
)
def _console(ctx: Context) -> Answer:
    assert ctx.session_id() in ctx.service.get_console_url()
    assert ctx.training.model_id in ctx.training.get_console_url()
    return client_side("a link into Tinker's web console, which knows nothing of a local server")


@check(
    "ServiceClient.get_telemetry",
    "TrainingClient.get_telemetry",
    "SamplingClient.get_telemetry",
    "RestClient.get_telemetry",
    "AdminClient.get_telemetry",
)
def _telemetry(ctx: Context) -> Answer:
    for client in (ctx.service, ctx.training, ctx.sampler, ctx.rest, ctx.admin):
        client.get_telemetry()  # the SDK's own telemetry object; its reports go to /telemetry, accepted
    return client_side("the SDK's telemetry object (its reports are accepted and dropped)")


# --- TrainingClient ---


@check("TrainingClient.forward", "TrainingClient.forward_async")
def _forward(ctx: Context) -> Answer:
    datum = sft_datum(TOKENS)
    sync = ctx.training.forward([datum], "cross_entropy").result()
    awaited = wait(ctx.training.forward([datum], "cross_entropy"))
    old = deprecated(lambda: ctx.training.forward_async([datum], "cross_entropy")).result()
    assert sync.loss_fn_outputs[0]["logprobs"].tolist() == awaited.loss_fn_outputs[0]["logprobs"].tolist()
    assert sync.metrics["loss:sum"] == pytest.approx(old.metrics["loss:sum"])
    wide = types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=[t for t in TOKENS[1:] for _ in "kk"], dtype="int64", shape=[9, 2]),
            "weights": types.TensorData(data=[1.0, 0.5] * 9, dtype="float32", shape=[9, 2]),
        },
    )
    spans: list[tinker.PromptProvenanceSpan | tinker.SampledProvenanceSpan] = [
        tinker.SampledProvenanceSpan(sequence_id="s:sample:0#1/0", length=9)
    ]
    traced = datum.with_provenance(model_input=spans, loss_fn_inputs=spans)
    assert ctx.training.forward([traced], "cross_entropy").result().metrics == sync.metrics
    grid = ctx.training.forward([wide], "cross_entropy").result()
    assert grid.loss_fn_outputs[0]["logprobs"].shape == [9, 2]
    assert grid.metrics["loss:sum"] == pytest.approx(1.5 * sync.metrics["loss:sum"], rel=1e-5)
    return works("per-token logprobs and loss; [T, K] cross-entropy targets and weights; provenance spans checked")


@check("TrainingClient.forward_backward", "TrainingClient.forward_backward_async")
def _forward_backward(ctx: Context) -> Answer:
    training = ctx.fresh_training()
    datum = sft_datum(TOKENS)
    before = training.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    out = training.forward_backward([datum], "cross_entropy").result()
    assert out.metrics["loss:sum"] == pytest.approx(before)
    wait(training.forward_backward([datum], "cross_entropy"))
    deprecated(lambda: training.forward_backward_async([datum], "cross_entropy")).result()
    with pytest.raises(tinker.BadRequestError) as info:
        training.forward_backward([datum], "stable_reinforce").result()
    assert "formula" in str(info.value)
    assert training.forward_backward([datum], "cross_entropy").result().metrics  # the refused request took its turn
    return works("gradients of every built-in loss but stable_reinforce (refused: its formula is unpublished)")


@check("TrainingClient.forward_backward_custom", "TrainingClient.forward_backward_custom_async")
def _custom(ctx: Context) -> Answer:
    training = ctx.fresh_training()
    datum = sft_datum(TOKENS)

    def loss_fn(data: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        return -torch.stack([lp.sum() for lp in logprobs]).sum(), {"custom/n": float(len(data))}

    out = training.forward_backward_custom([datum], loss_fn).result()
    old = deprecated(lambda: training.forward_backward_custom_async([datum], loss_fn)).result()
    assert out.metrics["custom/n"] == old.metrics["custom/n"] == 1.0
    return works("the SDK's two phases: a forward, then the linearised cross-entropy backward")


@check("TrainingClient.optim_step", "TrainingClient.optim_step_async")
def _optim(ctx: Context) -> Answer:
    training = ctx.fresh_training()
    datum = sft_datum(TOKENS)
    before = logprobs_of(training, datum)
    training.forward_backward([datum], "cross_entropy")
    training.optim_step(types.AdamParams(learning_rate=0.01)).result()
    assert logprobs_of(training, datum) != before
    training.forward_backward([datum], "cross_entropy")
    deprecated(lambda: training.optim_step_async(types.AdamParams(learning_rate=0.01))).result()
    with pytest.raises(tinker.BadRequestError) as info:
        training.optim_step(types.DimuonParams(learning_rate=0.01)).result()
    assert "Dimuon" in str(info.value)
    return works("AdamW; DimuonParams refused by name")


@check("TrainingClient.save_state", "TrainingClient.save_state_async")
def _save_state(ctx: Context) -> Answer:
    training = ctx.fresh_training()
    path = training.save_state("s", ttl_seconds=3600, user_metadata={"step": "1"}).result().path
    assert path == f"tinker://{training.model_id}/weights/s"
    with pytest.raises(tinker.BadRequestError, match="already exists"):
        training.save_state("s").result()
    again = training.save_state("s", overwrite=True).result().path
    listed = {c.tinker_path: c for c in ctx.rest.list_checkpoints(training.model_id).result().checkpoints}
    assert again == path and listed[path].user_metadata is None and listed[path].expires_at is None
    old = deprecated(lambda: training.save_state_async("t", ttl_seconds=7200)).result()
    assert listed[path].checkpoint_type == "training" and old.path.endswith("/weights/t")
    return works("a tinker:// path; TTL, overwrite and user_metadata as documented")


@check(
    "TrainingClient.load_state",
    "TrainingClient.load_state_async",
    "TrainingClient.load_state_with_optimizer",
    "TrainingClient.load_state_with_optimizer_async",
)
def _load_state(ctx: Context) -> Answer:
    training = ctx.fresh_training()
    datum = sft_datum(TOKENS)
    want = logprobs_of(ctx.training, datum)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        training.load_state(ctx.state_path).result()
        assert logprobs_of(training, datum) == want
        training.load_state_with_optimizer(ctx.state_path).result()
    deprecated(lambda: training.load_state_async(ctx.state_path)).result()
    deprecated(lambda: training.load_state_with_optimizer_async(ctx.state_path)).result()
    assert logprobs_of(training, datum) == want
    return works("the checkpoint's weights (and optimizer state) in this client (deprecated by the SDK)")


@check("TrainingClient.save_weights_for_sampler", "TrainingClient.save_weights_for_sampler_async")
def _save_sampler(ctx: Context) -> Answer:
    training = ctx.fresh_training()
    path = training.save_weights_for_sampler("w", ttl_seconds=3600).result().path
    old = deprecated(lambda: training.save_weights_for_sampler_async("w2")).result().path
    assert path.endswith("/sampler_weights/w") and old.endswith("/sampler_weights/w2")
    prompt = types.ModelInput.from_ints(TOKENS)
    sampler = ctx.service.create_sampling_client(model_path=path).result()
    assert (
        sampler.compute_logprobs(prompt).result()
        == training.save_weights_and_get_sampling_client().result().compute_logprobs(prompt).result()
    )
    return works("a tinker:// sampler path")


@check(
    "TrainingClient.save_weights_and_get_sampling_client",
    "TrainingClient.save_weights_and_get_sampling_client_async",
)
def _save_and_sample(ctx: Context) -> Answer:
    live = ctx.training.save_weights_and_get_sampling_client().result()
    old = deprecated(lambda: ctx.training.save_weights_and_get_sampling_client_async())
    prompt = types.ModelInput.from_ints(TOKENS)
    assert live.compute_logprobs(prompt).result() == old.compute_logprobs(prompt).result()
    with pytest.raises(tinker.BadRequestError) as info:
        ctx.training.save_weights_and_get_sampling_client(kind="inflight").result()
    assert "inflight" in str(info.value)
    ctx.training.forward([sft_datum(TOKENS)], "cross_entropy").result()  # the refused one took its turn
    return works("a snapshot sampler; kind='inflight' refused by name")


@check("TrainingClient.save_weights_external", "TrainingClient.save_weights_external_async")
def _external(ctx: Context) -> Answer:
    training = ctx.fresh_training()
    try:
        training.save_weights_external("x").result()
    except tinker.APIStatusError as exc:
        answer = refused(exc)
    with pytest.raises(tinker.BadRequestError):
        deprecated(lambda: training.save_weights_external_async("y")).result()
    training.forward([sft_datum(TOKENS)], "cross_entropy").result()  # the refused ones took their turn
    return answer


@check("TrainingClient.get_info", "TrainingClient.get_info_async")
def _info(ctx: Context) -> Answer:
    info = ctx.training.get_info()
    old = deprecated(lambda: ctx.training.get_info_async())
    assert info == old and info.model_data.model_name == BASE and info.lora_rank == 4 and info.is_lora
    return works("base model, LoRA rank, tokenizer folder")


@check("TrainingClient.get_tokenizer")
def _training_tokenizer(ctx: Context) -> Answer:
    tokenizer = ctx.training.get_tokenizer()
    assert str(tokenizer.decode(tokenizer.encode("hello world"))).strip() == "hello world"
    return works("loads offline from the folder get_info names")


@check("TrainingClient.create_sampling_client", "TrainingClient.create_sampling_client_async")
def _training_sampler(ctx: Context) -> Answer:
    sampler = ctx.training.create_sampling_client(ctx.sampler_path).result()
    old = deprecated(lambda: ctx.training.create_sampling_client_async(ctx.sampler_path))
    prompt = types.ModelInput.from_ints(TOKENS)
    assert sampler.compute_logprobs(prompt).result() == old.compute_logprobs(prompt).result()
    return works("a sampler on saved weights")


# --- SamplingClient ---


@check("SamplingClient.sample", "SamplingClient.sample_async")
def _sample(ctx: Context) -> Answer:
    prompt = types.ModelInput.from_ints(TOKENS)
    params = types.SamplingParams(max_tokens=6, seed=4, temperature=1.0)
    first = ctx.sampler.sample(prompt, 3, params).result()
    assert [s.tokens for s in first.sequences] == [
        s.tokens for s in wait(ctx.sampler.sample(prompt, 3, params)).sequences
    ]
    old = deprecated(lambda: ctx.sampler.sample_async(prompt, 3, params))
    assert [s.tokens for s in old.sequences] == [s.tokens for s in first.sequences]
    greedy = ctx.sampler.sample(prompt, 3, types.SamplingParams(max_tokens=6, temperature=0.0)).result()
    assert len({tuple(s.tokens) for s in greedy.sequences}) == 1  # temperature 0 is greedy
    eos = ctx.training.get_tokenizer().eos_token_id
    ended = ctx.sampler.sample(prompt, 4, types.SamplingParams(max_tokens=64, seed=2)).result()
    assert all(s.stop_reason == "stop" and s.tokens[-1] == eos for s in ended.sequences)  # stop=None: EOS
    running = ctx.sampler.sample(prompt, 4, types.SamplingParams(max_tokens=64, seed=2, stop=[])).result()
    assert all(s.stop_reason == "length" and len(s.tokens) == 64 for s in running.sequences)  # stop=[]: none
    scored = ctx.sampler.sample(
        prompt,
        2,
        types.SamplingParams(max_tokens=4, seed=1, top_k=3),
        include_prompt_logprobs=True,
        topk_prompt_logprobs=3,
        topk_sample_logprobs=3,
        prompt_alt_tokens_k=2,
        target_prompt_logprobs=types.TensorData(
            data=[x for t in TOKENS[1:] for x in (t, -1)], dtype="int64", shape=[9, 2]
        ),
        prompt_logprobs_last_n=4,
    ).result()
    full = ctx.sampler.compute_logprobs(prompt).result()
    assert scored.prompt_logprobs == [None] * 6 + full[6:]
    top = scored.topk_prompt_logprobs
    assert top is not None and top[:6] == [None] * 6 and all(len(row or []) == 3 for row in top[6:])
    for sequence in scored.sequences:
        assert sequence.topk_logprobs is not None and len(sequence.topk_logprobs) == len(sequence.tokens)
        drawn = sequence.tokens[:-1] if sequence.stop_reason == "stop" else sequence.tokens  # not an EOS
        assert all(
            token in [t for t, _ in row or []] for token, row in zip(drawn, sequence.topk_logprobs, strict=False)
        )
    targets = scored.target_prompt_logprobs
    assert targets is not None and targets.to_torch()[:, 0].tolist() == pytest.approx(full[1:], abs=1e-5)
    assert scored.prompt_alt_tokens is not None and scored.prompt_alt_tokens.tokens.shape == [9, 2]
    with pytest.raises(tinker.BadRequestError) as info:
        sampler = ctx.service.create_sampling_client(base_model=BASE, record_stability_info=True).result()
        sampler.sample(prompt, 1, params).result()
    assert "formula" in str(info.value)
    return works(
        "seeded samples; temperature 0 greedy, top_k/top_p; prompt, top-k, target and alternative-token "
        "logprobs; EOS stops by default; record_stability_info refused (stable_reinforce's formula is unpublished)"
    )


@check("SamplingClient.compute_logprobs", "SamplingClient.compute_logprobs_async")
def _compute_logprobs(ctx: Context) -> Answer:
    prompt = types.ModelInput.from_ints(TOKENS)
    full = ctx.sampler.compute_logprobs(prompt).result()
    assert full[0] is None and len(full) == len(TOKENS)
    assert deprecated(lambda: ctx.sampler.compute_logprobs_async(prompt)) == full
    assert ctx.sampler.compute_logprobs(prompt, prompt_logprobs_last_n=3).result() == [None] * 7 + full[7:]
    return works("each prompt token's logprob; prompt_logprobs_last_n")


@check("SamplingClient.get_tokenizer")
def _sampling_tokenizer(ctx: Context) -> Answer:
    """Offline, in a fresh process whose HF cache is the one the server wrote the served names to."""
    handle = ctx.sampler.get_sampler_handle()
    code = (
        "import tinker, sys; c = tinker.SamplingClient.from_sampler_handle(sys.argv[1], api_key=sys.argv[2]); "
        "t = c.get_tokenizer(); print(t.decode(t.encode('hello world')))"
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(ctx.server.hf_cache),
        "TINKER_BASE_URL": ctx.server.url,
    }
    result = subprocess.run(
        [sys.executable, "-c", code, handle, API_KEY], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0 and result.stdout.strip() == "hello world", result.stderr[-2000:]
    return works("offline: the server puts each served name's tokenizer in the HF cache")


@check("SamplingClient.get_base_model", "SamplingClient.get_base_model_async")
def _base_model(ctx: Context) -> Answer:
    assert ctx.sampler.get_base_model() == deprecated(lambda: ctx.sampler.get_base_model_async()) == BASE
    return works("the served name")


@check("SamplingClient.create")
def _create(ctx: Context) -> Answer:
    sampler = tinker.SamplingClient.create(ctx.service.holder, base_model=BASE).result()
    assert sampler.compute_logprobs(types.ModelInput.from_ints(TOKENS)).result()[1] is not None
    return works("a sampler on the holder's session")


@check("SamplingClient.get_sampler_handle", "SamplingClient.from_sampler_handle")
def _handle(ctx: Context) -> Answer:
    handle = ctx.sampler.get_sampler_handle()
    copy = tinker.SamplingClient.from_sampler_handle(handle, api_key=API_KEY)
    prompt = types.ModelInput.from_ints(TOKENS)
    assert copy.compute_logprobs(prompt).result() == ctx.sampler.compute_logprobs(prompt).result()
    return works("a handle another process rebuilds the same sampler from")


@check("SamplingClient.on_queue_state_change")
def _queue_state(ctx: Context) -> Answer:
    ctx.sampler.on_queue_state_change(QueueState.ACTIVE, None)
    return client_side("the SDK's hook for queue-state reports (the server is never paused: always active)")


# --- RestClient ---


@check("RestClient.get_server_capabilities")
def _capabilities(ctx: Context) -> Answer:
    assert [m.model_name for m in ctx.rest.get_server_capabilities().result().supported_models] == [BASE]
    assert [m.model_name for m in wait(ctx.rest.get_server_capabilities()).supported_models] == [BASE]
    return works("the served model names")


@check("RestClient.get_training_run", "RestClient.get_training_run_async")
def _get_run(ctx: Context) -> Answer:
    run = ctx.rest.get_training_run(ctx.training.model_id).result()
    old = deprecated(lambda: ctx.rest.get_training_run_async(ctx.training.model_id))
    assert run.base_model == old.base_model == BASE and run.lora_rank == 4 and run.last_checkpoint is not None
    return works("base model, LoRA rank, last checkpoints")


@check("RestClient.get_training_run_by_tinker_path", "RestClient.get_training_run_by_tinker_path_async")
def _run_by_path(ctx: Context) -> Answer:
    run = ctx.rest.get_training_run_by_tinker_path(ctx.state_path).result()
    old = deprecated(lambda: ctx.rest.get_training_run_by_tinker_path_async(ctx.state_path))
    assert run.training_run_id == old.training_run_id == ctx.training.model_id
    return works("the run a checkpoint belongs to")


@check("RestClient.get_weights_info_by_tinker_path")
def _weights_info(ctx: Context) -> Answer:
    info = ctx.rest.get_weights_info_by_tinker_path(ctx.state_path).result()
    assert info.base_model == BASE and info.lora_rank == 4 and info.train_unembed is True
    layered = ctx.fresh_training(train_mlp=False, train_unembed=False)
    path = layered.save_state("layers").result().path
    chosen = ctx.rest.get_weights_info_by_tinker_path(path).result()
    assert (chosen.train_attn, chosen.train_mlp, chosen.train_unembed) == (True, False, False)
    return works("base model, LoRA rank and the train_attn/train_mlp/train_unembed choice")


@check("RestClient.list_training_runs", "RestClient.list_training_runs_async")
def _list_runs(ctx: Context) -> Answer:
    runs = ctx.rest.list_training_runs(limit=1000).result()
    old = deprecated(lambda: ctx.rest.list_training_runs_async(limit=1000))
    assert ctx.training.model_id in [r.training_run_id for r in runs.training_runs]
    assert runs.cursor is not None and old.cursor is not None and runs.cursor.total_count == old.cursor.total_count
    in_project = ctx.rest.list_training_runs(limit=1000, project_id="conformance").result().training_runs
    assert ctx.training.model_id in [r.training_run_id for r in in_project]
    assert ctx.rest.list_training_runs(project_id="no-such-project").result().training_runs == []
    return works("this key's runs, paged; project_id and access_scope filters")


@check("RestClient.list_checkpoints", "RestClient.list_checkpoints_async")
def _list_checkpoints(ctx: Context) -> Answer:
    listed = ctx.rest.list_checkpoints(ctx.training.model_id).result().checkpoints
    old = deprecated(lambda: ctx.rest.list_checkpoints_async(ctx.training.model_id)).checkpoints
    assert {c.tinker_path for c in listed} == {c.tinker_path for c in old} >= {ctx.state_path, ctx.sampler_path}
    return works("a run's checkpoints")


@check("RestClient.list_user_checkpoints", "RestClient.list_user_checkpoints_async")
def _user_checkpoints(ctx: Context) -> Answer:
    page = ctx.rest.list_user_checkpoints(limit=1000).result()
    old = deprecated(lambda: ctx.rest.list_user_checkpoints_async(limit=1000))
    assert ctx.state_path in [c.tinker_path for c in page.checkpoints]
    times = [c.time for c in page.checkpoints]
    assert page.cursor is not None and old.cursor is not None
    assert times == sorted(times, reverse=True) and page.cursor.total_count == old.cursor.total_count
    return works("every checkpoint of this key, newest first, paged")


@check("RestClient.get_external_weights_urls", "RestClient.get_external_weights_urls_async")
def _external_urls(ctx: Context) -> Answer:
    with pytest.raises(ValueError, match="external"):
        ctx.rest.get_external_weights_urls(ctx.state_path)  # the SDK itself refuses a non-external path
    with pytest.raises(tinker.NotFoundError, match="no checkpoint"):
        ctx.rest.get_external_weights_urls(f"tinker://{ctx.training.model_id}/external_weights/none").result()
    with pytest.raises(tinker.NotFoundError):
        deprecated(
            lambda: ctx.rest.get_external_weights_urls_async(f"tinker://{ctx.training.model_id}/external_weights/none")
        )
    return works("signed download links (local column); a missing export is a 404 naming the path")


@check(
    "RestClient.delete_checkpoint",
    "RestClient.delete_checkpoint_async",
    "RestClient.delete_checkpoint_from_tinker_path",
    "RestClient.delete_checkpoint_from_tinker_path_async",
)
def _delete(ctx: Context) -> Answer:
    training = ctx.fresh_training()
    paths = [training.save_state(name).result().path for name in ("a", "b", "c", "d")]
    ctx.rest.delete_checkpoint(training.model_id, "weights/a").result()
    deprecated(lambda: ctx.rest.delete_checkpoint_async(training.model_id, "weights/b"))
    ctx.rest.delete_checkpoint_from_tinker_path(paths[2]).result()
    deprecated(lambda: ctx.rest.delete_checkpoint_from_tinker_path_async(paths[3]))
    assert ctx.rest.list_checkpoints(training.model_id).result().checkpoints == []
    with pytest.raises(tinker.NotFoundError):
        ctx.service.create_training_client_from_state(paths[0]).result()
    return works("gone from listings; loading it is a 404")


@check(
    "RestClient.publish_checkpoint_from_tinker_path",
    "RestClient.publish_checkpoint_from_tinker_path_async",
    "RestClient.unpublish_checkpoint_from_tinker_path",
    "RestClient.unpublish_checkpoint_from_tinker_path_async",
)
def _publish(ctx: Context) -> Answer:
    training = ctx.fresh_training()
    path = training.save_weights_for_sampler("shared").result().path
    other = tinker.ServiceClient(base_url=ctx.server.url, api_key=OTHER_KEY)
    try:
        with pytest.raises(tinker.NotFoundError):
            other.create_sampling_client(model_path=path).result()
        ctx.rest.publish_checkpoint_from_tinker_path(path).result()
        with pytest.raises(tinker.BadRequestError, match="already public"):
            ctx.rest.publish_checkpoint_from_tinker_path(path).result()
        prompt = types.ModelInput.from_ints(TOKENS)
        assert other.create_sampling_client(model_path=path).result().compute_logprobs(prompt).result()[1] is not None
        ctx.rest.unpublish_checkpoint_from_tinker_path(path).result()
        deprecated(lambda: ctx.rest.publish_checkpoint_from_tinker_path_async(path))
        deprecated(lambda: ctx.rest.unpublish_checkpoint_from_tinker_path_async(path))
        with pytest.raises(tinker.NotFoundError):
            other.create_sampling_client(model_path=path).result()
    finally:
        other.close("success").result()
    return works("published checkpoints load and sample for every key; a 400 when already so (the SDK retries 409s)")


@check("RestClient.set_checkpoint_ttl_from_tinker_path", "RestClient.set_checkpoint_ttl_from_tinker_path_async")
def _ttl(ctx: Context) -> Answer:
    training = ctx.fresh_training()
    path = training.save_state("ttl").result().path
    ctx.rest.set_checkpoint_ttl_from_tinker_path(path, 86400).result()
    (listed,) = ctx.rest.list_checkpoints(training.model_id).result().checkpoints
    assert listed.expires_at is not None
    assert 86000 < (listed.expires_at - dt.datetime.now(dt.UTC)).total_seconds() <= 86400
    with pytest.raises(tinker.BadRequestError, match="3600"):
        ctx.rest.set_checkpoint_ttl_from_tinker_path(path, 10).result()
    deprecated(lambda: ctx.rest.set_checkpoint_ttl_from_tinker_path_async(path, None))
    assert ctx.rest.list_checkpoints(training.model_id).result().checkpoints[0].expires_at is None
    return works("expiry set and removed (1 hour to 10 years); an expired checkpoint is deleted, then 404")


@check("RestClient.copy_weights", "RestClient.copy_weights_async")
def _rest_copy(ctx: Context) -> Answer:
    copied = ctx.rest.copy_weights(ctx.sampler_path, "archive").result()
    old = deprecated(lambda: ctx.rest.copy_weights_async(ctx.sampler_path, "archive"))
    assert copied != old and copied.endswith("/sampler_weights/sampler")
    prompt = types.ModelInput.from_ints(TOKENS)
    sampler = ctx.service.create_sampling_client(model_path=copied).result()
    assert sampler.compute_logprobs(prompt).result() == ctx.sampler.compute_logprobs(prompt).result()
    return works("a copy into the project (sampler or training weights), sharing the files")


@check("RestClient.get_session", "RestClient.get_session_async")
def _get_session(ctx: Context) -> Answer:
    session = ctx.rest.get_session(ctx.session_id()).result()
    old = deprecated(lambda: ctx.rest.get_session_async(ctx.session_id()))
    assert ctx.training.model_id in session.training_run_ids and session.sampler_ids
    assert session.user_metadata == old.user_metadata == {"purpose": "conformance"}
    assert session.display_name == "conformance run"
    return works("training runs, samplers, user_metadata and display_name")


@check("RestClient.list_sessions", "RestClient.list_sessions_async")
def _list_sessions(ctx: Context) -> Answer:
    listed = ctx.rest.list_sessions(limit=1000).result().sessions
    old = deprecated(lambda: ctx.rest.list_sessions_async(limit=1000)).sessions
    assert ctx.session_id() in listed and listed == old
    assert len(ctx.rest.list_sessions(limit=1).result().sessions) == 1
    return works("this key's sessions, newest first, paged")


@check("RestClient.search_sessions")
def _search(ctx: Context) -> Answer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tinker.ExperimentalWarning)
        found = ctx.rest.search_sessions(types.SessionSearchRequest(display_name="CONFORMANCE", limit=1)).result()
        assert [s.session_id for s in found.sessions] == [ctx.session_id()]
        by_metadata = ctx.rest.search_sessions(types.SessionSearchRequest(user_metadata={"purpose": "conformance"}))
        assert [s.project_id for s in by_metadata.result().sessions] == ["conformance"]
        status = [types.ActiveSessionStatusQuery()]
        active = ctx.rest.search_sessions(types.SessionSearchRequest(statuses=status, limit=200)).result()
        assert ctx.session_id() in [s.session_id for s in active.sessions]
    return works("by id, display name words, user_metadata, project and status; newest first, with a cursor")


@check("RestClient.assign_session_project", "RestClient.assign_session_project_async")
def _assign(ctx: Context) -> Answer:
    client = tinker.ServiceClient(base_url=ctx.server.url, api_key=API_KEY)
    try:
        client.create_lora_training_client(BASE, rank=4).result()
        session_id = client.holder.get_session_id()
        ctx.rest.assign_session_project(session_id, "moved").result()
        deprecated(lambda: ctx.rest.assign_session_project_async(session_id, "moved-again"))
        runs = ctx.rest.list_training_runs(project_id="moved-again").result().training_runs
        assert [r.training_run_id.split(":")[0] for r in runs] == [session_id]
    finally:
        client.close("success").result()
    return works("the session (and its runs) move to the project")


@check("RestClient.export_session_trace", "RestClient.export_session_trace_async")
def _trace(ctx: Context) -> Answer:
    url = ctx.rest.export_session_trace(ctx.session_id()).result()
    with urllib.request.urlopen(url, timeout=60) as response:  # a plain GET, no credentials
        trace = json.loads(response.read())
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert {"forward", "sample", "save_training"} <= names
    assert deprecated(lambda: ctx.rest.export_session_trace_async(ctx.session_id())).startswith("http")
    return works("a signed link to the session's request spans as a Perfetto/Chrome trace")


@check("RestClient.whoami")
def _whoami(ctx: Context) -> Answer:
    me = ctx.rest.whoami().result()
    other = tinker.RestClient(base_url=ctx.server.url, api_key=OTHER_KEY).whoami().result()
    assert me.user_urn.startswith("tml:user:") and me.user_urn != other.user_urn and me.org_urn == other.org_urn
    return works("this key's user URN (from the JWT the SDK exchanged its key for)")


@check("RestClient.get_sampler", "RestClient.get_sampler_async")
def _get_sampler(ctx: Context) -> Answer:
    sampler_id = ctx.made["sampler_id"]
    info = ctx.rest.get_sampler(sampler_id).result()
    old = deprecated(lambda: ctx.rest.get_sampler_async(sampler_id))
    assert info.base_model == old.base_model == BASE and info.model_path == ctx.sampler_path
    return works("base model and model path of a sampler")


# --- admin (AdminClient, and RestClient's deprecated copies) ---


def _day_window() -> tuple[dt.datetime, dt.datetime]:
    end = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    return end - dt.timedelta(hours=3), end


@check(
    "AdminClient.get_billing_usage",
    "AdminClient.get_billing_usage_async",
    "RestClient.get_billing_usage",
    "RestClient.get_billing_usage_async",
)
def _billing(ctx: Context) -> Answer:
    start, end = _day_window()
    usage = ctx.admin.get_billing_usage(start, end).result()
    old = deprecated(lambda: ctx.admin.get_billing_usage_async(start, end))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        via_rest = ctx.rest.get_billing_usage(start, end).result()
    deprecated(lambda: ctx.rest.get_billing_usage_async(start, end))
    assert usage.data == old.data == via_rest.data == []
    return works("an empty report: nothing is billed on a kitchen server")


@check(
    "AdminClient.get_current_checkpoint_storage_usage",
    "AdminClient.get_current_checkpoint_storage_usage_async",
    "RestClient.get_current_checkpoint_storage_usage",
    "RestClient.get_current_checkpoint_storage_usage_async",
)
def _storage(ctx: Context) -> Answer:
    usage = ctx.admin.get_current_checkpoint_storage_usage().result()
    cursor = ctx.rest.list_user_checkpoints(limit=1000).result().cursor
    assert cursor is not None
    listed = cursor.total_count
    assert sum(item.checkpoint_count for item in usage.data) == listed
    project = ctx.admin.get_current_checkpoint_storage_usage("conformance").result()
    assert [item.project_id for item in project.data] == ["conformance"]
    deprecated(lambda: ctx.admin.get_current_checkpoint_storage_usage_async())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ctx.rest.get_current_checkpoint_storage_usage().result()
    deprecated(lambda: ctx.rest.get_current_checkpoint_storage_usage_async())
    return works("this key's checkpoints by project: count and bytes on disk")


@check(
    "AdminClient.get_audit_log",
    "AdminClient.get_audit_log_async",
    "RestClient.get_audit_log",
    "RestClient.get_audit_log_async",
)
def _audit(ctx: Context) -> Answer:
    log = ctx.admin.get_audit_log().result()
    assert "checkpoint_create" in {e.event for e in log.entries}
    assert ctx.state_path in {e.tinker_path for e in log.entries}
    deprecated(lambda: ctx.admin.get_audit_log_async(event_type="checkpoints"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        assert ctx.rest.get_audit_log(event_type="projects").result().entries == []
    deprecated(lambda: ctx.rest.get_audit_log_async())
    return works("this key's checkpoint events of the day (create, delete, publish, TTL, copy)")


# --- the module's run ---


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("conformance") / "store", backend="noop").start()
    yield process
    process.stop()


def make_context(server: ServerProcess) -> Context:
    """A session (with metadata, in project `conformance`), a trained LoRA with a state and a
    sampler checkpoint, and a sampler on it."""
    service = tinker.ServiceClient(
        base_url=server.url,
        api_key=API_KEY,
        user_metadata={"purpose": "conformance"},
        project_id="conformance",
        display_name="conformance run",
    )
    training = service.create_lora_training_client(BASE, rank=4, seed=0).result()
    datum = sft_datum(TOKENS)
    training.forward_backward([datum], "cross_entropy").result()
    training.optim_step(types.AdamParams(learning_rate=0.01)).result()
    state = training.save_state("state").result().path
    sampler_path = training.save_weights_for_sampler("sampler").result().path
    sampler = service.create_sampling_client(model_path=sampler_path).result()
    context = Context(
        server,
        service,
        tinker.RestClient(base_url=server.url, api_key=API_KEY),
        tinker.AdminClient(base_url=server.url, api_key=API_KEY),
        training,
        state,
        sampler_path,
        sampler,
    )
    context.made["sampler_id"] = sampler._sampling_session_id
    return context


@pytest.fixture(scope="module")
def answers(server: ServerProcess) -> Iterator[dict[str, Answer | BaseException]]:
    context = make_context(server)
    yield run_checks(CHECKS, context)
    context.service.close("success").result()


@pytest.mark.parametrize("call", sorted(CHECKS))
def test_the_call_works_or_is_refused_by_name(call: str, answers: dict[str, Answer | BaseException]) -> None:
    answer = answers[call]
    if isinstance(answer, BaseException):
        raise answer


def test_the_docs_list_every_refusal() -> None:
    from tests.serve.conformance import refusal_messages

    text = TABLE.read_text(encoding="utf-8")
    assert all(f"- {message}." in text for message in refusal_messages())


def test_every_public_sdk_method_has_a_check() -> None:
    missing = sorted(set(public_methods()) - set(CHECKS))
    assert not missing, f"tinker {tinker.__version__} has methods without a conformance check: {missing}"


def test_the_docs_table_shows_these_answers(answers: dict[str, Answer | BaseException]) -> None:
    rows = read_table() if TABLE.exists() else {}
    got = {call: cell_text(a) for call, a in answers.items() if isinstance(a, Answer)}
    if os.environ.get("KITCHEN_WRITE_CONFORMANCE") == "1":
        for call, cell in got.items():
            rows.setdefault(call, {"noop": "-", "local": "-"})["noop"] = cell
        write_table(rows)
    assert {call: rows.get(call, {}).get("noop") for call in got} == got, (
        "docs/reference/tinker-sdk-conformance.md is out of date: rerun with KITCHEN_WRITE_CONFORMANCE=1"
    )


def test_an_unknown_route_is_a_404_naming_it(server: ServerProcess) -> None:
    import httpx

    response = httpx.post(f"{server.url}/api/v1/no_such_call", headers={"X-API-Key": API_KEY}, json={})
    assert response.status_code == 404 and "does not implement POST /api/v1/no_such_call" in response.json()["detail"]
    response = httpx.get(f"{server.url}/api/v1/forward_backward", headers={"X-API-Key": API_KEY})
    assert response.status_code == 404 and "GET /api/v1/forward_backward" in response.json()["detail"]
