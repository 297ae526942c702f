"""Terminal tasks in Harbor's task format (Terminal-Bench 2), read without building an image.

A task is a directory: `task.toml` (timeouts), `instruction.md` (the prompt), `environment/`
(a Dockerfile and the files it copies), `tests/test.sh` (writes the reward, a number, to
/logs/verifier/reward.txt, or a JSON object to /logs/verifier/reward.json) and optionally
`solution/solve.sh`. The `harbor` package itself needs Python 3.12 and Docker, so the format is
read here.

kitchen replays an environment instead of building it, so only Dockerfiles whose effect it can
replay offline in its sandbox are accepted:

- `FROM <image>`, once, first: the image is not pulled; commands see the host's read-only /usr;
- `WORKDIR <absolute path>`, exactly once, before any COPY or RUN, outside the system dirs
  (`sandbox.types.RESERVED_MOUNT_ROOTS`): the task's writable working directory;
- `COPY <source>... <destination>` without flags or wildcards, sources inside `environment/`,
  destination inside the WORKDIR;
- `ENV KEY=VALUE ...` (or `ENV KEY VALUE`) and `LABEL ...` (ignored);
- `RUN <shell command>` (shell form) where every command, split at `&&`, `||`, `;`, `|` and
  newlines, starts with one of `REPLAYABLE_COMMANDS` (file writes, no package managers, no
  network) and no `$(...)` or backquotes: replayed in the sandbox before the first command.

Anything else (another instruction, `RUN apt-get ...`, a `docker-compose.yaml`, a prebuilt
`environment.docker_image`) needs a Docker build: the task is refused with the reason, naming
the task and the line.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kitchen import DataError
from sandbox.types import RESERVED_MOUNT_ROOTS

REPLAYABLE_COMMANDS = frozenset(
    {"mkdir", "echo", "printf", "touch", "cp", "mv", "rm", "chmod", "ln", "cat", "true", "sed", "sort", "head",
     "tail", "tr", "cut", "seq", "cd"}
)  # fmt: skip
"""What a Dockerfile RUN may call: file writes kitchen replays offline in the sandbox."""
REWARD_FILES = ("/logs/verifier/reward.txt", "/logs/verifier/reward.json")
"""Where a task's tests/test.sh leaves its reward (Harbor's convention), read in this order."""
DEFAULT_AGENT_TIMEOUT_S = 600.0
DEFAULT_VERIFIER_TIMEOUT_S = 600.0


class UnsupportedTaskError(DataError):
    """A task kitchen cannot replay without building a container image."""


@dataclass(frozen=True)
class HarborTask:
    """One task, its environment replayed as files under `workdir` and `setup` commands."""

    name: str
    instruction: str
    workdir: str
    files: Mapping[str, bytes]
    """Path relative to `workdir` -> content, from the Dockerfile's COPY lines."""
    tests: Mapping[str, bytes]
    """Path relative to /tests -> content: the task's tests/ dir, shown only when grading."""
    setup: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    verifier_env: Mapping[str, str] = field(default_factory=dict)
    solution: str | None = None
    agent_timeout_s: float = DEFAULT_AGENT_TIMEOUT_S
    verifier_timeout_s: float = DEFAULT_VERIFIER_TIMEOUT_S


