"""The self-contained HTML report (figures inline as SVG, no external assets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from kit.fmt import fmt_num, fmt_p
from kit.store import atomic_write_bytes

TEMPLATES = Path(__file__).resolve().parents[2] / "reports" / "templates"


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = fmt_num
    env.filters["p"] = fmt_p
    return env


def render_html(ctx: dict[str, Any], out_dir: Path) -> Path:
    html = environment().get_template("report.html.j2").render(**ctx)
    path = out_dir / "index.html"
    atomic_write_bytes(path, html.encode("utf-8"))
    return path
