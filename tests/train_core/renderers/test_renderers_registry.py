"""The renderer registry, model-family recommendations, and the errors bad input gets."""

from __future__ import annotations

import pytest
from renderer_cases import decode_text
from renderer_goldens import CHAT, GOLDENS, TOOLS
from transformers import PreTrainedTokenizerBase

from train_core.renderers import (
    Message,
    RendererError,
    ToolCall,
    TrainOnWhat,
    UnknownRendererError,
    as_train_on_what,
    get_renderer,
    recommended_renderer,
    register_renderer,
    registry,
    renderer_names,
)
from train_core.renderers.deepseek_v3 import DeepSeekV3Renderer
from train_core.renderers.messages import STANDARD_ROLES
from train_core.renderers.registry import renderer_roles
from train_core.renderers.role_colon import RoleColonRenderer
from train_core.renderers.tokenizer import TokenCodec

COOKBOOK_RENDERERS = {
    # Every name tinker-cookbook 0.6.1's get_renderer knows.
    *("role_colon", "llama3", "qwen3", "qwen3_vl", "qwen3_vl_instruct", "qwen3_disable_thinking", "qwen3_instruct"),
    *("qwen3_5", "qwen3_5_disable_thinking", "qwen3_5_preserve_thinking"),
    *("qwen3_8_xhigh_reasoning", "qwen3_8_medium_reasoning", "qwen3_8_low_reasoning", "qwen3_8_disable_thinking"),
    *("deepseekv3", "deepseekv3_disable_thinking", "deepseekv3_thinking"),
    *("deepseekv4_1", "deepseekv4_1_low_reasoning", "deepseekv4_1_max_reasoning"),
    *("deepseekv4_1_disable_thinking", "deepseekv4_1_preserve_thinking"),
    *("glm5_3_max_reasoning", "glm5_3_low_reasoning", "glm5_3_high_reasoning"),
    *("kimi_k2", "kimi_k25", "kimi_k25_disable_thinking", "kimi_k26", "kimi_k26_disable_thinking"),
    "kimi_k26_preserve_thinking",
    *("kimi_k31_pro_max_reasoning", "kimi_k31_pro_high_reasoning", "kimi_k31_pro_low_reasoning"),
    *("kimi_k31_pro_disable_thinking", "kimi_k31_pro_no_reasoning_effort"),
    *("nemotron3", "nemotron3_low_thinking", "nemotron3_disable_thinking", "nemotron3_preserve_thinking"),
    *("nemotron3_ultra", "nemotron3_ultra_disable_thinking", "nemotron3_ultra_medium_thinking"),
    "nemotron3_ultra_preserve_thinking",
    *("gpt_oss_no_sysprompt", "gpt_oss_low_reasoning", "gpt_oss_medium_reasoning", "gpt_oss_high_reasoning"),
    "tml_v0",
}
NOT_BUILT = {
    # The reference renders these through tml-renderers >= 0.4.1's KimiK31Pro, which is not
    # published (PyPI has 0.2.1, without it), and Kimi K3.1-Pro's own template is not published
    # either: the format cannot be read anywhere. (tml_v0's is in the published 0.2.1.)
    **{
        name: "Kimi K3.1-Pro's format is only in tml-renderers >= 0.4.1, which is not published"
        for name in COOKBOOK_RENDERERS
        if name.startswith("kimi_k31_pro")
    },
}
ISSUE_RENDERERS = (COOKBOOK_RENDERERS - set(NOT_BUILT)) | {"hf_chat_template"}


