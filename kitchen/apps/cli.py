"""The `kitchen` command: run / ls / show / validate / report / runs.

Bad input (config, data, wiring) prints one line on stderr and exits 2; a runtime failure (a
`RuntimeFailure`: a lost node, a dead worker) prints one line and exits 1; `--debug` shows the
traceback instead.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
import warnings
from pathlib import Path

from kitchen.apps.cli_tools import add_commands as add_tool_commands
from kitchen.apps.cli_tools import dispatch as dispatch_tool_command
from kitchen.apps.cli_tools import format_keys
from kitchen.engine.config.loading import load_config
from kitchen.engine.config.renames import ConfigKeyRenamed
from kitchen.engine.config.run import RunConfig
from kitchen.engine.errors import RuntimeFailure
from kitchen.engine.recipe import Recipe, get_recipe, recipe_names, resolve_config_path, shipped_configs
from kitchen.engine.runner import StageFailure, is_environment_error
from kitchen.engine.secrets import install_logging_filter, redact
from kitchen.engine.workflow import render_tree
from train_core.errors import InvalidInputError

RESUME_HINT = "kitchen: rerun the same command to resume from the last checkpoint"
"""After a `RuntimeFailure` (exit 1): the input was fine, the run directory holds its checkpoints."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kitchen", description="LLM post-training as stage pipelines")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = parser.add_subparsers(dest="command", required=True)

    def with_config(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("recipe", help="a recipe name (kitchen ls), or a Python file that defines RECIPE")
        sub.add_argument("--config", help="YAML config file, or a shipped config by name (e.g. dpo)")
        sub.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (dotted keys)")

    with_config(commands.add_parser("run", help="run a recipe"))
    commands.add_parser("ls", help="list recipes and their shipped configs")
    show = commands.add_parser("show", help="print a recipe's workflow tree")
    with_config(show)
    show.add_argument("--keys", action="store_true", help="list the recipe's config keys instead")
    with_config(commands.add_parser("validate", help="check config and workflow wiring; calls no backend"))
    report = commands.add_parser("report", help="write a self-contained HTML report of a run directory")
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory (log_path)")
    report.add_argument("--out", type=Path, help="HTML file to write (default RUN_DIR/report.html)")
    runs = commands.add_parser("runs", help="list the runs under a folder, newest first")
    runs.add_argument("folder", type=Path, nargs="?", default=Path("runs"), metavar="DIR", help="default: runs/")
    add_tool_commands(commands)
    return parser


def _config(recipe: Recipe, args: argparse.Namespace) -> object:
    config_file = None if args.config is None else resolve_config_path(args.config)
    return load_config(recipe.config_cls, config_file, args.overrides)


def _ls() -> None:
    for name in recipe_names():
        recipe = get_recipe(name)
        print(f"{name:<20} {recipe.description}")
        for path in shipped_configs(name):
            print(f"{'':<20}   {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")


def _validate(recipe: Recipe, args: argparse.Namespace) -> None:
    from kitchen.engine.launch import preflight

    config = _config(recipe, args)
    workflow, _ = preflight(recipe, config)  # type: ignore[arg-type]
    stages = sum(1 for _ in workflow.stages())
    print(f"ok: {recipe.name} config is valid and workflow {workflow.name!r} ({stages} stages) is wired correctly")


def _report(args: argparse.Namespace) -> None:
    from kitchen.apps.report.build import write_report

    path = write_report(args.run_dir, args.out, time.time())
    print(f"report written: {path}")


def _runs(args: argparse.Namespace) -> None:
    from kitchen.apps.report.runs import format_runs, list_runs

    listing = list_runs(args.folder, time.time())
    for warning in listing.skipped:
        print(f"warning: {warning}", file=sys.stderr)
    print(format_runs(listing.lines) if listing.lines else f"no runs under {args.folder}")


def _dispatch(args: argparse.Namespace) -> None:
    if args.command == "ls":
        _ls()
        return
    if args.command == "report":
        _report(args)
        return
    if args.command == "runs":
        _runs(args)
        return
    if dispatch_tool_command(args):
        return
    recipe = get_recipe(args.recipe)
    if args.command == "show" and args.keys:
        print(format_keys(recipe.config_cls))
    elif args.command == "show":
        config = _config(recipe, args)
        print(render_tree(recipe.workflow(config)))
        summary = config.resolved_summary() if isinstance(config, RunConfig) else []
        if summary:
            print("\n".join(["", *summary]))
    elif args.command == "validate":
        _validate(recipe, args)
    else:
        from kitchen.engine.launch import run_recipe

        run_dir = run_recipe(recipe, _config(recipe, args))  # type: ignore[arg-type]
        if run_dir.already_complete:
            print(run_dir.already_complete)
        else:
            print(f"run finished: {run_dir.path}")


def _error(message: object) -> None:
    """The one error line: secrets redacted, on one line."""
    text = " ".join(redact(str(message)).split("\n"))
    print(f"kitchen: error: {text}", file=sys.stderr)


def _show_warning(message: Warning | str, category: type[Warning], *args: object, **kwargs: object) -> None:
    """A renamed config key is one line on stderr (other warnings as Python shows them)."""
    if issubclass(category, ConfigKeyRenamed):
        print(f"kitchen: warning: {message}", file=sys.stderr)
    else:
        _python_show_warning(message, category, *args, **kwargs)  # type: ignore[arg-type]


_python_show_warning = warnings.showwarning


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # accepted anywhere on the line
    args, extra = parser.parse_known_args([arg for arg in argv if arg != "--debug"])
    args.debug = args.debug or debug
    # `key=value` overrides may also follow `--config FILE`; anything else unknown is an error.
    stray = [arg for arg in extra if arg.startswith("-") or "=" not in arg or not hasattr(args, "overrides")]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    install_logging_filter()
    warnings.showwarning = _show_warning
    try:
        _dispatch(args)
    except InvalidInputError as exc:
        if args.debug:
            raise
        _error(exc)
        if isinstance(exc, RuntimeFailure):
            print(RESUME_HINT, file=sys.stderr)
            return 1
        return 2
    except StageFailure as exc:
        if args.debug:
            traceback.print_exception(exc.cause)
        _error(exc)
        if isinstance(exc.cause, RuntimeFailure):
            print(RESUME_HINT, file=sys.stderr)
        elif not args.debug and not exc.is_user_error:
            print("kitchen: rerun with --debug for the traceback", file=sys.stderr)
        return 2 if exc.is_user_error else 1
    except OSError as exc:
        if args.debug or not is_environment_error(exc):
            raise
        _error(f"{exc.filename or ''}: {exc.strerror}".lstrip(": "))
        return 2
    except KeyboardInterrupt:
        print("kitchen: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
