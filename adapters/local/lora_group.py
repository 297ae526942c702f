"""The LoRA training clients of one base model, as the Tinker service runs them: the base weights
once in memory, one worker, and the forward / forward_backward requests of different clients that
wait at the same time run as one pass through the base (each client's adapters on its own tokens:
`adapters.local.grouped_lora`).

Each client keeps its own adapters, optimizer and gradients: a grouped backward differentiates
the sum of the clients' losses, and each loss depends on its own client's adapters only, so every
client's adapters get exactly their own loss's gradient. A client's loss and metrics are its
own batch's, computed by its own loss function, as if it had run alone (to float rounding).

Requests that need what a grouped pass does not do run alone on the same worker, in their turn:
a batch split into micro-batches, images, custom losses, and (for the whole client) train mode,
gradient checkpointing, a compiled body, float16 loss scaling, or adapters other than plain LoRA
on linear layers (`grouped_lora.groupable`).

Sampling batches across clients the same way, on a second worker and host of its own (sampling
overlaps training, as the backend's sampling thread lets it): the sample requests of the group's
clients' sampling clients that wait together with the same sampling params decode as one batch
(`adapters.local.sampler.ClientAdapters`), each row through its own client's adapters, each
request with its own seed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch

from adapters.common.training_batch import TrainingBatch
from adapters.local.forward_pass import check_scoring_paths, sequence_logprobs
from adapters.local.grouped_lora import AdapterGroups, AdapterLayer, adapter_layers, shared_copy
from adapters.local.request_batcher import BatchLimits
from adapters.local.sampler import ClientAdapters, SampleRequest, sample_batch
from adapters.local.sampler_pool import ModelLease
from adapters.local.shared_worker import Lane, SharedWorker
from adapters.local.token_scoring import Entropy, LogprobMethod, output_head
from train_core.losses import LossSpec, merge_loss_metrics
from train_core.types import ForwardBackwardOutput, TensorData, TokensWithLogprobs


@dataclass(frozen=True)
class LossJob:
    """One client's forward or forward_backward of a built-in loss on one batch."""

    model: torch.nn.Module
    """The client's LoRA model (its adapters and output head)."""
    adapters: dict[str, AdapterLayer]
    spec: LossSpec
    batch: TrainingBatch
    config: dict[str, float]
    backward: bool
    entropy: Entropy
    pad_id: int
    alone: Callable[[], ForwardBackwardOutput]
    """The client's own pass (what runs when no other client's request waits)."""
    nonfinite: Callable[[], None]
    """Records a NaN/inf loss for the client's next optim step."""

    @property
    def key(self) -> Hashable:
        return self.backward, self.entropy

    @property
    def rows(self) -> int:
        return len(self.batch.lengths_D)

    @property
    def length(self) -> int:
        return max(self.batch.lengths_D)

    def run_alone(self) -> ForwardBackwardOutput:
        return self.alone()


@dataclass(frozen=True)
class SampleJob:
    """One sampling client's requests of one loop turn that share sampling params (one batch of its
    own `RequestBatcher`'s making)."""

    lease: ModelLease
    """The sampling client's snapshot of its client's adapters (its LoRA model made only when the
    job runs alone)."""
    adapters: dict[str, AdapterLayer]
    requests: list[SampleRequest]
    pad_id: int

    @property
    def key(self) -> Hashable:
        first = self.requests[0]
        if first.images or first.following is not None:  # their own paths: never grouped
            return id(self)
        return first.key, self.pad_id

    @property
    def rows(self) -> int:
        return sum(request.rows for request in self.requests)

    @property
    def length(self) -> int:
        return max(request.length for request in self.requests)

    def run_alone(self) -> list[list[TokensWithLogprobs]]:
        return sample_batch(self.lease.model, self.requests, self.pad_id)


