"""An in-process fake of the tinker SDK's ServiceClient, TrainingClient and SamplingClient.

It holds the adapter to the SDK's contract (see `fake_checks`): what the real SDK could not send
(not `tinker.types` objects, non-int tokens, unknown loss names) raises `FakeSdkUsageError` at
submission; what the service would refuse (a missing or misshapen loss input, a token outside
the vocabulary, an empty prompt, an unknown `tinker://` path) fails the request's future with
the SDK's BadRequestError / NotFoundError. Answers are real `tinker.types` responses inside the
SDK's own future class. Requests run one at a time on a worker thread in submission order,
optionally after a simulated latency, so futures really are pending when submission returns.
The "model" is the trainable bigram model of `fake_model`; losses are train_core's (the
service's formulas). `fail_next` queues service errors for a method; sampling retries them
through the SDK's own RetryHandler with the client's RetryConfig, as the SDK does.

Everything a local server can show runs on the real SDK against `kitchen serve` (tests/serve,
the adapter's tests, the backend contract, every recipe). The fake stays only for what the server
cannot produce: a service error injected at one exact call in the middle of a run
(test_builtin_workflows_tinker_serve, tests/safety/test_pipelined_failure.py,
tests/safety/test_secrets.py), exact sequences of retryable errors (test_tinker_errors.py), and
the adapter-misuse checks at submission (test_tinker_fake_sdk.py).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import pytest
import tinker
import torch
from tinker import types
from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture
from tinker.lib.retry_handler import RetryConfig, RetryHandler
from transformers import AutoTokenizer, PreTrainedTokenizerBase

import adapters.tinker.backend as tinker_backend_module
from adapters.tinker.availability import API_KEY_ENV
from adapters.tinker.backend import TinkerBackend
from adapters.tinker.redaction import Redactor
from adapters.tinker.retry import RetryPolicy
from kitchen.engine.ports import Tokenizer
from tests.adapters.tinker.fake_checks import (
    accepted_config,
    accepted_data,
    in_vocab,
    reject,
    service_error,
    typed_data,
    typed_loss,
    typed_tokens,
    usage,
)
from tests.adapters.tinker.fake_model import (
    AdamState,
    BigramWeights,
    accumulate_logit_grads,
    draw_token,
    service_loss,
    stable_hash,
)
from train_core.losses import TARGET_TOKENS

T = TypeVar("T")

DEFAULT_MAX_TOKENS = 128
FAST_RETRY = RetryPolicy(max_retries=3, base_delay_s=0.0, max_delay_s=0.0)
"""Retry policy for tests: the same attempts, no waiting."""


_RUN_NUMBERS = itertools.count()


def new_run_id() -> str:
    """A training run id unique in this process, so sessions sharing storage never share paths."""
    return f"fake-run-{next(_RUN_NUMBERS)}"


TINY_ASSETS = Path(str(files("adapters"))) / "common" / "tiny"
"""The embedded tiny model's package data, found without importing the local backend."""


@lru_cache(maxsize=1)
def tiny_tokenizer() -> PreTrainedTokenizerBase:
    """The embedded tiny model's tokenizer: a real tokenizer that needs no network."""
    return AutoTokenizer.from_pretrained(TINY_ASSETS)


def _tensor(values: np.ndarray) -> types.TensorData:
    return types.TensorData(data=values.astype(np.float32), dtype="float32", shape=list(values.shape))


@dataclass
class Checkpoint:
    """What the service stores under a tinker:// path."""

    kind: str  # "weights" (state) or "sampler_weights"
    weights: BigramWeights
    adam: AdamState


