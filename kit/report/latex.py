"""The LaTeX report: a standalone article whose tables and figures are separate fragments.

``report/latex/report.tex`` ``\\input``s ``tables/*.tex`` and ``figures/*.tex``
(each figure a vector PDF next to its fragment), so a paper can ``\\input``
the same fragments (with ``\\graphicspath`` pointing at the report's latex
directory). Templates live in reports/templates/latex/ and use a LaTeX-safe
Jinja2 syntax: ``\\VAR{x}`` (escaped unless marked safe), ``\\BLOCK{...}``,
``\\#{comment}``. The PDF is built with latexmk when TeX is installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from kit.errors import ReportError
from kit.fmt import fmt_num, fmt_p
from kit.report.html import TEMPLATES
from kit.store import atomic_write_bytes

LATEX_DIR = "latex"
TEX_PACKAGES = "texlive-latex-base texlive-latex-recommended texlive-latex-extra latexmk"
LATEXMK = ("latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error")

_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
            "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
            ">": r"\textgreater{}", "|": r"\textbar{}"}
# Characters the kit's texts use that pdflatex's default fonts lack; math or ASCII stand-ins.
_UNICODE = {"δ": r"$\delta$", "α": r"$\alpha$", "σ": r"$\sigma$", "μ": r"$\mu$", "τ": r"$\tau$", "°": r"$^\circ$",
            "±": r"$\pm$", "×": r"$\times$", "≤": r"$\leq$", "≥": r"$\geq$", "≠": r"$\neq$", "≈": r"$\approx$",
            "−": "-", "·": r"$\cdot$", "→": r"$\rightarrow$", "–": "--", "—": "---", "…": r"\dots{}",
            "‘": "`", "’": "'", "“": "``", "”": "''", "\u00a0": "~", "✓": "yes", "✗": "no", "²": r"$^2$"}
_BREAK_AFTER = set("/.-:,=@")


def tex_escape(text: Any) -> str:
    """Plain text as LaTeX: specials escaped, known Unicode mapped, other non-Latin characters as '?'."""
    out = []
    for ch in str(text):
        if ch in _SPECIAL:
            out.append(_SPECIAL[ch])
        elif ch in _UNICODE:
            out.append(_UNICODE[ch])
        elif ord(ch) < 128 or 0xC0 <= ord(ch) <= 0x17F:
            out.append(ch)
        else:
            out.append("?")
    return "".join(out)


def tex_code(text: Any) -> Markup:
    """Monospaced, escaped, breakable after path and digest separators and inside long runs."""
    out, run = [], 0
    for ch in str(text):
        out.append(tex_escape(ch) if ch != " " else "~")
        run = 0 if not ch.isalnum() else run + 1
        if ch in _BREAK_AFTER or run >= 12 or ch == " ":
            out.append(r"\allowbreak{}")
            run = 0
    return Markup(r"\texttt{" + "".join(out) + "}")


def _finalize(value: Any) -> Any:
    if isinstance(value, Markup):
        return value
    if value is None:
        return "--"
    if isinstance(value, float | int) and not isinstance(value, bool):
        return tex_escape(fmt_num(value))
    return tex_escape(value)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES / "latex")),
        block_start_string=r"\BLOCK{", block_end_string="}",
        variable_start_string=r"\VAR{", variable_end_string="}",
        comment_start_string=r"\#{", comment_end_string="}",
        trim_blocks=True, lstrip_blocks=True, autoescape=False, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined, finalize=_finalize,
    )
    env.filters["num"] = fmt_num
    env.filters["p"] = fmt_p
    env.filters["code"] = tex_code
    env.filters["e"] = tex_escape
    env.filters["raw"] = Markup
    return env


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9-]+", "-", s).strip("-") or "x"


def _figure_entry(fig: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A figure for LaTeX: its vector PDF (kit.report.figures) or, for a study figure given as PNG, those checked
    bytes (kit.report.sections); ``pdf`` holds the file's bytes either way (None: only in the HTML report)."""
    fid = _slug(prefix + fig["id"])
    pdf, png = getattr(fig.get("svg"), "pdf", None), fig.get("png")
    data, ext = (pdf, "pdf") if isinstance(pdf, bytes) else ((png, "png") if isinstance(png, bytes) else (None, "pdf"))
    return {"id": fid, "title": fig["title"], "kind": fig.get("kind", ""), "pdf": data, "file": f"{fid}.{ext}",
            "refused": fig.get("refused")}


def _write(path: Path, text: str) -> Path:
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def render_latex(ctx: dict[str, Any], out_dir: Path, pdf: bool = False) -> list[Path]:
    """Write report/latex/ (main .tex, table and figure fragments, figure PDFs); build the PDF on request."""
    if pdf and shutil.which("latexmk") is None:
        raise ReportError("--format pdf needs latexmk and a TeX distribution, which are not installed",
                          where="kit report --format", fix=f"apt-get install {TEX_PACKAGES} (or drop pdf from --format)")
    env = environment()
    root = out_dir / LATEX_DIR
    (root / "tables").mkdir(parents=True, exist_ok=True)
    (root / "figures").mkdir(parents=True, exist_ok=True)
    figures = []
    for f in ctx["figures"]:
        figures.append(_figure_entry(f))
    sections = []
    for s in ctx["sections"]:
        tables = []
        for k, t in enumerate(s.get("tables", [])):
            name = f"section-{_slug(s['id'])}-{k + 1}"
            _write(root / "tables" / f"{name}.tex", env.get_template("section_table.tex.j2").render(table=t, label=name))
            tables.append(name)
        figs = [_figure_entry(f, prefix=f"{s['id']}-") for f in s.get("figures", [])]
        sections.append({**s, "table_files": tables, "figure_entries": figs})
    for f in figures + [g for s in sections for g in s["figure_entries"]]:
        if f["pdf"] is not None:
            atomic_write_bytes(root / "figures" / f["file"], f["pdf"])
            _write(root / "figures" / f"{f['id']}.tex", env.get_template("figure.tex.j2").render(fig=f))
    for name in ("claims", "hypotheses", "design", "descriptives", "threats", "deviations", "environment", "devices", "selftest", "measured",
                 "raw-data"):
        _write(root / "tables" / f"{name}.tex", env.get_template(f"table_{name}.tex.j2").render(**ctx))
    main = _write(root / "report.tex", env.get_template("report.tex.j2").render(
        **{**ctx, "figures": figures, "sections": sections}))
    paths = [main]
    if pdf:
        paths.append(build_pdf(main))
    return paths


def build_pdf(tex: Path, timeout_s: float = 300) -> Path:
    """latexmk -pdf in the .tex's directory; a failure is a ReportError with the log's tail."""
    try:
        proc = subprocess.run([*LATEXMK, tex.name], cwd=tex.parent, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ReportError(f"latexmk took longer than {timeout_s:g} s", where=str(tex),
                          fix="look at the .log next to the .tex") from None
    pdf = tex.with_suffix(".pdf")
    if proc.returncode != 0 or not pdf.exists():
        log = tex.with_suffix(".log")
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else proc.stdout + proc.stderr
        tail = "\n".join(text.strip().splitlines()[-25:])
        raise ReportError(f"LaTeX failed (latexmk exit {proc.returncode}); log tail:\n{tail}", where=str(tex),
                          fix=f"see {log}; report the error with the run directory")
    return pdf
