"""The pages of `kit history`: one series page (``--html`` and each series of ``--publish``) and the site's index,
rendered with the report's Jinja2 environment (kit.report.html: autoescape on) from reports/templates/history/.

Every string from the runs (labels, versions, arms, experiment names, run directory names) is data: the
templates escape it, the plot is an SVG built here with every text escaped and then re-written by the kit's
SVG sanitiser into an image (kit.report.svg_safe), and the sparklines are inline SVG of numbers only. The pages
carry the kit's Content-Security-Policy, with the index's one inline script allowed by its hash (the filters;
with scripts off the page shows everything). Nothing here reads the clock or draws random ids: the same
series give the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from markupsafe import Markup, escape

if TYPE_CHECKING:
    from kit.history import HistorySeries

STYLE = Markup(
    "body { font: 15px/1.5 system-ui, sans-serif; margin: 0 auto; padding: 1rem; max-width: 72rem; color: #1b1b1b; }"
    " .table-wrap { overflow-x: auto; } table { border-collapse: collapse; width: 100%; font-size: .88rem; }"
    " th, td { border-bottom: 1px solid #d9dee4; padding: .3rem .45rem; text-align: left; vertical-align: top; }"
    " td, th { overflow-wrap: break-word; } th { background: #f5f7f9; }"
    " td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }"
    " .regression { color: #b3261e; font-weight: 600; } .improvement { color: #1b7f3b; font-weight: 600; }"
    " .suspect { color: #8e24aa; font-weight: 600; } .muted { color: #5b6470; } .small { font-size: .82rem; }"
    " img.plot { display: block; max-width: 100%; height: auto; } svg.spark { display: block; }"
    " form.filters { margin: .5rem 0; display: flex; gap: 1rem; flex-wrap: wrap; }")
# The index's filters: rows carry data-changes and data-framework; without scripts the form stays hidden.
SCRIPT = Markup(
    "(function () { var f = document.getElementById('filters'); if (!f) { return; } f.hidden = false;"
    " var only = document.getElementById('only-changes'), fw = document.getElementById('framework');"
    " function apply() { var rows = document.querySelectorAll('tr[data-framework]');"
    " for (var i = 0; i < rows.length; i++) { var r = rows[i];"
    " r.hidden = (only.checked && r.getAttribute('data-changes') !== '1')"
    " || (fw.value !== '' && r.getAttribute('data-framework') !== fw.value); } }"
    " only.addEventListener('change', apply); fw.addEventListener('change', apply); apply(); })();")


def _sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def csp(script: bool) -> Markup:
    """The kit's policy (kit.report.html) for a page with the site's style and, for the index, its one script."""
    from kit.report.html import content_security_policy

    policy = content_security_policy(str(STYLE))
    if script:
        policy = policy.replace("script-src 'none'", f"script-src {_sha(str(SCRIPT))}")
    return Markup(f'<meta http-equiv="Content-Security-Policy" content="{policy}">')


@dataclass(frozen=True, slots=True)
class PageRun:
    """One row of a series page's table: the point's number, date, label, version, n and values, and the
    relative link to its report (or run directory); ``link`` None where the page has no place to link from."""

    index: int
    date: str
    label: str
    version: str
    n: int
    median: str
    q1: str
    q3: str
    link: str | None
    link_text: str


def utc_date(started: float) -> str:
    """A run's start as ``YYYY-MM-DD HH:MM`` UTC (the run's own time; "" when the manifest has none)."""
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(started)) if started > 0 else ""


def page_runs(result: HistorySeries, links: Sequence[tuple[str, str]] | None = None) -> list[PageRun]:
    """The table rows of a series page; ``links``: per run (href, what it is), relative to the page."""
    return [PageRun(index=i, date=utc_date(r.started), label=r.label, version=r.version or "", n=r.n,
                    median=f"{r.median:.4g}", q1=f"{r.q1:.4g}", q3=f"{r.q3:.4g}",
                    link=links[i][0] if links else None, link_text=links[i][1] if links else "")
            for i, r in enumerate(result.runs)]


def sparkline(medians: Sequence[float], width: int = 160, height: int = 32, most: int = 120) -> Markup:
    """A small inline SVG line of the run medians (at most ``most`` points, evenly picked): numbers only."""
    if not medians:
        return Markup("")
    k = min(most, len(medians))
    idx = sorted({round(i * (len(medians) - 1) / max(k - 1, 1)) for i in range(k)})
    ys = [medians[i] for i in idx]
    lo, hi = min(ys), max(ys)
    span = (hi - lo) or 1.0
    pts = " ".join(f"{2 + (width - 4) * k / max(len(ys) - 1, 1):.1f},{2 + (height - 4) * (hi - y) / span:.1f}"
                   for k, y in enumerate(ys))
    return Markup(f'<svg class="spark" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                  f'viewBox="0 0 {width} {height}" role="img" aria-label="median per run">'
                  f'<polyline fill="none" stroke="#0072b2" stroke-width="1.5" points="{pts}"/></svg>')


VERDICT_COLOUR = {"regression": "#b3261e", "improvement": "#1b7f3b", "suspect": "#8e24aa"}


def plot_svg(result: HistorySeries, width: int = 960, height: int = 340) -> str:
    """Median per run (line) and its interquartile range (band), the steps as dashed lines with their ratio.
    Every text comes from ``escape``; numbers are formatted with fixed precision (the same series, same bytes)."""
    runs = result.runs
    left, right, top, bottom = 70, 20, 20, 90
    pw, ph = width - left - right, height - top - bottom
    lo = min(r.q1 for r in runs)
    hi = max(r.q3 for r in runs)
    span = (hi - lo) or (abs(hi) or 1.0)
    lo, hi = lo - 0.05 * span, hi + 0.05 * span

    def x(i: float) -> float:
        return left + pw * (i + 0.5) / len(runs)

    def y(v: float) -> float:
        return top + ph * (hi - v) / (hi - lo)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#ffffff" stroke="#9aa4ae"/>']
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e3e7eb"/>'
                   f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{escape(f"{v:.4g}")}</text>')
    band = [f"{x(i):.1f},{y(r.q3):.1f}" for i, r in enumerate(runs)]
    band += [f"{x(i):.1f},{y(r.q1):.1f}" for i, r in reversed(list(enumerate(runs)))]
    out.append(f'<polygon points="{" ".join(band)}" fill="#0072b2" fill-opacity="0.18" stroke="none"/>')
    line = " ".join(f"{x(i):.1f},{y(r.median):.1f}" for i, r in enumerate(runs))
    out.append(f'<polyline points="{line}" fill="none" stroke="#0072b2" stroke-width="1.5"/>')
    if len(runs) <= 200:
        out += [f'<circle cx="{x(i):.1f}" cy="{y(r.median):.1f}" r="2.5" fill="#0072b2"/>' for i, r in enumerate(runs)]
    for s in result.steps:
        colour = VERDICT_COLOUR.get(s.verdict, "#5b6470")
        ratio = "" if s.ratio is None else f" ×{s.ratio:.3f}"
        out.append(f'<line x1="{x(s.index - 0.5):.1f}" x2="{x(s.index - 0.5):.1f}" y1="{top}" y2="{top + ph}" '
                   f'stroke="{colour}" stroke-dasharray="4 3" stroke-width="1.5"/>'
                   f'<text x="{x(s.index - 0.5) + 3:.1f}" y="{top + 12}" fill="{colour}">'
                   f'{escape(s.verdict + ratio)}</text>')
    ticks = sorted({round(k * (len(runs) - 1) / 11) for k in range(min(12, len(runs)))})
    for i in ticks:
        label = runs[i].label if len(runs[i].label) <= 24 else runs[i].label[:23] + "…"
        out.append(f'<text transform="translate({x(i):.1f},{top + ph + 12}) rotate(30)" font-size="10">'
                   f'{escape(label)}</text>')
    out.append(f'<text x="14" y="{top + ph / 2:.1f}" transform="rotate(-90 14 {top + ph / 2:.1f})" '
               f'text-anchor="middle">{escape(f"{result.metric} ({result.unit})")}</text></svg>')
    return "".join(out)


def plot_image(result: HistorySeries) -> tuple[str | None, str]:
    """(the plot as a data: URL the kit's sanitiser wrote, None when it refused it; why not)."""
    from kit.errors import ReportError
    from kit.report.svg_safe import sanitize_svg

    try:
        return sanitize_svg(plot_svg(result), "history plot").data_url(), ""
    except ReportError as exc:
        return None, exc.cause


def render_series(result: HistorySeries, *, experiment: str, verdict: str, framework: str = "",
                  links: Sequence[tuple[str, str]] | None = None, index_href: str | None = None) -> str:
    """A series page: plot, steps with verdicts, runs with their intervals and links (``--html`` and publish)."""
    from kit.report.html import environment

    plot, why = plot_image(result)
    return environment().get_template("history/series.html.j2").render(
        csp=csp(script=False), style=STYLE, s=result, experiment=experiment, verdict=verdict, framework=framework,
        runs=page_runs(result, links), plot=plot, plot_missing=why, index_href=index_href)


@dataclass(frozen=True, slots=True)
class IndexRow:
    """One series on the index: its names, the page, the sparkline, the latest verdict, whether it changed."""

    experiment: str
    metric: str
    phase: str
    arm: str
    framework: str
    unit: str
    n_runs: int
    page: str
    spark: Markup
    verdict: str
    changed: bool
    latest: str


def render_index(rows: Sequence[IndexRow], *, n_runs: int, frameworks: Sequence[str]) -> str:
    """The site's index: every series, its sparkline and latest verdict, with the filters."""
    from kit.report.html import environment

    return environment().get_template("history/index.html.j2").render(
        csp=csp(script=True), style=STYLE, script=SCRIPT, rows=rows, n_runs=n_runs, frameworks=frameworks)
