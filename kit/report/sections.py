"""Study-specific report sections, in a format both templates can lay out.

A section is plain data:
``{"id", "title", "paragraphs": [str], "tables": [{"caption", "columns": [str],
"rows": [[cell, ...]]}], "figures": [{"id", "title", "svg"}]}``.
A study folder's report.py makes them from the manifest and the finished analysis.
"""

from __future__ import annotations

from typing import Any

from kit.studies import Hooks, study_sections

Section = dict[str, Any]


def extra_sections(manifest: dict[str, Any], analysis: dict[str, Any], hooks: Hooks) -> list[Section]:
    """The study's own sections: its folder's report.py (kit.studies.study_sections) where the reader trusted
    that code; the kit registers none."""
    return study_sections(hooks, manifest, analysis)


def study_code_section(hooks: Hooks) -> list[Section]:
    """A short section saying that the run's study code was not run, and how to include it ([] otherwise)."""
    if not hooks.notice:
        return []
    return [{"id": "study-code", "title": "Study code not run", "paragraphs": [hooks.notice[0].upper() + hooks.notice[1:]
                                                                               + "."], "tables": [], "figures": []}]
