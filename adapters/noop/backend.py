"""NoopBackend: a deterministic fake service for fast integration tests of workflows.

Real shapes, real loss values over seeded pseudo-logprobs, optional simulated latency, and a log
of every call. It is only ever used when asked for by name, never as a fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from adapters.common.tiny import TINY_MODEL_NAME, TINY_VL_MODEL_NAME
from adapters.common.tokenizer import load_tokenizer
from adapters.noop.call_log import NoopCall
from adapters.noop.checkpoint_store import CheckpointStore
from adapters.noop.latency import Latency
from adapters.noop.pseudo_logprobs import PseudoWeights
from adapters.noop.runtime import NoopRuntime
from adapters.noop.sampling_client import NoopSamplingClient
from adapters.noop.training_client import NoopTrainingClient
from kitchen.engine.errors import KitchenError
from kitchen.engine.ports import Tokenizer
from train_core.losses import LOSS_SPECS, LossTable
from train_core.types import LoraLayers


def _check_base_model(base_model: str) -> None:
    if not base_model:
        raise KitchenError("base_model must be a non-empty model name")


class NoopBackend:
    """Implements `kitchen.engine.ports.ServiceBackend` without a model.

    `seed` fixes every pseudo-logprob and sample; `latency` maps call kinds (see
    `adapters.noop.latency.LATENCY_KINDS`) to seconds slept per call; with `checkpoint_dir`, saves
    are JSON files there (so a new backend on the same directory can resume), else in memory.
    Every base model name is accepted and gets the embedded tiny tokenizer.
    """

    name = "noop"

    def __init__(
        self,
        seed: int = 0,
        latency: Mapping[str, float] | None = None,
        checkpoint_dir: Path | None = None,
        losses: LossTable = LOSS_SPECS,
    ) -> None:
        self.seed = seed
        self._losses = losses
        self.runtime = NoopRuntime(seed, Latency(latency), CheckpointStore(checkpoint_dir))
        self._training_clients: list[NoopTrainingClient] = []

    def script(self, replies: Callable[[str], str] | None = None, sampler_logprob_shift: float = 0.0) -> None:
        """Script the fake model for a test: `replies` gives its reply text to a prompt's text (so
        an env's rewards are known), `sampler_logprob_shift` is added to the logprobs reported
        with samples (a sampler/trainer mismatch of known size). `kitchen.testing` uses this."""
        self.runtime.replies = replies
        self.runtime.sampler_logprob_shift = sampler_logprob_shift

    @property
    def calls(self) -> list[NoopCall]:
        """Every call made to this backend and its clients, in call order."""
        return self.runtime.calls

    def _new_training_client(self, weights: PseudoWeights, lora_rank: int | None) -> NoopTrainingClient:
        client = NoopTrainingClient(self.runtime, weights, lora_rank, self._losses)
        self._training_clients.append(client)
        return client

    async def create_training_client(
        self, base_model: str, lora_rank: int | None = None, seed: int = 0
    ) -> NoopTrainingClient:
        """A client at the base model's weights (version 0); `seed` (LoRA init) does not change them."""
        _check_base_model(base_model)
        if lora_rank is not None and lora_rank < 1:
            raise KitchenError(f"lora_rank must be None (full fine-tuning) or >= 1, got {lora_rank}")
        self.runtime.record(
            "service", "create_training_client", "service", base_model=base_model, lora_rank=lora_rank, seed=seed
        )
        await self.runtime.latency.wait("create_training_client")
        return self._new_training_client(PseudoWeights(self.seed, base_model), lora_rank)

    async def create_lora_training_client(
        self, base_model: str, lora_rank: int, seed: int, layers: LoraLayers
    ) -> NoopTrainingClient:
        """As `create_training_client` with LoRA: the pseudo-model has no layers, so the choice
        is recorded (`calls`) and the weights are those of any other LoRA of the base model."""
        if not (layers.attn or layers.mlp or layers.unembed):
            raise KitchenError("LoRA layers: choose at least one of attention, MLP and the output head")
        self.runtime.record("service", "create_lora_training_client", "service", layers=layers)
        return await self.create_training_client(base_model, lora_rank, seed)

    async def create_training_client_from_state(self, path: str, with_optimizer: bool = True) -> NoopTrainingClient:
        self.runtime.record(
            "service", "create_training_client_from_state", "service", path=path, with_optimizer=with_optimizer
        )
        await self.runtime.latency.wait("create_training_client_from_state")
        saved = self.runtime.store.load(path, "state")
        return self._new_training_client(saved.weights, saved.lora_rank)

    async def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> NoopSamplingClient:
        """A sampler for saved sampler weights (`model_path`) or a base model's weights; exactly one."""
        if (model_path is None) == (base_model is None):
            raise KitchenError("create_sampling_client needs exactly one of model_path and base_model")
        self.runtime.record(
            "service", "create_sampling_client", "service", model_path=model_path, base_model=base_model
        )
        await self.runtime.latency.wait("create_sampling_client")
        if model_path is not None:
            weights = self.runtime.store.load(model_path, "sampler_weights").weights
        else:
            assert base_model is not None
            _check_base_model(base_model)
            weights = PseudoWeights(self.seed, base_model)
        return NoopSamplingClient(self.runtime, weights)

    def checkpoint_files(self, path: str) -> list[Path]:
        """The file behind a saved `noop://` path (none when saves live in memory)."""
        return self.runtime.store.files(path)

    def checkpoint_identity(self, path: str) -> tuple[str, int | None]:
        """(base model, lora_rank) of the training state saved at `path`."""
        saved = self.runtime.store.load(path, "state")
        return saved.weights.base_model, saved.lora_rank

    def get_tokenizer(self, base_model: str) -> Tokenizer:
        _check_base_model(base_model)
        return load_tokenizer(TINY_VL_MODEL_NAME if base_model == TINY_VL_MODEL_NAME else TINY_MODEL_NAME)

    async def close(self) -> None:
        """Let every submitted training request finish."""
        self.runtime.record("service", "close", "service")
        for client in self._training_clients:
            await client.queue.drain()
