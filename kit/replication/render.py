"""The replication map written out: map.html (fits 1280 px; the wide matrix scrolls inside its own box), map.tex
(a tabular a paper can ``\\input``, booktabs) and map.json (kit/schemas/map.schema.json).

Every string in a map came from other people's provenance and ledgers: it was length-capped when the map was built
(kit.replication.hostclass.cap), and is escaped here by the templates: HTML by Jinja2's autoescape under the kit's
content security policy (kit.report.html), LaTeX by the report's own escaping (kit.report.latex.tex_text), which
turns ``\\input{/etc/passwd}`` into printed text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

import jinja2

import kit
from kit.replication.build import MAP_SCHEMA, Cell, MapResult

HTML_NAME, TEX_NAME, JSON_NAME = "map.html", "map.tex", "map.json"


class MapFiles(TypedDict):
    html: str
    tex: str
    json: str


def _cells(result: MapResult) -> dict[str, dict[str, Cell]]:
    """claim id -> host class key -> cell (what the templates look up)."""
    return {c.id: {cell.class_key: cell for cell in c.cells} for c in result.claims}


def render_html(result: MapResult) -> str:
    from kit.report.html import environment

    return environment().get_template("map/map.html.j2").render(m=result, cells=_cells(result))


def render_tex(result: MapResult) -> str:
    from kit.report.html import TEMPLATES
    from kit.report.latex import environment

    env = environment()
    env.loader = jinja2.FileSystemLoader(str(TEMPLATES / "map"))
    return env.get_template("map.tex.j2").render(m=result, cells=_cells(result))


def map_document(result: MapResult) -> dict[str, object]:
    """map.json: the schema header every kit document opens with, then the map."""
    return {"schema": {"name": "kit.map", "version": MAP_SCHEMA}, "kit_version": kit.__version__,
            **result.to_json()}


def write_map(result: MapResult, out: Path) -> MapFiles:
    """The three files in ``out`` (created; each written atomically)."""
    from kit.safeio import real_dir
    from kit.store import atomic_write_bytes

    # all three rendered before any is written: a failure in one leaves no mix of new and old files
    html, tex = render_html(result).encode("utf-8"), render_tex(result).encode("utf-8")
    doc = (json.dumps(map_document(result), indent=1, allow_nan=False) + "\n").encode()
    real_dir(out, create=True, what="--out directory")
    paths = {"html": out / HTML_NAME, "tex": out / TEX_NAME, "json": out / JSON_NAME}
    for key, data in (("html", html), ("tex", tex), ("json", doc)):
        atomic_write_bytes(paths[key], data)
    return {"html": str(paths["html"]), "tex": str(paths["tex"]), "json": str(paths["json"])}
