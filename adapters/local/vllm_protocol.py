"""What the trainer's process and the vLLM engine's process tell each other: plain, picklable
records, free of torch and vllm imports (both sides load this module)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Literal

from train_core.types import SamplingParams, StopReason


@dataclass(frozen=True)
class EngineSpec:
    """How to start an engine: everything vLLM's `LLM(...)` is given, and its environment."""

    model_dir: str
    """A Hugging Face model directory (weights, config, tokenizer): the engine's starting weights."""
    dtype: str
    max_model_len: int | None
    device: Literal["cpu", "cuda"]
    max_lora_rank: int | None
    """None: no LoRA; else the largest adapter rank requests may use (one of vLLM's rank sizes)."""
    tied_head: bool
    """The output head shares the input embedding's weights (it is re-packed after a reload)."""
    enforce_eager: bool = True
    gpu_memory_utilization: float = 0.4
    tensor_parallel_size: int = 1
    cpu_kv_cache_gib: float = 1.0
    cpu_threads: int = 1
    """CPU: the engine's torch (OpenMP) threads."""
    seed: int = 0
    cuda_device: int = 0
    """CUDA: the first of the `tensor_parallel_size` GPUs the engine runs on, numbered as the trainer's
    process numbers them (`local.device`'s index): the engine shares the trainer's GPU."""
    sleep_level: Literal[0, 1, 2] = 0
    """CUDA: vLLM's sleep mode, entered while the trainer computes (0: never). 1 moves the weights to
    CPU memory (LoRA engines: the base weights stay); 2 discards them (full weights are loaded anew)."""


@dataclass(frozen=True)
class EngineInfo:
    """What a started engine reports about the model it serves."""

    vocab_size: int
    max_model_len: int
    vllm_version: str


@dataclass(frozen=True)
class TensorSlot:
    """One tensor of a shared-memory segment: its name, dtype (torch's name), shape and byte offset."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int


@dataclass(frozen=True)
class SharedWeights:
    """Full weights in a POSIX shared-memory segment (`adapters.local.vllm_weights`), by their
    Hugging Face names: what the engine loads instead of a file."""

    segment: str
    size: int
    slots: tuple[TensorSlot, ...]


@dataclass(frozen=True)
class ShippedWeights:
    """Full weights as one byte array that Ray's object store carries to an engine on another node
    (which cannot map the trainer's shared memory), laid out as a segment's `slots`."""

    slots: tuple[TensorSlot, ...]
    data: Any
    """A uint8 numpy array: Ray moves it between nodes' object stores and maps it, uncopied, on arrival."""

    @property
    def size(self) -> int:
        return int(self.data.nbytes)


@dataclass(frozen=True)
class LoraAdapter:
    """A PEFT adapter directory the engine applies per request (never merged into the weights)."""

    adapter_id: int
    """vLLM's `lora_int_id`: unique per adapter version (>= 1), so a new version is loaded anew."""
    path: str


@dataclass(frozen=True)
class GenerateRequest:
    """One `sample` call: `num_samples` continuations of `prompt` under `params` (seed resolved,
    max_tokens resolved), with the adapter the client's weights need, if any."""

    prompt: list[int]
    num_samples: int
    max_tokens: int
    seed: int
    params: SamplingParams
    lora: LoraAdapter | None

    @property
    def key(self) -> Hashable:
        """Any requests may share a batch (an engine call): vLLM takes a mix of sampling params."""
        return None

    @property
    def rows(self) -> int:
        return self.num_samples

    @property
    def length(self) -> int:
        return len(self.prompt) + self.max_tokens


@dataclass(frozen=True)
class ScoreRequest:
    """One `compute_logprobs` call (at least two tokens)."""

    tokens: list[int]
    lora: LoraAdapter | None

    @property
    def key(self) -> Hashable:
        return None

    @property
    def rows(self) -> int:
        return 1

    @property
    def length(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class Completion:
    """One sampled continuation: its tokens, their sampling logprobs, and why it stopped."""

    tokens: list[int]
    logprobs: list[float]
    stop_reason: StopReason
    topk: list[list[tuple[int, float]]] | None = None
    """Each position's most likely tokens and logprobs, when the request asked for top-k."""


@dataclass(frozen=True)
class Failure:
    """An exception raised in the engine's process, sent back in place of a result."""

    kind: str
    message: str
    details: str
    """The engine-side traceback (for the error the caller sees)."""
    config_error: bool = False
    """Bad input the user can fix (an unsupported model), not a crash."""
