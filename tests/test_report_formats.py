"""Only what was asked (issue 44): ``kit report --format html`` draws each figure once and writes no PDF, the
LaTeX formats get the PDF from the same figure object, and the reports stay byte-identical to the ones the kit
wrote before figures were drawn on demand.

The golden set under tests/data/golden/report/ was rendered from the calibrated self-test run
(tests/data/golden/run, copied: never rendered in place) by the code before the change, and is compared after
:func:`normalise`, which replaces only what truly differs per render: the run directory's absolute path (a fresh
temporary directory each time; in LaTeX also in its escaped, breakable form) and the kit's own version (the
report's generator line). The run's recorded start and end times are the run's, not the render's, and stay.
The figures' PDFs (LaTeX) are compared by SHA-256 (figures.sha256); the SVGs are inside index.html.
Regenerate after an intended change: tests/data/golden/report/REGENERATE.md.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kit
from kit.cli import app

REPO = Path(__file__).resolve().parent.parent
GOLDEN_RUN = REPO / "tests" / "data" / "golden" / "run"
GOLDEN_REPORT = REPO / "tests" / "data" / "golden" / "report"
EXPECTED = GOLDEN_REPORT / "expected"
FIGURE_HASHES = "figures.sha256"
# the raw-data table's row of analysis.json, in HTML and in LaTeX: its size is the one thing normalised in it
ANALYSIS_SIZE = re.compile(r"(analysis\.json(?:</code></td><td class=\"num\">|\} & )\d+(?:</td><td class=\"num\">| & ))"
                           r"[0-9.]+ (?:B|KiB|MiB)")


def normalise(text: str, run: Path) -> str:
    """A rendered report's text with what differs per render replaced: the run directory's absolute path (as
    written, and as LaTeX writes it: escaped, with ``\\allowbreak{}`` between its parts) by ``RUN``, and the
    kit's version in the generator lines by ``VERSION``, and the size of analysis.json in the raw-data table by
    ``SIZE`` (the analysis layer's file, whose seal record changes with that layer; the report only lists it).
    Nothing else is touched."""
    from kit.report.latex import tex_escape

    text = text.replace("\\allowbreak{}", "")
    text = ANALYSIS_SIZE.sub(r"\g<1>SIZE", text)
    for shown in (str(run), tex_escape(str(run))):
        text = text.replace(shown, "RUN")
    for prefix in ("kit report ", "kit "):
        text = text.replace(f"{prefix}{kit.__version__}", f"{prefix}VERSION")
    return text


def outputs(run: Path) -> dict[str, str]:
    """The report's files under RUN/report as normalised text: index.html, every LaTeX source (the article,
    its tables and figure wrappers) and one line per figure PDF with its SHA-256 (the PDF bytes themselves
    are deterministic: matplotlib writes no creation date, kit.report.figures.to_svg)."""
    report = run / "report"
    out: dict[str, str] = {}
    if (report / "index.html").is_file():
        out["index.html"] = (report / "index.html").read_text(encoding="utf-8")
    latex = report / "latex"
    if latex.is_dir():
        for path in sorted(latex.rglob("*.tex")):
            out[f"latex/{path.relative_to(latex)}"] = path.read_text(encoding="utf-8")
        pdfs = sorted((latex / "figures").glob("*.pdf"))
        out[f"latex/{FIGURE_HASHES}"] = "".join(
            f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in pdfs)
    return {name: normalise(text, run) for name, text in out.items()}


def render(dest: Path, formats: str) -> Path:
    """A copy of the golden run at ``dest``, reported in ``formats`` by the CLI; the copy's path."""
    shutil.copytree(GOLDEN_RUN, dest)
    result = CliRunner().invoke(app, ["report", str(dest), "--format", formats])
    assert result.exit_code == 0, result.output
    return dest


def regenerate(work: Path) -> list[Path]:
    """Write the golden set from a fresh render (html and latex) under ``work``; the files written."""
    run = render(work / "run", "html,latex")
    shutil.rmtree(EXPECTED, ignore_errors=True)
    written = []
    for name, text in outputs(run).items():
        path = EXPECTED / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def expected() -> dict[str, str]:
    return {str(p.relative_to(EXPECTED)): p.read_text(encoding="utf-8")
            for p in sorted(EXPECTED.rglob("*")) if p.is_file()}


def same(fresh: dict[str, str], golden: dict[str, str]) -> list[str]:
    """The names whose text differs, with the first differing line of each."""
    problems = []
    for name in sorted(golden):
        if fresh.get(name) != golden[name]:
            a, b = golden[name].splitlines(), (fresh.get(name) or "").splitlines()
            first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            got = b[first][:200] if first < len(b) else "<end>"
            want = a[first][:200] if first < len(a) else "<end>"
            problems.append(f"{name}:{first + 1}: expected {want!r}, got {got!r}")
    return problems


class Drawn:
    """Counts figures made and saved (per format, per figure object) while a report renders."""

    def __init__(self) -> None:
        self.made = 0
        self.saved: Counter[tuple[int, str]] = Counter()

    @property
    def formats(self) -> Counter[str]:
        return Counter(fmt for (_fig, fmt), n in self.saved.items() for _ in range(n))


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> Iterator[Drawn]:
    from matplotlib.figure import Figure

    counter = Drawn()
    init, savefig = Figure.__init__, Figure.savefig
    monkeypatch.setenv("KIT_FIGURE_CACHE", "off")  # every figure drawn here, none from kit.report.figure_cache

    def counted_init(self: Figure, *args: object, **kwargs: object) -> None:
        counter.made += 1
        init(self, *args, **kwargs)  # type: ignore[arg-type]

    def counted_savefig(self: Figure, fname: object, *args: object, **kwargs: object) -> None:
        counter.saved[(id(self), str(kwargs.get("format")))] += 1
        savefig(self, fname, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Figure, "__init__", counted_init)
    monkeypatch.setattr(Figure, "savefig", counted_savefig)
    yield counter