class FakeServiceClient:
    """Stands in for `tinker.ServiceClient`; also the fake service's state (checkpoints, call log)."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
        latency_s: float = 0.0,
        checkpoints: dict[str, Checkpoint] | None = None,
    ) -> None:
        self._api_key = api_key  # held like the SDK holds it; never printed
        self.base_url = base_url
        self.tokenizer = tokenizer or tiny_tokenizer()
        self.vocab_size = len(self.tokenizer)
        eos = self.tokenizer.eos_token_id
        self.end_token_ids: tuple[int, ...] = () if eos is None else (int(eos),)
        self.latency_s = latency_s
        self.submitted: list[str] = []
        self.executed: list[str] = []
        self.attempts: defaultdict[str, int] = defaultdict(int)
        self.checkpoints: dict[str, Checkpoint] = {} if checkpoints is None else checkpoints
        """The service's checkpoint storage; sessions that share it see each other's tinker:// paths."""
        self.closed_with: str | None = None
        self.retry_configs: list[RetryConfig | None] = []
        self._failures: defaultdict[str, deque[Exception]] = defaultdict(deque)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fake-tinker")
        self._lock = threading.Lock()
        self._ids = itertools.count()

    def __repr__(self) -> str:
        return f"FakeServiceClient(base_url={self.base_url!r})"

    # --- test controls ---

    def fail_next(self, method: str, *errors: Exception) -> None:
        """Make the next attempts of `method` fail with `errors`, in order."""
        self._failures[method].extend(errors)

    def load_tokenizer(self, base_model: str) -> Tokenizer:
        """The backend-level tokenizer loader (the real one asks the SDK, which may download)."""
        usage(isinstance(base_model, str), "get_tokenizer: base_model must be a str")
        return cast(Tokenizer, self.tokenizer)  # an HF tokenizer, typed more loosely than the port

    def base_weights(self, base_model: str) -> BigramWeights:
        return BigramWeights(base_model, self.vocab_size, self.end_token_ids)

    # --- machinery ---

    def next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def attempt(self, method: str) -> None:
        """Count an attempt at `method` and raise the next queued failure, if any."""
        with self._lock:
            self.attempts[method] += 1
            failure = self._failures[method].popleft() if self._failures[method] else None
        if failure is not None:
            raise failure

    def run(self, method: str, job: Callable[[], T]) -> AwaitableConcurrentFuture[T]:
        """Queue `job` behind every earlier request; the future completes when it has run."""
        if self.closed_with is not None:
            raise RuntimeError("ServiceClient is closed")
        self.submitted.append(method)

        def execute() -> T:
            if self.latency_s:
                time.sleep(self.latency_s)
            self.executed.append(method)
            self.attempt(method)
            return job()

        return AwaitableConcurrentFuture(self._executor.submit(execute))

    def run_with_sdk_retries(
        self, method: str, config: RetryConfig, job: Callable[[], T]
    ) -> AwaitableConcurrentFuture[T]:
        """Like `run`, but each attempt goes through the SDK's RetryHandler, as sampling does."""
        if self.closed_with is not None:
            raise RuntimeError("ServiceClient is closed")
        self.submitted.append(method)

        async def one_attempt() -> T:
            self.attempt(method)
            return job()

        async def with_handler() -> T:
            handler: RetryHandler[T] = RetryHandler(config=config, name=f"fake-{method}")
            return await handler.execute(one_attempt)

        def execute() -> T:
            if self.latency_s:
                time.sleep(self.latency_s)
            self.executed.append(method)
            return asyncio.run(with_handler())

        return AwaitableConcurrentFuture(self._executor.submit(execute))

    @staticmethod
    def run_done(value: T) -> AwaitableConcurrentFuture[T]:
        done: Future[T] = Future()
        done.set_result(value)
        return AwaitableConcurrentFuture(done)

    def lookup(self, path: Any, kind: str, method: str) -> Checkpoint:
        usage(isinstance(path, str), f"{method}: path must be a str")
        checkpoint = self.checkpoints.get(path)
        if checkpoint is None or checkpoint.kind != kind:
            raise service_error(404, f"{method}: no {kind} checkpoint at {path}")
        return checkpoint

    # --- the SDK surface ---

    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
    ) -> AwaitableConcurrentFuture[FakeTrainingClient]:
        usage(train_mlp or train_attn or train_unembed, "create_lora_training_client: train at least one layer kind")
        usage(
            isinstance(base_model, str) and bool(base_model),
            "create_lora_training_client: base_model must be a non-empty str",
        )
        usage(type(rank) is int and rank > 0, f"create_lora_training_client: rank must be a positive int, got {rank!r}")
        usage(
            seed is None or type(seed) is int, f"create_lora_training_client: seed must be an int or None, got {seed!r}"
        )
        return self.run(
            "create_lora_training_client",
            lambda: FakeTrainingClient(self, new_run_id(), self.base_weights(base_model), AdamState()),
        )

    def _from_state(
        self, path: str, method: str, with_optimizer: bool
    ) -> AwaitableConcurrentFuture[FakeTrainingClient]:
        def job() -> FakeTrainingClient:
            checkpoint = self.lookup(path, "weights", method)
            adam = checkpoint.adam.copy() if with_optimizer else AdamState()
            return FakeTrainingClient(self, new_run_id(), checkpoint.weights, adam)

        return self.run(method, job)

    def create_training_client_from_state(self, path: str) -> AwaitableConcurrentFuture[FakeTrainingClient]:
        return self._from_state(path, "create_training_client_from_state", with_optimizer=False)

    def create_training_client_from_state_with_optimizer(
        self, path: str
    ) -> AwaitableConcurrentFuture[FakeTrainingClient]:
        return self._from_state(path, "create_training_client_from_state_with_optimizer", with_optimizer=True)

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None, retry_config: RetryConfig | None = None
    ) -> AwaitableConcurrentFuture[FakeSamplingClient]:
        usage(model_path is not None or base_model is not None, "Either model_path or base_model must be provided")
        usage(
            retry_config is None or isinstance(retry_config, RetryConfig),
            "create_sampling_client: retry_config must be a RetryConfig",
        )
        self.retry_configs.append(retry_config)
        config = retry_config or RetryConfig()

        def job() -> FakeSamplingClient:
            if model_path is not None:
                return FakeSamplingClient(
                    self, self.lookup(model_path, "sampler_weights", "create_sampling_client").weights, config
                )
            assert base_model is not None
            return FakeSamplingClient(self, self.base_weights(base_model), config)

        return self.run("create_sampling_client", job)

    def close(self, status: str, detail: str | None = None) -> AwaitableConcurrentFuture[None]:
        usage(status in ("success", "errored", "interrupted"), f"close: bad status {status!r}")
        if self.closed_with is not None:  # closing twice is a no-op, as in the SDK
            return self.run_done(None)
        future = self.run("close", lambda: None)
        self.closed_with = status
        self._executor.shutdown(wait=False)
        return future


