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
from typing import TYPE_CHECKING, Any, TypedDict

import jinja2
from markupsafe import Markup

from kit.errors import ReportError
from kit.fmt import fmt_num, fmt_p
from kit.report.html import TEMPLATES
from kit.report.sections import Figure, Section, Table
from kit.store import atomic_write_bytes

if TYPE_CHECKING:  # the context module builds what this one renders; only its type is needed here
    from kit.report.context import ReportContext

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


_SOFT_BREAK = re.compile(r"(?<=[A-Za-z0-9])[/,](?=[A-Za-z])|(?<=[A-Z0-9]{2})_(?=[A-Z]{2})")


def tex_text(text: Any) -> str:
    """Plain text as LaTeX (:func:`tex_escape`) that may also wrap after a slash or a comma between words, or
    after an underscore in a constant's name ("tensorflow/pytorch", "avx2,fma,avx512f", "NVML_FI_DEV_POWER"):
    the places a reader expects a line to end, so a narrow column needs neither a word cut inside nor a box over
    the margin. A number's thousands separator ("61,706") and a lower-case name ("blocked_pairs") are not."""
    return tex_escape(_SOFT_BREAK.sub(lambda m: m.group(0) + "\x00", str(text))).replace("\x00", r"\allowbreak{}")


def _finalize(value: Any) -> Any:
    if isinstance(value, Markup):
        return value
    if value is None:
        return "--"
    if isinstance(value, float | int) and not isinstance(value, bool):
        return tex_escape(fmt_num(value))
    return tex_text(value)


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


class FigureEntry(TypedDict):
    """A figure as the LaTeX report includes it: its file under figures/ (``pdf``: the bytes to write there)."""

    id: str
    title: str
    kind: str
    pdf: bytes | None
    file: str
    refused: str | None


class LatexSection(Section):
    """A section with the fragments its tables and figures were written to."""

    table_files: list[str]
    figure_entries: list[FigureEntry]


def _figure_entry(fig: Figure, prefix: str = "") -> FigureEntry:
    """A figure for LaTeX: its vector PDF (kit.report.figures) or, for a study figure given as PNG, those checked
    bytes (kit.report.sections); ``pdf`` holds the file's bytes either way (None: only in the HTML report)."""
    fid = _slug(prefix + fig["id"])
    pdf, png = getattr(fig.get("svg"), "pdf", None), fig.get("png")
    data, ext = (pdf, "pdf") if isinstance(pdf, bytes) else ((png, "png") if isinstance(png, bytes) else (None, "pdf"))
    return {"id": fid, "title": fig["title"], "kind": fig.get("kind", ""), "pdf": data, "file": f"{fid}.{ext}",
            "refused": fig.get("refused")}


TEXT_WIDTH_CM = 17.0  # A4 with 2 cm margins (report.tex.j2's geometry)
CHAR_CM = 0.16  # about one character of \footnotesize text
SEP_CM = 0.21  # between two columns: 2 x \tabcolsep of 3 pt


def section_table_tex(env: jinja2.Environment, table: Table, label: str, long: bool = False) -> str:
    """One study section's table as LaTeX: a longtable in the appendices (it may break across pages), a float
    in the main text; columns sized by :func:`column_spec` so that the table fits the text width."""
    return env.get_template("section_table.tex.j2").render(table=table, label=label, spec=column_spec(table),
                                                           long=long)


