#!/usr/bin/env bash
# Install the environment hubs' packages (the `hubs` extra: verifiers 0.4 and openenv-core, and uv)
# into .venv, for `env: verifiers` and `env: openenv`; their tests (tests/env_hubs) skip without them.
# verifiers 0.4 pins openai<3 and mcp==2.0.0, which the test and mcp extras accept. verifiers runs
# each episode's harness program with uv, which installs the program's packages on first use: this
# downloads them now into a local package index, $venv/verifiers-index, that `env: verifiers`
# (env.package_index) and its tests install from offline. .ci/run runs this after scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${KITCHEN_VENV:-.venv}
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[hubs]"
"$venv/bin/python" - "$venv/verifiers-index" <<'PY'
"""The verifiers chat program's packages (its PEP 723 dependencies) as a PEP 503 index in argv[1]."""
import html
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM

index = Path(sys.argv[1])
requirements = re.findall(r'"([^"]+)"', CHAT_PROGRAM.split("dependencies =", 1)[1].split("\n", 1)[0])
with tempfile.TemporaryDirectory() as tmp:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "-d", tmp, *requirements],
        check=True,
    )
    shutil.rmtree(index, ignore_errors=True)
    for file in sorted(Path(tmp).iterdir()):
        project = index / re.sub(r"[-_.]+", "-", file.name.split("-", 1)[0]).lower()
        project.mkdir(parents=True, exist_ok=True)
        shutil.move(file, project / file.name)
for project in index.iterdir():
    links = "".join(f'<a href="{html.escape(f.name)}">{html.escape(f.name)}</a>\n' for f in sorted(project.iterdir()))
    (project / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
print(f"setup: {len(list(index.iterdir()))} packages of verifiers' chat program in {index}")
PY
"$venv/bin/python" -c "from importlib.metadata import version as v; print(f\"setup: verifiers {v('verifiers')}, openenv-core {v('openenv-core')}, uv {v('uv')}\")"