class FakeTrainingClient:
    """Stands in for `tinker.TrainingClient`: one LoRA run with its weights and AdamW state."""

    def __init__(self, service: FakeServiceClient, model_id: str, weights: BigramWeights, adam: AdamState) -> None:
        self._service = service
        self.model_id = model_id
        self.weights = weights
        self._adam = adam
        self._grads_P: dict[int, np.ndarray] = {}

    def _loss_request(
        self, method: str, data: list[types.Datum], loss_fn: Any, loss_fn_config: Mapping[str, Any] | None
    ) -> AwaitableConcurrentFuture[types.ForwardBackwardOutput]:
        loss = typed_loss(loss_fn, loss_fn_config, method)
        typed_data(data, method)

        def job() -> types.ForwardBackwardOutput:
            config = accepted_config(loss, loss_fn_config)
            outputs, loss_sum = [], 0.0
            for item in accepted_data(data, loss, self._service.vocab_size, method):
                lp_T = self.weights.target_logprobs(item.input_T, item.arrays[TARGET_TOKENS])
                loss_D, dloss_T = service_loss(loss, lp_T, item.arrays, config)
                loss_sum += loss_D
                if method == "forward_backward":
                    accumulate_logit_grads(
                        self._grads_P, self.weights, item.input_T, item.arrays[TARGET_TOKENS], dloss_T
                    )
                outputs.append({"logprobs": _tensor(lp_T)})
            return types.ForwardBackwardOutput(
                loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs, metrics={"loss:sum": loss_sum}
            )

        return self._service.run(method, job)

    def forward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> AwaitableConcurrentFuture[types.ForwardBackwardOutput]:
        return self._loss_request("forward", data, loss_fn, loss_fn_config)

    def forward_backward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> AwaitableConcurrentFuture[types.ForwardBackwardOutput]:
        return self._loss_request("forward_backward", data, loss_fn, loss_fn_config)

    def forward_backward_custom(
        self, data: list[types.Datum], loss_fn: Callable[[list[types.Datum], list[Any]], tuple[Any, dict[str, float]]]
    ) -> AwaitableConcurrentFuture[types.ForwardBackwardOutput]:
        """As the SDK does: logprobs with requires_grad go to `loss_fn`; its gradient is applied."""
        usage(callable(loss_fn), "forward_backward_custom: loss_fn must be callable")
        typed_data(data, "forward_backward_custom")

        def job() -> types.ForwardBackwardOutput:
            checked = accepted_data(data, None, self._service.vocab_size, "forward_backward_custom")
            lp_D = [self.weights.target_logprobs(c.input_T, c.arrays[TARGET_TOKENS]) for c in checked]
            lp_tensors = [torch.tensor(lp, dtype=torch.float32, requires_grad=True) for lp in lp_D]
            loss, metrics = loss_fn(data, lp_tensors)
            loss.backward()
            for item, tensor in zip(checked, lp_tensors, strict=True):
                if tensor.grad is None:
                    raise ValueError("No gradient computed for logprob tensor")
                grad_T = tensor.grad.detach().numpy().astype(np.float64)
                accumulate_logit_grads(self._grads_P, self.weights, item.input_T, item.arrays[TARGET_TOKENS], grad_T)
            return types.ForwardBackwardOutput(
                loss_fn_output_type="ArrayRecord",
                loss_fn_outputs=[{"logprobs": _tensor(lp)} for lp in lp_D],
                metrics={**metrics, "loss:sum": float(loss.detach().sum())},
            )

        return self._service.run("forward_backward_custom", job)

    def optim_step(self, optim_params: types.AdamParams) -> AwaitableConcurrentFuture[types.OptimStepResponse]:
        usage(
            isinstance(optim_params, types.AdamParams),
            f"optim_step: expected tinker AdamParams, got {type(optim_params).__name__}",
        )

        def job() -> types.OptimStepResponse:
            offsets_P = self._adam.apply(self.weights.offsets_P, self._grads_P, optim_params, self.weights.vocab_size)
            self.weights = self.weights.with_offsets(offsets_P)
            self._grads_P = {}
            return types.OptimStepResponse(metrics={})

        return self._service.run("optim_step", job)

    def _save(self, name: str, kind: str, method: str) -> Callable[[], str]:
        usage(isinstance(name, str) and bool(name) and "/" not in name, f"{method}: bad checkpoint name {name!r}")

        def job() -> str:
            path = f"tinker://{self.model_id}/{kind}/{name}"
            if path in self._service.checkpoints:
                raise service_error(409, f"{method}: checkpoint {path} already exists")
            self._service.checkpoints[path] = Checkpoint(kind, self.weights, self._adam.copy())
            return path

        return job

    def save_state(self, name: str) -> AwaitableConcurrentFuture[types.SaveWeightsResponse]:
        save = self._save(name, "weights", "save_state")
        return self._service.run("save_state", lambda: types.SaveWeightsResponse(path=save()))

    def save_weights_for_sampler(self, name: str) -> AwaitableConcurrentFuture[types.SaveWeightsForSamplerResponse]:
        save = self._save(name, "sampler_weights", "save_weights_for_sampler")
        return self._service.run("save_weights_for_sampler", lambda: types.SaveWeightsForSamplerResponse(path=save()))

    def _load(
        self, path: str, method: str, with_optimizer: bool
    ) -> AwaitableConcurrentFuture[types.LoadWeightsResponse]:
        def job() -> types.LoadWeightsResponse:
            checkpoint = self._service.lookup(path, "weights", method)
            self.weights, self._grads_P = checkpoint.weights, {}
            if with_optimizer:
                self._adam = checkpoint.adam.copy()
            return types.LoadWeightsResponse(path=path)

        return self._service.run(method, job)

    def load_state(self, path: str) -> AwaitableConcurrentFuture[types.LoadWeightsResponse]:
        return self._load(path, "load_state", with_optimizer=False)

    def load_state_with_optimizer(self, path: str) -> AwaitableConcurrentFuture[types.LoadWeightsResponse]:
        return self._load(path, "load_state_with_optimizer", with_optimizer=True)

    def save_weights_and_get_sampling_client(
        self, *, retry_config: RetryConfig | None = None
    ) -> AwaitableConcurrentFuture[FakeSamplingClient]:
        usage(retry_config is None or isinstance(retry_config, RetryConfig), "retry_config must be a RetryConfig")
        self._service.retry_configs.append(retry_config)
        config = retry_config or RetryConfig()
        return self._service.run(
            "save_weights_and_get_sampling_client", lambda: FakeSamplingClient(self._service, self.weights, config)
        )

    def get_tokenizer(self) -> PreTrainedTokenizerBase:
        return self._service.tokenizer


