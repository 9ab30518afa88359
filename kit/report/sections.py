"""Study-specific report sections, in a format both templates can lay out.

A section is plain data:
``{"id", "title", "paragraphs": [str], "tables": [{"caption", "columns": [str],
"rows": [[cell, ...]]}], "figures": [{"id", "title", "svg"}]}``.
A study folder's report.py makes them from the manifest and the finished analysis.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

Section = dict[str, Any]


def extra_sections(manifest: dict[str, Any], analysis: dict[str, Any], run_path: Path | None = None) -> list[Section]:
    """The study's own sections: its folder's report.py (kit.studies.study_sections); the kit registers none."""
    from kit.studies import study_sections

    return study_sections(run_path, manifest, analysis)