class LoraGroup:
    """The base model of several LoRA clients, its host for grouped passes, and their worker."""

    def __init__(self, name: str, base: torch.nn.Module, limits: BatchLimits, method: LogprobMethod) -> None:
        self.base = base.eval()
        self.host = shared_copy(base).eval()
        self._method = method
        check_scoring_paths(self.host, method)
        self.worker = SharedWorker(f"local-lora-{name}", self._run_together, limits)
        self.sampling_host = shared_copy(base).eval()
        head = getattr(self.sampling_host, "get_output_embeddings", lambda: None)()
        self._head_name = next((name for name, module in self.sampling_host.named_modules() if module is head), None)
        self.sampling_worker = SharedWorker(f"local-lora-sampling-{name}", self._sample_together, limits)

    def client_base(self) -> torch.nn.Module:
        """A base model for a new client to wrap its adapters around, sharing the group's weights."""
        return shared_copy(self.base)

    def lane(self) -> Lane:
        return self.worker.lane()

    def sampling_lane(self, model: torch.nn.Module) -> Lane | None:
        """A queue for the sample requests of all the sampling clients of LoRA model `model`; None
        when its adapters cannot sample grouped (not plain LoRA on linear layers)."""
        return None if adapter_layers(model) is None else self.sampling_worker.lane()

    def _sample_together(self, jobs: list[SampleJob]) -> list[list[list[TokensWithLogprobs]]]:
        """One decode of every job's requests on the sampling host, each through its job's adapters."""
        requests = [request for job in jobs for request in job.requests]
        client_R = [g for g, job in enumerate(jobs) for _ in job.requests]
        clients = ClientAdapters([job.adapters for job in jobs], client_R, self._head_name)
        with torch.inference_mode():
            sampled = sample_batch(self.sampling_host, requests, jobs[0].pad_id, clients)
        results, start = [], 0
        for job in jobs:
            results.append(sampled[start : start + len(job.requests)])
            start += len(job.requests)
        return results

    def _run_together(self, jobs: list[LossJob]) -> list[ForwardBackwardOutput]:
        """One pass over every job's rows (each through its own client's adapters); each job's loss
        from its own rows; one backward of their sum when they train."""
        inputs_D: list[list[int]] = []
        targets_D: list[list[int]] = []
        groups_D: list[int] = []
        for g, job in enumerate(jobs):
            inputs_D += [row.tolist() for row in job.batch.split(job.batch.input_ids_BL)]
            targets_D += [row.tolist() for row in job.batch.split(job.batch.targets_BL)]
            groups_D += [g] * job.rows
        heads = []
        for job in jobs:
            split = output_head(job.model) if self._method != "full" else None
            heads.append(None if split is None else split.head)
        lengths_D = [len(tokens) for tokens in inputs_D]
        groups = AdapterGroups(self.host, [job.adapters for job in jobs], heads, groups_D, lengths_D)
        first = jobs[0]
        with torch.set_grad_enabled(first.backward):
            scored = sequence_logprobs(
                self.host, inputs_D, targets_D, first.pad_id, self._method, first.entropy, groups
            )
            losses, results = [], []
            start = 0
            for job in jobs:
                logprobs_D = scored.logprobs_D[start : start + job.rows]
                entropy_D = None if scored.entropy_D is None else scored.entropy_D[start : start + job.rows]
                start += job.rows
                loss, metrics = job.spec(torch.cat(logprobs_D), job.batch.loss_inputs, job.config, job.batch.lengths_D)
                losses.append(loss)
                outputs: list[dict[str, TensorData]] = []
                for k, logprobs_T in enumerate(logprobs_D):
                    outputs.append({"logprobs": TensorData.from_torch(logprobs_T)})
                    if entropy_D is not None:
                        outputs[-1]["entropy"] = TensorData.from_torch(entropy_D[k])
                # as a client's own pass reports them (`LocalTrainingClient._run_loss`)
                metrics = {**merge_loss_metrics([metrics]), "padding_fraction:mean": 1.0 - scored.filled / scored.slots}
                results.append(ForwardBackwardOutput(outputs, metrics))
        if first.backward:
            torch.stack([loss.reshape(()) for loss in losses]).sum().backward()
            for job, loss in zip(jobs, losses, strict=True):
                if not bool(torch.isfinite(loss.detach()).all()):
                    job.nonfinite()
        return results

    def shutdown(self) -> None:
        self.worker.shutdown()
        self.sampling_worker.shutdown()