class FakeSamplingClient:
    """Stands in for `tinker.SamplingClient`: samples and scores one frozen set of weights."""

    def __init__(self, service: FakeServiceClient, weights: BigramWeights, retry_config: RetryConfig) -> None:
        self._service = service
        self.weights = weights
        self.retry_config = retry_config

    def _accept_prompt(self, prompt_T: list[int], method: str) -> None:
        reject(len(prompt_T) > 0, f"{method}: the prompt is empty")
        in_vocab(prompt_T, self._service.vocab_size, f"{method} prompt")

    def _stops(self, stop: Any) -> tuple[frozenset[int], tuple[str, ...]]:
        if stop is None:
            return frozenset(self._service.end_token_ids), ()
        items = [stop] if isinstance(stop, str) else list(stop)
        strings = tuple(s for s in items if isinstance(s, str))
        reject(not strings or len(strings) == len(items), f"sample: stop mixes strings and token ids: {items!r}")
        ids = in_vocab([s for s in items if not isinstance(s, str)], self._service.vocab_size, "sample stop")
        return frozenset(ids), strings

    def _sample_one(
        self, prompt_T: list[int], params: types.SamplingParams, rng: np.random.Generator
    ) -> types.SampledSequence:
        stop_ids, stop_strings = self._stops(params.stop)
        tokens: list[int] = []
        logprobs: list[float] = []
        reason: types.StopReason = "length"
        prev = prompt_T[-1]
        for _ in range(params.max_tokens or DEFAULT_MAX_TOKENS):
            row = self.weights.logprobs_after(prev)
            token = draw_token(row, params, rng)
            tokens.append(token)
            logprobs.append(float(row[token]))
            if token in stop_ids or (
                stop_strings and any(s in self._service.tokenizer.decode(tokens) for s in stop_strings)
            ):
                reason = "stop"
                break
            prev = token
        return types.SampledSequence(
            stop_reason=reason,
            sequence_id=f"fake-seq-{self._service.next_id()}",
            tokens_np=np.asarray(tokens, dtype=np.int32),
            logprobs_np=np.asarray(logprobs, dtype=np.float32),
        )

    def sample(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
    ) -> AwaitableConcurrentFuture[types.SampleResponse]:
        # the fake models sampled tokens only (the real SDK's extras are tested against kitchen serve)
        usage(
            not (include_prompt_logprobs or topk_prompt_logprobs or topk_sample_logprobs),
            "sample: the fake SDK returns no prompt or top-k logprobs",
        )
        prompt_T = typed_tokens(prompt, "sample prompt")
        usage(
            type(num_samples) is int and num_samples > 0,
            f"sample: num_samples must be a positive int, got {num_samples!r}",
        )
        usage(isinstance(sampling_params, types.SamplingParams), "sample: expected tinker SamplingParams")
        usage(
            sampling_params.max_tokens is None or sampling_params.max_tokens > 0,
            "sample: max_tokens must be positive",
        )
        seed = sampling_params.seed if sampling_params.seed is not None else self._service.next_id() + (1 << 40)
        prompt_hash = stable_hash(prompt_T)

        def job() -> types.SampleResponse:
            self._accept_prompt(prompt_T, "sample")
            sequences = [
                self._sample_one(prompt_T, sampling_params, np.random.default_rng([seed & (2**63 - 1), i, prompt_hash]))
                for i in range(num_samples)
            ]
            return types.SampleResponse(sequences=sequences)

        return self._service.run_with_sdk_retries("sample", self.retry_config, job)

    def compute_logprobs(self, prompt: types.ModelInput) -> AwaitableConcurrentFuture[list[float | None]]:
        prompt_T = typed_tokens(prompt, "compute_logprobs prompt")

        def job() -> list[float | None]:
            self._accept_prompt(prompt_T, "compute_logprobs")
            scored_T = self.weights.target_logprobs(prompt_T[:-1], np.asarray(prompt_T[1:]))
            return [None, *(float(np.float32(lp)) for lp in scored_T)]

        return self._service.run_with_sdk_retries("compute_logprobs", self.retry_config, job)


