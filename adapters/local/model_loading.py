"""Load a causal LM and its tokenizer: the embedded tiny model, a local path, or the HF cache.

The model always comes back in eval mode (no dropout) and stays there: training, sampling and
`compute_logprobs` then run the same deterministic forward pass, so their logprobs agree.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, PretrainedConfig

from adapters.common.tiny import EMBEDDED_MODELS
from kitchen.engine.errors import ConfigError
from train_core.types import LoraLayers

TINY_INIT_SEED = 0
"""An embedded model's weights are a pure function of this seed, so "tiny" names one fixed model
(training, reference and sampling clients all see the same base weights)."""

SEEDED = threading.Lock()
"""Held while a seeded initialisation draws (an embedded model's weights, LoRA adapters): it seeds
torch's process-wide generator, so two models built at once on different threads would draw from
each other's streams and get weights that depend on the timing."""

LORA_ALPHA = 32
"""LoRA updates are scaled by alpha / rank; a fixed alpha of 32 (as in "LoRA Without Regret")
keeps the best learning rate roughly independent of the rank."""


@dataclass(frozen=True)
class LoraOptions:
    """peft LoraConfig fields other than the rank (`local.lora_alpha`, ...); defaults: alpha 32, no
    dropout, every linear layer but the output head."""

    alpha: int = LORA_ALPHA
    dropout: float = 0.0
    target_modules: str | tuple[str, ...] = "all-linear"


def resolve_device(device: str | None) -> torch.device:
    """The requested device, else cuda when available, else cpu. A CUDA device becomes this
    process's current device (kernels that launch on the current device, Triton's and Liger's,
    then run where the model is) with TF32 for whatever float32 matmuls remain."""
    if device is not None:
        if device.startswith("cuda"):
            index = int(device.split(":")[1]) if ":" in device else 0
            if not torch.cuda.is_available():
                raise ConfigError(f"local.device={device}: no CUDA GPU is available on this machine (use cpu)")
            if index >= torch.cuda.device_count():
                raise ConfigError(f"local.device={device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        if device == "mps" and not torch.backends.mps.is_available():
            raise ConfigError("local.device=mps: MPS is not available on this machine (use cpu)")
        resolved = torch.device(device)
    else:
        resolved = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if resolved.type == "cuda":
        use_cuda_device(resolved)
    return resolved


def use_cuda_device(device: torch.device) -> None:
    """Make `device` the current CUDA device and let float32 matmuls use TF32 tensor cores."""
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def default_dtype(device: torch.device) -> str:
    """`local.dtype` when unset: bfloat16 (with float32 master weights) on CUDA, float32 elsewhere
    (CPUs without bfloat16 matmul units gain nothing from it)."""
    return "bfloat16" if device.type == "cuda" else "float32"


def load_base_model(base_model: str, dtype: torch.dtype) -> torch.nn.Module:
    """The base weights on the cpu: embedded models are random-initialised from TINY_INIT_SEED,
    others are read."""
    try:
        if base_model in EMBEDDED_MODELS:
            config = AutoConfig.from_pretrained(EMBEDDED_MODELS[base_model])
            with SEEDED, torch.random.fork_rng(devices=[]):
                torch.manual_seed(TINY_INIT_SEED)
                model = _auto_class(config).from_config(config, dtype=dtype)
            model.config.name_or_path = str(EMBEDDED_MODELS[base_model])  # where its image processor is
        else:
            config = AutoConfig.from_pretrained(base_model)
            model = _auto_class(config).from_pretrained(base_model, dtype=dtype)
    except OSError as exc:
        raise ConfigError(f"model_name {base_model!r}: cannot load the model ({exc})") from exc
    return model.eval()


def _auto_class(config: PretrainedConfig) -> type[AutoModelForCausalLM] | type[AutoModelForImageTextToText]:
    """Vision-language models (a config with a `vision_config`) load as image-text-to-text models."""
    return AutoModelForImageTextToText if getattr(config, "vision_config", None) is not None else AutoModelForCausalLM


def add_lora(
    model: torch.nn.Module,
    lora_rank: int,
    seed: int,
    options: LoraOptions | None = None,
    layers: LoraLayers | None = None,
) -> torch.nn.Module:
    """Wrap the target layers (by default every linear layer but the output head; with `layers`,
    the ones it names, see `layer_targets`) in LoRA adapters; only adapters train."""
    if lora_rank <= 0:
        raise ConfigError(f"lora_rank must be a positive integer, got {lora_rank}")
    hidden = getattr(getattr(model, "config", None), "hidden_size", None)
    if isinstance(hidden, int) and lora_rank > hidden:
        # a rank above the width is no more expressive and allocates rank x width per layer
        raise ConfigError(
            f"lora_rank={lora_rank} is larger than the model's hidden size ({hidden}); use lora_rank <= {hidden}"
        )
    # peft takes seconds to import; only LoRA runs pay for it (the noop backend imports this module).
    from peft import LoraConfig, get_peft_model

    options = options or LoraOptions()
    targets: str | list[str]
    if layers is not None:
        targets, excluded = layer_targets(model, layers), None
    else:
        targets = options.target_modules if isinstance(options.target_modules, str) else list(options.target_modules)
        excluded = _all_linear_exclusions(model) if targets == "all-linear" else None
    config = LoraConfig(
        r=lora_rank,
        lora_alpha=options.alpha,
        lora_dropout=options.dropout,
        target_modules=targets,
        exclude_modules=excluded,
    )
    with SEEDED, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            # adapters in the base's dtype: under mixed precision they compute in it too, and
            # their float32 masters live in the optimizer (`adapters.local.mixed_precision`)
            peft_model = get_peft_model(model, config, autocast_adapter_dtype=False)
        except ValueError as exc:  # e.g. target modules that match no layer
            raise ConfigError(f"local.lora_target_modules {options.target_modules!r}: {exc}") from exc
    return peft_model.eval()


_ATTENTION_PARTS = ("attn", "attention")
_MLP_PARTS = ("mlp", "feed_forward", "ffn", "expert")


def layer_targets(model: torch.nn.Module, layers: LoraLayers) -> list[str]:
    """The linear layers `layers` names, by module path: attention (a path through an `*attn*` or
    `*attention*` module), MLP (through `*mlp*`, `*feed_forward*`, `*ffn*` or `*expert*`: MoE
    experts are MLPs), the output head. Linear layers that are neither (a Mamba mixer's input
    projection, a vision merger) train only when attention and MLP both do, as "all-linear" has
    them; the layers "all-linear" leaves out never train."""
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    excluded = _all_linear_exclusions(model) or []
    chosen = []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or any(name == e or name.endswith(f".{e}") for e in excluded):
            continue
        parts = name.lower().split(".")[:-1]
        if module is head:
            wanted = layers.unembed
        elif any(key in part for part in parts for key in _ATTENTION_PARTS):
            wanted = layers.attn
        elif any(key in part for part in parts for key in _MLP_PARTS):
            wanted = layers.mlp
        else:
            wanted = layers.attn and layers.mlp
        if wanted:
            chosen.append(name)
    if not chosen:
        raise ConfigError(f"LoRA layers {layers}: the model has no such linear layers to train")
    return chosen


MAMBA_LORA_EXCLUDED = ("out_proj", "conv1d")
"""Layers of a Mamba mixer that peft refuses to wrap (hybrid models such as Nemotron-3)."""


def _all_linear_exclusions(model: torch.nn.Module) -> list[str] | None:
    """What "all-linear" must leave out: a Mamba mixer's `out_proj` and `conv1d` (peft refuses
    them), and linear layers whose own forward is not `x @ W.T + b` (DeepSeek V4's grouped output
    projection), which a LoRA wrapper would compute wrongly."""
    excluded = [
        name
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and type(module).forward is not torch.nn.Linear.forward
    ]
    if any("Mamba" in type(module).__name__ for module in model.modules()):
        excluded += MAMBA_LORA_EXCLUDED
    return excluded or None


def load_model(
    base_model: str,
    lora_rank: int | None,
    seed: int,
    device: torch.device,
    dtype: torch.dtype = torch.float32,
    lora: LoraOptions | None = None,
    layers: LoraLayers | None = None,
) -> torch.nn.Module:
    """The model a client trains or samples: full fine-tuning when `lora_rank` is None, else LoRA
    (on `layers`, or the `lora` options' target modules)."""
    model = load_base_model(base_model, dtype)
    if lora_rank is not None:
        model = add_lora(model, lora_rank, seed, lora, layers)
    return model.to(device).eval()


def compile_body(model: torch.nn.Module) -> None:
    """`torch.compile` the model's body (token ids to final hidden states) in place, so the chunked
    scoring pass and the whole forward both run it compiled; each new batch shape compiles once
    more (then shapes are treated as dynamic). The output head and softmax stay eager."""
    get_decoder = getattr(model, "get_decoder", None)
    body = get_decoder() if callable(get_decoder) else None
    (body if isinstance(body, torch.nn.Module) else model).compile()
