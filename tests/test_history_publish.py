"""`kit history --publish DIR` (issue 41 item 3): a deterministic, incremental static site of every series, whose
run labels and study names are hostile input, whose links resolve, and which never follows a planted link."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from urllib.parse import unquote

import pytest
from typer.testing import CliRunner

from kit.cli import app
from kit.history_site import SITE_MANIFEST, publish
from tests.test_history import _golden_runs

SCRIPT = "<script>alert('owned')</script>"
# The analysed runs are built once per module (seconds): the module is slow, each test below it fast.
pytestmark = pytest.mark.slow
HOSTILE = ["2.0", SCRIPT, 'q"uote\' ../../etc/passwd', "2.3"]


def _relabel(run: Path, **fields: object) -> None:
    man = json.loads((run / "manifest.json").read_text())
    man.update(fields)
    (run / "manifest.json").write_text(json.dumps(man))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four analysed copies of the golden run, labelled with hostile text, one of a hostile study name."""
    from kit.analysis.analyze import analyze_run

    tmp = tmp_path_factory.mktemp("pub")
    base = _golden_runs(tmp, 4)
    for i, label in enumerate(HOSTILE):
        _relabel(base / f"r{i}", label=label)
    _relabel(base / "r3", experiment="<img src=x onerror=alert(1)>../x")
    for i in range(4):
        analyze_run(base / f"r{i}")
    return base


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_two_publishes_are_byte_identical_and_a_republish_rewrites_nothing(runs: Path, tmp_path: Path) -> None:
    a = publish(runs, tmp_path / "a")
    b = publish(runs, tmp_path / "b", use_cache=False)
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    assert a.series == b.series > 0 and a.runs_read + a.runs_reused == 4
    again = publish(runs, tmp_path / "a")
    assert again.pages_written == 0 and again.pages_unchanged == a.pages_written


def test_html_svg_and_json_carry_hostile_labels_as_text(runs: Path, tmp_path: Path) -> None:
    publish(runs, tmp_path / "s")
    texts = {n: (tmp_path / "s" / n).read_text() for n in _files(tmp_path / "s") if n.endswith(".html")}
    for name, text in texts.items():
        assert "<script>alert" not in text and "<img src=x" not in text, name
        assert len(re.findall(r"<script>", text)) <= 1  # the index's own filter script only
    joined = "".join(texts.values())
    assert "&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;" in joined
    assert "&lt;img src=x onerror=alert(1)&gt;../x" in joined
    assert not any("passwd" in n or ".." in n for n in texts)  # page names never come from run text
    data = json.loads((tmp_path / "s" / "data.json").read_text())
    labels = {p["label"] for s in data["series"] for p in s["points"]}
    assert SCRIPT in labels  # data stays data
    s0 = data["series"][0]
    assert set(s0) >= {"experiment", "metric", "phase", "arm", "framework", "unit", "points", "steps", "page",
                       "latest_verdict", "interval"}
    assert set(s0["points"][0]) >= {"label", "median", "q1", "q3", "n", "started", "run", "link", "version"}


def test_every_link_resolves_to_an_existing_file(runs: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    publish(runs, site)
    for page in site.glob("*.html"):
        hrefs = re.findall(r'href="([^"]*)"', page.read_text())
        assert hrefs, page.name
        for h in hrefs:
            assert not re.match(r"[a-z]+:", h), h  # relative only: no scheme, no network
            assert (site / unquote(h)).exists(), (page.name, h)


def test_incremental_add_and_remove_a_run(runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kit import history_cache

    monkeypatch.setattr(history_cache, "RACY_S", 0.0)
    mine = tmp_path / "runs"
    shutil.copytree(runs, mine, symlinks=True)  # sealed analyses travel with their runs
    site = tmp_path / "site"
    first = publish(mine, site)
    before = _files(site)
    shutil.rmtree(mine / "r3")  # the only run of its study: its pages go
    gone = publish(mine, site)
    assert gone.pages_removed > 0 and gone.runs_read == 0
    after = _files(site)
    assert set(after) < set(before) and all(after[n] == before[n] for n in after if n.startswith("series-")
                                            and "golden" not in n) is True
    assert first.series > gone.series
    shutil.copytree(runs / "r3", mine / "r3")  # back: only the new run is read
    back = publish(mine, site)
    assert back.runs_read == 1 and back.runs_reused == 3 and _files(site) == before
    (site / "mine.txt").write_text("kept")  # a file the site did not write is never removed
    publish(mine, site)
    assert (site / "mine.txt").read_text() == "kept"


def test_a_link_planted_in_the_site_is_replaced_never_followed(runs: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    publish(runs, site)
    outside = tmp_path / "outside.html"
    outside.write_text("precious")
    (site / "index.html").unlink()
    (site / "index.html").symlink_to(outside)
    publish(runs, site)
    assert outside.read_text() == "precious" and not (site / "index.html").is_symlink()
    manifest = json.loads((site / SITE_MANIFEST).read_text())
    page = manifest["pages"][0]
    (site / page).unlink()
    (site / page).symlink_to(outside)
    manifest["pages"].append("series-zzz-000000000000.html")
    (site / SITE_MANIFEST).write_text(json.dumps(manifest))
    publish(runs, site)
    assert outside.read_text() == "precious"


def test_cli_publish(runs: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["history", str(runs), "--publish", str(tmp_path / "site")], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "series from 4 runs" in res.output and str(tmp_path / "site" / "index.html") in res.output.replace("\n", "")


def test_history_html_is_the_series_template(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "h.html"
    res = CliRunner().invoke(app, ["history", str(runs), "--experiment", "golden", "--arm", "pytorch", "--html",
                                   str(out)], terminal_width=200)
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert '<img class=plot src="data:image/svg+xml;base64,' in text and "<script>alert" not in text


CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)")
def test_chromium_loads_the_index_and_a_series_page(runs: Path, tmp_path: Path) -> None:
    import os

    from tests.test_report_browser import load

    site = tmp_path / "site"
    publish(runs, site)
    shots = Path(os.environ["KIT_ARTIFACTS"]) if os.environ.get("KIT_ARTIFACTS") else tmp_path
    shots.mkdir(parents=True, exist_ok=True)
    page = sorted(site.glob("series-golden-time-s-train-*.html"))[0]
    for name, html in (("history-index", site / "index.html"), ("history-series", page)):
        messages = load(html, shots / f"{name}.png", 1280, tmp_path / f"profile-{name}")
        assert messages == [], messages
        assert (shots / f"{name}.png").stat().st_size > 10_000


def test_the_sparkline_draws_every_run_of_a_short_series_and_at_most_its_cap() -> None:
    """Two runs give a line of two points (it once drew one: the pick spread 120 slots over two runs), and a long
    series is thinned evenly to the cap, its first and newest runs kept."""
    import re

    from kit.history_pages import sparkline

    def points(svg: str) -> list[tuple[float, float]]:
        (pts,) = re.findall(r'points="([^"]*)"', svg)
        return [(float(x), float(y)) for x, y in (p.split(",") for p in pts.split())]

    assert len(points(str(sparkline([2.0, 1.0])))) == 2
    assert len(points(str(sparkline([1.0, 3.0, 2.0])))) == 3
    long = points(str(sparkline([float(i % 7) for i in range(1000)], most=50)))
    assert len(long) == 50 and long[0][0] == 2.0 and long[-1][0] == 158.0
