"""`kitchen docs --build` writes the whole site with `mkdocs build --strict` (as `.ci/run` does):
a broken link, a missing page or a reference that does not resolve fails it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_cli


@pytest.mark.slow
def test_kitchen_docs_builds_the_site_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the dev extra (mkdocs-material, mkdocstrings) is not installed")
    result = run_cli("docs", "--build", str(tmp_path / "site"), cwd=tmp_path, timeout=300)  # from anywhere
    assert result.returncode == 0, result.stderr[-3000:]
    config = (tmp_path / "site" / "reference" / "config" / "index.html").read_text()
    assert "local.vllm.gpu_memory_utilization" in config and "sl_basic" in config
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert 'id="kitchen.engine.stage.Stage"' in api
    assert 'class="mermaid"' in (tmp_path / "site" / "explanation" / "concepts" / "index.html").read_text()
