"""The sizing arithmetic of docs/explanation/scaling.md: memory per H100 for LoRA and full
fine-tuning under FSDP2, the H100s each needs, the cost of sending new weights to N engines, and
where the single controller's measured rollout rate becomes the limit.

    PYTHONPATH=. python benchmarks/sizing.py

Prints the page's tables (tests/documentation/test_scaling_page.py checks the page shows exactly
these). Paper arithmetic, not measurements, except `DRIVER_US_PER_EPISODE`, which comes from
`benchmarks/driver_throughput.py`. Every assumption is a named constant below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

GB = 1e9
H100_BYTES = 80 * GB
USABLE_BYTES = 76 * GB
"""An H100's 80 GB less ~4 GB for the CUDA context, NCCL buffers and allocator fragmentation."""
TOKENS_PER_GPU = 8192
"""Tokens in one micro-batch on one GPU (e.g. one 8k-token sequence)."""
LORA_RANK = 32
"""LoRA on every linear layer of the decoder (q, k, v, o, gate, up, down)."""
ENGINE_WEIGHT_SHARE = 0.5
"""A separate vLLM engine spans enough GPUs that its bf16 weights take at most half of each; the
rest is KV cache."""
LINK_BYTES_PER_S = 40 * GB
"""One 400 Gb/s NIC (InfiniBand NDR / 400GbE, one per H100 on a DGX-class node) at ~80% of its
50 GB/s line rate."""
GPUS_PER_NODE = 8
DRIVER_US_PER_EPISODE = 86.0
"""The controller's own CPU µs per episode, the worst level of `benchmarks/driver_throughput.py`
(10k concurrent episodes, 2-core shared box, noop's simulated decode subtracted)."""
ENGINE_TOKENS_PER_S = 10_000.0
"""Sampled tokens per second one H100 vLLM engine serves an 8B model at large batch (an
assumption, not a measurement here: no GPU was lent)."""

Mode = Literal["LoRA", "full"]


@dataclass(frozen=True)
class Model:
    """A Llama-style decoder: the published shapes of Llama 3.1 8B, Qwen2.5 32B, Llama 3.1 70B."""

    name: str
    layers: int
    hidden: int
    kv_dim: int
    """Width of K (and of V): key-value heads x head size."""
    ffn: int
    vocab: int

    @property
    def layer_params(self) -> int:
        h, kv, f = self.hidden, self.kv_dim, self.ffn
        return 2 * h * h + 2 * h * kv + 3 * h * f  # q, o; k, v; gate, up, down (norms are noise)

    @property
    def root_params(self) -> int:
        """The input embedding and the output head (untied): FSDP2's root unit."""
        return 2 * self.vocab * self.hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.root_params

    @property
    def lora_params(self) -> int:
        h, kv, f = self.hidden, self.kv_dim, self.ffn
        return LORA_RANK * self.layers * (9 * h + 2 * kv + 3 * f)  # rank x (in + out) of the seven projections

    def activation_bytes_per_token_layer(self) -> int:
        """bf16 tensors a layer keeps for backward, per token, with flash attention (no seq x seq
        scores): both norms' inputs and outputs, q/k/v, the attention output, and gate, up,
        act(gate) and their product in the MLP."""
        h, kv, f = self.hidden, self.kv_dim, self.ffn
        return 2 * (4 * h + (h + 2 * kv) + h + 4 * f)


MODELS = (
    Model("8B", layers=32, hidden=4096, kv_dim=1024, ffn=14336, vocab=128256),
    Model("32B", layers=64, hidden=5120, kv_dim=1024, ffn=27648, vocab=152064),
    Model("70B", layers=80, hidden=8192, kv_dim=1024, ffn=28672, vocab=128256),
)


@dataclass(frozen=True)
class Memory:
    """Bytes on each of `gpus` FSDP2 training GPUs."""

    model: Model
    mode: Mode
    gpus: int

    @property
    def sharded(self) -> float:
        """kitchen's FSDP2 shards are float32 (the masters); full fine-tuning adds a float32 gradient
        and AdamW's two float32 moments per parameter (16 B), LoRA keeps those for the adapters only."""
        trainable = self.model.params if self.mode == "full" else self.model.lora_params
        frozen = 0 if self.mode == "full" else self.model.params
        return (4 * frozen + 16 * trainable) / self.gpus

    @property
    def gathered(self) -> float:
        """What FSDP2 unshards at once in bf16: the root (embedding, head) and two layers (the
        current one and the prefetched next); full fine-tuning adds the largest unit's unsharded
        float32 gradient awaiting its reduce-scatter."""
        params = self.model.root_params + 2 * self.model.layer_params
        grad = 4 * max(self.model.root_params, self.model.layer_params) if self.mode == "full" else 0
        return 2 * params + grad

    @property
    def activations(self) -> float:
        """Every layer's saved tensors for `TOKENS_PER_GPU` tokens, no checkpointing."""
        return self.model.layers * self.model.activation_bytes_per_token_layer() * TOKENS_PER_GPU

    @property
    def activations_checkpointed(self) -> float:
        """Each layer's bf16 input, plus one layer's tensors while it is recomputed."""
        per_token = 2 * self.model.hidden * self.model.layers + self.model.activation_bytes_per_token_layer()
        return per_token * TOKENS_PER_GPU

    def total(self, checkpointing: bool) -> float:
        acts = self.activations_checkpointed if checkpointing else self.activations
        return self.sharded + self.gathered + acts


