"""TrainingClient over a local torch model, with the Tinker service's semantics.

Every method validates its arguments at once (so a bad call fails where it is made), then queues
a job on the client's own worker thread and returns an asyncio future: jobs run strictly in
submission order. Losses are sums over datums and tokens, and gradients accumulate across
`forward_backward` calls until `optim_step` applies and clears them.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Sequence
from pathlib import Path

import torch

from adapters.common.training_batch import TrainingBatch, build_training_batch
from adapters.local.checkpoint_io import (
    CheckpointKind,
    ModelIdentity,
    checkpoint_path,
    load_optimizer,
    load_weights,
    read_identity,
    save_checkpoint,
    trainable_parameters,
)
from adapters.local.forward_pass import pad_token_id, target_logprobs, vocab_size
from adapters.local.request_batcher import DEFAULT_BATCH_LIMITS, BatchLimits
from adapters.local.sampling_client import LocalSamplingClient
from adapters.local.serial_executor import SerialExecutor
from kitchen.errors import ConfigError, KitchenError
from kitchen.ports import CustomLossFn, Tokenizer
from train_core.losses import TARGET_TOKENS, LossSpec, get_loss_fn
from train_core.types import AdamParams, Datum, ForwardBackwardOutput, OptimStepOutput, TensorData


def _check_adam(params: AdamParams) -> None:
    if params.learning_rate < 0:
        raise ConfigError(f"learning_rate must be >= 0, got {params.learning_rate}")
    for name in ("beta1", "beta2"):
        if not 0.0 <= getattr(params, name) < 1.0:
            raise ConfigError(f"{name} must be in [0, 1), got {getattr(params, name)}")
    for name in ("eps", "weight_decay", "grad_clip_norm"):
        if getattr(params, name) < 0:
            raise ConfigError(f"{name} must be >= 0, got {getattr(params, name)}")


class LocalTrainingClient:
    """Trains one model (all weights, or LoRA adapters only) with AdamW."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Tokenizer,
        identity: ModelIdentity,
        checkpoint_dir: Path,
        sampling_executor: SerialExecutor,
        seeds: random.Random,
        batch_limits: BatchLimits = DEFAULT_BATCH_LIMITS,
    ) -> None:
        self._model = model.eval()  # eval for good: no dropout, same numerics as the sampler
        self._tokenizer = tokenizer
        self._identity = identity
        self._checkpoint_dir = checkpoint_dir
        self._sampling_executor = sampling_executor
        self._seeds = seeds  # the backend's stream: each sampling client gets its own seed
        self._batch_limits = batch_limits
        self._executor = SerialExecutor("local-training")
        self._device = next(model.parameters()).device
        self._vocab_size = vocab_size(model)
        self._pad_id = pad_token_id(tokenizer)
        self._params = list(trainable_parameters(model).values())
        # Hyperparameters are set from AdamParams at every step (learning-rate schedules).
        self._optimizer = torch.optim.AdamW(self._params, lr=0.0)
        self._nonfinite_loss = False  # a loss since the last optim_step was NaN/inf

    def get_tokenizer(self) -> Tokenizer:
        return self._tokenizer

    # -- forward / backward ------------------------------------------------------------------

    async def forward(
        self, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None = None
    ) -> asyncio.Future[ForwardBackwardOutput]:
        """Logprobs and loss without gradients."""
        spec, batch, config = self._prepare(data, loss_fn, loss_fn_config)
        return self._executor.submit(lambda: self._run_loss(spec, batch, config, backward=False))

    async def forward_backward(
        self, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None = None
    ) -> asyncio.Future[ForwardBackwardOutput]:
        """Logprobs and loss; the loss's gradients are added to those already accumulated."""
        spec, batch, config = self._prepare(data, loss_fn, loss_fn_config)
        return self._executor.submit(lambda: self._run_loss(spec, batch, config, backward=True))

    async def forward_backward_custom(
        self, data: Sequence[Datum], loss_fn: CustomLossFn
    ) -> asyncio.Future[ForwardBackwardOutput]:
        """One forward pass; `loss_fn(data, logprobs_D)` is differentiated straight through."""
        batch = self._batch(data, (TARGET_TOKENS,), "forward_backward_custom", ())
        return self._executor.submit(lambda: self._run_custom(data, batch, loss_fn))

    def _prepare(
        self, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None
    ) -> tuple[LossSpec, TrainingBatch, dict[str, float]]:
        spec = get_loss_fn(loss_fn)
        config = spec.resolve_config(loss_fn_config)
        batch = self._batch(data, spec.required_inputs, f"loss {spec.name!r}", spec.input_keys)
        return spec, batch, config

    def _batch(
        self, data: Sequence[Datum], required: Sequence[str], user: str, float_keys: Sequence[str]
    ) -> TrainingBatch:
        return build_training_batch(data, required, user, float_keys, self._pad_id, self._vocab_size, self._device)

    def _logprobs_D(self, batch: TrainingBatch) -> list[torch.Tensor]:
        return batch.split(target_logprobs(self._model, batch.input_ids_BL, batch.targets_BL))

    def _run_loss(
        self, spec: LossSpec, batch: TrainingBatch, config: dict[str, float], backward: bool
    ) -> ForwardBackwardOutput:
        with torch.set_grad_enabled(backward):
            logprobs_D = self._logprobs_D(batch)
            loss, metrics = spec(torch.cat(logprobs_D), batch.loss_inputs, config, batch.lengths_D)
        if backward:
            loss.backward()
            self._nonfinite_loss |= not bool(torch.isfinite(loss.detach()).all())
        return ForwardBackwardOutput([{"logprobs": TensorData.from_torch(lp)} for lp in logprobs_D], metrics)

    def _run_custom(self, data: Sequence[Datum], batch: TrainingBatch, loss_fn: CustomLossFn) -> ForwardBackwardOutput:
        logprobs_D = self._logprobs_D(batch)
        loss, metrics = loss_fn(data, logprobs_D)
        if not (isinstance(loss, torch.Tensor) and loss.dim() == 0 and loss.requires_grad):
            raise KitchenError("a custom loss must return a scalar tensor computed from the logprobs it was given")
        loss.backward()
        self._nonfinite_loss |= not bool(torch.isfinite(loss.detach()).all())
        outputs = [{"logprobs": TensorData.from_torch(lp)} for lp in logprobs_D]
        return ForwardBackwardOutput(outputs, {"loss:sum": float(loss.detach()), **metrics})

    # -- optimizer ---------------------------------------------------------------------------

    async def optim_step(self, adam_params: AdamParams) -> asyncio.Future[OptimStepOutput]:
        """One AdamW step on the accumulated gradients (clipped first when grad_clip_norm > 0)."""
        _check_adam(adam_params)
        return self._executor.submit(lambda: self._step(adam_params))

    def _step(self, adam: AdamParams) -> OptimStepOutput:
        for group in self._optimizer.param_groups:
            group.update(
                lr=adam.learning_rate,
                betas=(adam.beta1, adam.beta2),
                eps=adam.eps,
                weight_decay=adam.weight_decay,
            )
        grads = [p.grad for p in self._params if p.grad is not None]
        grad_norm = torch.nn.utils.get_total_norm(grads) if grads else torch.tensor(0.0)
        if self._nonfinite_loss or not bool(torch.isfinite(grad_norm)):
            # A NaN/inf loss or gradient would poison the weights and Adam's moments: skip the step.
            self._nonfinite_loss = False
            self._optimizer.zero_grad(set_to_none=True)
            return OptimStepOutput(
                {"grad_norm": float(grad_norm), "learning_rate": adam.learning_rate, "nonfinite_step": 1.0}
            )
        if adam.grad_clip_norm > 0 and grads:
            torch.nn.utils.clip_grads_with_norm_(self._params, adam.grad_clip_norm, grad_norm)
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        return OptimStepOutput({"grad_norm": float(grad_norm), "learning_rate": adam.learning_rate})

    # -- checkpoints -------------------------------------------------------------------------

    async def save_state(self, name: str) -> asyncio.Future[str]:
        """Weights, optimizer state and metadata under `<checkpoint_dir>/weights/<name>`."""
        path = checkpoint_path(self._checkpoint_dir, "state", name)
        return self._executor.submit(lambda: self._save(path, "state"))

    async def save_weights_for_sampler(self, name: str) -> asyncio.Future[str]:
        """Weights and metadata under `<checkpoint_dir>/sampler_weights/<name>`."""
        path = checkpoint_path(self._checkpoint_dir, "sampler", name)
        return self._executor.submit(lambda: self._save(path, "sampler"))

    def _save(self, path: Path, kind: CheckpointKind) -> str:
        optimizer = self._optimizer if kind == "state" else None
        return str(save_checkpoint(path, self._model, self._identity, kind, optimizer))

    async def load_state(self, path: str, with_optimizer: bool = True) -> asyncio.Future[None]:
        """Replace the weights (and the optimizer state, else reset it) with a saved checkpoint's."""
        checkpoint = Path(path)
        saved = read_identity(checkpoint)
        if (saved.base_model, saved.lora_rank) != (self._identity.base_model, self._identity.lora_rank):
            raise ConfigError(
                f"{path}: checkpoint of {saved.base_model!r} (lora_rank={saved.lora_rank}) cannot load "
                f"into a client training {self._identity.base_model!r} (lora_rank={self._identity.lora_rank})"
            )
        return self._executor.submit(lambda: self.restore(checkpoint, with_optimizer))

    def restore(self, path: Path, with_optimizer: bool) -> None:
        """Load weights (and optimizer state, else a fresh optimizer) now, on the calling thread."""
        load_weights(path, self._model)
        self._optimizer = torch.optim.AdamW(self._params, lr=0.0)
        if with_optimizer:
            load_optimizer(path, self._optimizer)

    async def save_weights_and_get_sampling_client(self, name: str | None = None) -> LocalSamplingClient:
        """A sampling client on a frozen copy of the current weights (after all queued work).

        With a name, the weights are also saved for the sampler under that name.
        """
        if name is not None:
            await (await self.save_weights_for_sampler(name))
        frozen = await self._executor.submit(lambda: copy.deepcopy(self._model))
        seed = self._seeds.getrandbits(63)
        return LocalSamplingClient(frozen, self._tokenizer, self._sampling_executor, seed, self._batch_limits)

    async def close(self) -> None:
        """Finish queued jobs and stop the worker thread."""
        await asyncio.to_thread(self._executor.shutdown)
