"""The self-contained HTML report (figures as images the kit encoded, no external assets), and the
Content-Security-Policy every HTML page of the kit carries.

The policy (:func:`content_security_policy`) is the last wall behind escaping and the figure re-writing
(:mod:`kit.report.svg_safe`): even if some text of a run or a study reached a page as markup, a browser would
run no script (``script-src 'none'``: the kit writes none), load nothing (``default-src 'none'``, images only
from ``data:`` URLs, which is how the kit embeds its figures), submit no form, re-base no link, embed no
plugin, and apply no style but the page's own ``<style>`` element, allowed by its SHA-256 hash. No inline
``style=`` attribute is allowed (a planted one, "display:none" on a table, is ignored): the kit's pages use
none, and its figures are images, whose own styles live in the image and cannot reach the page.
Each page puts the policy first in its ``<head>`` (:func:`csp_meta`), before anything it governs.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
from markupsafe import Markup

from kit.fmt import fmt_num, fmt_p
from kit.store import atomic_write_bytes

if TYPE_CHECKING:  # the context module builds what this one renders; only its type is needed here
    from kit.report.context import ReportContext

TEMPLATES = Path(__file__).resolve().parents[2] / "reports" / "templates"
# frame-ancestors, report-uri and sandbox are ignored in a <meta> policy (browsers log a warning): not used
POLICY = ("default-src 'none'", "script-src 'none'", "object-src 'none'", "base-uri 'none'", "form-action 'none'",
          "frame-src 'none'", "img-src data:", "font-src 'none'", "connect-src 'none'", "media-src 'none'")


def style_hash(css: str) -> str:
    """A CSP source for one ``<style>`` element whose text is exactly ``css``."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode("ascii") + "'"


def content_security_policy(*styles: str) -> str:
    """The policy of every HTML page the kit writes; ``styles``: the exact texts of the page's ``<style>``
    elements (the only styles it may apply)."""
    allowed = " ".join(style_hash(s) for s in styles) or "'none'"
    return "; ".join((*POLICY, f"style-src {allowed}"))


def csp_meta(*styles: str) -> Markup:
    """The policy as the ``<meta http-equiv>`` element that opens a page's ``<head>``."""
    policy = content_security_policy(*(str(s) for s in styles))
    assert not set(policy) & set('"<>&'), policy  # built from constants and base64 hashes: nothing to escape
    return Markup(f'<meta http-equiv="Content-Security-Policy" content="{policy}">')


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
    env.globals["csp_meta"] = csp_meta
    return env


def render_html(ctx: ReportContext, out_dir: Path) -> Path:
    html = environment().get_template("report.html.j2").render(**ctx)
    path = out_dir / "index.html"
    atomic_write_bytes(path, html.encode("utf-8"))
    return path
