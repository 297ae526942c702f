"""TrainingClient over a local torch model, with the Tinker service's semantics.

Every method validates its arguments at once (so a bad call fails where it is made), then queues
a job on the client's own worker thread and returns an asyncio future: jobs run strictly in
submission order. Losses are sums over datums and tokens, and gradients accumulate across
`forward_backward` calls until `optim_step` applies and clears them.

A batch larger than `max_tokens_per_microbatch` (padded tokens) runs as several micro-batches of
datums of similar length whose gradients accumulate: the built-in losses are sums over datums, so
the result is that of one big batch, up to float rounding.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from adapters.common.training_batch import TrainingBatch, build_training_batch
from adapters.local.checkpoint_io import (
    CheckpointKind,
    ModelIdentity,
    checkpoint_path,
    copy_weights,
    load_optimizer,
    read_weights,
    require_same_model,
    trainable_parameters,
    write_checkpoint,
)
from adapters.local.forward_pass import (
    ScoredSequences,
    check_scoring_paths,
    log_sum_squared_probs,
    pad_token_id,
    sequence_logprobs,
    vocab_size,
)
from adapters.local.grouped_lora import adapter_layers
from adapters.local.lora_group import LossJob
from adapters.local.mixed_precision import (
    LossScale,
    MasterWeights,
    compute_dtype,
    scaled_gradients,
    sum_embedding_gradients_in_float32,
)
from adapters.local.model_loading import compile_body
from adapters.local.request_batcher import DEFAULT_BATCH_LIMITS, BatchLimits
from adapters.local.sampler_pool import SamplerPool
from adapters.local.sampling_client import LocalSamplingClient
from adapters.local.serial_executor import SerialExecutor
from adapters.local.shared_worker import Lane
from adapters.local.token_scoring import Entropy, LogprobMethod
from adapters.local.vision import image_token_id, is_vision_model, vision_logprobs
from kitchen.engine.errors import ConfigError, KitchenError
from kitchen.engine.ports import CustomLossFn, SamplingClient, Tokenizer
from train_core.losses import (
    LOSS_SPECS,
    TARGET_TOKENS,
    LossSpec,
    LossTable,
    find_loss,
    is_policy_gradient,
    merge_loss_metrics,
)
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


@dataclass(frozen=True)
class TrainingOptions:
    """How a training client runs (the `local.*` settings that concern training)."""

    max_tokens_per_microbatch: int | None = None
    """Split a forward_backward whose padded batch exceeds this many tokens; None: never split."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass instead of keeping them (less memory, ~30% slower)."""
    train_mode: bool = False
    """Run forward_backward in train mode (LoRA dropout > 0); forward and sampling stay in eval."""
    always_grad_norm: bool = False
    """Compute the gradient norm every step; else only when clipping needs it."""
    logprob_method: LogprobMethod = "chunked"
    """How logprobs come from the final hidden states (see `adapters.local.token_scoring`)."""
    compile: bool = False
    """`torch.compile` the model's body (`compile_body`)."""


SamplerFactory = Callable[
    [torch.nn.Module, ModelIdentity, Tokenizer, int, Callable[[Callable[[], Any]], Awaitable[Any]]],
    Awaitable[SamplingClient],
]
"""Makes the sampling client when another rollout engine than kitchen's sampler serves it
(`local.sampler: vllm`): from the trained model itself (no sampler copy), its identity, its
tokenizer, a seed, and what runs a job on the training thread (where it reads the weights)."""


