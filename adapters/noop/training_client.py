"""The noop training client: real loss values over pseudo-logprobs, requests run in submission order.

An optimizer step bumps the weights version, which changes every logprob; saving and loading move
versions around. Arguments are checked when a request is submitted, so a bad loss name or a
missing input fails at the call that caused it; the work itself runs later, in order, on the
weights current at that point.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from adapters.common.tiny import TINY_MODEL_NAME
from adapters.common.tokenizer import load_tokenizer
from adapters.common.training_batch import TrainingBatch, build_training_batch
from adapters.noop.checkpoint_store import SavedWeights, SaveKind
from adapters.noop.pseudo_logprobs import PseudoWeights, target_logprobs_BL
from adapters.noop.runtime import NOOP_IMAGE_TOKEN, NoopRuntime, vocab_size
from adapters.noop.sampling_client import NoopSamplingClient
from adapters.noop.serial_queue import SerialQueue
from kitchen.engine.errors import KitchenError
from kitchen.engine.ports import CustomLossFn, Tokenizer
from train_core.losses import LOSS_SPECS, TARGET_TOKENS, LossSpec, LossTable, find_loss
from train_core.types import AdamParams, Datum, ForwardBackwardOutput, OptimStepOutput, TensorData

T = TypeVar("T")


def _check_batch(
    data: Sequence[Datum], required_keys: Sequence[str], float_keys: Sequence[str], user: str
) -> TrainingBatch:
    """Validate `data` exactly as the local backend does (keys, lengths, token ids) and stack it."""
    return build_training_batch(
        data, required_keys, user, float_keys, 0, vocab_size(), torch.device("cpu"), NOOP_IMAGE_TOKEN
    )


class NoopTrainingClient:
    """A training client over pseudo-weights; see the module docstring."""

    def __init__(
        self, runtime: NoopRuntime, weights: PseudoWeights, lora_rank: int | None, losses: LossTable = LOSS_SPECS
    ) -> None:
        self.runtime = runtime
        self._losses = losses
        self.weights = weights
        self.lora_rank = lora_rank
        self.client_id = runtime.new_client_id("training")
        self.queue = SerialQueue()
        self._service_free_at = 0.0  # the event loop's time at which the simulated service ends its last request
        self._nonfinite = False  # the gradients accumulated since the last optim_step hold NaN/inf

    def _submit(self, method: str, work: Callable[[], T]) -> asyncio.Task[T]:
        """Queue `work` behind earlier requests; it takes `method`'s simulated latency in all,
        counted from when the simulated service takes it up: at its submission or when the request
        before it ends, whichever is later (not when this client's event loop gets round to it, as
        a busy loop would only stretch a remote service's latency, never delay its start)."""
        loop = asyncio.get_running_loop()
        submitted = loop.time()

        async def run() -> T:
            started = max(submitted, self._service_free_at)
            try:
                result = work()  # the service's own computation is part of its latency
            finally:
                self._service_free_at = max(loop.time(), started + self.runtime.latency.seconds(method))
            await self.runtime.latency.pad(method, started)
            return result

        return self.queue.submit(run)

    def _logprobs_D(self, batch: TrainingBatch) -> list[torch.Tensor]:
        """Each datum's pseudo-logprobs of its target tokens under the current weights, [L_d] each,
        scored for the whole padded batch at once."""
        logprobs_BL = target_logprobs_BL(self.weights, batch.input_ids_BL.numpy(), batch.targets_BL.numpy())
        return batch.split(torch.from_numpy(logprobs_BL))

    def _run_loss(
        self, batch: TrainingBatch, spec: LossSpec, config: dict[str, float], backward: bool
    ) -> ForwardBackwardOutput:
        logprobs_D = self._logprobs_D(batch)
        targets_T = torch.cat(batch.split(batch.targets_BL))
        loss, metrics = spec(
            torch.cat(logprobs_D), {TARGET_TOKENS: targets_T, **batch.loss_inputs}, config, batch.lengths_D
        )
        if backward and not torch.isfinite(loss).all():
            self._nonfinite = True
        outputs = [{"logprobs": TensorData.from_torch(logprobs_T)} for logprobs_T in logprobs_D]
        return ForwardBackwardOutput(outputs, metrics)

    def _submit_loss(
        self, method: str, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None
    ) -> asyncio.Task[ForwardBackwardOutput]:
        spec = find_loss(self._losses, loss_fn)
        config = spec.resolve_config(loss_fn_config)
        batch = _check_batch(data, spec.required_inputs, spec.input_keys, f"loss {loss_fn!r}")
        num_tokens = sum(batch.lengths_D)
        self.runtime.record(
            "training",
            method,
            self.client_id,
            loss_fn=loss_fn,
            loss_fn_config=dict(loss_fn_config or {}),
            num_data=len(data),
            num_tokens=num_tokens,
        )
        backward = method == "forward_backward"
        return self._submit(method, lambda: self._run_loss(batch, spec, config, backward))

    async def forward(
        self, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None = None
    ) -> asyncio.Task[ForwardBackwardOutput]:
        return self._submit_loss("forward", data, loss_fn, loss_fn_config)

    async def forward_backward(
        self, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None = None
    ) -> asyncio.Task[ForwardBackwardOutput]:
        return self._submit_loss("forward_backward", data, loss_fn, loss_fn_config)

    async def forward_backward_custom(
        self, data: Sequence[Datum], loss_fn: CustomLossFn
    ) -> asyncio.Task[ForwardBackwardOutput]:
        batch = _check_batch(data, (TARGET_TOKENS,), (), "forward_backward_custom")
        self.runtime.record(
            "training",
            "forward_backward_custom",
            self.client_id,
            loss_fn=getattr(loss_fn, "__name__", repr(loss_fn)),
            num_data=len(data),
            num_tokens=sum(batch.lengths_D),
        )
        data = list(data)

        def run_custom() -> ForwardBackwardOutput:
            logprobs_D = self._logprobs_D(batch)
            tensors_D = [lp.clone().requires_grad_() for lp in logprobs_D]
            loss, metrics = loss_fn(data, tensors_D)
            loss.backward()
            grads = [t.grad for t in tensors_D if t.grad is not None]
            if not torch.isfinite(loss).all() or any(not torch.isfinite(g).all() for g in grads):
                self._nonfinite = (
                    True  # a custom loss that is not differentiable in the logprobs fails here, as for real
                )
            outputs = [{"logprobs": TensorData.from_torch(lp)} for lp in logprobs_D]
            return ForwardBackwardOutput(outputs, {key: float(value) for key, value in metrics.items()})

        return self._submit("forward_backward_custom", run_custom)

    async def optim_step(self, adam_params: AdamParams) -> asyncio.Task[OptimStepOutput]:
        if not (math.isfinite(adam_params.learning_rate) and adam_params.learning_rate >= 0):
            raise KitchenError(f"optim_step: learning_rate must be finite and >= 0, got {adam_params.learning_rate}")
        self.runtime.record("training", "optim_step", self.client_id, learning_rate=adam_params.learning_rate)

        def step() -> OptimStepOutput:
            if self._nonfinite:  # a NaN/inf loss or gradient: the step is not applied
                self._nonfinite = False
                return OptimStepOutput({"nonfinite_step": 1.0})
            self.weights = self.weights.bumped()
            return OptimStepOutput()

        return self._submit("optim_step", step)

    def _save(self, method: str, kind: SaveKind, name: str) -> asyncio.Task[str]:
        path = self.runtime.store.path_for(self.client_id, kind, name)
        self.runtime.record("training", method, self.client_id, name=name)

        def save() -> str:
            self.runtime.store.save(path, SavedWeights(kind, self.weights, self.lora_rank))
            return path

        return self._submit(method, save)

    async def save_state(self, name: str) -> asyncio.Task[str]:
        return self._save("save_state", "state", name)

    async def save_weights_for_sampler(self, name: str) -> asyncio.Task[str]:
        return self._save("save_weights_for_sampler", "sampler_weights", name)

    async def load_state(self, path: str, with_optimizer: bool = True) -> asyncio.Task[None]:
        """Load weights (the noop backend has no optimizer state, so `with_optimizer` only gets recorded)."""
        self.runtime.record("training", "load_state", self.client_id, path=path, with_optimizer=with_optimizer)

        def load() -> None:
            saved = self.runtime.store.load(path, "state")
            mine = (self.weights.base_model, self.lora_rank)
            theirs = (saved.weights.base_model, saved.lora_rank)
            if theirs != mine:
                raise KitchenError(f"{path!r} holds (base_model, lora_rank) {theirs}, but this client is {mine}")
            self.weights = saved.weights

        return self._submit("load_state", load)

    async def save_weights_and_get_sampling_client(self, name: str | None = None) -> NoopSamplingClient:
        """A sampler frozen at the weights this client has once every earlier request has run."""
        self.runtime.record("training", "save_weights_and_get_sampling_client", self.client_id, name=name)

        path = None if name is None else self.runtime.store.path_for(self.client_id, "sampler_weights", name)

        def snapshot() -> PseudoWeights:
            if path is not None:
                self.runtime.store.save(path, SavedWeights("sampler_weights", self.weights, self.lora_rank))
            return self.weights

        weights = await self._submit("save_weights_and_get_sampling_client", snapshot)
        return NoopSamplingClient(self.runtime, weights)

    def get_tokenizer(self) -> Tokenizer:
        return load_tokenizer(TINY_MODEL_NAME)