def make_fake_backend(
    latency_s: float = 0.0, retry: RetryPolicy = FAST_RETRY
) -> tuple[TinkerBackend, FakeServiceClient]:
    """A TinkerBackend on a fresh fake service, and the service (to inspect or to inject failures)."""
    service = FakeServiceClient(latency_s=latency_s)
    backend = TinkerBackend(service, retry=retry, redactor=Redactor(), load_tokenizer=service.load_tokenizer)
    return backend, service


def install_fake_sdk(monkeypatch: pytest.MonkeyPatch, latency_s: float = 0.0) -> list[FakeServiceClient]:
    """Make `TinkerBackend.from_env`, and so every `backend: tinker` run, build on fake services.

    Sets a (fake) TINKER_API_KEY, replaces `tinker.ServiceClient` and the SDK tokenizer loader
    (the tiny model's tokenizer stands in for every base model). The services share one checkpoint
    storage, as sessions of the real service do, so a later run can resume from an earlier one's
    tinker:// paths. Returns the services created, in order, for inspection.
    """
    services: list[FakeServiceClient] = []
    storage: dict[str, Checkpoint] = {}

    def service_client(*, base_url: str | None, api_key: str) -> FakeServiceClient:
        services.append(FakeServiceClient(base_url=base_url, api_key=api_key, latency_s=latency_s, checkpoints=storage))
        return services[-1]

    monkeypatch.setenv(API_KEY_ENV, "tml-fake-key-for-tests")
    monkeypatch.setattr(tinker, "ServiceClient", service_client)
    monkeypatch.setattr(tinker_backend_module, "sdk_tokenizer", lambda _base_model: cast(Tokenizer, tiny_tokenizer()))
    return services