def training_gpus(model: Model, mode: Mode, checkpointing: bool) -> int | None:
    """The fewest GPUs (a power of two, up to 1024) on which FSDP2 training fits; None: never
    (activations alone exceed a GPU: FSDP does not shard them)."""
    gpus = 1
    while gpus <= 1024:
        if Memory(model, mode, gpus).total(checkpointing) <= USABLE_BYTES:
            return gpus
        gpus *= 2
    return None


def engine_gpus(model: Model) -> int:
    """Tensor-parallel size of a separate vLLM engine: bf16 weights within `ENGINE_WEIGHT_SHARE`."""
    return 2 ** math.ceil(math.log2(max(1.0, 2 * model.params / (ENGINE_WEIGHT_SHARE * H100_BYTES))))


def sync_bytes(model: Model, mode: Mode) -> int:
    """What reaches each engine after a step: the bf16 weights, or the bf16 LoRA adapters."""
    return 2 * (model.params if mode == "full" else model.lora_params)


def sync_seconds(model: Model, mode: Mode, engines: int, scheme: Literal["driver", "ring"]) -> float:
    """`driver`: one sender (the driver's NIC) sends every engine its copy, one after another.
    `ring`: a pipelined broadcast (NCCL's ring) moves the bytes once over each link, whatever N."""
    copies = engines if scheme == "driver" else 1
    return copies * sync_bytes(model, mode) / LINK_BYTES_PER_S


def _gb(value: float) -> str:
    return f"{value / GB:.1f}"


def _duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.0f} ms"


def memory_table() -> str:
    """Memory per training GPU at the GPU count checkpointing needs, and the H100s in all."""
    rows = [
        "| model | mode | params | FSDP2 GPUs (ckpt) | sharded states GB/GPU | gathered GB | activations GB, no ckpt | "
        "activations GB, ckpt | total GB/GPU (ckpt) | fits without ckpt from | engine TP (weights GB/GPU) | "
        "H100s: trainer + engine |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model in MODELS:
        for mode in ("LoRA", "full"):
            gpus = training_gpus(model, mode, checkpointing=True)
            assert gpus is not None, f"{model.name} {mode} does not fit even with checkpointing"
            memory = Memory(model, mode, gpus)
            plain = training_gpus(model, mode, checkpointing=False)
            tp = engine_gpus(model)
            rows.append(
                f"| {model.name} | {mode} | {model.params / 1e9:.2f}B | {gpus} | {_gb(memory.sharded)} | "
                f"{_gb(memory.gathered)} | {_gb(memory.activations)} | {_gb(memory.activations_checkpointed)} | "
                f"{_gb(memory.total(True))} | {'never' if plain is None else f'{plain} GPUs'} | "
                f"{tp} ({_gb(2 * model.params / tp)}) | {gpus + tp} |"
            )
    return "\n".join(rows)


def sync_table() -> str:
    """Seconds per step to get new weights to one engine per node, at 8 and 64 nodes."""
    rows = [
        "| model | mode | bytes per engine | 8 nodes, from the driver | 8 nodes, ring | 64 nodes, from the driver "
        "| 64 nodes, ring |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model in MODELS:
        for mode in ("LoRA", "full"):
            cells = [
                _duration(sync_seconds(model, mode, nodes, scheme))
                for nodes in (8, 64)
                for scheme in ("driver", "ring")
            ]
            size = sync_bytes(model, mode)
            shown = f"{size / GB:.1f} GB" if size >= GB else f"{size / 1e6:.0f} MB"
            rows.append(f"| {model.name} | {mode} | {shown} | {' | '.join(cells)} |")
    return "\n".join(rows)


def controller_table() -> str:
    """How many engines one controller core can keep busy, by sampled tokens per episode."""
    ceiling = 1e6 / DRIVER_US_PER_EPISODE
    rows = [
        "| sampled tokens per episode | episodes/s per engine | controller ceiling, rollouts/s | engines it can feed "
        "| nodes of 8 engines |",
        "| --- | --- | --- | --- | --- |",
    ]
    for tokens in (100, 1_000, 10_000):
        per_engine = ENGINE_TOKENS_PER_S / tokens
        engines = ceiling / per_engine
        rows.append(
            f"| {tokens:,} | {per_engine:g} | {ceiling:,.0f} | {engines:,.0f} | {engines / GPUS_PER_NODE:,.1f} |"
        )
    return "\n".join(rows)


def tables() -> list[str]:
    return [memory_table(), sync_table(), controller_table()]


if __name__ == "__main__":
    print("\n\n".join(tables()))
