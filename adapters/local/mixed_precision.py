"""Mixed precision: low-precision compute over float32 master weights, as large-model training does it.

With `local.dtype` bfloat16 or float16 the model's parameters hold the compute weights in that
dtype (the forward and backward run on them, and the sampler snapshots them), but AdamW never
steps them: a bfloat16 weight of magnitude 0.02 moves only by steps of ~1e-4, so updates of
lr 1e-5 would round away, and moments kept in bfloat16 lose what they average. `MasterWeights`
keeps a float32 copy of every low-precision trainable parameter; each backward's gradient is
moved onto the copy's float32 gradient as soon as it is complete (a post-accumulate-grad hook),
so gradients accumulate across micro-batches and `forward_backward` calls in float32; AdamW (its
moments float32 too) steps the copies, which are then rounded into the model. Float32 parameters
(a float32 run, the FSDP workers' sharded parameters, whose compute dtype is FSDP's) are their
own masters: no copy, no hook.

float16's narrow range adds dynamic loss scaling (`LossScale`): the gradient entering the
low-precision part of the graph (where the float32 logprob math meets the float16 logits) is
multiplied by the scale, so small gradients do not flush to zero in float16; the float32 master
gradients are divided by it before the step, and a step whose scaled gradients overflowed is
skipped with the scale halved (it doubles again after `GROWTH_INTERVAL` good steps). The losses
and logprobs themselves are never scaled.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

import torch

LOW_PRECISION = (torch.bfloat16, torch.float16)


def is_low_precision(dtype: torch.dtype) -> bool:
    return dtype in LOW_PRECISION


class MasterWeights:
    """float32 masters of a model's trainable parameters (the parameters themselves where they are
    float32 already); the optimizer steps `masters`, and `publish` rounds them into the model."""

    def __init__(self, named: Mapping[str, torch.nn.Parameter]) -> None:
        self.names = list(named)
        self.params = list(named.values())
        self.masters: list[torch.nn.Parameter] = []
        self._low: list[tuple[torch.nn.Parameter, torch.nn.Parameter]] = []  # (model parameter, master)
        for param in self.params:
            if not is_low_precision(param.dtype):
                self.masters.append(param)
                continue
            master = torch.nn.Parameter(param.detach().float(), requires_grad=True)
            self.masters.append(master)
            self._low.append((param, master))
            param.register_post_accumulate_grad_hook(_mover(master))

    @property
    def mixed(self) -> bool:
        """Whether any parameter computes in low precision (so masters are copies)."""
        return bool(self._low)

    def gradients(self) -> list[torch.Tensor]:
        """The masters' accumulated gradients (float32; those that got one)."""
        return [m.grad for m in self.masters if m.grad is not None]

    @torch.no_grad()
    def publish(self) -> None:
        """Round the masters into the model's low-precision parameters (after an optimizer step)."""
        if self._low:
            torch._foreach_copy_([p for p, _ in self._low], [m for _, m in self._low])

    @torch.no_grad()
    def load(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Set masters and model parameters from full-precision tensors by name (a checkpoint's):
        the masters get them exactly, the model their rounding."""
        for name, master in zip(self.names, self.masters, strict=True):
            master.copy_(tensors[name])
        self.publish()

    def state(self) -> dict[str, torch.Tensor]:
        """The trained weights at master precision by name, on the cpu (what checkpoints hold)."""
        return {name: m.detach().to("cpu").contiguous() for name, m in zip(self.names, self.masters, strict=True)}


def _mover(master: torch.nn.Parameter) -> Any:
    """The hook that adds a parameter's just-completed low-precision gradient to its master's
    float32 gradient and drops it (so it never accumulates in low precision)."""

    def move(param: torch.Tensor) -> None:
        grad = param.grad
        if grad is None:
            return
        if master.grad is None:
            master.grad = grad.float()
        else:
            master.grad.add_(grad)
        param.grad = None

    return move


class _Float32SumEmbedding(torch.autograd.Function):
    """`F.embedding` whose weight gradient is summed in float32 (then rounded once to the weight's
    dtype), as torch's CUDA kernel does; its CPU kernel adds each occurrence of a token to the
    gradient's row in the weight's dtype."""

    @staticmethod
    def forward(ctx: Any, ids: torch.Tensor, weight: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.weight_shape, ctx.padding_idx = weight.shape, padding_idx
        return torch.nn.functional.embedding(ids, weight, padding_idx)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor | None, None]:
        if not ctx.needs_input_grad[1]:
            return None, None, None
        (ids,) = ctx.saved_tensors
        ids_N = ids.reshape(-1)
        rows_NH = grad.reshape(ids_N.shape[0], -1).float()
        if ctx.padding_idx is not None:  # as F.embedding: the padding row gets no gradient
            rows_NH = rows_NH * (ids_N != ctx.padding_idx).unsqueeze(-1)
        total = torch.zeros(ctx.weight_shape, dtype=torch.float32, device=grad.device)
        return None, total.index_add_(0, ids_N, rows_NH), None


def sum_embedding_gradients_in_float32(model: torch.nn.Module) -> bool:
    """Make a low-precision input embedding on the CPU sum its weight's gradient in float32.

    torch's CPU embedding backward adds every occurrence of a token into its gradient row in the
    weight's dtype: in bfloat16 a token seen a few hundred times in a batch gets a gradient ~3% off
    (1.4% over a Zipf-like batch, nine times one rounding), and with a tied head this is the output
    layer's gradient too. CUDA's kernel sums in float32 already. Only a plain `nn.Embedding` is
    changed (a subclass may scale or otherwise transform); whether it was."""
    get_embedding: Any = getattr(model, "get_input_embeddings", None)
    embedding = get_embedding() if callable(get_embedding) else None
    if type(embedding) is not torch.nn.Embedding:
        return False
    weight = embedding.weight
    if not is_low_precision(weight.dtype) or weight.device.type == "cuda" or not weight.requires_grad:
        return False
    if embedding.max_norm is not None or embedding.scale_grad_by_freq or embedding.sparse:
        return False
    padding_idx = embedding.padding_idx

    def forward(ids: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, _Float32SumEmbedding.apply(ids, embedding.weight, padding_idx))

    embedding.forward = forward  # type: ignore[method-assign,assignment]
    return True


GROWTH_INTERVAL = 2000
INITIAL_SCALE = 2.0**16


class LossScale:
    """float16's dynamic loss scale (the factor, its growth and backoff), as torch.amp's
    GradScaler: start at 2^16, halve on an overflow, double after GROWTH_INTERVAL good steps.
    At 1.0 it stops shrinking: an overflow there is a non-finite step like any other."""

    def __init__(self, value: float = INITIAL_SCALE) -> None:
        self.value = value
        self._good_steps = 0

    def unscale(self, gradients: list[torch.Tensor]) -> bool:
        """Divide the gradients by the scale in place; whether all of them are finite."""
        if not gradients:
            return True
        from torch.distributed.tensor import DTensor

        # a sharded gradient (DTensor) is unscaled through its local shard; the caller agrees on
        # the outcome across workers
        local = [g.to_local() if isinstance(g, DTensor) else g for g in gradients]
        device = local[0].device
        found = torch.zeros(1, device=device)
        inverse = torch.full((1,), 1.0 / self.value, device=device)
        torch._amp_foreach_non_finite_check_and_unscale_(local, found, inverse)
        return not bool(found.item())

    def update(self, overflow: bool) -> bool:
        """Record a step's outcome; whether the overflow was the scale's (the step is skipped and
        the scale halved) rather than a non-finite gradient at the smallest scale."""
        if overflow:
            self._good_steps = 0
            if self.value > 1.0:
                self.value = max(1.0, self.value / 2)
                return True
            return False
        self._good_steps += 1
        if self._good_steps >= GROWTH_INTERVAL:
            self.value *= 2
            self._good_steps = 0
        return False


_ACTIVE = threading.local()
"""The gradient scale of the forward passes running on this thread (training clients each have
their own worker thread)."""


@contextmanager
def scaled_gradients(scale: LossScale | None) -> Iterator[None]:
    """Forward passes inside scale the gradient that flows back into their low-precision part."""
    previous = getattr(_ACTIVE, "scale", None)
    _ACTIVE.scale = scale
    try:
        yield
    finally:
        _ACTIVE.scale = previous


def gradient_scale() -> float:
    """The factor the gradients of this thread's forward passes are scaled by (1.0: none)."""
    scale: LossScale | None = getattr(_ACTIVE, "scale", None)
    return 1.0 if scale is None or not torch.is_grad_enabled() else scale.value


class _ScaleGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.factor, None


def scale_gradient(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` (float32 logits, just upcast from the model's dtype), whose gradient is multiplied
    by this thread's loss scale on its way back (unchanged when none is active)."""
    factor = gradient_scale()
    if factor == 1.0 or not tensor.requires_grad:
        return tensor
    return cast(torch.Tensor, _ScaleGradient.apply(tensor, factor))


_COMPUTE_DTYPES: weakref.WeakKeyDictionary[torch.nn.Module, torch.dtype] = weakref.WeakKeyDictionary()


def set_compute_dtype(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Record that `model` computes in `dtype` though its parameters are stored in another (FSDP's
    mixed precision: float32 shards, gathered in low precision for each layer's forward)."""
    _COMPUTE_DTYPES[model] = dtype


def compute_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype the model's activations (and so its attention masks) are in."""
    return _COMPUTE_DTYPES.get(model) or next(model.parameters()).dtype
