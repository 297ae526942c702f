"""Loading models: the embedded tiny model, a saved model directory, LoRA, and bad names."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

from adapters.common.tiny import TINY_DIR
from adapters.local import LocalBackend
from adapters.local.model_loading import load_model, resolve_device
from kitchen.engine.errors import ConfigError
from train_core.types import ModelInput

CPU = torch.device("cpu")


def test_tiny_model_is_a_few_hundred_thousand_float32_params_in_eval_mode() -> None:
    model = load_model("tiny", None, seed=0, device=CPU)
    n_params = sum(p.numel() for p in model.parameters())
    assert 200_000 <= n_params <= 900_000
    assert all(p.dtype == torch.float32 and p.requires_grad for p in model.parameters())
    assert not model.training


def test_tiny_weights_are_the_same_on_every_load_whatever_the_client_seed() -> None:
    first = load_model("tiny", None, seed=0, device=CPU).state_dict()
    second = load_model("tiny", None, seed=123, device=CPU).state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[key], second[key]) for key in first)


def test_loading_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    load_model("tiny", 4, seed=0, device=CPU)
    assert torch.equal(torch.rand(3), expected)


def test_a_model_saved_to_a_directory_loads_by_path(tmp_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(TINY_DIR)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    saved = Qwen3ForCausalLM(config).eval()
    saved.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    tokens = tokenizer.encode("Alice reads a book.", add_special_tokens=False)
    with torch.no_grad():
        logits = saved(input_ids=torch.tensor([tokens])).logits[0]
    expected = torch.log_softmax(logits, -1)[:-1].gather(-1, torch.tensor(tokens[1:])[:, None]).squeeze(-1)

    async def score() -> list[float | None]:
        backend = LocalBackend(checkpoint_dir=tmp_path / "ckpt", device="cpu")
        client = await backend.create_sampling_client(base_model=str(tmp_path / "model"))
        assert backend.get_tokenizer(str(tmp_path / "model")).encode("Alice", add_special_tokens=False)
        result = await client.compute_logprobs(ModelInput.from_ints(tokens))
        await backend.close()
        return result

    logprobs = asyncio.run(score())
    assert logprobs[0] is None
    assert logprobs[1:] == pytest.approx(expected.tolist(), abs=1e-5)


def test_lora_leaves_only_adapter_parameters_trainable() -> None:
    model = load_model("tiny", 4, seed=0, device=CPU)
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    # Every linear layer of every block is adapted: q, k, v, o, gate, up, down.
    assert len(trainable) == 2 * 7 * 3
    assert not model.training


def test_bad_model_names_and_lora_ranks_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"model_name .*no-such-model"):
        load_model(str(tmp_path / "no-such-model"), None, seed=0, device=CPU)
    with pytest.raises(ConfigError, match="lora_rank must be a positive integer"):
        load_model("tiny", 0, seed=0, device=CPU)


def test_device_defaults_to_cuda_when_available_and_can_be_overridden() -> None:
    assert resolve_device("cpu") == CPU
    assert resolve_device(None).type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_models_built_at_once_on_threads_are_those_built_alone() -> None:
    """Seeded initialisation draws from torch's process-wide generator: built concurrently (as
    kitchen serve builds one client per tenant), every model must still be its seed's."""
    from concurrent.futures import ThreadPoolExecutor

    def build(seed: int) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in load_model("tiny", 4, seed=seed, device=CPU).state_dict().items()}

    alone = [build(seed) for seed in range(4)]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(build, range(4)))
    for one, other in zip(alone, together, strict=True):
        assert one.keys() == other.keys() and all(torch.equal(one[k], other[k]) for k in one)


def test_a_cuda_device_becomes_current_with_tf32_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """`local.device=cuda:1` makes GPU 1 the process's current device (kernels that launch on the
    current device, Triton's and Liger's, then run where the model is) and turns TF32 on. No GPU
    here: torch.cuda's queries and `set_device` are stand-ins that record the call."""
    current: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    precision, cudnn_tf32 = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = False
        assert resolve_device("cuda:1") == torch.device("cuda", 1)
        assert current == [torch.device("cuda", 1)]
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        resolve_device("cpu")
        assert current == [torch.device("cuda", 1)]  # the CPU sets nothing
    finally:  # the CPU's float32 matmuls must stay float32 for the rest of the session
        torch.set_float32_matmul_precision(precision)
        torch.backends.cudnn.allow_tf32 = cudnn_tf32
