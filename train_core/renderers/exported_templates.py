"""Hugging Face chat templates (Jinja) that reproduce a renderer's text byte for byte, written
into `kitchen export` directories so `tokenizer.apply_chat_template` formats conversations the
way the model was trained.

Each template covers plain conversations (system, user and assistant messages with text content;
tool results where the format has a plain form for them) and raises for what it does not render
(thinking, tool calls): a chat server then refuses such a request instead of formatting it in a
way the model never saw. Renderers without an entry here get no template: the export records the
renderer's name instead of guessing. Tested against the renderers in
`tests/train_core/renderers/test_exported_templates.py`.
"""

from __future__ import annotations


def _refuse(renderer: str, what: str) -> str:
    return (
        "{%- if message.get('" + what + "') -%}{{ raise_exception('the exported " + renderer + " template does "
        "not render " + what + "; use kitchen to render such conversations') }}{%- endif -%}"
    )


_ROLE_COLON = (
    "{%- if bos_token -%}{{ bos_token }}{%- endif -%}"
    "{%- for message in messages -%}"
    + _refuse("role_colon", "tool_calls")
    + _refuse("role_colon", "thinking")
    + "{{ message['role'] | capitalize }}{{ ': ' + message['content'] + '\\n\\n' }}"
    "{%- if loop.last and message['role'] == 'assistant' and not add_generation_prompt -%}{{ 'User:' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'Assistant:' }}{%- endif -%}"
)

_LLAMA3 = (
    "{{- '<|begin_of_text|>' -}}"
    "{%- for message in messages -%}"
    + _refuse("llama3", "tool_calls")
    + _refuse("llama3", "thinking")
    + "{%- set role = 'ipython' if message['role'] == 'tool' else message['role'] -%}"
    "{%- set content = message['content'] if message['role'] == 'tool' else message['content'] | trim -%}"
    "{{ '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' + content + '<|eot_id|>' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif -%}"
)


def _qwen3(name: str, empty_think_block: bool) -> str:
    """Qwen3 without thinking: `qwen3_instruct`, or `qwen3_disable_thinking`, whose last reply of the
    current turn (and the generation prompt) opens with an empty think block. Consecutive tool
    results share one user message."""
    think = "<think>\\n\\n</think>\\n\\n"
    reply_opener = (
        "{%- if loop.last and loop.index0 > ns.last_query -%}{{ '" + think + "' }}"
        "{%- set content = content.lstrip('\\n') -%}{%- endif -%}"
        if empty_think_block
        else ""
    )
    return (
        "{%- set ns = namespace(last_query=messages | length - 1) -%}"
        "{%- for message in messages -%}{%- if message['role'] == 'user' -%}{%- set ns.last_query = loop.index0 -%}"
        "{%- endif -%}{%- endfor -%}"
        "{%- for message in messages -%}"
        + _refuse(name, "tool_calls")
        + _refuse(name, "thinking")
        + "{%- set content = message['content'] -%}"
        "{%- if message['role'] == 'tool' -%}"
        "{%- if loop.first or loop.previtem['role'] != 'tool' -%}"
        "{%- if not loop.first -%}{{ '\\n' }}{%- endif -%}{{ '<|im_start|>user' }}{%- endif -%}"
        "{{ '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}"
        "{%- if loop.last or loop.nextitem['role'] != 'tool' -%}{{ '<|im_end|>' }}{%- endif -%}"
        "{%- else -%}"
        "{%- if not loop.first -%}{{ '\\n' }}{%- endif -%}{{ '<|im_start|>' + message['role'] + '\\n' }}"
        "{%- if message['role'] == 'assistant' -%}" + reply_opener + "{%- endif -%}"
        "{{ content + '<|im_end|>' }}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{%- if messages -%}{{ '\\n' }}{%- endif -%}{{ '<|im_start|>assistant\\n' }}"
        + ("{{ '" + think + "' }}" if empty_think_block else "")
        + "{%- endif -%}"
    )


_DEEPSEEKV3 = (
    "{{- '<｜begin▁of▁sentence｜>' -}}"
    "{%- set ns = namespace(previous='') -%}"
    "{%- for message in messages -%}"
    + _refuse("deepseekv3", "tool_calls")
    + _refuse("deepseekv3", "thinking")
    + "{%- if message['role'] == 'system' -%}"
    "{%- if ns.previous not in ['', 'system'] -%}"
    "{{ raise_exception('deepseekv3 renders system messages only at the start') }}{%- endif -%}"
    "{%- if not loop.first -%}{{ '\\n\\n' }}{%- endif -%}{{ message['content'] }}"
    "{%- elif message['role'] == 'user' -%}{{ '<｜User｜>' + message['content'] }}"
    "{%- elif message['role'] == 'tool' -%}"
    "{{ '<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>' }}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{%- if ns.previous == 'user' -%}{{ '<｜Assistant｜></think>' }}{%- endif -%}"
    "{{ message['content'] + '<｜end▁of▁sentence｜>' }}"
    "{%- else -%}{{ raise_exception('deepseekv3 has no role ' + message['role']) }}"
    "{%- endif -%}"
    "{%- set ns.previous = message['role'] -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt and ns.previous == 'user' -%}{{ '<｜Assistant｜></think>' }}{%- endif -%}"
)

EXPORTED_CHAT_TEMPLATES: dict[str, str] = {
    "role_colon": _ROLE_COLON,
    "llama3": _LLAMA3,
    "qwen3_instruct": _qwen3("qwen3_instruct", empty_think_block=False),
    "qwen3_disable_thinking": _qwen3("qwen3_disable_thinking", empty_think_block=True),
    "deepseekv3": _DEEPSEEKV3,
    "deepseekv3_disable_thinking": _DEEPSEEKV3,
}
"""Renderer name -> a chat template equal to it on plain conversations."""


def exported_chat_template(renderer: str) -> str | None:
    """The Hugging Face chat template that reproduces `renderer`, or None when there is none (the
    export then records the renderer's name and ships no template)."""
    return EXPORTED_CHAT_TEMPLATES.get(renderer)
