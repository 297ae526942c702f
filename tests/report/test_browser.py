"""The report in headless Chromium: the script runs without console errors, draws every plot,
renders transcripts as text (a transcript's <script> does not run), and the page is not blank.

Skipped only when no Chromium/Chrome binary is found (scripts/setup.sh installs Debian's
`chromium` when run as root); KITCHEN_CHROMIUM names a binary explicitly.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from kitchen.apps.report.build import write_report
from tests.report.png import read_png

ARTIFACTS = Path(__file__).parent / "artifacts"
_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def _browser() -> str | None:
    explicit = os.environ.get("KITCHEN_CHROMIUM")
    if explicit:
        return explicit
    return next((found for name in _NAMES if (found := shutil.which(name))), None)


BROWSER = _browser()
pytestmark = pytest.mark.skipif(BROWSER is None, reason=f"no headless browser found (looked for {', '.join(_NAMES)})")


def chromium(page: Path, *flags: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    assert BROWSER is not None
    command = [
        BROWSER,
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--no-first-run",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={tmp_path / 'profile'}",
        *flags,
        page.resolve().as_uri(),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, f"console output from the page: {console}"
    return result


def test_dom_after_scripts(hostile_rl_run: Path, tmp_path: Path) -> None:
    page = write_report(hostile_rl_run, tmp_path / "report.html", time.time())
    dom = chromium(page, "--dump-dom", tmp_path=tmp_path).stdout
    assert 'data-rendered="true"' in dom, "the report script did not finish"
    figures = dom.count('<figure class="card chart"')
    svgs = re.findall(r'<svg viewBox="[^"]*" class="chart-svg".*?</svg>', dom, re.DOTALL)
    assert figures > 5 and len(svgs) == figures
    assert all(("<path" in svg or "<polygon" in svg or "<circle" in svg) for svg in svgs)
    assert "<polygon" in dom, "the stacked stage-time chart"
    assert "<title>pwned</title>" not in dom and "<title>" in dom
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;&lt;b&gt;bold?&lt;/b&gt;" in dom
    assert 'class="group"' in dom and "step 3</option>" in dom


def test_screenshot_is_not_blank(rl_run: Path, tmp_path: Path) -> None:
    page = write_report(rl_run, tmp_path / "report.html", time.time())
    shot = tmp_path / "report.png"
    chromium(page, f"--screenshot={shot}", "--window-size=1200,1600", tmp_path=tmp_path)
    width, height, channels, rows = read_png(shot)
    assert (width, height) == (1200, 1600)
    # Brightness over a grid of pixels: a blank or single-colour page has no spread.
    samples = [sum(row[x * channels : x * channels + 3]) / 3 for row in rows[::16] for x in range(0, width, 16)]
    mean = sum(samples) / len(samples)
    variance = sum((s - mean) ** 2 for s in samples) / len(samples)
    assert variance > 100, f"screenshot looks blank (brightness variance {variance:.1f})"
    dark = sum(1 for s in samples if s < 128) / len(samples)
    assert 0.001 < dark < 0.5, f"unexpected share of dark pixels: {dark:.3f}"
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(shot, ARTIFACTS / "report_screenshot.png")
