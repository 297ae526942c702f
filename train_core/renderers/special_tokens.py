"""Every special token the built-in renderers emit. The embedded tiny tokenizer carries those of
ALL_SPECIAL_TOKENS as single tokens, so those renderers run on the tiny model offline; the
formats added after it (GLM-5.3, TMLv0) need their model's tokenizer, or a tokenizer given
NEWER_SPECIAL_TOKENS (as the renderer tests do), since growing the tiny vocabulary would change
the tiny model every recipe's figures come from."""

from __future__ import annotations

LLAMA3 = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
)
QWEN3 = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)
DEEPSEEK_V3 = (
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁outputs▁begin｜>",
    "<｜tool▁outputs▁end｜>",
    "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>",
)
KIMI_K2 = (
    "<|im_system|>",
    "<|im_user|>",
    "<|im_assistant|>",
    "<|im_middle|>",
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
)
GPT_OSS = (
    "<|startoftext|>",
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|constrain|>",
    "<|return|>",
    "<|call|>",
)
PAD = "<|pad|>"

ALL_SPECIAL_TOKENS: tuple[str, ...] = tuple(dict.fromkeys((*LLAMA3, *QWEN3, *DEEPSEEK_V3, *KIMI_K2, *GPT_OSS, PAD)))
GLM5 = (
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
)

TML_V0 = (
    "<|message_system|>",
    "<|message_user|>",
    "<|message_tool|>",
    "<|message_model|>",
    "<|content_text|>",
    "<|content_thinking|>",
    "<|content_invoke_tool_json|>",
    "<|end_message|>",
    "<|content_model_end_sampling|>",
)

NEWER_SPECIAL_TOKENS: tuple[str, ...] = tuple(t for t in dict.fromkeys((*GLM5, *TML_V0)) if t not in ALL_SPECIAL_TOKENS)
