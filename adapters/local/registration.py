"""The local backend's entry in kitchen's backend registry: its config section and factory.

Kept free of torch imports, so loading a config (or `kitchen validate`) stays cheap.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from adapters.common.tiny import EMBEDDED_MODELS
from adapters.local.vllm_settings import SamplerName, VllmSettings, missing_vllm_problem
from kitchen.engine.backends import BackendSpec
from kitchen.engine.ports import ServiceBackend
from train_core.losses import LossTable


class LocalSettings(BaseModel):
    """Config section `local`: where and how the in-process torch backend runs."""

    model_config = ConfigDict(extra="forbid")

    device: str | None = Field(None, description="torch device (cpu, cuda, cuda:1, mps); default cuda if available")
    cpu_threads: int | None = Field(
        None, ge=1, strict=True, description="torch CPU threads; default 1 for model_name tiny, else torch's default"
    )
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        None,
        description="compute dtype; default bfloat16 on CUDA, float32 elsewhere. bfloat16 and float16 are mixed "
        "precision: low-precision weights and activations, float32 master weights, AdamW moments, gradient "
        "sums, logprobs and losses (float16 adds dynamic loss scaling); checkpoints hold the float32 weights",
    )
    gradient_checkpointing: bool = Field(
        False, description="recompute activations in the backward pass: less memory, about a third slower"
    )
    max_tokens_per_microbatch: int | None = Field(
        None,
        ge=1,
        description="split a forward_backward whose padded batch exceeds this many tokens into micro-batches "
        "of similar length whose gradients accumulate (same result); default: never split",
    )
    lora_alpha: int = Field(32, gt=0, description="LoRA scale numerator (updates scaled by alpha / lora_rank)")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the LoRA adapters' input while training")
    lora_target_modules: str | list[str] = Field(
        "all-linear", description="layers that get LoRA adapters: 'all-linear' or a list of module names"
    )
    logprob_method: Literal["chunked", "full", "liger"] = Field(
        "chunked",
        description="how token logprobs (and entropy) come from the model's final hidden states: chunked (the "
        "output head and softmax a chunk of tokens at a time, never the whole [tokens, vocab] logits), full (the "
        "whole logits at once: more memory, same values), liger (Liger's fused linear cross-entropy kernel: CUDA "
        "and the 'liger' extra; entropy, when asked for, still comes from the chunked path)",
    )
    compile: bool = Field(
        False,
        description="torch.compile the trained model's body: the first step of each new batch shape compiles "
        "(seconds to minutes), later ones may run faster; on the CPU it needs a C++ compiler",
    )
    always_grad_norm: bool = Field(
        False, description="report optim/grad_norm every step; by default only when grad_clip_norm > 0 needs it"
    )
    num_workers: int = Field(
        1,
        ge=1,
        strict=True,
        description="training workers: 1 trains in this process; N > 1 shards the model with FSDP2 over N Ray "
        "actors (one GPU each on CUDA, else CPU processes with gloo); needs the 'distributed' extra",
    )
    ray_address: str | None = Field(
        None, description="Ray cluster to join when num_workers > 1 (e.g. 'auto'); default: start Ray on this machine"
    )
    worker_timeout_s: float = Field(
        600.0, gt=0, description="how long one training call may take on the workers before the step fails"
    )
    sampler: SamplerName = Field(
        "kitchen",
        description="rollout engine of sampling clients: kitchen (its own KV-cache sampler, in this process) or "
        "vllm (a vLLM engine in its own process, weights synced after each update; needs the 'vllm' extra)",
    )
    vllm: VllmSettings = Field(
        default_factory=VllmSettings, description="the vLLM engine's settings (when sampler is vllm)"
    )

    @field_validator("sampler")
    @classmethod
    def _vllm_installed(cls, sampler: str) -> str:
        if sampler == "vllm" and (problem := missing_vllm_problem()):
            raise ValueError(problem)
        return sampler

    @model_validator(mode="after")
    def _engine_on_ray(self) -> LocalSettings:
        if self.sampler == "vllm" and self.vllm.resources and self.num_workers == 1:
            raise ValueError(
                "vllm.resources place the engine's Ray actor, and the engine is a Ray actor only with "
                "num_workers > 1 (with one training process it runs in a process of its own beside it)"
            )
        return self

    @field_validator("device")
    @classmethod
    def _known_device(cls, device: str | None) -> str | None:
        if device is not None and not _DEVICE.fullmatch(device):
            raise ValueError(f"unknown device {device!r}: use cpu, cuda, cuda:N or mps")
        return device


_DEVICE = re.compile(r"cpu|cuda(:\d+)?|mps")


def create(config: Any, settings: LocalSettings, checkpoint_dir: Path, losses: LossTable) -> ServiceBackend:
    import torch

    from adapters.local.backend import LocalBackend

    # The embedded models' matrices are too small to gain from intra-op threads, and spinning
    # OpenMP workers make them many times slower on a busy machine.
    threads = settings.cpu_threads or (1 if config.model_name in EMBEDDED_MODELS else None)
    if threads is not None:
        torch.set_num_threads(threads)
    from adapters.local.distributed import DistributedOptions
    from adapters.local.model_loading import LoraOptions
    from adapters.local.training_client import TrainingOptions

    distributed = None
    if settings.num_workers > 1:
        distributed = DistributedOptions(settings.num_workers, settings.ray_address, settings.worker_timeout_s, threads)
    return LocalBackend(
        checkpoint_dir=checkpoint_dir,
        device=settings.device,
        seed=config.seed,
        dtype=settings.dtype,
        training=TrainingOptions(
            max_tokens_per_microbatch=settings.max_tokens_per_microbatch,
            gradient_checkpointing=settings.gradient_checkpointing,
            train_mode=settings.lora_dropout > 0,
            always_grad_norm=settings.always_grad_norm,
            logprob_method=settings.logprob_method,
            compile=settings.compile,
        ),
        lora=lora_options(settings, LoraOptions),
        distributed=distributed,
        vllm=settings.vllm if settings.sampler == "vllm" else None,
        lora_rank=config.lora_rank,
        losses=losses,
    )


def lora_options(settings: LocalSettings, options: Any) -> Any:
    """The `LoraOptions` (passed in: this module imports no torch) of the `local` section."""
    targets = settings.lora_target_modules
    return options(
        alpha=settings.lora_alpha,
        dropout=settings.lora_dropout,
        target_modules=targets if isinstance(targets, str) else tuple(targets),
    )


def export_hf(checkpoint: str, out_dir: Path, merge_lora: bool, settings: LocalSettings) -> dict[str, Any]:
    from adapters.local.export import export_hf as export
    from adapters.local.model_loading import LoraOptions

    return export(checkpoint, out_dir, merge_lora, lora_options(settings, LoraOptions))


BACKEND = BackendSpec(
    name="local",
    description="torch + transformers in this process, on CPU or GPU (the embedded tiny model by default)",
    settings=LocalSettings,
    create=create,
    moved_keys={"device": "device", "cpu_threads": "cpu_threads"},
    export_hf=export_hf,
    custom_loss_entropy=True,
)
