"""Study-specific report sections, in a format both templates can lay out.

A section is plain data:
``{"id", "title", "paragraphs": [str], "tables": [{"caption", "columns": [str],
"rows": [[cell, ...]]}], "figures": [{"id", "title", "svg"}]}``.
A study folder's report.py makes them from the manifest and the finished analysis.

The report is the kit's, not the study's: what a study returns is data, re-built here into sections of the
kit's own shape (:func:`study_section`), so nothing a study writes reaches a page as markup. Texts become plain
``str`` (a ``markupsafe.Markup`` from in-process code is not trusted as safe), cut to size; table cells are
numbers or text; ids are checked, and rewritten when they are not plain names or when they would take an id of
the kit's own page (:data:`KIT_IDS`, the kit's figures); figures become images the kit encodes
(:mod:`kit.report.svg_safe`: an SVG re-written to drawing elements, or checked PNG bytes). Each section says
whose it is (``origin``: the study's report.py, which copy, its digest), so a study cannot pass its words off
as the kit's verdict.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, NotRequired, TypedDict

from kit.analysis_record import Analysis
from kit.errors import ReportError
from kit.manifest import Manifest
from kit.report.svg_safe import png_data_url, sanitize_svg
from kit.studies import Hooks, study_sections

Cell = str | int | float | None


class Table(TypedDict):
    """A table of a section: plain text and numbers only."""

    caption: str
    columns: list[str]
    rows: list[list[Cell]]


class Details(TypedDict):
    """A line with a table behind a <details> element (kit.report.appendix)."""

    line: str
    summary: str
    tables: list[Table]


class DrawnFigure(TypedDict):
    """One of the kit's own figures as drawn (kit.report.figures), before :func:`kit_figure` encodes it."""

    id: str
    title: str
    kind: str
    svg: str


class Figure(TypedDict):
    """A figure as a page shows it: ``src`` (a data: URL the kit wrote) or ``refused`` (why not)."""

    id: str
    title: str
    kind: str
    svg: str | None  # the re-written SVG (a VectorFigure carrying its PDF, for LaTeX)
    png: bytes | None
    src: str | None
    refused: str | None
    note: str | None  # what the kit removed from the drawing


class Section(TypedDict):
    """A section both templates lay out (see the module docstring)."""

    id: str
    title: str
    paragraphs: list[str]
    tables: list[Table]
    figures: list[Figure]
    origin: NotRequired[str]  # a study's section: whose code wrote it
    notes: NotRequired[list[str]]  # what the kit left out of a study's section
    details: NotRequired[list[Details]]


# Every id the kit's own HTML page uses (reports/templates/report.html.j2 and the kit's sections); a study's
# section or figure never takes one of them (nor one of the kit's figure ids, passed in by the context).
KIT_IDS = frozenset({
    "answer", "claims", "findings", "figures", "hypotheses", "design", "threats", "goal", "descriptives",
    "environment", "devices", "selftest", "deviations", "reproduce", "raw", "study-code", "excluded-trials",
    "retried-trials", "host-conditions", "sequential"})
MAX_SECTIONS = 200
MAX_PARAGRAPHS = 200
MAX_TEXT_CHARS = 20_000
MAX_TABLES = 50
MAX_COLUMNS = 64
MAX_ROWS = 5_000
MAX_FIGURES = 50
MAX_PDF_BYTES = 16 << 20
_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# which study code wrote a section, in the reader's words (kit.studies.Hooks.kind)
ORIGIN = {"bundled": "the study folder bundled with the kit", "copy": "the run's copy of its study folder, which "
          "you trusted", "folder": "the study folder given with --study"}


