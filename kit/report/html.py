"""The self-contained HTML report (figures inline as SVG, no external assets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

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


def fmt_num(x: Any, digits: int = 4) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if x != 0 and (abs(x) >= 1e6 or abs(x) < 1e-3):
            return f"{x:.{digits - 1}e}"
        return f"{x:.{digits}g}"
    return str(x)


def fmt_p(p: Any) -> str:
    if p is None:
        return "–"
    return "< 1e-300" if p == 0 else f"{p:.3g}"


def render_html(ctx: dict[str, Any], out_dir: Path) -> Path:
    html = environment().get_template("report.html.j2").render(**ctx)
    path = out_dir / "index.html"
    atomic_write_bytes(path, html.encode("utf-8"))
    return path
