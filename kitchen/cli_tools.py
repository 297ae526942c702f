"""`kitchen sample / chat / export / keys / cp`: using a run's checkpoints and exploring configs.

Kept apart from `kitchen.cli` (which only registers and dispatches these) so that file stays small.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from pathlib import Path
from typing import Any

from kitchen.errors import ConfigError


def add_commands(commands: Any) -> None:
    """Register the subcommands on `kitchen`'s subparsers."""

    def checkpoint_args(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("checkpoint", metavar="CHECKPOINT", help="a run directory, or a path from checkpoints.jsonl")
        sub.add_argument("--run", type=Path, metavar="RUN_DIR", help="the run that made CHECKPOINT (tinker:// paths)")
        sub.add_argument("--renderer", help="chat renderer (default: the run's)")

    def sampling_args(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--temperature", type=float, default=1.0)
        sub.add_argument("--max-tokens", type=int, default=256)
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


COMMANDS = frozenset({"sample", "chat", "export"})


def _target(args: argparse.Namespace) -> Any:
    from kitchen.inference import resolve_checkpoint

    return resolve_checkpoint(args.checkpoint, run_dir=args.run, renderer=args.renderer)


def _sample(args: argparse.Namespace) -> None:
    from kitchen.inference import open_session

    target = _target(args)

    async def go() -> str:
        async with open_session(target, args.temperature, args.max_tokens, args.seed) as session:
            return await session.reply(args.prompt)

    print(asyncio.run(go()))


def _chat(args: argparse.Namespace) -> None:
    from kitchen.inference import open_session

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
    from kitchen.inference import export_checkpoint

    info = export_checkpoint(_target(args), args.out, args.merge_lora)
    kind = {"full": "model", "merged": "merged LoRA model", "peft_adapter": "PEFT adapter"}.get(
        str(info.get("format")), "model"
    )
    print(f"exported {kind}: {args.out}")


def dispatch(args: argparse.Namespace) -> bool:
    """Run the command if it is one of these; False when it is not."""
    handlers = {"sample": _sample, "chat": _chat, "export": _export}
    handler = handlers.get(args.command)
    if handler is None:
        return False
    handler(args)
    return True


def copy_config(name: str, dest: Path) -> Path:
    """`kitchen cp`: copy a shipped config (by name) to `dest` (a file, or a folder to copy into)."""
    from kitchen.recipe import resolve_config_path

    source = resolve_config_path(name)
    target = dest / source.name if dest.is_dir() else dest
    if target.exists():
        raise ConfigError(f"{target} already exists; not overwriting it")
    shutil.copyfile(source, target)
    return target
