"""`kit history` over run directories whose labels were crafted (issue 14 item 10).

Run labels come from manifest.json, which anyone who hands over a runs directory
wrote. They reach three renderers, each with its own markup: the HTML page, the
terminal (rich markup) and matplotlib's tick labels (mathtext between '$').
Each attack is performed for real on copies of the stored golden run.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kit.cli import app

GOLDEN = Path(__file__).parent / "data" / "golden" / "run"

SCRIPT = "<script>alert('owned')</script>"
MARKUP = "[bold red]FAKE-VERDICT[/bold red]"
MATH = r"v$\frac{$2"  # broken mathtext between two dollars: matplotlib raised when it parsed it


def _runs(tmp_path: Path, labels: list[str]) -> Path:
    runs = tmp_path / "runs"
    for i, label in enumerate(labels):
        dest = runs / f"2026-01-0{i + 1}T00-00-00-golden"
        shutil.copytree(GOLDEN, dest)
        man = json.loads((dest / "manifest.json").read_text())
        man["label"] = label
        man["started"] = 1_790_000_000.0 + i
        (dest / "manifest.json").write_text(json.dumps(man))
    return runs


@pytest.fixture(scope="module")
def crafted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    tmp = tmp_path_factory.mktemp("hist")
    runs = _runs(tmp, [SCRIPT, MARKUP])
    output, page = _history(runs, tmp / "history.html")
    return runs, output, page


def _history(runs: Path, html: Path) -> tuple[str, str]:
    res = CliRunner().invoke(app, ["history", str(runs), "--metric", "time_s", "--arm", "pytorch", "--html", str(html)],
                             terminal_width=200)
    assert res.exit_code == 0, res.output
    return res.output, html.read_text()


def test_history_html_escapes_labels_from_run_directories(crafted: tuple[Path, str, str]) -> None:
    _, _, page = crafted
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;" in page  # Jinja2 autoescape (markupsafe)


def test_history_terminal_shows_markup_in_labels_literally(crafted: tuple[Path, str, str]) -> None:
    _, output, _ = crafted
    assert "[bold red]FAKE-VERDICT[/bold red]" in output


def test_history_plot_shows_a_dollar_label_literally_instead_of_failing(tmp_path: Path) -> None:
    """Text between two '$' was parsed as mathtext: a broken formula crashed kit history (internal error)."""
    output, page = _history(_runs(tmp_path, ["2.0", MATH]), tmp_path / "h.html")
    assert '<img class=plot src="data:image/svg+xml;base64,' in page  # the plot was drawn (as an image the kit encodes)
    assert MATH in page and MATH in output


def test_history_never_follows_a_directory_link_planted_in_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose trials/ is a link to another directory: the fingerprint records the link, never lists its target,
    and the freshness digest records only that a link is there (so the analysis is recomputed from what the run really holds)."""
    from kit import history_cache
    from kit.freshness import raw_digest

    run = tmp_path / "run"
    (run / "trials").mkdir(parents=True)
    (run / "trials" / "t.json").write_text("{}")
    outside = tmp_path / "outside"
    outside.mkdir()
    for i in range(3):
        (outside / f"secret{i}").write_text("x")
    before = history_cache.fingerprint(run)[0]
    (run / "trials" / "t.json").unlink()
    (run / "trials").rmdir()
    (run / "trials").symlink_to(outside, target_is_directory=True)
    listed: list[str] = []
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.append(str(path)) or real(path))
    linked = history_cache.fingerprint(run)[0]
    digest = raw_digest(run)
    assert linked != before and listed == []  # neither the link nor its target was listed
    other = tmp_path / "other-run"
    other.mkdir()
    (tmp_path / "empty").mkdir()
    (other / "trials").symlink_to(tmp_path / "empty", target_is_directory=True)
    assert digest == raw_digest(other)  # the linked directory's files contribute nothing: only "a link is there"
    assert digest != raw_digest(tmp_path / "empty-run")  # ... which differs from no trials/ at all