def extra_sections(manifest: Manifest, analysis: Analysis, hooks: Hooks,
                   reserved: frozenset[str] | set[str] = KIT_IDS) -> list[Section]:
    """The study's own sections: its folder's report.py (kit.studies.study_sections) where the reader trusted
    that code; the kit registers none. Each is re-built by :func:`study_section` (``reserved``: ids of the kit's
    page the study's may not take). The study's code gets analysis.json's content (``to_json``): it runs in a
    child process, and its API types what it receives (kit.study_api)."""
    raw = study_sections(hooks, manifest, analysis)
    taken = set(KIT_IDS) | set(reserved)
    where = str(hooks.root / "report.py") if hooks.root is not None else "report.py"
    origin = origin_line(hooks)
    out = [study_section(sec, i, taken, where, origin) for i, sec in enumerate(raw[:MAX_SECTIONS])]
    if len(raw) > MAX_SECTIONS:
        out[-1]["notes"].append(f"The kit left out {len(raw) - MAX_SECTIONS} further section(s) of the study "
                                f"(at most {MAX_SECTIONS}).")
    return out


def origin_line(hooks: Hooks) -> str:
    """The line under a study section's heading: whose code wrote it."""
    source = ORIGIN.get(hooks.kind, hooks.kind)
    digest = f", digest {hooks.digest[:12]}" if hooks.digest else ""
    return f"Written by the study's report.py ({source}{digest}), not by the kit."


def text(value: Any, limit: int = MAX_TEXT_CHARS) -> str:
    """A study's text as a plain ``str`` (never a str subclass that could be marked safe), without control
    characters, at most ``limit`` characters."""
    s = value if isinstance(value, str) else ("" if value is None else str(value))
    s = "".join(["", s])  # an exact str: a Markup or other subclass is copied as plain text
    s = _CONTROL.sub("", s)
    return s if len(s) <= limit else s[:limit - 1] + "…"


def safe_id(raw: Any, taken: set[str], fallback: str) -> str:
    """A plain, unused id for ``raw`` (kept when it is one): otherwise its letters, digits, - and _ under
    ``study-``, numbered when that is taken too. The result is added to ``taken``."""
    s = text(raw, 200)
    if not _ID.match(s) or s in taken:
        slug = re.sub(r"[^A-Za-z0-9_-]+", "-", s).strip("-_")[:56] or fallback
        s = f"study-{slug}"
    base, n = s, 2
    while s in taken:
        s, n = f"{base}-{n}", n + 1
    taken.add(s)
    return s


def _cell(value: Any) -> Cell:
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    return text(value, 2_000)


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _table(raw: Any) -> Table:
    t = raw if isinstance(raw, dict) else {}
    columns = [text(c, 500) for c in _list(t.get("columns"))[:MAX_COLUMNS]]
    rows_in = _list(t.get("rows"))
    rows = [[_cell(c) for c in _list(r)[:MAX_COLUMNS]] for r in rows_in[:MAX_ROWS]]
    caption = text(t.get("caption"), 2_000)
    if len(rows_in) > MAX_ROWS:
        caption += f" (the kit shows the first {MAX_ROWS} of {len(rows_in)} rows)"
    return {"caption": caption, "columns": columns, "rows": rows}


def study_section(raw: Any, index: int, taken: set[str], where: str, origin: str) -> Section:
    """One section of a study, re-built from the kit's fields only (see the module docstring)."""
    sec = raw if isinstance(raw, dict) else {}
    sid = safe_id(sec.get("id"), taken, f"section-{index + 1}")
    paragraphs = _list(sec.get("paragraphs"))
    tables = _list(sec.get("tables"))
    figures = _list(sec.get("figures"))
    notes = []
    cut = [f"{len(items) - cap} {what}" for items, cap, what in ((paragraphs, MAX_PARAGRAPHS, "paragraph(s)"),
                                                                  (tables, MAX_TABLES, "table(s)"),
                                                                  (figures, MAX_FIGURES, "figure(s)"))
           if len(items) > cap]
    if cut:
        notes.append(f"The kit left out {', '.join(cut)} of this section (over its limits).")
    return {"id": sid, "title": text(sec.get("title"), 500), "origin": origin, "notes": notes,
            "paragraphs": [text(p) for p in paragraphs[:MAX_PARAGRAPHS]],
            "tables": [_table(t) for t in tables[:MAX_TABLES]],
            "figures": [study_figure(f, taken, where) for f in figures[:MAX_FIGURES]]}


