"""The HTML report in a real browser: headless Chromium loads it without console messages,
screenshots at phone and desktop width are kept (CI artifacts: $KIT_ARTIFACTS), and the page
holds everything it shows (no external resource)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kit.analysis.analyze import analyze_run
from kit.report import write_report

GOLDEN_RUN = Path(__file__).parent / "data" / "golden" / "run"
CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)")
CONSOLE = re.compile(r":CONSOLE(?:\(\d+\)|:\d+)\]\s*(.*)")


@pytest.fixture(scope="module")
def html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("golden") / "run"
    shutil.copytree(GOLDEN_RUN, run)
    analysis = analyze_run(run)
    (path,) = write_report(run, analysis, ("html",))
    return path


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    d = Path(os.environ["KIT_ARTIFACTS"]) if os.environ.get("KIT_ARTIFACTS") else tmp_path
    d.mkdir(parents=True, exist_ok=True)
    return d


def load(page: Path, screenshot: Path, width: int, profile: Path) -> list[str]:
    """Open ``page`` in headless Chromium, save a screenshot, return the console messages it logged."""
    assert CHROMIUM is not None
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", f"--window-size={width},2400",
         f"--screenshot={screenshot}", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [m.group(1) for line in proc.stderr.splitlines() if (m := CONSOLE.search(line))]


def test_html_is_self_contained_and_responsive(html: Path) -> None:
    text = html.read_text(encoding="utf-8")
    refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', text)
    # links within the page; figures are images the kit encoded as data: URLs (kit.report.svg_safe)
    inside = ("#", "data:image/svg+xml;base64,", "data:image/png;base64,")
    assert all(r.startswith(inside) for r in refs), [r[:80] for r in refs if not r.startswith(inside)]
    assert "<link" not in text and "@import" not in text
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in text
    assert "@media print" in text and "overflow-x: auto" in text
    assert text.count('<img src="data:image/svg+xml;base64,') >= 5 and 'id="telemetry-series"' in text  # figures
    assert "<svg" not in text and 'http-equiv="Content-Security-Policy"' in text  # as images, under the kit's policy
    for section in ("findings", "goal", "hypotheses", "figures", "environment", "threats", "reproduce", "raw"):
        assert f'<section id="{section}">' in text


@pytest.mark.browser
@needs_chromium
def test_chromium_renders_without_console_messages(html: Path, artifacts: Path, tmp_path: Path) -> None:
    shots = {"phone": 412, "desktop": 1280}
    for name, width in shots.items():
        shot = artifacts / f"report-{name}.png"
        messages = load(html, shot, width, tmp_path / f"profile-{name}")
        assert messages == [], messages
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    # the capture works: the same page with a planted console error, and without the kit's policy (which
    # forbids every script), is caught; under the policy the planted script never runs, and the refusal is logged
    planted_text = html.read_text(encoding="utf-8").replace(
        "</body>", '<script>console.error("kit-probe " + JSON.stringify({a: 1}))</script></body>')
    probe = tmp_path / "probe.html"
    probe.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", planted_text, count=1),
                     encoding="utf-8")
    planted = load(probe, tmp_path / "probe.png", 800, tmp_path / "profile-probe")
    assert any("kit-probe" in m and json.dumps({"a": 1}).replace(" ", "") in m for m in planted), planted
    probe.write_text(planted_text, encoding="utf-8")
    refused = load(probe, tmp_path / "probe2.png", 800, tmp_path / "profile-probe2")
    assert not any("kit-probe" in m for m in refused) and any("script-src 'none'" in m for m in refused), refused
