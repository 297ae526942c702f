"""A reward model's export: the exported causal LM directory (full or merged weights) rewritten
as a Hugging Face sequence-classification model with one label, whose `score` head is the
difference of the two score tokens' unembedding rows. It then scores a conversation exactly as
training did (`train_core.preference.bradley_terry`): `AutoModelForSequenceClassification`
reads the head at the last non-padding token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kitchen.engine.errors import ConfigError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def export_sequence_classifier(model_dir: Path, score_tokens: tuple[str, str]) -> dict[str, Any]:
    """Rewrite `model_dir` (an `AutoModelForCausalLM` directory with its tokenizer) in place as
    an `AutoModelForSequenceClassification` reward model; returns what it wrote."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = []
    for text in score_tokens:
        encoded = tokenizer.encode(text, add_special_tokens=False)
        if len(encoded) != 1:
            raise ConfigError(f"score token {text!r} is {len(encoded)} tokens for the exported tokenizer")
        ids.append(encoded[0])
    causal: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    head = causal.get_output_embeddings()
    if getattr(head, "bias", None) is not None:
        raise ConfigError("this architecture's output layer has a bias; the reward head export supports none")
    config = causal.config
    config.num_labels = 1
    config.architectures = None
    if config.pad_token_id is None:
        config.pad_token_id = tokenizer.pad_token_id
    classifier: Any = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
    body = {k: v for k, v in causal.state_dict().items() if not k.startswith(_prefix(causal, head))}
    missing, unexpected = classifier.load_state_dict(body, strict=False)
    if unexpected or [k for k in missing if not k.startswith("score.")]:
        raise ConfigError(
            f"the reward head export does not fit this architecture (missing {missing}, unexpected {unexpected})"
        )
    with torch.no_grad():
        classifier.score.weight.copy_((head.weight[ids[0]] - head.weight[ids[1]]).unsqueeze(0))
    for name in WEIGHT_FILES:
        (model_dir / name).unlink(missing_ok=True)
    classifier.save_pretrained(model_dir, safe_serialization=True)
    return {
        "reward_model": {"score_tokens": list(score_tokens), "score_token_ids": ids, "class": type(classifier).__name__}
    }


def _prefix(model: Any, head: Any) -> str:
    """The state-dict prefix of the output layer (`lm_head.` for most architectures)."""
    for name, module in model.named_modules():
        if module is head:
            return name + "."
    raise ConfigError("the exported model's output layer was not found")
