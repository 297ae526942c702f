"""`kitchen sample / chat / export / eval / keys / cp`: using a run's checkpoints and exploring configs.

Kept apart from `kitchen.apps.cli` (which only registers and dispatches these) so that file stays small.
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import shutil
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from kitchen.engine.config.sections import choices_of, model_of
from kitchen.engine.errors import ConfigError
from kitchen.engine.typecompat import type_name


def add_commands(commands: Any) -> None:
    """Register the subcommands on `kitchen`'s subparsers."""

    def checkpoint_args(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("checkpoint", metavar="CHECKPOINT", help="a run directory, or a path from checkpoints.jsonl")
        sub.add_argument("--run", type=Path, metavar="RUN_DIR", help="the run that made CHECKPOINT (tinker:// paths)")
        sub.add_argument("--renderer", help="chat renderer (default: the run's)")

    def sampling_args(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (0: greedy)")
        sub.add_argument("--max-tokens", type=int, default=256, help="most tokens of one reply")
        sub.add_argument("--seed", type=int, default=None, help="same seed, same reply")

    sample = commands.add_parser("sample", help="sample one reply from a checkpoint")
    checkpoint_args(sample)
    sampling_args(sample)
    sample.add_argument("--prompt", required=True, help="the user message")

    chat = commands.add_parser("chat", help="chat with a checkpoint (stdin lines; /exit or EOF ends)")
    checkpoint_args(chat)
    sampling_args(chat)

    export = commands.add_parser("export", help="write a checkpoint as a Hugging Face model directory")
    checkpoint_args(export)
    export.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory to write (new or empty)")
    export.add_argument("--merge-lora", action="store_true", help="LoRA runs: merged full weights, not an adapter")

    keys = commands.add_parser("keys", help="every config key of a recipe: type, default, description")
    keys.add_argument("recipe", help="a recipe name, or a path to a recipe file")

    serve = commands.add_parser("serve", help="serve a backend behind the Tinker API (for tinker SDK programs)")
    serve.add_argument("--backend", default="local", help="registered backend to serve (default local)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (non-loopback needs --api-keys)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on")
    serve.add_argument("--models", type=Path, metavar="FILE", help="YAML: model name -> local folder or 'tiny'")
    serve.add_argument("--api-keys", type=Path, metavar="FILE", help="one API key (tml-...) per line")
    serve.add_argument("--store", type=Path, default=Path("serve-store"), metavar="DIR", help="checkpoints and records")
    serve.add_argument("--full-finetune", action="store_true", help="train all weights, not the requested LoRA")
    serve.add_argument("--seed", type=int, default=0, help="seed of the served models' sampling and initial weights")
    serve.add_argument("--renderer", default=None, help="chat renderer of /v1/chat/completions (default: recommended)")
    serve.add_argument("--max-body-mb", type=int, default=256, help="largest request body accepted (MiB)")
    serve.add_argument(
        "--mcp-server",
        action="append",
        default=[],
        metavar="NAME=COMMAND|URL",
        help="an MCP server whose tools /v1/chat/completions runs (repeatable; a command is started by kitchen)",
    )
    serve.add_argument("--max-tool-rounds", type=int, default=8, help="MCP tool rounds per chat choice (default 8)")
    serve.add_argument(
        "--long-poll-s", type=float, default=20.0, help="how long a result fetch waits before asking again (s)"
    )
    serve.add_argument("overrides", nargs="*", metavar="key=value", help="backend settings, e.g. local.device=cuda")

    evaluate = commands.add_parser(
        "eval", help="evaluate a run, checkpoint or model on tasks (kitchen eval TARGET --tasks)"
    )
    evaluate.add_argument(
        "target", metavar="TARGET", help="a run directory, a checkpoint path, a model folder or (--base) name"
    )
    evaluate.add_argument(
        "--tasks", required=True, help="comma-separated: task names, NAME:DATA.jsonl, or a prompts JSONL"
    )
    evaluate.add_argument("--grader", help="grader of JSONL tasks: a named grader (math, exact) or module:function")
    evaluate.add_argument("--limit", type=int, help="items per task (default: all)")
    evaluate.add_argument("--samples", type=int, help="samples per item (pass@k and maj@k need more than one)")
    evaluate.add_argument("--seed", type=int, help="sampling seed (default 0): same seed, same samples")
    evaluate.add_argument("--temperature", type=float, help="sampling temperature (default: the run's, else 1.0)")
    evaluate.add_argument("--max-tokens", type=int, help="most tokens per reply (default: the run's, else 256)")
    evaluate.add_argument(
        "--thinking-budget",
        type=int,
        metavar="N",
        help="most thinking tokens per reply, part of --max-tokens: thinking still going is closed (default: none)",
    )
    evaluate.add_argument("--out", type=Path, metavar="DIR", help="results folder (default RUN_DIR/evals/<time>)")
    evaluate.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted evaluation in --out: items already graded there are not sampled again",
    )
    evaluate.add_argument(
        "--checkpoint",
        help="a run's checkpoint by name (default: its last, 'final' when finished), or 'best' (best_checkpoint)",
    )
    evaluate.add_argument("--run", type=Path, metavar="RUN_DIR", help="the run that made TARGET (tinker:// paths)")
    evaluate.add_argument("--renderer", help="chat renderer (default: the run's, or the model's recommended one)")
    evaluate.add_argument("--backend", help="backend to sample on (default: the run's, or local)")
    evaluate.add_argument("--base", action="store_true", help="TARGET is a base model name (tiny, a hub id)")
    evaluate.add_argument("--harness", choices=["lm-eval"], help="run the tasks through lm-evaluation-harness")
    evaluate.add_argument("overrides", nargs="*", metavar="TASK.key=value", help="task settings")

    docs = commands.add_parser(
        "docs", help="serve the docs site locally (mkdocs serve; needs a checkout and the dev extra)"
    )
    docs.add_argument("--addr", default="127.0.0.1:8000", metavar="HOST:PORT", help="where to serve the site")
    docs.add_argument("--build", type=Path, metavar="DIR", help="write the site to DIR (mkdocs build --strict) instead")

    cp = commands.add_parser("cp", help="copy a shipped config to edit (kitchen cp dpo my_dpo.yaml)")
    cp.add_argument("config", metavar="CONFIG", help="a shipped config name (see kitchen ls)")
    cp.add_argument("dest", type=Path, metavar="DEST", help="file to write, or a folder to copy into")


def _target(args: argparse.Namespace) -> Any:
    from kitchen.engine.runs.targets import resolve_checkpoint

    return resolve_checkpoint(args.checkpoint, run_dir=args.run, renderer=args.renderer)


def _sample(args: argparse.Namespace) -> None:
    from kitchen.apps.inference import open_session

    target = _target(args)

    async def go() -> str:
        async with open_session(target, args.temperature, args.max_tokens, args.seed) as session:
            return await session.reply(args.prompt)

    print(asyncio.run(go()))


def _chat(args: argparse.Namespace) -> None:
    from kitchen.apps.inference import open_session

    target = _target(args)
    interactive = sys.stdin.isatty()

    def read(prompt: str) -> str | None:
        try:
            return input(prompt)
        except EOFError:
            return None

    async def go() -> None:
        async with open_session(target, args.temperature, args.max_tokens, args.seed) as session:
            if interactive:
                print(f"chatting with {target.model_path} (renderer {target.renderer}); /exit or Ctrl-D ends")
            while True:
                line = await asyncio.to_thread(read, "you> " if interactive else "")
                if line is None or line.strip() == "/exit":
                    return
                if not line.strip():
                    continue
                print(f"assistant> {await session.reply(line)}", flush=True)

    asyncio.run(go())


def _export(args: argparse.Namespace) -> None:
    from kitchen.apps.inference import export_checkpoint

    info = export_checkpoint(_target(args), args.out, args.merge_lora, args.renderer)
    kind = {"full": "model", "merged": "merged LoRA model", "peft_adapter": "PEFT adapter"}.get(
        str(info.get("format")), "model"
    )
    print(f"exported {kind}: {args.out} (chat template: {info['chat_template']})")


def _keys(args: argparse.Namespace) -> None:
    from kitchen.engine.recipe import get_recipe

    print(format_keys(get_recipe(args.recipe).config_cls))


def _cp(args: argparse.Namespace) -> None:
    from kitchen.engine.recipe import recipe_names

    target = copy_config(args.config, args.dest)
    stem = Path(args.config).stem
    recipes = [name for name in recipe_names() if stem == name or stem.startswith(f"{name}_")]
    recipe = max(recipes, key=len) if recipes else "RECIPE"
    print(f"copied to {target}; edit it, then: kitchen run {recipe} --config {target}")


def _eval(args: argparse.Namespace) -> None:
    from kitchen.apps.eval.command import run_command

    run_command(args)


def _serve(args: argparse.Namespace) -> None:
    from kitchen.apps.serve.server import ServeSettings, serve
    from kitchen.apps.serve.server_tools import parse_targets

    serve(
        ServeSettings(
            backend=args.backend,
            host=args.host,
            port=args.port,
            models=args.models,
            api_keys=args.api_keys,
            store=args.store,
            full_finetune=args.full_finetune,
            seed=args.seed,
            max_body_mb=args.max_body_mb,
            long_poll_s=args.long_poll_s,
            renderer=args.renderer,
            overrides=list(args.overrides),
            mcp_servers=parse_targets(args.mcp_server),
            max_tool_rounds=args.max_tool_rounds,
        )
    )


def _docs(args: argparse.Namespace) -> None:
    """`mkdocs serve` (or `build --strict`) on the checkout's mkdocs.yml, with this interpreter."""
    import importlib.util
    import subprocess

    config = Path(__file__).resolve().parents[2] / "mkdocs.yml"
    if not config.is_file():
        raise ConfigError(f"the docs site's sources are not here ({config} is missing): run kitchen docs in a checkout")
    if importlib.util.find_spec("mkdocs") is None:
        raise ConfigError("kitchen docs needs mkdocs: pip install -e '.[dev]'")
    command = (
        ["build", "--strict", "--site-dir", str(args.build.resolve())]
        if args.build
        else ["serve", "--dev-addr", args.addr]
    )
    # from the checkout's root: the pages include files (examples, CHANGELOG.md) by paths relative to it
    mkdocs = [sys.executable, "-m", "mkdocs", *command, "--config-file", str(config)]
    if subprocess.run(mkdocs, cwd=config.parent, check=False).returncode:
        raise ConfigError(f"mkdocs {command[0]} failed (its messages are above)")
    if args.build:
        print(f"docs site written: {args.build}")


def dispatch(args: argparse.Namespace) -> bool:
    """Run the command if it is one of these; False when it is not."""
    handlers = {
        "sample": _sample,
        "chat": _chat,
        "export": _export,
        "keys": _keys,
        "cp": _cp,
        "serve": _serve,
        "eval": _eval,
        "docs": _docs,
    }
    handler = handlers.get(args.command)
    if handler is None:
        return False
    handler(args)
    return True


def copy_config(name: str, dest: Path) -> Path:
    """`kitchen cp`: copy a shipped config (by name) to `dest` (a file, or a folder to copy into)."""
    from kitchen.engine.recipe import resolve_config_path

    source = resolve_config_path(name)
    target = dest / source.name if dest.is_dir() else dest
    if target.exists():
        raise ConfigError(f"{target} already exists; not overwriting it")
    shutil.copyfile(source, target)
    return target


def config_keys(
    model: type[BaseModel], prefix: str = "", values: BaseModel | None = None, member: str = ""
) -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, description) for every key of `model`, sections expanded with
    their defaults as `values` (the recipe's, where it sets them) holds them; a choice of sections
    (`env`) lists each member's keys, marked with the member's name."""
    rows: list[tuple[str, str, str, str]] = []
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        description = (info.description or "") + member
        if values is not None:
            value: Any = getattr(values, name)
        elif info.is_required():
            value = PydanticUndefined
        else:
            value = info.get_default(call_default_factory=True)
        choices = choices_of(info)
        if choices is not None:
            tag, members = choices
            chosen = getattr(value, tag, None)
            rows.append((key, "choice of " + " | ".join(members), repr(chosen) if chosen else "required", description))
            for tag_value, section in members.items():
                current = value if isinstance(value, section) else None
                keys = config_keys(section, f"{key}.", current, f" ({tag_value})")
                rows.extend(row for row in keys if row[0] != f"{key}.{tag}")
            continue
        section_model = model_of(info.annotation)
        if section_model is not None and (isinstance(value, BaseModel) or value is None or value is PydanticUndefined):
            kind = "optional section" if value is None else "section"
            rows.append((key, kind, "None" if value is None else "", description))
            rows.extend(config_keys(section_model, f"{key}.", value if isinstance(value, BaseModel) else None, member))
            continue
        if value is PydanticUndefined:
            default = "required"
        else:
            default = repr(value.value if isinstance(value, enum.Enum) else value)
        rows.append((key, type_name(info.annotation), default, description))
    return rows


def format_keys(model: type[BaseModel]) -> str:
    rows = config_keys(model)
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    widths = [min(width, cap) for width, cap in zip(widths, (34, 40, 24), strict=True)]
    header = ("KEY", "TYPE", "DEFAULT", "DESCRIPTION")
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)]
        lines.append("  ".join([*cells, row[3]]).rstrip())
    return "\n".join(lines)