def study_figure(raw: Any, taken: set[str], where: str) -> Figure:
    """A study's figure as the kit shows it: ``src`` (a data: URL the kit wrote) or ``refused`` (why not), the
    re-written SVG with the study's PDF (``svg``, for LaTeX) or its PNG bytes (``png``), and ``note`` (what the
    kit removed from the drawing)."""
    from kit.report.figures import VectorFigure
    from kit.study_child import VECTOR_FIGURE

    fig = raw if isinstance(raw, dict) else {}
    fid = safe_id(fig.get("id"), taken, "figure")
    out: Figure = {"id": fid, "title": text(fig.get("title"), 1_000), "kind": "", "svg": None, "png": None,
                   "src": None, "refused": None, "note": None}
    at = f"{where}: figure {fid}"
    svg, pdf = fig.get("svg"), None
    if isinstance(svg, dict):  # a figure that came back from a child process (kit.study_child)
        pdf = _b64(svg.get("pdf_b64"))
        svg = svg.get(VECTOR_FIGURE)
    elif isinstance(svg, str):  # in-process (bundled) code: a VectorFigure carries its PDF
        pdf = getattr(svg, "pdf", None)
    try:
        if isinstance(svg, str):
            clean = sanitize_svg("".join(["", svg]), at)
            vec = VectorFigure(clean.text)
            vec.pdf = pdf if isinstance(pdf, bytes) and pdf.startswith(b"%PDF-") and len(pdf) <= MAX_PDF_BYTES \
                else None
            out["svg"], out["src"], out["note"] = vec, clean.data_url(), removed_note(clean.dropped)
        elif fig.get("png") is not None or fig.get("png_b64") is not None:
            png = fig.get("png") if isinstance(fig.get("png"), bytes) else _b64(fig.get("png_b64"))
            out["src"], out["png"] = png_data_url(png if isinstance(png, bytes) else b"", at), png
        else:
            out["refused"] = "the study returned no SVG text and no PNG bytes for this figure"
    except ReportError as exc:
        out["refused"] = exc.cause
    return out


def _b64(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True) or None
    except (binascii.Error, ValueError):
        return None


QUIET = ("element metadata",)  # removed from every matplotlib figure: not drawing, nothing a reader misses


def removed_note(dropped: tuple[tuple[str, int], ...]) -> str | None:
    """What the kit removed from a figure, for its caption (None: nothing a reader would miss)."""
    said = [f"{what} ×{n}" for what, n in dropped if what not in QUIET]
    if not said:
        return None
    return "The kit removed from this figure what it does not show: " + "; ".join(said[:12]) + (
        f"; and {len(said) - 12} more" if len(said) > 12 else "") + "."


def kit_figure(fig: DrawnFigure) -> Figure:
    """One of the kit's own figures with its image (``src``): the same re-writing as a study's, so every figure
    of a page is an image the kit encoded and the page's policy can forbid inline styles."""
    out: Figure = {"id": fig["id"], "title": fig["title"], "kind": fig["kind"], "svg": fig["svg"], "png": None,
                   "src": None, "refused": None, "note": None}
    try:
        clean = sanitize_svg(str(fig["svg"]), f"figure {fig['id']}")
        out["src"], out["note"] = clean.data_url(), removed_note(clean.dropped)
    except ReportError as exc:
        out["refused"] = exc.cause
    return out


def study_code_section(hooks: Hooks) -> list[Section]:
    """A short section saying that the run's study code was not run, and how to include it ([] otherwise)."""
    if not hooks.notice:
        return []
    return [{"id": "study-code", "title": "Study code not run", "paragraphs": [hooks.notice[0].upper() + hooks.notice[1:]
                                                                               + "."], "tables": [], "figures": []}]