def make_adamw(params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """AdamW with torch's fused kernel where the parameters allow it (same update, several times
    faster than the per-parameter loop), else the multi-tensor (foreach) one."""
    try:
        return torch.optim.AdamW(params, lr=0.0, fused=True)
    except (RuntimeError, ValueError):  # a device or dtype the fused kernel does not support
        return torch.optim.AdamW(params, lr=0.0, foreach=True)


def microbatches(lengths_D: Sequence[int], max_tokens: int | None) -> list[list[int]]:
    """Datum indices per micro-batch: sorted by length and cut so that rows x longest row stays
    within `max_tokens` (a datum longer than that runs alone). One batch, in order, when it fits."""
    if max_tokens is None or len(lengths_D) * max(lengths_D) <= max_tokens:
        return [list(range(len(lengths_D)))]
    batches: list[list[int]] = []
    current: list[int] = []
    for index in sorted(range(len(lengths_D)), key=lambda i: lengths_D[i]):
        if current and (len(current) + 1) * lengths_D[index] > max_tokens:
            batches.append(current)
            current = []
        current.append(index)
    batches.append(current)
    return batches


def loss_entropy(spec: LossSpec) -> Entropy:
    """What a built-in loss needs of the policy's per-token entropy: its value for the
    policy-gradient losses (returned per token, for RL to log), else nothing."""
    return "value" if is_policy_gradient(spec) else "none"


def reads_entropy(loss_fn: CustomLossFn) -> bool:
    """Whether a custom loss takes the policy's per-token entropies (`entropy_D`, with gradients,
    computed in the same pass as the logprobs) besides `(data, logprobs_D)`."""
    return _takes(loss_fn, "entropy_D")


def reads_log_sum_sq_probs(loss_fn: CustomLossFn) -> bool:
    """Whether a custom loss takes each target position's `log sum_v p_v^2` under the policy
    (`log_sum_sq_probs_D`, no gradient: WPO's weights, `train_core.preference.losses.wpo_weights`)."""
    return _takes(loss_fn, "log_sum_sq_probs_D")


def _takes(loss_fn: CustomLossFn, parameter: str) -> bool:
    try:
        return parameter in inspect.signature(loss_fn).parameters
    except (TypeError, ValueError):  # a callable without a signature
        return False


def backward_custom_loss(
    loss_fn: CustomLossFn,
    data: Sequence[Datum],
    logprobs_D: list[torch.Tensor],
    entropy_D: list[torch.Tensor] | None = None,
    log_sum_sq_probs_D: list[torch.Tensor] | None = None,
) -> tuple[dict[str, float], bool]:
    """`loss_fn(data, logprobs_D)` (with `entropy_D=` and `log_sum_sq_probs_D=` when given),
    checked and differentiated (the gradients flow to whatever the logprobs were computed from):
    its metrics with `loss:sum`, and whether the loss was finite.

    Also `surrogate_loss:sum`, the loss linearised at these logprobs, `sum(logprob * dC/dlogprob)`:
    what the Tinker service reports for a custom loss (its backward is a cross-entropy weighted by
    `-dC/dlogprob`), so a custom-loss step logs the same keys on every backend."""
    for logprobs_T in logprobs_D:
        if logprobs_T.requires_grad and not logprobs_T.is_leaf:
            logprobs_T.retain_grad()
    # beyond the port's CustomLossFn type: only losses that name them (`reads_entropy`, ...) get them
    extras = {"entropy_D": entropy_D, "log_sum_sq_probs_D": log_sum_sq_probs_D}
    call: Any = loss_fn
    loss, metrics = call(data, logprobs_D, **{key: value for key, value in extras.items() if value is not None})
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0 and loss.requires_grad):
        raise KitchenError("a custom loss must return a scalar tensor computed from the logprobs it was given")
    loss.backward()
    surrogate = sum(float((lp.detach() * lp.grad).sum()) for lp in logprobs_D if lp.grad is not None)
    own = {"loss:sum": float(loss.detach()), "surrogate_loss:sum": surrogate}
    return {**own, **metrics}, bool(torch.isfinite(loss.detach()))


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
        options: TrainingOptions | None = None,
        make_sampler: SamplerFactory | None = None,
        losses: LossTable = LOSS_SPECS,
        before_compute: Callable[[], None] | None = None,
        lane: Lane | None = None,
        sampling_lane: Lane | None = None,
    ) -> None:
        """With `lane` (a queue on its LoRA group's worker, `adapters.local.lora_group`), the
        client's jobs run there, its forward passes batched with other clients' of the group; with
        `sampling_lane` (on the group's sampling worker), so do its sampling clients' samples."""
        options = options or TrainingOptions()
        self._before_compute = before_compute
        self._losses = losses
        self._make_sampler = make_sampler
        self._options = options
        # Eval mode (no dropout, the sampler's numerics) except inside forward_backward when
        # LoRA dropout or gradient checkpointing (which transformers applies in train mode) ask.
        self._model = model.eval()
        if options.gradient_checkpointing:
            # transformers 5 renamed it (the old name warns); peft models forward both.
            enable: Any = getattr(model, "activation_checkpointing_enable", None)
            if enable is not None:
                enable(activation_checkpointing_kwargs={"use_reentrant": False})
            elif (legacy := getattr(model, "gradient_checkpointing_enable", None)) is not None:
                legacy(gradient_checkpointing_kwargs={"use_reentrant": False})
            else:
                raise ConfigError("local.gradient_checkpointing: this model does not support it")
        self._tokenizer = tokenizer
        self._identity = identity
        self._checkpoint_dir = checkpoint_dir
        self._sampling_executor = sampling_executor
        self._seeds = seeds  # the backend's stream: each sampling client gets its own seed
        self._batch_limits = batch_limits
        self._executor: SerialExecutor | Lane = lane or SerialExecutor("local-training")
        self._lane = lane
        self._sampling_lane = sampling_lane
        self._adapters = None if lane is None else adapter_layers(model)
        self._device = next(model.parameters()).device
        self._vocab_size = vocab_size(model)
        self._pad_id = pad_token_id(tokenizer)
        self._image_token_id = image_token_id(model) if is_vision_model(model) else None
        # AdamW steps float32 masters of low-precision parameters (`adapters.local.mixed_precision`);
        # float16 also scales its gradients.
        self._masters = MasterWeights(trainable_parameters(model))
        sum_embedding_gradients_in_float32(model)
        self._params = self._masters.masters
        self._loss_scale = LossScale() if compute_dtype(model) == torch.float16 else None
        # Hyperparameters are set from AdamParams at every step (learning-rate schedules).
        self._optimizer = make_adamw(self._params)
        # after the optimizer took the parameters: an FSDP root keeps its parameters gathered
        # after a forward, and the checks run forward passes
        check_scoring_paths(model, options.logprob_method)
        if options.compile:
            compile_body(model)
        # kitchen's sampler samples from copies of the model; another engine gets the weights
        self._samplers = SamplerPool(model) if make_sampler is None else None
        self._weights_version = 0  # bumped whenever the weights may change
        self._last_state: tuple[int, Path] | None = None  # (version, path) of the last save_state
        self._nonfinite_loss = False  # a loss since the last optim_step was NaN/inf

    def get_tokenizer(self) -> Tokenizer:
        return self._tokenizer

    # -- forward / backward ------------------------------------------------------------------

    async def forward(
        self, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None = None
    ) -> asyncio.Future[ForwardBackwardOutput]:
        """Logprobs and loss without gradients."""
        spec, parts, config = self._prepare(data, loss_fn, loss_fn_config)
        return self._submit_loss(spec, parts, config, backward=False)

    async def forward_backward(
        self, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None = None
    ) -> asyncio.Future[ForwardBackwardOutput]:
        """Logprobs and loss; the loss's gradients are added to those already accumulated."""
        spec, parts, config = self._prepare(data, loss_fn, loss_fn_config)
        return self._submit_loss(spec, parts, config, backward=True)

    def _submit_loss(
        self,
        spec: LossSpec,
        parts: list[tuple[list[int], TrainingBatch]],
        config: dict[str, float],
        backward: bool,
    ) -> asyncio.Future[ForwardBackwardOutput]:
        """Queue a built-in loss's pass: on a LoRA group's lane, one that may run together with
        other clients' (one micro-batch, no images, no loss scaling, no engine to put to sleep first),
        else on its own."""
        run = functools.partial(self._run_loss, spec, parts, config, backward)
        batch = parts[0][1]
        alone = len(parts) > 1 or bool(batch.images) or self._loss_scale is not None
        alone = alone or self._before_compute is not None
        if self._lane is None or self._adapters is None or alone:
            return self._executor.submit(run)
        job = LossJob(
            self._model,
            self._adapters,
            spec,
            batch,
            config,
            backward,
            loss_entropy(spec),
            self._pad_id,
            run,
            self._mark_nonfinite,
        )
        return self._lane.submit_batchable(job)

    def _mark_nonfinite(self) -> None:
        self._nonfinite_loss = True

    async def forward_backward_custom(
        self, data: Sequence[Datum], loss_fn: CustomLossFn
    ) -> asyncio.Future[ForwardBackwardOutput]:
        """One forward pass; `loss_fn(data, logprobs_D)` is differentiated straight through."""
        batch = self._batch(data, (TARGET_TOKENS,), "forward_backward_custom", ())
        return self._executor.submit(lambda: self._run_custom(data, batch, loss_fn))

    def _prepare(
        self, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None
    ) -> tuple[LossSpec, list[tuple[list[int], TrainingBatch]], dict[str, float]]:
        spec = find_loss(self._losses, loss_fn)
        config = spec.resolve_config(loss_fn_config)
        user = f"loss {spec.name!r}"
        batch = self._batch(data, spec.required_inputs, user, spec.input_keys)
        groups = microbatches(batch.lengths_D, self._options.max_tokens_per_microbatch)
        if len(groups) == 1:
            return spec, [(groups[0], batch)], config
        parts = [(group, self._batch([data[i] for i in group], (), user, spec.input_keys)) for group in groups]
        return spec, parts, config

    def _batch(
        self, data: Sequence[Datum], required: Sequence[str], user: str, float_keys: Sequence[str]
    ) -> TrainingBatch:
        return build_training_batch(
            data, required, user, float_keys, self._pad_id, self._vocab_size, self._device, self._image_token_id
        )

    def _score(self, batch: TrainingBatch, entropy: Entropy = "none") -> ScoredSequences:
        inputs_D = [row.tolist() for row in batch.split(batch.input_ids_BL)]
        targets_D = [row.tolist() for row in batch.split(batch.targets_BL)]
        if batch.images:
            logprobs_D, entropy_D = vision_logprobs(
                self._model, inputs_D, targets_D, batch.images, self._pad_id, entropy
            )
            return ScoredSequences(logprobs_D, batch.input_ids_BL.numel(), sum(batch.lengths_D), entropy_D)
        method = self._options.logprob_method
        return sequence_logprobs(self._model, inputs_D, targets_D, self._pad_id, method, entropy)

    @contextmanager
    def _training_mode(self, backward: bool) -> Iterator[None]:
        """Train mode (dropout, gradient checkpointing) around a backward pass that asks for it;
        the model is back in eval mode afterwards, whatever happened. Every pass starts here, so
        here a rollout engine that sleeps while the trainer computes is put to sleep."""
        if self._before_compute is not None:
            self._before_compute()
        train_mode = backward and (self._options.train_mode or self._options.gradient_checkpointing)
        if train_mode:
            self._model.train()
        try:
            yield
        finally:
            if train_mode:
                self._model.eval()

    def _loss_pass(
        self, spec: LossSpec, batch: TrainingBatch, config: dict[str, float], backward: bool
    ) -> tuple[ScoredSequences, dict[str, float]]:
        """One micro-batch through a built-in loss (gradients accumulate when `backward`): its
        per-datum logprobs and its loss metrics. A NaN/inf loss is remembered for the optim step."""
        with torch.set_grad_enabled(backward), scaled_gradients(self._loss_scale):
            scored = self._score(batch, loss_entropy(spec))
            loss, metrics = spec(torch.cat(scored.logprobs_D), batch.loss_inputs, config, batch.lengths_D)
        if backward:
            loss.backward()
            self._nonfinite_loss |= not bool(torch.isfinite(loss.detach()).all())
        return scored, metrics

    def _run_loss(
        self,
        spec: LossSpec,
        parts: list[tuple[list[int], TrainingBatch]],
        config: dict[str, float],
        backward: bool,
    ) -> ForwardBackwardOutput:
        """The loss metrics of the micro-batches merge as one batch's (`merge_loss_metrics`)."""
        outputs: list[dict[str, TensorData]] = [{} for _ in range(sum(len(group) for group, _ in parts))]
        part_metrics: list[dict[str, float]] = []
        slots = filled = 0
        with self._training_mode(backward):
            for group, batch in parts:
                scored, metrics = self._loss_pass(spec, batch, config, backward)
                part_metrics.append(metrics)
                slots, filled = slots + scored.slots, filled + scored.filled
                for k, index in enumerate(group):
                    outputs[index] = {"logprobs": TensorData.from_torch(scored.logprobs_D[k])}
                    if scored.entropy_D is not None:
                        outputs[index]["entropy"] = TensorData.from_torch(scored.entropy_D[k])
        metrics = {**merge_loss_metrics(part_metrics), "padding_fraction:mean": 1.0 - filled / slots}
        return ForwardBackwardOutput(outputs, metrics)

    def _run_custom(self, data: Sequence[Datum], batch: TrainingBatch, loss_fn: CustomLossFn) -> ForwardBackwardOutput:
        """A custom loss sees every datum's logprobs at once (it may couple them, as DPO's pairs
        do), so it is never split into micro-batches. The backward runs in the forward's mode: a
        gradient-checkpointed layer recomputes its forward then, dropout included."""
        log_sum_sq_D = None
        if reads_log_sum_sq_probs(loss_fn):
            if batch.images:
                raise KitchenError("a custom loss that reads log_sum_sq_probs_D (WPO) takes text-only data")
            log_sum_sq_D = log_sum_squared_probs(self._model, [row.tolist() for row in batch.split(batch.input_ids_BL)])
        with self._training_mode(backward=True), scaled_gradients(self._loss_scale):
            scored = self._score(batch, "grad" if reads_entropy(loss_fn) else "none")
            logprobs_D = scored.logprobs_D
            metrics, finite = backward_custom_loss(loss_fn, data, logprobs_D, scored.entropy_D, log_sum_sq_D)
        self._nonfinite_loss |= not finite
        metrics["padding_fraction:mean"] = 1.0 - scored.filled / scored.slots
        return ForwardBackwardOutput([{"logprobs": TensorData.from_torch(lp)} for lp in logprobs_D], metrics)

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
        grads = self._masters.gradients()
        metrics = {"learning_rate": adam.learning_rate}
        overflow = False
        if self._loss_scale is not None:
            metrics["loss_scale"] = self._loss_scale.value
            overflow = not self._loss_scale.unscale(grads)
        nonfinite, overflow = self._agreed(self._nonfinite_loss, overflow)
        self._nonfinite_loss = False
        if overflow and not nonfinite and self._loss_scale is not None and self._loss_scale.update(overflow=True):
            # float16's scaled gradients overflowed: a normal event of loss scaling, not a bad step
            self._optimizer.zero_grad(set_to_none=True)
            return OptimStepOutput({**metrics, "loss_scale_overflow": 1.0})
        # The norm costs a pass over every gradient: computed when clipping needs it (or when
        # asked for); with no gradient at all it is 0 for free. Otherwise it is not reported.
        grad_norm: torch.Tensor | None = None
        if not grads:
            metrics["grad_norm"] = 0.0
        elif adam.grad_clip_norm > 0 or self._options.always_grad_norm:
            grad_norm = torch.nn.utils.get_total_norm(grads)
            metrics["grad_norm"] = float(grad_norm)
        if nonfinite or overflow or (grad_norm is not None and not bool(torch.isfinite(grad_norm))):
            # A NaN/inf loss, or gradient norm where it is measured (with clipping, or
            # always_grad_norm), would poison the weights and Adam's moments: skip the step.
            self._optimizer.zero_grad(set_to_none=True)
            return OptimStepOutput({**metrics, "nonfinite_step": 1.0})
        if self._loss_scale is not None:
            self._loss_scale.update(overflow=False)
        if grad_norm is not None and adam.grad_clip_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(self._params, adam.grad_clip_norm, grad_norm)
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        self._masters.publish()
        self._weights_version += 1
        return OptimStepOutput(metrics)

    def _agreed(self, nonfinite: bool, overflow: bool) -> tuple[bool, bool]:
        """The step's skip decisions as every process holding a part of the model sees them (here:
        this one alone; the sharded workers agree across ranks)."""
        return nonfinite, overflow

    # -- checkpoints -------------------------------------------------------------------------

    async def save_state(self, name: str) -> asyncio.Future[str]:
        """Weights, optimizer state and metadata under `<checkpoint_dir>/weights/<name>`."""
        path = checkpoint_path(self._checkpoint_dir, "state", name)
        return self._executor.submit(lambda: self._save(path, "state"))

    async def save_weights_for_sampler(self, name: str) -> asyncio.Future[str]:
        """Weights and metadata under `<checkpoint_dir>/sampler_weights/<name>`."""
        path = checkpoint_path(self._checkpoint_dir, "sampler", name)
        return self._executor.submit(lambda: self._save(path, "sampler"))

    async def save_mixed_weights_for_sampler(self, name: str, other_path: str, alpha: float) -> asyncio.Future[str]:
        """`alpha * current + (1 - alpha) * saved` (the sampler checkpoint at `other_path`), parameter
        by parameter at master precision, saved for the sampler as `name` (TR-DPO's soft reference
        update). Full weights only: mixing LoRA's two factors separately is not mixing their
        product, so a LoRA client refuses (as TRL refuses TR-DPO with PEFT)."""
        if self._identity.lora_rank is not None:
            raise ConfigError("mixing weights (dpo.ref_model_mixup_alpha < 1) needs full fine-tuning, not LoRA")
        if not 0.0 < alpha <= 1.0:
            raise ConfigError(f"weight mixing alpha must be in (0, 1], got {alpha}")
        other = Path(other_path)
        require_same_model(other, self._identity)
        path = checkpoint_path(self._checkpoint_dir, "sampler", name)

        def mixed() -> dict[str, torch.Tensor]:
            saved = read_weights(other)
            return {
                key: alpha * value + (1.0 - alpha) * saved[key].to(value.dtype)
                for key, value in self._masters.state().items()
            }

        return self._executor.submit(lambda: str(write_checkpoint(path, mixed, self._identity, "sampler", None)))

    def _save(self, path: Path, kind: CheckpointKind) -> str:
        optimizer = self._optimizer.state_dict() if kind == "state" else None
        same = None
        if kind == "sampler" and self._last_state is not None and self._last_state[0] == self._weights_version:
            same = self._last_state[1]  # unchanged since that save: link its weights, do not rewrite them
        # the weights at master precision: a resumed mixed-precision run continues exactly
        saved = write_checkpoint(path, self._masters.state, self._identity, kind, optimizer, same_weights_as=same)
        if kind == "state":
            self._last_state = (self._weights_version, saved)
        return str(saved)

    async def load_state(self, path: str, with_optimizer: bool = True) -> asyncio.Future[None]:
        """Replace the weights (and the optimizer state, else reset it) with a saved checkpoint's."""
        checkpoint = Path(path)
        require_same_model(checkpoint, self._identity)
        return self._executor.submit(lambda: self.restore(checkpoint, with_optimizer))

    def restore(self, path: Path, with_optimizer: bool) -> None:
        """Load weights (and optimizer state, else a fresh optimizer) now, on the calling thread. A
        checkpoint of low-precision weights and moments (saved before master weights existed)
        loads as their float32 values: the optimizer state takes its parameters' dtype."""
        weights = read_weights(path)
        copy_weights(weights, self._model, path)  # checks that the names fit
        self._masters.load(weights)
        self._weights_version += 1
        self._optimizer = make_adamw(self._params)
        if with_optimizer:
            load_optimizer(path, self._optimizer)

    async def save_weights_and_get_sampling_client(self, name: str | None = None) -> SamplingClient:
        """A sampling client on a snapshot of the current weights (after all queued work).

        The snapshot is a sampler model of this client's pool: one no live sampling client holds,
        refreshed in place, or a new copy when every one is in use (a grouped LoRA client's:
        copies of its adapters, the model taken only when a job needs one); another rollout engine
        reads the weights from the model itself, in a job on this client's thread. With a name,
        the weights are also saved for the sampler under that name.
        """
        if name is not None:
            await (await self.save_weights_for_sampler(name))
        if self._make_sampler is not None:
            seed = self._seeds.getrandbits(63)
            return await self._make_sampler(self._model, self._identity, self._tokenizer, seed, self._executor.submit)
        assert self._samplers is not None
        snapshot = self._samplers.snapshot
        if self._sampling_lane is not None and self._adapters is not None:  # sampled on the group's host
            snapshot = functools.partial(self._samplers.adapter_snapshot, self._adapters)
        lease = await self._executor.submit(snapshot)
        seed = self._seeds.getrandbits(63)
        return LocalSamplingClient(
            lease,
            self._tokenizer,
            self._sampling_executor,
            seed,
            self._batch_limits,
            self._options.logprob_method,
            self._sampling_lane,
        )

    async def close(self) -> None:
        """Finish queued jobs and stop the worker thread."""
        await asyncio.to_thread(self._executor.shutdown)
        if self._sampling_lane is not None:
            await asyncio.to_thread(self._sampling_lane.shutdown)