def _dir_files(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def _instructions(text: str) -> list[tuple[int, str, str]]:
    """(line number, INSTRUCTION, arguments) of a Dockerfile, continuation lines joined."""
    found: list[tuple[int, str, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if pending is None and (not line or line.startswith("#")):
            continue
        start, body = pending if pending is not None else (number, "")
        if line.endswith("\\"):
            pending = (start, body + line[:-1] + " ")
            continue
        pending = None
        keyword, _, rest = (body + line).strip().partition(" ")
        found.append((start, keyword.upper(), rest.strip()))
    if pending is not None:
        found.append((pending[0], *pending[1].strip().partition(" ")[::2]))
    return found


def _replayable_run(command: str) -> str | None:
    """Why a RUN command cannot be replayed, or None."""
    if command.startswith("["):
        return "the exec form (a JSON list)"
    if "$(" in command or "`" in command:
        return "command substitution"
    for part in re.split(r"&&|\|\||[;|\n]", command):
        words = shlex.split(part, comments=True)
        if words and words[0] not in REPLAYABLE_COMMANDS:
            return f"`{words[0]}`"
    return None


@dataclass
class _Replay:
    """The Dockerfile read so far."""

    task: str
    environment: Path
    workdir: str | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    setup: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def refuse(self, line: int, reason: str) -> UnsupportedTaskError:
        return UnsupportedTaskError(
            f"{self.task}: environment/Dockerfile line {line}: {reason}; it needs a Docker build (kitchen replays "
            f"only FROM, one WORKDIR, COPY, ENV, LABEL and RUN of {', '.join(sorted(REPLAYABLE_COMMANDS))})"
        )

    def copy(self, line: int, arguments: str) -> None:
        words = shlex.split(arguments)
        if len(words) < 2 or any(word.startswith("--") for word in words) or any(c in arguments for c in "*?["):
            raise self.refuse(line, f"COPY {arguments} (flags, wildcards or a missing destination)")
        assert self.workdir is not None
        *sources, destination = words
        target = posixpath.normpath(posixpath.join(self.workdir, destination))
        if target != self.workdir and not target.startswith(self.workdir.rstrip("/") + "/"):
            raise self.refuse(line, f"COPY to {destination}, outside the WORKDIR {self.workdir}")
        into_dir = destination.endswith("/") or len(sources) > 1 or target == self.workdir
        base = posixpath.relpath(target, self.workdir)
        for source in sources:
            path = (self.environment / source).resolve()
            if not path.is_relative_to(self.environment.resolve()) or not path.exists():
                raise self.refuse(line, f"COPY source {source} is not a file or dir inside environment/")
            if path.is_dir():
                for name, content in _dir_files(path).items():
                    self.files[posixpath.normpath(posixpath.join(base, name))] = content
            else:
                name = posixpath.join(base, path.name) if into_dir else base
                self.files[posixpath.normpath(name)] = path.read_bytes()

    def read(self, dockerfile: Path) -> None:
        instructions = _instructions(dockerfile.read_text(encoding="utf-8"))
        if not instructions or instructions[0][1] != "FROM":
            raise self.refuse(instructions[0][0] if instructions else 1, "the first instruction must be FROM")
        for line, keyword, arguments in instructions[1:]:
            if keyword == "WORKDIR":
                path = posixpath.normpath(arguments) if arguments.startswith("/") else ""
                if self.workdir is not None or self.files or self.setup:
                    raise self.refuse(line, "WORKDIR must come once, before any COPY or RUN")
                if not path or path.split("/")[1] in RESERVED_MOUNT_ROOTS:
                    raise self.refuse(line, f"WORKDIR {arguments} is not an absolute path outside the system dirs")
                self.workdir = path
            elif keyword in ("COPY", "RUN") and self.workdir is None:
                raise self.refuse(line, f"{keyword} before a WORKDIR")
            elif keyword == "COPY":
                self.copy(line, arguments)
            elif keyword == "RUN":
                why = _replayable_run(arguments)
                if why is not None:
                    raise self.refuse(line, f"RUN with {why}")
                self.setup.append(arguments)
            elif keyword == "ENV":
                self.env.update(_env_pairs(arguments))
            elif keyword != "LABEL":
                raise self.refuse(line, f"{keyword}")
        if self.workdir is None:
            raise self.refuse(len(instructions), "no WORKDIR")


def _env_pairs(arguments: str) -> dict[str, str]:
    words = shlex.split(arguments)
    if words and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    return dict(word.split("=", 1) for word in words)


def _seconds(config: Mapping[str, Any], section: str, default: float, where: str) -> float:
    value = config.get(section, {}).get("timeout_sec", default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise DataError(f"{where}: [{section}] timeout_sec must be a positive number, got {value!r}")
    return float(value)


def _string_map(config: Mapping[str, Any], where: str) -> dict[str, str]:
    env = config.get("verifier", {}).get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise DataError(f"{where}: [verifier] env must be a table of strings")
    return dict(env)


def load_harbor_task(root: str | Path) -> HarborTask:
    """The task in `root`; a broken task is a DataError, one that needs an image build an
    UnsupportedTaskError, each naming the task's file."""
    root = Path(root)
    name = root.name
    for required in ("task.toml", "instruction.md", "tests/test.sh", "environment/Dockerfile"):
        if not (root / required).is_file():
            problem = "needs a Docker build" if required == "environment/Dockerfile" else "is not a Harbor task"
            raise (UnsupportedTaskError if "Docker" in problem else DataError)(f"{root}: no {required}: {problem}")
    for compose in ("docker-compose.yaml", "docker-compose.yml"):
        if (root / "environment" / compose).exists():
            raise UnsupportedTaskError(f"{name}: environment/{compose}: services need a Docker build")
    where = f"{root / 'task.toml'}"
    try:
        config = tomllib.loads((root / "task.toml").read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise DataError(f"{where}: {exc}") from None
    image = config.get("environment", {}).get("docker_image")
    if image:
        raise UnsupportedTaskError(f"{where}: [environment] docker_image = {image!r}: a prebuilt image is needed")
    replay = _Replay(name, root / "environment")
    replay.read(root / "environment" / "Dockerfile")
    assert replay.workdir is not None
    solution = root / "solution" / "solve.sh"
    return HarborTask(
        name=name,
        instruction=(root / "instruction.md").read_text(encoding="utf-8").strip(),
        workdir=replay.workdir,
        files=replay.files,
        tests=_dir_files(root / "tests"),
        setup=tuple(replay.setup),
        env=replay.env,
        verifier_env=_string_map(config, where),
        solution=solution.read_text(encoding="utf-8") if solution.is_file() else None,
        agent_timeout_s=_seconds(config, "agent", DEFAULT_AGENT_TIMEOUT_S, where),
        verifier_timeout_s=_seconds(config, "verifier", DEFAULT_VERIFIER_TIMEOUT_S, where),
    )


def load_harbor_tasks(path: str | Path, skip_unsupported: bool) -> tuple[list[HarborTask], list[str]]:
    """The tasks at `path` (one task dir, or a dir of task dirs, in name order) and, with
    `skip_unsupported`, why each skipped task was refused (else the first refusal raises)."""
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"{root}: no such task directory")
    roots = [root] if (root / "task.toml").exists() else sorted(p for p in root.iterdir() if (p / "task.toml").exists())
    if not roots:
        raise DataError(f"{root}: no Harbor task (a dir with task.toml) in it")
    tasks: list[HarborTask] = []
    refused: list[str] = []
    for task_root in roots:
        try:
            tasks.append(load_harbor_task(task_root))
        except UnsupportedTaskError as exc:
            if not skip_unsupported:
                raise
            refused.append(str(exc))
    if not tasks:
        raise DataError(f"{root}: every task needs a Docker build: " + "; ".join(refused))
    return tasks, refused


def read_reward(files: Mapping[str, str]) -> float | None:
    """The reward a task's tests left, by Harbor's convention: reward.txt's number, else
    reward.json's `reward` (or its only value); None when neither is readable."""
    text = files.get(REWARD_FILES[0])
    if text is not None:
        try:
            return float(text.strip())
        except ValueError:
            return None
    text = files.get(REWARD_FILES[1])
    if text is None:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    values: Sequence[Any] = [data["reward"]] if isinstance(data, dict) and "reward" in data else []
    if not values and isinstance(data, dict) and len(data) == 1:
        values = list(data.values())
    if len(values) == 1 and isinstance(values[0], int | float) and not isinstance(values[0], bool):
        return float(values[0])
    return None
