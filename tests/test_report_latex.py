"""The LaTeX report: escaping, a standalone article that \\input's booktabs tables and vector
figures (fragments a paper can \\input too), the PDF built with latexmk and its text checked."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kit.analysis.analyze import analyze_run
from kit.analysis_record import Analysis
from kit.errors import ReportError
from kit.report import latex as latex_mod
from kit.report import write_report
from kit.report.latex import build_pdf, environment, tex_code, tex_escape

GOLDEN_RUN = Path(__file__).parent / "data" / "golden" / "run"
HAVE_TEX = shutil.which("latexmk") is not None and shutil.which("pdflatex") is not None
needs_tex = pytest.mark.skipif(not HAVE_TEX, reason="latexmk/pdflatex not installed (apt-get install "
                               + latex_mod.TEX_PACKAGES + ")")


@pytest.mark.parametrize(("raw", "tex"), [
    ("50%", r"50\%"), ("a_b", r"a\_b"), ("R&D", r"R\&D"), ("#1", r"\#1"), ("$5", r"\$5"),
    ("{x}", r"\{x\}"), ("~", r"\textasciitilde{}"), ("^", r"\textasciicircum{}"), ("\\", r"\textbackslash{}"),
    ("p < 0.05", r"p \textless{} 0.05"), ("δ=+0.46", r"$\delta$=+0.46"), ("95 °C", r"95 $^\circ$C"),
    ("0.1–0.2", "0.1--0.2"), ("café", "café"), ("漢", "?"),
])
def test_escape(raw: str, tex: str) -> None:
    assert tex_escape(raw) == tex


def test_escape_leaves_no_active_character() -> None:
    out = tex_escape(r"_%&#${}~^\ all at once")
    for ch in "_%&#$":
        assert out.count(ch) == out.count("\\" + ch), (ch, out)


def test_code_is_monospaced_escaped_and_breakable() -> None:
    out = tex_code("runs/2026_x/sha256:" + "ab" * 16)
    assert out.startswith(r"\texttt{") and r"\_" in out and r"\allowbreak{}" in out
    assert "abababababab" + r"\allowbreak{}" in out  # long digests break every 12 characters


def test_templates_escape_values_unless_marked_raw() -> None:
    env = environment()
    assert env.from_string(r"\textbf{\VAR{x}}").render(x="50% of $5 & #1_a") == r"\textbf{50\% of \$5 \& \#1\_a}"
    assert env.from_string(r"\VAR{x | raw}").render(x=r"\emph{y}") == r"\emph{y}"
    assert env.from_string(r"\BLOCK{for v in xs}\VAR{v | num};\BLOCK{endfor}").render(xs=[0.5, None, 1234]) == "0.5;--;1,234;"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("golden") / "run"
    shutil.copytree(GOLDEN_RUN, run)
    analyze_run(run)
    return run


def _analysis(run: Path) -> Analysis:
    import json

    return Analysis.from_json(json.loads((run / "analysis.json").read_text()), "analysis.json")


def test_latex_article_inputs_booktabs_tables_and_pdf_figures(run_dir: Path) -> None:
    (main,) = write_report(run_dir, _analysis(run_dir), ("latex",))
    assert main == run_dir / "report" / "latex" / "report.tex"
    tex = main.read_text()
    assert tex.startswith("%") and r"\documentclass" in tex and r"\usepackage{booktabs" in tex
    for name in ("measured", "hypotheses", "descriptives", "environment", "threats", "raw-data"):
        assert rf"\input{{tables/{name}}}" in tex
        frag = (main.parent / "tables" / f"{name}.tex").read_text()
        assert r"\toprule" in frag and r"\bottomrule" in frag and r"\documentclass" not in frag
    hyp = (main.parent / "tables" / "hypotheses.tex").read_text()
    assert "wilcoxon signed-rank" in hyp and hyp.count("H1 &") == 2 and r"\label{tab:hypotheses}" in hyp
    threats = (main.parent / "tables" / "threats.tex").read_text()
    assert "Frameworks not interleaved" not in threats and "randomised blocks" in threats
    figs = sorted((main.parent / "figures").glob("*.tex"))
    assert {f.stem for f in figs} >= {"box-time-s-train", "box-time-s-infer", "schedule-time-train", "telemetry-series"}
    for f in figs:
        assert rf"\input{{figures/{f.stem}}}" in tex
        pdf = f.with_suffix(".pdf")
        assert pdf.read_bytes().startswith(b"%PDF") and f"figures/{f.stem}.pdf" in f.read_text()
    plain = tex.replace(r"\allowbreak{}", "").replace("~", " ")
    assert r"\texttt{kit run " in plain and "--format html,latex,pdf}" in plain  # how to reproduce


def test_pdf_without_latexmk_names_the_packages(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(latex_mod.shutil, "which", lambda name: None)
    with pytest.raises(ReportError) as err:
        write_report(run_dir, _analysis(run_dir), ("pdf",))
    assert "latexmk" in str(err.value) and "texlive-latex-extra" in str(err.value)


@pytest.mark.tex
@needs_tex
def test_pdf_compiles_and_holds_the_hypotheses_table(run_dir: Path) -> None:
    pypdf = pytest.importorskip("pypdf")
    paths = write_report(run_dir, _analysis(run_dir), ("latex", "pdf"))
    pdf = paths[-1]
    assert pdf.suffix == ".pdf" and pdf.exists()
    reader = pypdf.PdfReader(str(pdf))
    text = "\n".join(p.extract_text() for p in reader.pages)
    assert "Hypotheses" in text and "Threats to validity" in text and "How to reproduce" in text
    assert "wilcoxon" in text and "H0 not rejected" in text and "p (Holm)" in text
    h = _analysis(run_dir).to_json()["hypotheses"][0]
    assert f"{h['p_adj']:.3g}" in text  # the table's numbers, as analysed


@pytest.mark.tex
@needs_tex
def test_fragments_input_into_a_two_column_paper(run_dir: Path, tmp_path: Path) -> None:
    """The fragments compile inside another document (the use the fragments exist for)."""
    write_report(run_dir, _analysis(run_dir), ("latex",))
    frag = run_dir / "report" / "latex"
    paper = tmp_path / "paper.tex"
    paper.write_text("\n".join([
        r"\documentclass[twocolumn]{article}",
        r"\usepackage{booktabs,longtable,array,adjustbox,graphicx}",
        rf"\graphicspath{{{{{frag}/}}}}",
        r"\begin{document}",
        rf"\input{{{frag}/tables/hypotheses}}",
        rf"\input{{{frag}/figures/box-time-s-train}}",
        r"\end{document}", ""]))
    assert build_pdf(paper).exists()


@pytest.mark.tex
@needs_tex
def test_latex_failure_is_a_kit_error_with_the_log(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tex"
    bad.write_text("\\documentclass{article}\n\\begin{document}\n\\undefinedcommandxyz\n\\end{document}\n")
    with pytest.raises(ReportError) as err:
        build_pdf(bad)
    assert "LaTeX failed" in str(err.value) and "Undefined control sequence" in str(err.value)


def test_default_formats_follow_the_installed_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    import kit.report as report

    monkeypatch.setattr(report.shutil, "which", lambda name: "/usr/bin/latexmk")
    monkeypatch.setattr(report, "_styles_present", lambda *names: True)
    assert report.default_formats() == (("html", "latex", "pdf"), None)
    monkeypatch.setattr(report, "_styles_present", lambda *names: False)  # latexmk without texlive-latex-extra
    formats, note = report.default_formats()
    assert formats == ("html", "latex") and note and "adjustbox" in note
    monkeypatch.setattr(report.shutil, "which", lambda name: None)
    formats, note = report.default_formats()
    assert formats == ("html", "latex") and note and "PDF skipped" in note and "texlive-latex-base" in note


@pytest.mark.tex
def test_styles_present_asks_tex() -> None:
    import shutil

    import kit.report as report

    if shutil.which("kpsewhich") is None:
        pytest.skip("no TeX here (CI installs it: .ci/report-tools.sh)")
    assert report._styles_present("booktabs.sty", "adjustbox.sty")
    assert not report._styles_present("booktabs.sty", "no-such-package-kit.sty")
