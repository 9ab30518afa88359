"""Reports: finished analysis in, documents out (HTML, LaTeX, PDF by format).

``build_context`` turns the analysis (:class:`kit.analysis_record.Analysis`)
and the manifest into everything a template shows, so templates only lay out
numbers that already exist.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from kit.analysis_record import Analysis
from kit.errors import ReportError, disk_error
from kit.report.context import build_context
from kit.report.figure_cache import redrawing
from kit.report.figures import vector_formats
from kit.store import REPORT, RunDir
from kit.studies import resolve_hooks
from kit.trust import StudyTrust

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


def write_report(run_dir: Path, analysis: Analysis, formats: tuple[str, ...] = ("html",),
                 trust: StudyTrust | None = None, redraw: bool = False) -> list[Path]:
    """Render the requested formats into RUN_DIR/report/ and return their paths.

    The kit's figures come from the user's figure cache when they were drawn before from the same data
    (kit.report.figure_cache); ``redraw`` draws each afresh (and stores it).

    ``report/`` must be a real directory of the run (a planted link is refused, never written through);
    index.html is written by rename, and the LaTeX tree is built in a fresh temporary directory and renamed
    to ``report/latex`` when complete, so no file planted there is followed by the kit or by latexmk.
    """
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ReportError(f"unknown report format(s): {', '.join(bad)}", where="--format",
                          fix=f"use a comma-separated subset of {', '.join(FORMATS)}")
    rd = RunDir.open(run_dir)
    manifest = rd.manifest()
    # the figures' PDFs only for LaTeX: an HTML page needs the SVGs alone, and saving is most of the drawing time
    with vector_formats(pdf="latex" in formats or "pdf" in formats), redrawing(redraw):
        ctx = build_context(manifest, analysis, rd.path, resolve_hooks(rd.path, manifest, trust))
    out_dir = rd.subdir(REPORT)
    paths: list[Path] = []
    if "html" in formats:
        from kit.report.html import render_html

        paths.append(render_html(ctx, out_dir))
    if "latex" in formats or "pdf" in formats:
        from kit.report.latex import LATEX_DIR, render_latex

        try:
            tmp = Path(tempfile.mkdtemp(prefix=".latex-", dir=out_dir))
        except OSError as exc:
            raise disk_error(exc, out_dir, "write the report") from None
        try:
            try:
                made = render_latex(ctx, tmp, pdf="pdf" in formats)
            except ReportError as exc:  # keep the failed tree (its .log says why) where the message points
                if (tmp / LATEX_DIR).is_dir():
                    _replace_dir(tmp / LATEX_DIR, out_dir / LATEX_DIR)

                def moved(text: str | None) -> str | None:
                    return None if text is None else text.replace(str(tmp), str(out_dir))
                raise ReportError(moved(exc.cause) or exc.cause, where=moved(exc.where), fix=moved(exc.fix)) from None
            _replace_dir(tmp / LATEX_DIR, out_dir / LATEX_DIR)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        paths += [out_dir / p.relative_to(tmp) for p in made]
    return paths


def _replace_dir(new: Path, final: Path) -> None:
    """Put the directory ``new`` at ``final``: whatever is there (a link: the name only; a directory: itself,
    never what links in it point to) is moved aside and removed."""
    import os

    old = None
    if os.path.lexists(final):
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.rename(final, old)
    os.rename(new, final)
    if old is not None:
        if old.is_symlink() or not old.is_dir():
            old.unlink()
        else:
            shutil.rmtree(old, ignore_errors=True)