@pytest.mark.slow
def test_the_reports_are_the_golden_ones(tmp_path: Path) -> None:
    """html,latex: every text the kit wrote before the change, byte for byte after normalising, and the same
    figure PDFs."""
    if os.environ.get("KIT_REGEN_REPORT_GOLDEN") == "1":
        regenerate(tmp_path / "regen")
    fresh = outputs(render(tmp_path / "run", "html,latex"))
    golden = expected()
    assert sorted(fresh) == sorted(golden), "the report's files differ from the golden ones"
    assert not same(fresh, golden), "\n".join(same(fresh, golden))


@pytest.mark.slow
def test_html_alone_draws_each_figure_once_and_writes_no_pdf(tmp_path: Path, drawn: Drawn) -> None:
    """--format html: one figure object per figure, saved once, as SVG; no PDF anywhere; the page is the golden
    one (drawing less changes nothing a reader sees)."""
    run = render(tmp_path / "run", "html")
    fresh = outputs(run)
    assert sorted(fresh) == ["index.html"]
    assert not same(fresh, {"index.html": expected()["index.html"]})
    assert not list((run / "report").rglob("*.pdf"))
    n_figures = fresh["index.html"].count('<figure')
    assert n_figures >= 5  # two box plots, two schedule plots, the telemetry series
    assert drawn.made == n_figures, drawn.made
    assert drawn.formats == Counter({"svg": n_figures}), drawn.saved
    assert set(drawn.saved.values()) == {1}


@pytest.mark.slow
def test_latex_draws_each_figure_once_for_svg_and_pdf(tmp_path: Path, drawn: Drawn) -> None:
    """--format latex: each figure drawn once, the one figure object saved as SVG and PDF; the sources and PDFs
    are the golden ones."""
    run = render(tmp_path / "run", "latex")
    fresh = outputs(run)
    golden = {k: v for k, v in expected().items() if k.startswith("latex/")}
    assert sorted(fresh) == sorted(golden)
    assert not same(fresh, golden), "\n".join(same(fresh, golden))
    n_figures = len(fresh[f"latex/{FIGURE_HASHES}"].splitlines())
    assert drawn.made == n_figures
    assert drawn.formats == Counter({"svg": n_figures, "pdf": n_figures})
    assert {fmt for (_fig, fmt) in drawn.saved} == {"svg", "pdf"}
    assert len({fig for (fig, _fmt) in drawn.saved}) == n_figures  # the PDF from the SVG's figure object


def test_the_figures_module_imports_no_plotting() -> None:
    """Importing the report's figure code costs nothing: matplotlib (0.3 s) is imported when a figure is drawn,
    after the non-interactive backend is chosen."""
    import subprocess

    code = ("import sys, os; import kit.report.figures; "
            "print(sorted(m for m in sys.modules if m.startswith('matplotlib')), os.environ.get('MPLBACKEND'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, check=True).stdout.strip()
    assert out == "[] Agg", out


def test_a_figure_without_pdf_is_svg_only() -> None:
    """Outside the LaTeX formats to_svg saves the SVG alone; inside it the same figure object gives both."""
    from kit.report import figures

    plt = figures.pyplot()
    for pdf in (False, True):
        fig, ax = plt.subplots(figsize=(2, 1))
        ax.plot([0, 1], [1, 0])
        with figures.vector_formats(pdf=pdf):
            svg = figures.to_svg(fig)
        assert svg.startswith("<svg")
        assert (svg.pdf is not None and svg.pdf.startswith(b"%PDF-")) if pdf else svg.pdf is None


if __name__ == "__main__":  # regenerate the golden set: tests/data/golden/report/REGENERATE.md
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kit-report-golden-") as tmp:
        for p in regenerate(Path(tmp)):
            print(p.relative_to(REPO))


@pytest.mark.slow
def test_a_stored_analysis_is_reused_while_its_seal_holds_and_gives_the_same_report(tmp_path: Path) -> None:
    """`kit report` of a run it analysed before reads its sealed analysis.json instead of recomputing it (issue 44)
    and writes the same report; --reanalyse, or an edited input, recomputes."""
    run = render(tmp_path / "run", "html,latex")
    first = outputs(run)
    again = CliRunner().invoke(app, ["report", str(run), "--format", "html,latex"])
    assert again.exit_code == 0 and "(stored, its seal holds" in again.output, again.output
    assert outputs(run) == first
    forced = CliRunner().invoke(app, ["report", str(run), "--format", "html", "--reanalyse"])
    assert forced.exit_code == 0 and "(stored" not in forced.output, forced.output
    trial = sorted((run / "trials").glob("*.json"))[-1]
    trial.write_text(trial.read_text().replace("}", " }", 1))  # same content, other bytes: the seal no longer holds
    edited = CliRunner().invoke(app, ["report", str(run), "--format", "html"])
    assert edited.exit_code == 0 and "(stored" not in edited.output, edited.output
