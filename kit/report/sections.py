"""Study-specific report sections, in a format both templates can lay out.

A section is plain data:
``{"id", "title", "paragraphs": [str], "tables": [{"caption", "columns": [str],
"rows": [[cell, ...]]}], "figures": [{"id", "title", "svg"}]}``.
A study folder's report.py makes them from the manifest and the finished analysis.
"""

from __future__ import annotations

from typing import Any

from kit.manifest import Manifest
from kit.studies import Hooks, study_sections

Section = dict[str, Any]


def extra_sections(manifest: Manifest, analysis: dict[str, Any], hooks: Hooks) -> list[Section]:
    """The study's own sections: its folder's report.py (kit.studies.study_sections) where the reader trusted
    that code; the kit registers none. Figures that came back from a child process as {SVG, PDF} are made
    report figures again (the LaTeX report needs their PDF)."""
    sections = study_sections(hooks, manifest, analysis)
    for sec in sections:
        sec["figures"] = [_figure(f) for f in sec.get("figures") or []]
    return sections


def _figure(fig: Any) -> Any:
    import base64
    import binascii

    from kit.report.figures import VectorFigure
    from kit.study_child import VECTOR_FIGURE

    svg = fig.get("svg") if isinstance(fig, dict) else None
    if isinstance(svg, dict) and isinstance(svg.get(VECTOR_FIGURE), str):
        out = VectorFigure(svg[VECTOR_FIGURE])
        try:
            out.pdf = base64.b64decode(str(svg.get("pdf_b64") or ""), validate=True) or None
        except (binascii.Error, ValueError):
            out.pdf = None
        return {**fig, "svg": out}
    return fig


def study_code_section(hooks: Hooks) -> list[Section]:
    """A short section saying that the run's study code was not run, and how to include it ([] otherwise)."""
    if not hooks.notice:
        return []
    return [{"id": "study-code", "title": "Study code not run", "paragraphs": [hooks.notice[0].upper() + hooks.notice[1:]
                                                                               + "."], "tables": [], "figures": []}]