def column_spec(table: Table, width_cm: float = TEXT_WIDTH_CM) -> str:
    """A tabular column spec for a section's table that fits the text width without cutting a word: columns
    whose longest entry fits stay ``l``; when the natural widths add up to more than the line, the wide columns
    become ragged-right ``p`` columns: each gets at least its longest word, and the width left is shared in
    proportion to what each would need on one line (a cell wraps at spaces, never inside a word). Why: an ``l``
    column cannot wrap, and a table of them was scaled down to an unreadable size or ran into the margin."""
    columns = [str(c) for c in table.get("columns") or []]
    rows = table.get("rows") or []
    if not columns:
        return ""
    natural, longest = [], []
    for i, c in enumerate(columns):
        cells = [c] + [str(r[i]) for r in rows if i < len(r) and r[i] is not None]
        natural.append(max(len(x) for x in cells) * CHAR_CM + 0.2)
        longest.append(max(len(w) for x in cells for w in (_SOFT_BREAK.sub(" ", x).split() or [""])) * CHAR_CM + 0.2)
    width_cm -= SEP_CM * (len(columns) - 1)
    if sum(natural) <= width_cm:
        return "@{}" + " ".join("l" for _ in columns) + "@{}"
    # the columns that wrap: those wider than an equal share of the line and with more than one word
    wrap = [natural[k] > longest[k] and natural[k] > width_cm / len(columns) for k in range(len(columns))]
    fixed = sum(natural[k] for k in range(len(columns)) if not wrap[k])
    base = sum(longest[k] for k in range(len(columns)) if wrap[k])
    spare = max(0.0, width_cm - fixed - base)
    extra = sum(natural[k] - longest[k] for k in range(len(columns)) if wrap[k]) or 1.0
    last = max((k for k in range(len(columns)) if wrap[k]), default=-1)
    out = []
    for k in range(len(columns)):
        if not wrap[k]:
            out.append("l")
            continue
        share = longest[k] + spare * (natural[k] - longest[k]) / extra - 0.2
        fin = r"\arraybackslash" if k == last else ""
        out.append(rf">{{\raggedright{fin}}}p{{{share:.2f}cm}}")
    return "@{}" + " ".join(out) + "@{}"


def _write(path: Path, text: str) -> Path:
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def render_latex(ctx: ReportContext, out_dir: Path, pdf: bool = False) -> list[Path]:
    """Write report/latex/ (main .tex, table and figure fragments, figure PDFs); build the PDF on request."""
    if pdf and shutil.which("latexmk") is None:
        raise ReportError("--format pdf needs latexmk and a TeX distribution, which are not installed",
                          where="kit report --format", fix=f"apt-get install {TEX_PACKAGES} (or drop pdf from --format)")
    env = environment()
    root = out_dir / LATEX_DIR
    (root / "tables").mkdir(parents=True, exist_ok=True)
    (root / "figures").mkdir(parents=True, exist_ok=True)
    figures = [_figure_entry(f) for f in ctx["figures"]]
    sections: list[LatexSection] = []
    appendix: list[LatexSection] = []
    for group, out, long in ((ctx["sections"], sections, False), (ctx.get("appendix_sections") or [], appendix, True)):
        for s in group:
            tables = []
            for k, t in enumerate(s.get("tables", [])):
                name = f"section-{_slug(s['id'])}-{k + 1}"
                _write(root / "tables" / f"{name}.tex", section_table_tex(env, t, name, long=long))
                tables.append(name)
            figs = [_figure_entry(f, prefix=f"{s['id']}-") for f in s.get("figures", [])]
            out.append(LatexSection(**s, table_files=tables, figure_entries=figs))
    for entry in figures + [g for s in sections + appendix for g in s["figure_entries"]]:
        if entry["pdf"] is not None:
            atomic_write_bytes(root / "figures" / entry["file"], entry["pdf"])
            _write(root / "figures" / f"{entry['id']}.tex", env.get_template("figure.tex.j2").render(fig=entry))
    for name in ("claims", "hypotheses", "design", "descriptives", "threats", "deviations", "environment", "devices", "selftest", "measured",
                 "raw-data"):
        _write(root / "tables" / f"{name}.tex", env.get_template(f"table_{name}.tex.j2").render(**ctx))
    main = _write(root / "report.tex", env.get_template("report.tex.j2").render(
        **{**ctx, "figures": figures, "sections": sections, "appendix_sections": appendix}))
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
