"""Using a trained checkpoint: sample a reply, chat, export it as a Hugging Face model.

A checkpoint is named by its run directory (its last checkpoint's sampler weights) or by a path
from the run's `checkpoints.jsonl` (a local directory, `tinker://...`, `noop://...`). The run's
`config.yaml` says which backend, model and renderer to use. Everything goes through the ports and
the backend registry: the engine names no backend.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kitchen.engine.backends import get_backend_spec
from kitchen.engine.errors import ConfigError
from kitchen.engine.ports import SamplingClient, Tokenizer
from kitchen.engine.renderers import get_renderer
from kitchen.engine.runs.targets import EXPORT_INFO, CheckpointTarget, open_backend, open_sampling_client
from train_core.renderers.base import Message, Renderer
from train_core.renderers.exported_templates import exported_chat_template
from train_core.renderers.registry import FALLBACK_RENDERER
from train_core.types import SamplingParams

CHAT_TEMPLATE_FILE = "chat_template.jinja"


@dataclass
class ChatSession:
    """A conversation with a checkpoint: the run's renderer over the backend's sampling client."""

    client: SamplingClient
    renderer: Renderer
    tokenizer: Tokenizer
    temperature: float = 1.0
    max_tokens: int = 256
    seed: int | None = None
    messages: list[Message] = field(default_factory=list)
    turns: int = 0

    def params(self) -> SamplingParams:
        # Each turn gets its own seed, derived from --seed, so a seeded chat replays exactly.
        seed = None if self.seed is None else self.seed + self.turns
        return SamplingParams(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=seed,
            stop=self.renderer.get_stop_sequences(),
        )

    async def reply(self, text: str, on_text: Callable[[str], None] | None = None) -> str:
        """Add the user's `text`, sample the assistant's reply, keep both in the history.

        `on_text` gets the reply text; the sampling port returns whole sequences, so it is called
        once per turn (no token streaming)."""
        self.messages.append({"role": "user", "content": text})
        prompt = self.renderer.build_generation_prompt(self.messages)
        result = await self.client.sample(prompt, 1, self.params())
        message, _ok = self.renderer.parse_response(result.sequences[0].tokens)
        content = message.get("content", "")
        reply = content if isinstance(content, str) else str(content)
        self.messages.append({"role": "assistant", "content": reply})
        self.turns += 1
        if on_text is not None:
            on_text(reply)
        return reply


@contextlib.asynccontextmanager
async def open_session(
    target: CheckpointTarget, temperature: float, max_tokens: int, seed: int | None
) -> AsyncIterator[ChatSession]:
    backend = open_backend(target)
    try:
        client = await open_sampling_client(backend, target)
        tokenizer = backend.get_tokenizer(target.config.model_name)
        try:
            renderer = get_renderer(target.renderer, tokenizer)
        except ValueError as exc:
            raise ConfigError(f"renderer: {exc}") from None
        yield ChatSession(client, renderer, tokenizer, temperature, max_tokens, seed)
    finally:
        await backend.close()


def export_checkpoint(
    target: CheckpointTarget, out_dir: Path, merge_lora: bool, renderer: str | None = None
) -> Mapping[str, Any]:
    """Write the checkpoint as a Hugging Face model directory through its backend's export hook,
    with the chat template of the renderer the run trained with (or `renderer`); what was written
    goes to `kitchen_export.json`."""
    spec = get_backend_spec(target.config.backend)
    if spec.export_hf is None:
        hint = f": {spec.export_hint}" if spec.export_hint else ""
        raise ConfigError(f"backend {spec.name!r} cannot export checkpoints{hint}")
    if target.model_path is None:
        raise ConfigError(f"{target.config.model_name} is a base model, not a checkpoint: nothing to export")
    score_tokens = target.saved("reward_model.score_tokens", "score_tokens")  # a reward model (rm)
    if score_tokens is not None and target.config.lora_rank is not None and not merge_lora:
        raise ConfigError("a LoRA reward model exports as merged weights with its head: add --merge-lora")
    info = dict(spec.export_hf(target.model_path, out_dir, merge_lora, getattr(target.config, spec.name)))
    if score_tokens is not None:
        from kitchen.families.preference.reward_export import export_sequence_classifier

        info |= export_sequence_classifier(out_dir, tuple(score_tokens))
    chosen = renderer or target.trained_renderer
    info["renderer"] = chosen
    info["chat_template"] = set_export_chat_template(out_dir, chosen)
    (out_dir / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


def set_export_chat_template(out_dir: Path, renderer: str | None) -> str:
    """Make the exported tokenizer's chat template the renderer's (`exported_chat_template`), as
    transformers stores one (`chat_template.jinja`); with no such template, remove the tokenizer's
    own rather than ship a format the model never saw. Says which it did."""
    if renderer == FALLBACK_RENDERER:
        return "the tokenizer's own (the run rendered with it)"
    template = exported_chat_template(renderer) if renderer else None
    (out_dir / CHAT_TEMPLATE_FILE).unlink(missing_ok=True)
    config_file = out_dir / "tokenizer_config.json"
    if config_file.is_file():
        config = json.loads(config_file.read_text(encoding="utf-8"))
        if config.pop("chat_template", None) is not None:
            config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if template is not None:
        (out_dir / CHAT_TEMPLATE_FILE).write_text(template, encoding="utf-8")
        return f"renderer {renderer!r}"
    if renderer is None:
        return "none: the run trained on plain text, without a chat renderer"
    return f"none: renderer {renderer!r} has no exported template; render prompts with it (kitchen sample/chat)"
