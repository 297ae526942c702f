"""Golden renderings, character for character, of two conversations in every format.

CHAT has a system message, two turns and thinking; TOOLS has a tool call with thinking, a tool
result and a final answer. llama3, role_colon and the thinking-disabled renderers have no
thinking format (they get the conversations without it) and role_colon has no tool format. Each
entry holds the supervised example, the part of it trained under LAST_ASSISTANT_MESSAGE, and the
generation prompt for the conversation without its last message."""

from __future__ import annotations

from train_core.renderers import Message

CHAT: list[Message] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4.", "thinking": "Add them."},
    {"role": "user", "content": "And 3+3?"},
    {"role": "assistant", "content": "6.", "thinking": "Add again."},
]
TOOLS: list[Message] = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "thinking": "Ask the tool.",
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
    },
    {"role": "tool", "content": '{"temp": 20}', "name": "get_weather", "tool_call_id": "functions.get_weather:0"},
    {"role": "assistant", "content": "20 degrees.", "thinking": "Report it."},
]
CONVERSATIONS = {"chat": CHAT, "tools": TOOLS}
WITHOUT_THINKING = (
    "llama3",
    "role_colon",
    "qwen3_disable_thinking",
    "qwen3_instruct",
    "deepseekv3",
    "deepseekv3_disable_thinking",
)
WITHOUT_TOOLS = ("role_colon",)
GPT_OSS_DATE = "2025-06-28"

