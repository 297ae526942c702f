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

import yaml
from pydantic import ValidationError

from kitchen.backends import get_backend_spec, make_backend
from kitchen.checkpoints import CheckpointRecord, read_records
from kitchen.config import RunConfig
from kitchen.errors import ConfigError
from kitchen.ports import SamplingClient, ServiceBackend, Tokenizer
from kitchen.renderers import get_renderer
from kitchen.yaml_bounded import load_yaml
from train_core.renderers.base import Message, Renderer
from train_core.renderers.exported_templates import exported_chat_template
from train_core.renderers.registry import FALLBACK_RENDERER, recommended_renderer
from train_core.types import SamplingParams

CONFIG_FILE = "config.yaml"
CHECKPOINTS_FILE = "checkpoints.jsonl"
BEST = "best"
"""`--checkpoint best`: the run's best checkpoint (`kitchen.best_checkpoint`)."""
EXPORT_INFO = "kitchen_export.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"


@dataclass(frozen=True)
class CheckpointTarget:
    """A checkpoint resolved to the weights to load and the run that made them."""

    model_path: str | None
    """None: the base model `config.model_name` itself."""
    run_dir: Path | None
    """None for a bare model (no run made it)."""
    config: RunConfig
    """The run's shared keys and backend sections (recipe-specific keys are left out)."""
    renderer: str
    record: CheckpointRecord | None = None
    raw_config: dict[str, Any] = field(default_factory=dict)

    @property
    def trained_renderer(self) -> str | None:
        """The chat renderer the run trained with; None for a recipe without one (plain text)."""
        if "renderer" not in self.raw_config:
            return None
        return str(self.raw_config["renderer"] or recommended_renderer(self.config.model_name))


def _has_scheme(text: str) -> bool:
    return "://" in text


def find_run_dir(path: Path) -> Path | None:
    """The nearest directory at or above `path` holding a run's config.yaml."""
    for candidate in (path, *path.parents):
        if (candidate / CONFIG_FILE).is_file():
            return candidate
    return None


def _read_run_config(run_dir: Path) -> dict[str, Any]:
    file = run_dir / CONFIG_FILE
    if not file.is_file():
        raise ConfigError(f"{run_dir}: no {CONFIG_FILE} (not a kitchen run directory)")
    try:
        raw = load_yaml(file.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{file}: cannot read it ({exc})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: the top level must be a mapping")
    return raw


def _shared_config(raw: Mapping[str, Any], where: Path, overrides: Mapping[str, Any]) -> RunConfig:
    shared = {key: value for key, value in raw.items() if key in RunConfig.model_fields}
    shared.update({key: value for key, value in overrides.items() if value is not None})
    try:
        return RunConfig.model_validate(shared)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{where / CONFIG_FILE}: {problems}") from None


def _pick_record(run_dir: Path, name: str | None) -> CheckpointRecord:
    """The checkpoint named `name` (`best`: the run's best, `kitchen.best_checkpoint`), or the
    last one (a finished run's `final`)."""
    records = [r for r in read_records(run_dir / CHECKPOINTS_FILE) if r.sampler_path or r.state_path]
    if not records:
        raise ConfigError(f"{run_dir}: no checkpoint recorded in {CHECKPOINTS_FILE} yet")
    if name is None:
        return records[-1]
    if name == BEST:
        from kitchen.best_checkpoint import best_name

        name = best_name(run_dir)
    named = [r for r in records if r.name == name]
    if not named:
        names = ", ".join(dict.fromkeys(r.name for r in records))
        raise ConfigError(f"{run_dir}: no checkpoint named {name!r} (recorded: {names})")
    return named[-1]


def resolve_checkpoint(
    target: str,
    run_dir: Path | None = None,
    renderer: str | None = None,
    backend: str | None = None,
    checkpoint: str | None = None,
) -> CheckpointTarget:
    """`target` is a run directory (its checkpoint named `checkpoint`, default the last) or a
    checkpoint path; `run_dir` names the run when the path does not sit inside one (a `tinker://`
    path, a copied checkpoint directory)."""
    record = None
    if not _has_scheme(target) and (Path(target) / CHECKPOINTS_FILE).is_file():
        run_dir = Path(target)
        record = _pick_record(run_dir, checkpoint)
        model_path = record.sampler_path or record.state_path
        assert model_path is not None
    else:
        model_path = target
        if not _has_scheme(target):
            path = Path(target)
            if not path.exists():
                raise ConfigError(f"checkpoint not found: {target} (give a run directory or a checkpoint path)")
            model_path = str(path.resolve())
            run_dir = run_dir or find_run_dir(path.resolve())
        if run_dir is None:
            raise ConfigError(
                f"cannot tell which run made {target}: pass --run RUN_DIR (the run directory holding {CONFIG_FILE})"
            )
        for item in read_records(run_dir / CHECKPOINTS_FILE):
            if model_path in (item.sampler_path, item.state_path):
                record = item
    raw = _read_run_config(run_dir)
    config = _shared_config(raw, run_dir, {"backend": backend})
    name = renderer or raw.get("renderer") or recommended_renderer(config.model_name)
    return CheckpointTarget(model_path, run_dir, config, str(name), record, raw)


def resolve_base_model(
    model_name: str, renderer: str | None = None, backend: str | None = None, recommend_for: str | None = None
) -> CheckpointTarget:
    """A bare model as a target: the embedded `tiny`, a Hugging Face model folder or a hub id, on
    `backend` (default local). The renderer defaults to the one recommended for `recommend_for`
    (e.g. the base model an exported folder came from), else for `model_name`."""
    config = _shared_config({}, Path(model_name), {"backend": backend, "model_name": model_name})
    name = renderer or recommended_renderer(recommend_for or model_name)
    return CheckpointTarget(None, None, config, name)


def open_backend(target: CheckpointTarget) -> ServiceBackend:
    """The target's backend; checkpoints it would save go to its run (a bare model's backend
    saves none)."""
    where = target.run_dir if target.run_dir is not None else Path(target.config.model_name)
    return make_backend(target.config, where / "checkpoints")


async def open_sampling_client(backend: ServiceBackend, target: CheckpointTarget) -> SamplingClient:
    if target.model_path is None:
        return await backend.create_sampling_client(base_model=target.config.model_name)
    return await backend.create_sampling_client(model_path=target.model_path)


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
    score_tokens = target.raw_config.get("score_tokens")  # a reward model (the rm recipe)
    if score_tokens is not None and target.config.lora_rank is not None and not merge_lora:
        raise ConfigError("a LoRA reward model exports as merged weights with its head: add --merge-lora")
    info = dict(spec.export_hf(target.model_path, out_dir, merge_lora, getattr(target.config, spec.name)))
    if score_tokens is not None:
        from kitchen.preference.reward_export import export_sequence_classifier

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
