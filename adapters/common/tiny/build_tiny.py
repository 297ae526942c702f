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
from transformers import PreTrainedTokenizerFast, Qwen3Config

from adapters.common.tiny import TINY32_MODEL_NAME, TINY_DIR
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


def build(out_dir: Path) -> None:
    """Write tokenizer files and tiny's config.json into `out_dir`, tiny32's into `out_dir/tiny32`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fast = wrap_for_transformers(train_tokenizer())
    fast.save_pretrained(out_dir)
    _use_portable_tokenizer_class(out_dir / "tokenizer_config.json")
    model_config(fast).save_pretrained(out_dir)
    model_config(fast, hidden_size=128, intermediate_size=384).save_pretrained(out_dir / TINY32_MODEL_NAME)


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
