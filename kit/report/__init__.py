"""Reports: finished analysis in, documents out (HTML, LaTeX, PDF by format).

``build_context`` turns analysis.json and the manifest into everything a
template shows, so templates only lay out numbers that already exist.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from kit.errors import ReportError
from kit.report.context import build_context
from kit.store import REPORT, RunDir

FORMATS = ("html", "latex", "pdf")


def default_formats() -> tuple[tuple[str, ...], str | None]:
    """What `kit run` writes at the end: every format this host can build, and a note on what it skipped.

    latexmk alone is not enough: the article needs booktabs and adjustbox (texlive-latex-recommended
    and -extra), and a finished run should not end in a LaTeX error on a partial TeX install.
    """
    from kit.report.latex import TEX_PACKAGES

    if shutil.which("latexmk") is not None and _styles_present("booktabs.sty", "adjustbox.sty"):
        return FORMATS, None
    return ("html", "latex"), f"PDF skipped: TeX (latexmk with booktabs and adjustbox) is not installed; apt-get install {TEX_PACKAGES}"


def _styles_present(*names: str) -> bool:
    """Whether TeX finds every one of these packages (kpsewhich prints one path per found file)."""
    import subprocess

    if shutil.which("kpsewhich") is None:
        return False
    out = subprocess.run(["kpsewhich", *names], capture_output=True, text=True, timeout=30).stdout
    return len(out.split()) == len(names)


def write_report(run_dir: Path, analysis: dict[str, Any], formats: tuple[str, ...] = ("html",)) -> list[Path]:
    """Render the requested formats into RUN_DIR/report/ and return their paths."""
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ReportError(f"unknown report format(s): {', '.join(bad)}", where="--format",
                          fix=f"use a comma-separated subset of {', '.join(FORMATS)}")
    rd = RunDir.open(run_dir)
    ctx = build_context(rd.manifest(), analysis, rd.path)
    out_dir = rd.path / REPORT
    out_dir.mkdir(exist_ok=True)
    paths: list[Path] = []
    if "html" in formats:
        from kit.report.html import render_html

        paths.append(render_html(ctx, out_dir))
    if "latex" in formats or "pdf" in formats:
        from kit.report.latex import render_latex

        paths += render_latex(ctx, out_dir, pdf="pdf" in formats)
    return paths
