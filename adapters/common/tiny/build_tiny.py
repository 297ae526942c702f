"""Build the embedded tiny models' assets: tokenizer files and the models' `config.json`s.

Run `python -m adapters.common.tiny.build_tiny` to regenerate them; the output is a pure function
of this file and `corpus.py` (fixed corpus seed, deterministic BPE training), so the committed
assets can always be reproduced. No weights are written: the model is random-initialised from a
fixed seed when it is loaded (see `adapters.local.model_loading`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3VLConfig

from adapters.common.tiny import TINY32_MODEL_NAME, TINY64K_DIR, TINY_DIR, VISION_TOKENS
from adapters.common.tiny.corpus import iter_corpus
from train_core.renderers.special_tokens import ALL_SPECIAL_TOKENS, PAD

VOCAB_SIZE = 1500
CORPUS_LINES = 40_000
CORPUS_SEED = 0
EOS = "<|im_end|>"

# The Qwen2/Llama3-style pre-tokenisation split, with every digit its own piece (`\p{N}` alone),
# so numbers tokenise digit by digit and arithmetic stays learnable.
_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen ChatML: `<|im_start|>{role}\n{content}<|im_end|>\n` per message.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def train_tokenizer() -> Tokenizer:
    """Train the byte-level BPE; the special tokens take the first ids, in ALL_SPECIAL_TOKENS order."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        show_progress=False,
        special_tokens=list(ALL_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(iter_corpus(CORPUS_LINES, CORPUS_SEED), trainer=trainer)
    return tokenizer


def wrap_for_transformers(tokenizer: Tokenizer) -> PreTrainedTokenizerFast:
    """Give the raw tokenizer the pad/eos roles and the chat template transformers expects."""
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD,
        eos_token=EOS,
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
        extra_special_tokens=[t for t in ALL_SPECIAL_TOKENS if t not in (PAD, EOS)],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def model_config(
    tokenizer: PreTrainedTokenizerFast, hidden_size: int = 96, intermediate_size: int = 256
) -> Qwen3Config:
    """A Qwen3 of a few hundred thousand parameters: big enough to learn toy tasks, fast on a CPU.

    Four query heads of `hidden_size / 4` (two key/value heads): 24 for `tiny`, 32 for `tiny32`.
    """
    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden_size // 4,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        attention_dropout=0.0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        dtype="float32",
        architectures=["Qwen3ForCausalLM"],
    )


LONG_CONTEXT = 65_536
LONG_ROPE_THETA = 1_000_000.0


def long_context_config(tokenizer: PreTrainedTokenizerFast) -> Qwen3Config:
    """`tiny64k`: `tiny`'s shape (so a seed gives it the same weights) with positions for 64k tokens.

    Plain RoPE with base 1e6 rather than a `rope_scaling` method: YaRN / linear scaling stretch a
    pretrained model's short-context positions, but tiny is random-initialised, so there is nothing
    to stretch. What matters is that no rotary pair wraps around inside the context: the slowest of
    the 12 pairs of a 24-wide head turns once every 2*pi*theta^(22/24) positions, ~29k at tiny's
    base 1e4 (positions past it would alias) and ~2.0M at 1e6 (Qwen3's own base).
    """
    config = model_config(tokenizer)
    config.max_position_embeddings = LONG_CONTEXT
    config.rope_parameters = {"rope_type": "default", "rope_theta": LONG_ROPE_THETA}
    return config


TINY_VL_DIR = "tiny_vl"

QWEN3_VL_IMAGE_PROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "merge_size": 2,
    "patch_size": 16,
    "resample": 3,
    "rescale_factor": 1 / 255,
    "size": {"longest_edge": 16_777_216, "shortest_edge": 65_536},
    "temporal_patch_size": 2,
}
"""Qwen3-VL's published image processor settings (the renderers' default `VisionSpec`)."""


def vl_config(tokenizer: PreTrainedTokenizerFast) -> Qwen3VLConfig:
    """`tiny-vl`: tiny's language model shape (multimodal rotary sections 4+4+4 of its 12 frequency
    pairs) behind a 2-block vision encoder of width 64 with Qwen3-VL's patching (16-pixel patches,
    2x2 merged, one deep-stack layer). The vision tokens take the ids after tiny's vocabulary, in
    VISION_TOKENS order (the loader adds them to tiny's tokenizer); one more id is the video token,
    which no tiny tokenizer writes."""
    first = len(tokenizer)
    start, end, image = (first + i for i in range(len(VISION_TOKENS)))
    return Qwen3VLConfig(
        text_config={
            "vocab_size": first + len(VISION_TOKENS) + 1,
            "hidden_size": 96,
            "intermediate_size": 256,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 24,
            "max_position_embeddings": 2048,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [4, 4, 4],
                "mrope_interleaved": True,
            },
            "pad_token_id": tokenizer.pad_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "tie_word_embeddings": True,
        },
        vision_config={
            "depth": 2,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_heads": 4,
            "patch_size": 16,
            "temporal_patch_size": 2,
            "spatial_merge_size": 2,
            "out_hidden_size": 96,
            "num_position_embeddings": 256,
            "deepstack_visual_indexes": [0],
        },
        image_token_id=image,
        video_token_id=first + len(VISION_TOKENS),
        vision_start_token_id=start,
        vision_end_token_id=end,
        tie_word_embeddings=True,
    )


def build(out_dir: Path) -> None:
    """Write tokenizer files and tiny's config.json into `out_dir`, tiny32's into `out_dir/tiny32`,
    tiny64k's into `out_dir/tiny64k`, tiny-vl's config and image processor config into `out_dir/tiny_vl`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fast = wrap_for_transformers(train_tokenizer())
    fast.save_pretrained(out_dir)
    _use_portable_tokenizer_class(out_dir / "tokenizer_config.json")
    model_config(fast).save_pretrained(out_dir)
    model_config(fast, hidden_size=128, intermediate_size=384).save_pretrained(out_dir / TINY32_MODEL_NAME)
    long_context_config(fast).save_pretrained(out_dir / TINY64K_DIR)
    vl_config(fast).save_pretrained(out_dir / TINY_VL_DIR)
    processor = json.dumps(QWEN3_VL_IMAGE_PROCESSOR, indent=2) + "\n"
    (out_dir / TINY_VL_DIR / "preprocessor_config.json").write_text(processor, encoding="utf-8")


def _use_portable_tokenizer_class(config_path: Path) -> None:
    """transformers 5 writes its new class name; the classic name loads on 4.x and 5.x alike."""
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out-dir", type=Path, default=TINY_DIR)
    build(parser.parse_args().out_dir)


if __name__ == "__main__":
    main()
