"""Study-specific report sections, in a format both templates can lay out.

A section is plain data:
``{"id", "title", "paragraphs": [str], "tables": [{"caption", "columns": [str],
"rows": [[cell, ...]]}], "figures": [{"id", "title", "svg"}]}``.
Functions registered here receive the manifest and the finished analysis.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

Section = dict[str, Any]
SectionMaker = Callable[[dict[str, Any], dict[str, Any]], list[Section]]

# workload name -> "module:function"
EXTRA_SECTIONS: dict[str, str] = {
    "germino": "kit.report.germino:sections",
    "dlbench": "kit.report.dlbench:sections",
    "zoo": "kit.report.zoo:sections",
    "dai_factors": "kit.report.dai:sections",
    "zoo_distributed": "kit.report.zoo_dist:sections",
}


def extra_sections(manifest: dict[str, Any], analysis: dict[str, Any]) -> list[Section]:
    name = manifest["spec"]["workload"]["name"]
    target = EXTRA_SECTIONS.get(name)
    if target is None:
        return []
    mod, _, fn = target.partition(":")
    maker: SectionMaker = getattr(importlib.import_module(mod), fn)
    sections = maker(manifest, analysis)
    for s in sections:
        s.setdefault("paragraphs", [])
        s.setdefault("tables", [])
        s.setdefault("figures", [])
    return sections