def test_every_renderer_of_the_issue_is_registered(tokenizer: PreTrainedTokenizerBase) -> None:
    assert set(renderer_names()) == ISSUE_RENDERERS
    for name in renderer_names():
        model_input, weights = get_renderer(name, tokenizer).build_supervised_example(
            [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
        )
        assert model_input.length == len(weights) and sum(weights) > 0, name


def test_an_unknown_name_lists_the_valid_ones(tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(UnknownRendererError) as caught:
        get_renderer("qwen4", tokenizer)
    assert isinstance(caught.value, ValueError)
    assert "'qwen4'" in str(caught.value)
    assert all(name in str(caught.value) for name in ISSUE_RENDERERS)


def test_user_renderers_register_and_replace_only_on_request(
    tokenizer: PreTrainedTokenizerBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))
    register_renderer("mine", RoleColonRenderer)
    assert isinstance(get_renderer("mine", tokenizer), RoleColonRenderer)
    with pytest.raises(RendererError, match="already registered"):
        register_renderer("mine", DeepSeekV3Renderer)
    register_renderer("mine", DeepSeekV3Renderer, replace=True)
    assert isinstance(get_renderer("mine", tokenizer), DeepSeekV3Renderer)


def test_a_function_factory_declares_the_roles_its_renderers_accept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Data is checked against the roles before any tokenizer exists: a class says them itself, a
    plain function factory declares them (or gets the standard roles)."""
    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))
    monkeypatch.setattr(registry, "_DECLARED_ROLES", {})
    register_renderer("plain", lambda tokenizer: RoleColonRenderer(tokenizer))
    assert renderer_roles("plain") == STANDARD_ROLES
    with_critic = STANDARD_ROLES | {"critic"}
    register_renderer("plain", lambda tokenizer: RoleColonRenderer(tokenizer), roles=with_critic, replace=True)
    assert renderer_roles("plain") == with_critic
    register_renderer("plain", RoleColonRenderer, replace=True)  # re-registered without: the class's own again
    assert renderer_roles("plain") == RoleColonRenderer.roles


@pytest.mark.parametrize(
    ("model_name", "renderer"),
    [
        ("tiny", "role_colon"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3"),
        ("meta-llama/Llama-3.2-1B", "llama3"),
        ("Qwen/Qwen3-8B", "qwen3"),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3_instruct"),
        ("Qwen/Qwen3.5-4B", "qwen3_5"),
        ("Qwen/Qwen3.6-35B-A3B", "qwen3_5"),
        ("Qwen/Qwen3.8-27B", "qwen3_8_xhigh_reasoning"),
        ("deepseek-ai/DeepSeek-V3.1", "deepseekv3"),
        ("deepseek-ai/DeepSeek-V4.1-Flash", "deepseekv4_1"),
        ("zai-org/GLM-5.3", "glm5_3_max_reasoning"),
        ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16", "nemotron3"),
        ("thinkingmachines/Inkling-Small", "tml_v0"),
        ("nvidia/NVIDIA-Nemotron-3-Ultra-500B", "nemotron3_ultra"),
        ("nvidia/Nemotron-3.5-Super", "nemotron3_ultra"),
        ("moonshotai/Kimi-K2-Thinking", "kimi_k2"),
        ("moonshotai/Kimi-K2.5", "kimi_k25"),
        ("moonshotai/Kimi-K2.6", "kimi_k26"),
        ("openai/gpt-oss-20b", "gpt_oss_medium_reasoning"),
        ("/models/checkpoints/gpt-oss-120b", "gpt_oss_medium_reasoning"),
        ("mistralai/Mistral-7B-Instruct-v0.3", "hf_chat_template"),
    ],
)
def test_recommended_renderer(model_name: str, renderer: str) -> None:
    assert recommended_renderer(model_name) == renderer
    assert renderer in renderer_names()


def test_train_on_what_reads_config_spellings() -> None:
    assert as_train_on_what("all_assistant_messages") is TrainOnWhat.ALL_ASSISTANT_MESSAGES
    assert as_train_on_what(TrainOnWhat.CUSTOMIZED) is TrainOnWhat.CUSTOMIZED
    assert {t.value for t in TrainOnWhat} == {
        "last_assistant_message",
        "last_assistant_turn",
        "all_assistant_messages",
        "all_messages",
        "all_tokens",
        "all_user_and_system_messages",
        "customized",
    }
    with pytest.raises(RendererError, match=r"'everything'.*all_tokens"):
        as_train_on_what("everything")


def test_customized_needs_a_trainable_flag_on_every_message(tokenizer: PreTrainedTokenizerBase) -> None:
    messages = [Message(role="user", content="a", trainable=False), Message(role="assistant", content="b")]
    with pytest.raises(RendererError, match="message 1"):
        get_renderer("qwen3", tokenizer).build_supervised_example(messages, "customized")


def test_formats_reject_what_they_cannot_express(tokenizer: PreTrainedTokenizerBase) -> None:
    call = ToolCall(name="f", arguments={})
    two_calls = Message(role="assistant", content="", tool_calls=[call, call])
    cases: list[tuple[str, list[Message], str]] = [
        ("role_colon", [Message(role="assistant", content="", tool_calls=[call])], "role_colon cannot render"),
        ("llama3", [Message(role="assistant", content="x", thinking="t")], "llama3 cannot render 'thinking'"),
        ("llama3", [two_calls], "one tool call"),
        ("gpt_oss_no_sysprompt", [two_calls], "one tool call"),
        ("gpt_oss_no_sysprompt", [Message(role="user", content="q"), Message(role="tool", content="r")], "tool name"),
        ("deepseekv3", [*CHAT[1:3], Message(role="system", content="late")], "message 2 is a later system"),
    ]
    for name, messages, error in cases:
        with pytest.raises(RendererError, match=error):
            get_renderer(name, tokenizer).build_supervised_example(messages)


def test_deepseek_maps_a_later_system_message_to_a_user_message(tokenizer: PreTrainedTokenizerBase) -> None:
    renderer = DeepSeekV3Renderer(tokenizer, thinking=True, system_role_as_user=True)
    model_input, _ = renderer.build_supervised_example([*CHAT[1:3], Message(role="system", content="late")])
    assert decode_text(tokenizer, model_input.to_ints()).endswith("<｜end▁of▁sentence｜><｜User｜>late")


def test_a_special_token_missing_from_the_tokenizer_fails_loudly(tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(RendererError, match="not a single token"):
        TokenCodec(tokenizer).special_id("<|not_a_token|>")


def test_deepseekv3_means_thinking_off_as_in_the_reference(tokenizer: PreTrainedTokenizerBase) -> None:
    """A config written for tinker-cookbook gets the same renderer: `deepseekv3` and its alias
    `deepseekv3_disable_thinking` open the reply with `</think>`; `deepseekv3_thinking` with `<think>`."""
    history = [Message(role="user", content="Hi")]

    def prompt(name: str) -> str:
        return decode_text(tokenizer, get_renderer(name, tokenizer).build_generation_prompt(history).to_ints())

    assert prompt("deepseekv3").endswith("<｜Assistant｜></think>")
    assert prompt("deepseekv3_disable_thinking") == prompt("deepseekv3")
    assert prompt("deepseekv3_thinking").endswith("<｜Assistant｜><think>")


THINKING_DISABLED = ["qwen3_disable_thinking", "qwen3_instruct", "deepseekv3", "deepseekv3_disable_thinking"]


@pytest.mark.parametrize("name", THINKING_DISABLED)
def test_thinking_disabled_renderers_drop_thinking_from_history_as_the_templates_do(
    name: str, tokenizer: PreTrainedTokenizerBase
) -> None:
    """CHAT[2] reasoned; the prompt for the next reply is the one of the conversation without it."""
    renderer = get_renderer(name, tokenizer)
    without = [Message(role=m["role"], content=m["content"]) for m in CHAT]
    assert renderer.build_generation_prompt(CHAT[:4]) == renderer.build_generation_prompt(without[:4])
    history_only = [*CHAT[:4], without[4]]
    assert renderer.build_supervised_example(history_only) == renderer.build_supervised_example(without)


@pytest.mark.parametrize(
    ("name", "error"), [("qwen3_disable_thinking", True), ("qwen3_instruct", False), ("deepseekv3", False)]
)
def test_thinking_on_the_trained_reply_is_an_error_only_where_the_template_writes_it(
    name: str, error: bool, tokenizer: PreTrainedTokenizerBase
) -> None:
    """Qwen3's template writes the last reply's reasoning even with `enable_thinking=False`, after a
    prompt that closed the think block: training on that is refused. Qwen3-2507 Instruct's and
    DeepSeek V3.1's non-thinking templates never write reasoning, so it is dropped, as they do."""
    renderer = get_renderer(name, tokenizer)
    if error:
        with pytest.raises(RendererError, match=rf"{name} cannot render 'thinking' \(message 4, .*use 'qwen3'"):
            renderer.build_supervised_example(CHAT)
    else:
        without = [Message(role=m["role"], content=m["content"]) for m in CHAT]
        assert renderer.build_supervised_example(CHAT) == renderer.build_supervised_example(without)


def test_qwen3_disable_thinking_writes_a_tool_steps_thinking_as_the_template_does(
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    """An assistant message after the last user message that is not the reply keeps its
    reasoning in Qwen3's template whatever `enable_thinking` says."""
    prompt = get_renderer("qwen3_disable_thinking", tokenizer).build_generation_prompt(TOOLS[:3])
    assert decode_text(tokenizer, prompt.to_ints()) == GOLDENS["qwen3"]["tools_prompt"] + "<think>\n\n</think>\n\n"


def test_qwen3_disable_thinking_strips_the_replys_leading_newlines(tokenizer: PreTrainedTokenizerBase) -> None:
    """As Qwen3's template does (`content.lstrip('\\n')` after the think block); inner and trailing
    whitespace stays."""
    renderer = get_renderer("qwen3_disable_thinking", tokenizer)
    messages = [Message(role="user", content="Hi"), Message(role="assistant", content="\n  Hello  \n")]
    model_input, weights = renderer.build_supervised_example(messages)
    tokens = model_input.to_ints()
    expected_tail = "<|im_start|>assistant\n<think>\n\n</think>\n\n  Hello  \n<|im_end|>"
    assert decode_text(tokenizer, tokens).endswith(expected_tail)
    trained = [t for t, w in zip(tokens, weights, strict=True) if w]
    assert decode_text(tokenizer, trained) == "  Hello  \n<|im_end|>"
