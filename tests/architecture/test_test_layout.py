"""Test folders must not shadow the optional packages tests probe for.

pytest's default import mode puts each test module's folder on `sys.path`, so a folder
`tests/adapters/vllm` made `import vllm` succeed as an empty namespace package where vLLM is
not installed: `pytest.importorskip("vllm")` then ran the vLLM tests instead of skipping them.
"""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PROBE = re.compile(r"""importorskip\(\s*["']([A-Za-z_][\w.]*)["']""")


def probed_top_level_modules() -> set[str]:
    return {m.group(1).split(".")[0] for path in TESTS.rglob("*.py") for m in PROBE.finditer(path.read_text())}


def test_the_probe_finds_the_optional_packages() -> None:
    # (trl is no longer probed: it is in the test extra and its parity tests import it outright)
    assert {"vllm", "ray"} <= probed_top_level_modules()


def test_no_test_folder_is_named_like_a_probed_package() -> None:
    probed = probed_top_level_modules()
    clashes = sorted(str(path.relative_to(TESTS)) for path in TESTS.rglob("*") if path.is_dir() and path.name in probed)
    assert clashes == [], f"rename these test folders, they shadow optional packages: {clashes}"


def test_no_test_package_is_named_like_a_package_of_this_repository() -> None:
    """A test folder with an `__init__.py` is imported under its own name: `tests/sandbox/` made
    `import sandbox` load the tests instead of the sandbox package."""
    ours = {path.parent.name for path in TESTS.parent.glob("*/__init__.py")}
    assert {"kitchen", "train_core", "adapters", "recipes", "sandbox"} <= ours
    clashes = sorted(str(p.parent.relative_to(TESTS)) for p in TESTS.rglob("__init__.py") if p.parent.name in ours)
    assert clashes == [], f"rename these test packages, they shadow the repository's own: {clashes}"
