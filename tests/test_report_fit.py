"""A report that fits (issue 27, item 3): in headless Chromium at 1280 px no table of the golden report or of a
`kit compare --html` page is wider than its container (the hidden column used to be the mitigation, and in
compare the verdict); screenshots are kept (KIT_SCREENSHOTS=DIR, e.g. docs/evidence; else $KIT_ARTIFACTS).
And no Python repr in reader text: the rendered HTML and LaTeX are scanned for dicts, lists of quoted strings,
None/True/False words."""

from __future__ import annotations

import html as htmllib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.analysis.analyze import analyze_run
from kit.report import write_report
from tests.test_report_browser import CHROMIUM, GOLDEN_RUN, needs_chromium

WIDTH = 1280
MEASURE = """<script>
window.addEventListener('load', () => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const out = [];
  document.querySelectorAll('table').forEach((t, i) => {
    const c = t.parentElement;
    const head = (t.querySelector('caption') || t.querySelector('th') || {}).textContent || '';
    out.push({i: i, section: (t.closest('section') || {}).id || '', head: head.slice(0, 60),
              scroll: c.scrollWidth, client: c.clientWidth, table: t.scrollWidth});
  });
  const pre = document.createElement('pre');
  pre.id = 'kit-fit';
  pre.textContent = JSON.stringify({vw: window.innerWidth, tables: out});
  document.body.appendChild(pre);
});
</script></body>"""


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The golden run's report (HTML and LaTeX) and `kit compare --html` of its two arms."""
    tmp = tmp_path_factory.mktemp("fit")
    run = tmp / "run"
    shutil.copytree(GOLDEN_RUN, run)
    paths = write_report(run, analyze_run(run), ("html", "latex"))
    cmp = tmp / "compare.html"
    proc = subprocess.run([sys.executable, "-m", "kit", "compare", str(run), "--arms", "tensorflow,pytorch",
                           "--html", str(cmp)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Answer:" in proc.stdout
    return {"report": paths[0], "latex": paths[1].parent, "compare": cmp}


def _shots() -> Path | None:
    d = os.environ.get("KIT_SCREENSHOTS") or os.environ.get("KIT_ARTIFACTS")
    if not d:
        return None
    Path(d).mkdir(parents=True, exist_ok=True)
    return Path(d)


def _chromium(page: Path, profile: Path, *args: str, height: int = 2400) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", f"--user-data-dir={profile}", f"--window-size={WIDTH},{height}", *args,
                           page.as_uri()], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def without_policy(text: str) -> str:
    """The page without the kit's Content-Security-Policy, which forbids every script and every style but the page's
    own sheet: the measuring script and the planted styles below are the test's, not the page's."""
    return re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text, count=1)


def measure(page: Path, tmp: Path) -> dict[str, object]:
    """Every table's container scroll and client width at 1280 px, every <details> opened."""
    probe = tmp / f"{page.stem}-measure.html"
    probe.write_text(without_policy(page.read_text(encoding="utf-8")).replace("</body>", MEASURE), encoding="utf-8")
    proc = _chromium(probe, tmp / f"profile-{page.stem}", "--dump-dom")
    m = re.search(r'<pre id="kit-fit">(.*?)</pre>', proc.stdout, re.S)
    assert m, proc.stdout[-2000:]
    return json.loads(htmllib.unescape(m.group(1)))


@pytest.mark.browser
@needs_chromium
@pytest.mark.parametrize("name", ["report", "compare"])
def test_every_table_fits_its_container_at_1280_px(pages: dict[str, Path], name: str, tmp_path: Path) -> None:
    got = measure(pages[name], tmp_path)
    assert got["vw"] == WIDTH
    tables = got["tables"]
    assert isinstance(tables, list) and len(tables) >= (8 if name == "report" else 1)
    wide = [t for t in tables if t["scroll"] > t["client"] or t["table"] > t["client"]]
    assert wide == [], wide
    # the measurement sees an overflow where there is one: a table made wider than its column is caught
    wider = tmp_path / f"{name}-wider.html"
    wider.write_text(pages[name].read_text(encoding="utf-8").replace("<table", '<table style="min-width:1600px"', 1),
                     encoding="utf-8")
    planted = measure(wider, tmp_path)["tables"]
    assert isinstance(planted, list) and planted[0]["scroll"] > planted[0]["client"]


@pytest.mark.browser
@needs_chromium
def test_screenshots_of_the_answer_the_threats_and_a_comparison(pages: dict[str, Path], tmp_path: Path) -> None:
    """Issue 27's evidence: the report's first screen, its threats table and a compare page at 1280 px."""
    out = _shots() or tmp_path
    report = pages["report"]
    threats = tmp_path / "threats.html"
    threats.write_text(without_policy(report.read_text(encoding="utf-8")).replace(
        "</style>", "body > header, body > section:not(#threats), footer { display: none; }</style>", 1),
        encoding="utf-8")
    for page, shot, height in ((report, "issue27-report-top.png", 900), (threats, "issue27-threats.png", 900),
                               (pages["compare"], "issue27-compare.png", 900)):
        _chromium(page, tmp_path / f"profile-{shot}", f"--screenshot={out / shot}", height=height)
        data = (out / shot).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


# ------------------------------------------------------------------------------------------- no Python reprs

REPRS = {
    "dict repr": re.compile(r"\{\s*'[^'\n]{1,80}'\s*:"),
    "list of quoted strings": re.compile(r"\[\s*'[^'\n]*'(?:\s*,\s*'[^'\n]*')*\s*\]"),
    "None/True/False as a word": re.compile(r"(?<![\w=.-])(None|True|False)(?![\w=-])"),
    "numpy scalar repr": re.compile(r"np\.(?:float|int)\d*\("),
}


def reader_text_html(text: str) -> str:
    """What a reader reads: the tags, styles, scripts and inline SVG figures left out."""
    text = re.sub(r"<(style|script|svg)\b.*?</\1>", " ", text, flags=re.S | re.I)
    return htmllib.unescape(re.sub(r"<[^>]+>", " ", text))


def repr_hits(text: str) -> list[tuple[str, str]]:
    hits = []
    for what, rx in REPRS.items():
        for m in rx.finditer(text):
            hits.append((what, text[max(0, m.start() - 60):m.end() + 60].replace("\n", " ")))
    return hits


def test_the_scan_finds_reprs() -> None:
    planted = "parameter counts {'tensorflow': [61706], 'pytorch': [61706]}; arms ['a', 'b']; tf32 None; ok True"
    assert {w for w, _ in repr_hits(planted)} == {"dict repr", "list of quoted strings", "None/True/False as a word"}
    assert repr_hits("onednn=True; a None-free text; Nonet; True-colour") == []


def test_no_python_reprs_in_the_rendered_report(pages: dict[str, Path]) -> None:
    html_hits = repr_hits(reader_text_html(pages["report"].read_text(encoding="utf-8")))
    assert html_hits == [], html_hits
    for tex in sorted(pages["latex"].rglob("*.tex")):
        body = tex.read_text(encoding="utf-8")
        body = "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("%"))
        hits = repr_hits(body.replace(r"\_", "_"))
        assert hits == [], (tex.name, hits)
    cmp_hits = repr_hits(reader_text_html(pages["compare"].read_text(encoding="utf-8")))
    assert cmp_hits == [], cmp_hits