GOLDENS: dict[str, dict[str, str]] = {
    "llama3": {
        "chat_supervised": (
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "You are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n"
            "What is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
            "4.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n"
            "And 3+3?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
            "6.<|eot_id|>"
        ),
        "chat_trained": "6.<|eot_id|>",
        "chat_prompt": (
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "You are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n"
            "What is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
            "4.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n"
            "And 3+3?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
        ),
        "tools_supervised": (
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
            "Weather in Paris?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
            '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>'
            "<|start_header_id|>ipython<|end_header_id|>\n\n"
            '{"temp": 20}<|eot_id|>'
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
            "20 degrees.<|eot_id|>"
        ),
        "tools_trained": "20 degrees.<|eot_id|>",
        "tools_prompt": (
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
            "Weather in Paris?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
            '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>'
            "<|start_header_id|>ipython<|end_header_id|>\n\n"
            '{"temp": 20}<|eot_id|>'
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
        ),
    },
    "qwen3": {
        "chat_supervised": (
            "<|im_start|>system\nYou are terse.<|im_end|>"
            "\n<|im_start|>user\nWhat is 2+2?<|im_end|>"
            "\n<|im_start|>assistant\n4.<|im_end|>"
            "\n<|im_start|>user\nAnd 3+3?<|im_end|>"
            "\n<|im_start|>assistant\n<think>\nAdd again.\n</think>\n\n"
            "6.<|im_end|>"
        ),
        "chat_trained": ("<think>\nAdd again.\n</think>\n\n6.<|im_end|>"),
        "chat_prompt": (
            "<|im_start|>system\nYou are terse.<|im_end|>"
            "\n<|im_start|>user\nWhat is 2+2?<|im_end|>"
            "\n<|im_start|>assistant\n4.<|im_end|>"
            "\n<|im_start|>user\nAnd 3+3?<|im_end|>"
            "\n<|im_start|>assistant\n"
        ),
        "tools_supervised": (
            "<|im_start|>user\nWeather in Paris?<|im_end|>"
            "\n<|im_start|>assistant\n<think>\nAsk the tool.\n</think>\n\n"
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
            "<|im_end|>"
            '\n<|im_start|>user\n<tool_response>\n{"temp": 20}\n</tool_response><|im_end|>'
            "\n<|im_start|>assistant\n<think>\nReport it.\n</think>\n\n"
            "20 degrees.<|im_end|>"
        ),
        "tools_trained": ("<think>\nReport it.\n</think>\n\n20 degrees.<|im_end|>"),
        "tools_prompt": (
            "<|im_start|>user\nWeather in Paris?<|im_end|>"
            "\n<|im_start|>assistant\n<think>\nAsk the tool.\n</think>\n\n"
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
            "<|im_end|>"
            '\n<|im_start|>user\n<tool_response>\n{"temp": 20}\n</tool_response><|im_end|>'
            "\n<|im_start|>assistant\n"
        ),
    },
    "qwen3_disable_thinking": {
        "chat_supervised": (
            "<|im_start|>system\nYou are terse.<|im_end|>"
            "\n<|im_start|>user\nWhat is 2+2?<|im_end|>"
            "\n<|im_start|>assistant\n4.<|im_end|>"
            "\n<|im_start|>user\nAnd 3+3?<|im_end|>"
            "\n<|im_start|>assistant\n<think>\n\n"
            "</think>\n\n"
            "6.<|im_end|>"
        ),
        "chat_trained": "6.<|im_end|>",
        "chat_prompt": (
            "<|im_start|>system\nYou are terse.<|im_end|>"
            "\n<|im_start|>user\nWhat is 2+2?<|im_end|>"
            "\n<|im_start|>assistant\n4.<|im_end|>"
            "\n<|im_start|>user\nAnd 3+3?<|im_end|>"
            "\n<|im_start|>assistant\n<think>\n\n"
            "</think>\n\n"
        ),
        "tools_supervised": (
            "<|im_start|>user\nWeather in Paris?<|im_end|>"
            '\n<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city":'
            ' "Paris"}}\n</tool_call><|im_end|>'
            '\n<|im_start|>user\n<tool_response>\n{"temp": 20}\n</tool_response><|im_end|>'
            "\n<|im_start|>assistant\n<think>\n\n"
            "</think>\n\n"
            "20 degrees.<|im_end|>"
        ),
        "tools_trained": "20 degrees.<|im_end|>",
        "tools_prompt": (
            "<|im_start|>user\nWeather in Paris?<|im_end|>"
            '\n<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city":'
            ' "Paris"}}\n</tool_call><|im_end|>'
            '\n<|im_start|>user\n<tool_response>\n{"temp": 20}\n</tool_response><|im_end|>'
            "\n<|im_start|>assistant\n<think>\n\n"
            "</think>\n\n"
        ),
    },
    "qwen3_instruct": {
        "chat_supervised": (
            "<|im_start|>system\nYou are terse.<|im_end|>"
            "\n<|im_start|>user\nWhat is 2+2?<|im_end|>"
            "\n<|im_start|>assistant\n4.<|im_end|>"
            "\n<|im_start|>user\nAnd 3+3?<|im_end|>"
            "\n<|im_start|>assistant\n6.<|im_end|>"
        ),
        "chat_trained": "6.<|im_end|>",
        "chat_prompt": (
            "<|im_start|>system\nYou are terse.<|im_end|>"
            "\n<|im_start|>user\nWhat is 2+2?<|im_end|>"
            "\n<|im_start|>assistant\n4.<|im_end|>"
            "\n<|im_start|>user\nAnd 3+3?<|im_end|>"
            "\n<|im_start|>assistant\n"
        ),
        "tools_supervised": (
            "<|im_start|>user\nWeather in Paris?<|im_end|>"
            '\n<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city":'
            ' "Paris"}}\n</tool_call><|im_end|>'
            '\n<|im_start|>user\n<tool_response>\n{"temp": 20}\n</tool_response><|im_end|>'
            "\n<|im_start|>assistant\n20 degrees.<|im_end|>"
        ),
        "tools_trained": "20 degrees.<|im_end|>",
        "tools_prompt": (
            "<|im_start|>user\nWeather in Paris?<|im_end|>"
            '\n<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city":'
            ' "Paris"}}\n</tool_call><|im_end|>'
            '\n<|im_start|>user\n<tool_response>\n{"temp": 20}\n</tool_response><|im_end|>'
            "\n<|im_start|>assistant\n"
        ),
    },
    "role_colon": {
        "chat_supervised": (
            "System: You are terse.\n\nUser: What is 2+2?\n\nAssistant: 4.\n\nUser: And 3+3?\n\nAssistant: 6.\n\nUser:"
        ),
        "chat_trained": (" 6.\n\nUser:"),
        "chat_prompt": (
            "System: You are terse.\n\nUser: What is 2+2?\n\nAssistant: 4.\n\nUser: And 3+3?\n\nAssistant:"
        ),
    },
    "deepseekv3_thinking": {
        "chat_supervised": (
            "<｜begin▁of▁sentence｜>You are terse.<｜User｜>What is 2+2?<｜Assistant｜></think>4.<｜"
            "end▁of▁sentence｜><｜User｜>And 3+3?<｜Assistant｜><think>Add again.</think>6.<｜end▁o"
            "f▁sentence｜>"
        ),
        "chat_trained": "Add again.</think>6.<｜end▁of▁sentence｜>",
        "chat_prompt": (
            "<｜begin▁of▁sentence｜>You are terse.<｜User｜>What is 2+2?<｜Assistant｜></think>4.<｜"
            "end▁of▁sentence｜><｜User｜>And 3+3?<｜Assistant｜><think>"
        ),
        "tools_supervised": (
            "<｜begin▁of▁sentence｜><｜User｜>Weather in Paris?<｜Assistant｜></think><｜tool▁calls▁"
            'begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁en'
            "d｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
            '<｜tool▁output▁begin｜>{"temp": 20}<｜tool▁output▁end｜>'
            "20 degrees.<｜end▁of▁sentence｜>"
        ),
        "tools_trained": "20 degrees.<｜end▁of▁sentence｜>",
        "tools_prompt": (
            "<｜begin▁of▁sentence｜><｜User｜>Weather in Paris?<｜Assistant｜></think><｜tool▁calls▁"
            'begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁en'
            "d｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
            '<｜tool▁output▁begin｜>{"temp": 20}<｜tool▁output▁end｜>'
        ),
    },
    "deepseekv3": {
        "chat_supervised": (
            "<｜begin▁of▁sentence｜>You are terse.<｜User｜>What is 2+2?<｜Assistant｜></think>4.<｜"
            "end▁of▁sentence｜><｜User｜>And 3+3?<｜Assistant｜></think>6.<｜end▁of▁sentence｜>"
        ),
        "chat_trained": "6.<｜end▁of▁sentence｜>",
        "chat_prompt": (
            "<｜begin▁of▁sentence｜>You are terse.<｜User｜>What is 2+2?<｜Assistant｜></think>4.<｜"
            "end▁of▁sentence｜><｜User｜>And 3+3?<｜Assistant｜></think>"
        ),
        "tools_supervised": (
            "<｜begin▁of▁sentence｜><｜User｜>Weather in Paris?<｜Assistant｜></think><｜tool▁calls▁"
            'begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁en'
            "d｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
            '<｜tool▁output▁begin｜>{"temp": 20}<｜tool▁output▁end｜>'
            "20 degrees.<｜end▁of▁sentence｜>"
        ),
        "tools_trained": "20 degrees.<｜end▁of▁sentence｜>",
        "tools_prompt": (
            "<｜begin▁of▁sentence｜><｜User｜>Weather in Paris?<｜Assistant｜></think><｜tool▁calls▁"
            'begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁en'
            "d｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
            '<｜tool▁output▁begin｜>{"temp": 20}<｜tool▁output▁end｜>'
        ),
    },
    "kimi_k2": {
        "chat_supervised": (
            "<|im_system|>system<|im_middle|>You are terse.<|im_end|>"
            "<|im_user|>user<|im_middle|>What is 2+2?<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|><think></think>4.<|im_end|>"
            "<|im_user|>user<|im_middle|>And 3+3?<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|><think>Add again.</think>6.<|im_end|>"
        ),
        "chat_trained": "<think>Add again.</think>6.<|im_end|>",
        "chat_prompt": (
            "<|im_system|>system<|im_middle|>You are terse.<|im_end|>"
            "<|im_user|>user<|im_middle|>What is 2+2?<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|><think></think>4.<|im_end|>"
            "<|im_user|>user<|im_middle|>And 3+3?<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>"
        ),
        "tools_supervised": (
            "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonsho"
            "t AI.<|im_end|>"
            "<|im_user|>user<|im_middle|>Weather in Paris?<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|><think>Ask the tool.</think><|tool_calls_s"
            "ection_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_beg"
            'in|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
            "<|im_end|>"
            '<|im_system|>get_weather<|im_middle|>## Return of functions.get_weather:0\n{"temp'
            '": 20}<|im_end|>'
            "<|im_assistant|>assistant<|im_middle|><think>Report it.</think>20 degrees.<|im_e"
            "nd|>"
        ),
        "tools_trained": "<think>Report it.</think>20 degrees.<|im_end|>",
        "tools_prompt": (
            "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonsho"
            "t AI.<|im_end|>"
            "<|im_user|>user<|im_middle|>Weather in Paris?<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|><think>Ask the tool.</think><|tool_calls_s"
            "ection_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_beg"
            'in|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
            "<|im_end|>"
            '<|im_system|>get_weather<|im_middle|>## Return of functions.get_weather:0\n{"temp'
            '": 20}<|im_end|>'
            "<|im_assistant|>assistant<|im_middle|>"
        ),
    },
    "gpt_oss_no_sysprompt": {
        "chat_supervised": (
            "<|start|>developer<|message|># Instructions\n\n"
            "You are terse.\n\n"
            "<|end|>"
            "<|start|>user<|message|>What is 2+2?<|end|>"
            "<|start|>assistant<|channel|>final<|message|>4.<|end|>"
            "<|start|>user<|message|>And 3+3?<|end|>"
            "<|start|>assistant<|channel|>analysis<|message|>Add again.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>6.<|return|>"
        ),
        "chat_trained": (
            "<|channel|>analysis<|message|>Add again.<|end|><|start|>assistant<|channel|>final<|message|>6.<|return|>"
        ),
        "chat_prompt": (
            "<|start|>developer<|message|># Instructions\n\n"
            "You are terse.\n\n"
            "<|end|>"
            "<|start|>user<|message|>What is 2+2?<|end|>"
            "<|start|>assistant<|channel|>final<|message|>4.<|end|>"
            "<|start|>user<|message|>And 3+3?<|end|>"
            "<|start|>assistant"
        ),
        "tools_supervised": (
            "<|start|>user<|message|>Weather in Paris?<|end|>"
            "<|start|>assistant<|channel|>analysis<|message|>Ask the tool.<|end|>"
            "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>js"
            'on<|message|>{"city": "Paris"}<|call|>'
            '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"tem'
            'p": 20}<|end|>'
            "<|start|>assistant<|channel|>analysis<|message|>Report it.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>20 degrees.<|return|>"
        ),
        "tools_trained": (
            "<|channel|>analysis<|message|>Report it.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>20 degrees.<|return|>"
        ),
        "tools_prompt": (
            "<|start|>user<|message|>Weather in Paris?<|end|>"
            "<|start|>assistant<|channel|>analysis<|message|>Ask the tool.<|end|>"
            "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>js"
            'on<|message|>{"city": "Paris"}<|call|>'
            '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"tem'
            'p": 20}<|end|>'
            "<|start|>assistant"
        ),
    },
    "gpt_oss_medium_reasoning": {
        "chat_supervised": (
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by Ope"
            "nAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\n"
            "Reasoning: medium\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for ever"
            "y message.<|end|>"
            "<|start|>developer<|message|># Instructions\n\n"
            "You are terse.\n\n"
            "<|end|>"
            "<|start|>user<|message|>What is 2+2?<|end|>"
            "<|start|>assistant<|channel|>final<|message|>4.<|end|>"
            "<|start|>user<|message|>And 3+3?<|end|>"
            "<|start|>assistant<|channel|>analysis<|message|>Add again.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>6.<|return|>"
        ),
        "chat_trained": (
            "<|channel|>analysis<|message|>Add again.<|end|><|start|>assistant<|channel|>final<|message|>6.<|return|>"
        ),
        "chat_prompt": (
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by Ope"
            "nAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\n"
            "Reasoning: medium\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for ever"
            "y message.<|end|>"
            "<|start|>developer<|message|># Instructions\n\n"
            "You are terse.\n\n"
            "<|end|>"
            "<|start|>user<|message|>What is 2+2?<|end|>"
            "<|start|>assistant<|channel|>final<|message|>4.<|end|>"
            "<|start|>user<|message|>And 3+3?<|end|>"
            "<|start|>assistant"
        ),
        "tools_supervised": (
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by Ope"
            "nAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\n"
            "Reasoning: medium\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for ever"
            "y message.<|end|>"
            "<|start|>user<|message|>Weather in Paris?<|end|>"
            "<|start|>assistant<|channel|>analysis<|message|>Ask the tool.<|end|>"
            "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>js"
            'on<|message|>{"city": "Paris"}<|call|>'
            '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"tem'
            'p": 20}<|end|>'
            "<|start|>assistant<|channel|>analysis<|message|>Report it.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>20 degrees.<|return|>"
        ),
        "tools_trained": (
            "<|channel|>analysis<|message|>Report it.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>20 degrees.<|return|>"
        ),
        "tools_prompt": (
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by Ope"
            "nAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\n"
            "Reasoning: medium\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for ever"
            "y message.<|end|>"
            "<|start|>user<|message|>Weather in Paris?<|end|>"
            "<|start|>assistant<|channel|>analysis<|message|>Ask the tool.<|end|>"
            "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>js"
            'on<|message|>{"city": "Paris"}<|call|>'
            '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"tem'
            'p": 20}<|end|>'
            "<|start|>assistant"
        ),
    },
    "hf_chat_template": {
        "chat_supervised": (
            "<|im_start|>system\nYou are terse.<|im_end|>"
            "\n<|im_start|>user\nWhat is 2+2?<|im_end|>"
            "\n<|im_start|>assistant\n4.<|im_end|>"
            "\n<|im_start|>user\nAnd 3+3?<|im_end|>"
            "\n<|im_start|>assistant\n6.<|im_end|>"
            "\n"
        ),
        "chat_trained": ("6.<|im_end|>\n"),
        "chat_prompt": (
            "<|im_start|>system\nYou are terse.<|im_end|>"
            "\n<|im_start|>user\nWhat is 2+2?<|im_end|>"
            "\n<|im_start|>assistant\n4.<|im_end|>"
            "\n<|im_start|>user\nAnd 3+3?<|im_end|>"
            "\n<|im_start|>assistant\n"
        ),
        "tools_supervised": (
            "<|im_start|>user\nWeather in Paris?<|im_end|>"
            "\n<|im_start|>assistant\n<|im_end|>"
            '\n<|im_start|>tool\n{"temp": 20}<|im_end|>'
            "\n<|im_start|>assistant\n20 degrees.<|im_end|>"
            "\n"
        ),
        "tools_trained": ("20 degrees.<|im_end|>\n"),
        "tools_prompt": (
            "<|im_start|>user\nWeather in Paris?<|im_end|>"
            "\n<|im_start|>assistant\n<|im_end|>"
            '\n<|im_start|>tool\n{"temp": 20}<|im_end|>'
            "\n<|im_start|>assistant\n"
        ),
    },
}
