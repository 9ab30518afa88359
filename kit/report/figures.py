"""Figures drawn from finished analysis data only (no run directory access).

Each function takes the analysis' rows (value rows, telemetry series) and returns an SVG string (vector; the HTML page
shows it as an image the kit encodes, kit.report.svg_safe) that also carries the same figure as PDF (``.pdf``, for
LaTeX) when a LaTeX format was asked for (:func:`vector_formats`): each figure is drawn once, as one figure object,
saved as SVG and, only for LaTeX, as PDF. Saving is most of a report's drawing time (issue 44: 18 ``savefig``
calls, 4 s, for an HTML page that needed 9).

Matplotlib runs headless (Agg), chosen when this module is imported and before pyplot is (:func:`headless`);
matplotlib itself (0.3 s to import) is imported only when a figure is drawn (:func:`pyplot`).

The kit's own figures (:func:`boxplot`, :func:`schedule_plot`, :func:`telemetry_series`) are kept between
processes by what they draw (:mod:`kit.report.figure_cache`): each names, beside its drawing code, exactly the
inputs that drawing reads (``_*_inputs``), and a report whose figures are all stored imports no matplotlib.
"""

from __future__ import annotations

import io
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from kit.analysis.metrics import METRICS
from kit.analysis_record import TrialSeries
from kit.analysis_rows import ValueRow
from kit.report import figure_cache
from kit.report.figure_cache import Canon

# Whether to_svg also writes the PDF: the LaTeX formats need it, the HTML page does not. A context variable, so
# the choice of one report (kit.report.write_report) reaches study code's figures too, and ends with that report.
_PDF_WANTED: ContextVar[bool] = ContextVar("kit_report_pdf_wanted", default=True)


def headless() -> None:
    """The non-interactive Agg backend for every figure of this process, set before pyplot is imported (a GUI
    backend probes its toolkit at that import and opens windows on a desktop). Without importing matplotlib:
    MPLBACKEND is what matplotlib reads when it is first imported; once imported (not yet pyplot), it is told."""
    if "matplotlib.pyplot" in sys.modules:
        return  # someone chose already; the kit saves its figures to files with any backend
    if "matplotlib" in sys.modules:
        sys.modules["matplotlib"].use("Agg")
    else:
        os.environ["MPLBACKEND"] = "Agg"


headless()  # as the module loads: study code importing pyplot after the kit's figures gets Agg too


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, imported on the first figure drawn."""
    headless()
    import matplotlib.pyplot as plt

    return plt


@contextmanager
def vector_formats(pdf: bool) -> Iterator[None]:
    """Within this block :func:`to_svg` writes the PDF beside the SVG only when ``pdf`` (a LaTeX format was
    asked for); outside any block it writes both, as every study's code has always received."""
    token = _PDF_WANTED.set(pdf)
    try:
        yield
    finally:
        _PDF_WANTED.reset(token)


# Okabe-Ito colours: told apart by colour-blind readers and in greyscale print (the brand red and
# orange of the two frameworks are not).
PALETTE = {"pytorch": "#0072b2", "tensorflow": "#e69f00"}
FALLBACK = ["#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#000000"]
PHASE_LABEL = {"train": "learning", "infer": "inference"}


TIME_UNITS = ("s", "ms")


def axis_scale(unit: str) -> tuple[float, str]:
    """What a value axis plots: bytes in MiB (1.268e+09 B reads 1,209 MiB), anything else as it is."""
    return (1 / 2**20, "MiB") if unit == "B" else (1.0, unit)


def from_zero(ax: Any, unit: str) -> None:
    """A time axis starts at zero (a box 5 % above another must not look twice as tall); log axes cannot."""
    if unit in TIME_UNITS and ax.get_yscale() == "linear":
        ax.set_ylim(bottom=0)


def arm_color(arm: str, i: int) -> str:
    """A framework arm keeps its colour; image-version arms (``pytorch@2.6``) get one each by position."""
    return PALETTE.get(arm, FALLBACK[i % len(FALLBACK)])


class VectorFigure(str):
    """An SVG string that also holds the same figure as PDF bytes (``pdf``) for LaTeX; None when the figure was
    drawn for the HTML page alone (:func:`vector_formats`)."""

    pdf: bytes | None = None


def to_svg(fig: Any) -> VectorFigure:
    """SVG for the HTML report and, when a LaTeX format needs it (:func:`vector_formats`), PDF for LaTeX, both
    from this one matplotlib figure (then closed): the figure is built once, only the files it is saved to vary.
    """
    import matplotlib

    buf = io.StringIO()
    # a fixed salt makes matplotlib's SVG ids (clip paths, glyphs) the same on every render: the same run
    # gives the same report, byte for byte (tests/test_report_golden.py, tests/test_report_formats.py)
    with matplotlib.rc_context({"svg.hashsalt": "kit-report"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    pdf = None
    if _PDF_WANTED.get():
        pdf = io.BytesIO()
        fig.savefig(pdf, format="pdf", bbox_inches="tight", metadata={"CreationDate": None, "ModDate": None})
    pyplot().close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    # let the page scale the figure: drop fixed width/height, keep the viewBox
    out = VectorFigure(re.sub(r'<svg([^>]*?) width="[^"]+" height="[^"]+"', r'<svg\1', svg, count=1))
    out.pdf = None if pdf is None else pdf.getvalue()
    return out


def _cached(kind: str, inputs: Canon, draw: Callable[[], VectorFigure]) -> VectorFigure:
    """``draw()``'s figure, or the same bytes stored by an earlier drawing of the same ``inputs`` with the same
    code and matplotlib (:func:`kit.report.figure_cache.through_cache`); with the PDF when a LaTeX format wants it."""
    def drawn() -> figure_cache.Drawn:
        fig = draw()
        return figure_cache.Drawn(str(fig), fig.pdf)

    got = figure_cache.through_cache(f"{__name__}.{kind}", inputs, _PDF_WANTED.get(), drawn)
    out = VectorFigure(got.svg)
    out.pdf = got.pdf
    return out


def _pairs(configs: dict[str, str] | None) -> Canon:
    return None if configs is None else [[cid, label] for cid, label in configs.items()]


def telemetry_series(series: Sequence[TrialSeries], arms: list[str], panels: list[tuple[str, str]],
                     title: str) -> VectorFigure:
    """Telemetry against time since the start of each trial's training, one line per trial.

    ``series``: one line each (:class:`kit.analysis_record.TrialSeries`, time relative to the train phase
    start); ``panels``: (metric key, axis label).
    """
    return _cached("telemetry_series", _telemetry_inputs(series, arms, panels, title),
                   lambda: _draw_telemetry_series(series, arms, panels, title))


def _telemetry_inputs(series: Sequence[TrialSeries], arms: list[str], panels: list[tuple[str, str]],
                      title: str) -> Canon:
    """What :func:`_draw_telemetry_series` reads: each series' arm, panel and points, in order (not its trial)."""
    return [[s.arm, s.metric, list(s.t_s), list(s.value)] for s in series], list(arms), \
        [[key, label] for key, label in panels], title


def _draw_telemetry_series(series: Sequence[TrialSeries], arms: list[str], panels: list[tuple[str, str]],
                           title: str) -> VectorFigure:
    fig, axes = pyplot().subplots(len(panels), 1, figsize=(6.4, 1.7 * len(panels) + 0.4), sharex=True, squeeze=False)
    for ax, (key, label) in zip(axes[:, 0], panels, strict=True):
        for i, a in enumerate(arms):
            first = True
            for s in series:
                if s.arm != a or s.metric != key:
                    continue
                ax.plot(list(s.t_s), list(s.value), lw=0.7, alpha=0.55, color=arm_color(a, i), label=a if first else None)
                first = False
        ax.set_ylabel(label, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7, loc="upper right")
    axes[0, 0].set_title(title, fontsize=10)
    axes[-1, 0].set_xlabel("time since the start of the training phase (s)")
    return to_svg(fig)


def boxplot(values: Sequence[ValueRow], metric: str, phase: str, arms: list[str], title: str,
            configs: dict[str, str] | None = None) -> str:
    """Box plot per arm (whiskers 1.5 IQR, outliers drawn, every point jittered on top).

    With ``configs`` (config id -> label; several configurations) the boxes
    are grouped per configuration, so values of different configurations
    are never pooled into one box.
    """
    return _cached("boxplot", _boxplot_inputs(values, metric, phase, arms, title, configs),
                   lambda: _draw_boxplot(values, metric, phase, arms, title, configs))


def _boxplot_inputs(values: Sequence[ValueRow], metric: str, phase: str, arms: list[str], title: str,
                    configs: dict[str, str] | None) -> Canon:
    """What :func:`_draw_boxplot` reads: the metric's label and unit, and the arm, configuration and value of
    each row of this metric and phase with a value, in order (the jitter's draws follow it)."""
    m = METRICS[metric]
    rows: list[Canon] = [[v.arm, v.config_id, v.value] for v in values if v.metric == metric and v.phase == phase
            and v.value is not None]
    return rows, metric, m.label, m.unit, phase, list(arms), title, _pairs(configs)


def _draw_boxplot(values: Sequence[ValueRow], metric: str, phase: str, arms: list[str], title: str,
                  configs: dict[str, str] | None) -> VectorFigure:
    import numpy as np

    m = METRICS[metric]
    scale, unit = axis_scale(m.unit)
    groups = list(configs) if configs else [None]
    rng = np.random.default_rng(0)
    fig, ax = pyplot().subplots(figsize=(4.2 if configs is None else max(4.2, 1.6 * len(groups)), 3.2))
    width = 0.8 / len(arms) if configs else 0.5
    for i, a in enumerate(arms):
        data, pos = [], []
        for k, cid in enumerate(groups):
            d = [v.value * scale for v in values if v.metric == metric and v.phase == phase and v.arm == a
                 and v.value is not None and (cid is None or v.config_id == cid)]
            if d or cid is None:
                data.append(d)
                pos.append(i + 1 if cid is None else k + 1 + (i - (len(arms) - 1) / 2) * width)
        if not data:
            continue
        bp = ax.boxplot(data, positions=pos, patch_artist=True, widths=width * 0.9, showfliers=True)
        for patch, p, d in zip(bp["boxes"], pos, data, strict=True):
            patch.set_facecolor(arm_color(a, i))
            patch.set_alpha(0.35)
            ax.scatter(p + rng.uniform(-0.1, 0.1, len(d)) * width, d, s=8, color=arm_color(a, i), alpha=0.8, zorder=3)
        if configs:
            ax.plot([], [], "s", color=arm_color(a, i), alpha=0.6, label=a)
    if configs:
        ax.set_xticks(range(1, len(groups) + 1), list(configs.values()), fontsize=7)  # groups == list(configs)
        ax.legend(fontsize=7)
    else:
        ax.set_xticks(range(1, len(arms) + 1), arms)
    ax.set_ylabel(f"{m.label} ({unit})")
    from_zero(ax, m.unit)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return to_svg(fig)


def schedule_plot(values: Sequence[ValueRow], metric: str, phase: str, arms: list[str], title: str,
                  configs: dict[str, str] | None = None) -> str:
    """Metric against position in the schedule, warm-ups marked: drift shows here.

    With ``configs`` each configuration gets its own line (and marker) per arm, on a log scale.
    """
    return _cached("schedule_plot", _schedule_inputs(values, metric, phase, arms, title, configs),
                   lambda: _draw_schedule_plot(values, metric, phase, arms, title, configs))


def _schedule_inputs(values: Sequence[ValueRow], metric: str, phase: str, arms: list[str], title: str,
                     configs: dict[str, str] | None) -> Canon:
    """What :func:`_draw_schedule_plot` reads: the metric's label and unit, and the arm, configuration,
    position, warm-up flag and value of each finished row of this metric and phase with a value, in order."""
    m = METRICS[metric]
    rows: list[Canon] = [[v.arm, v.config_id, v.position, v.warmup, v.value] for v in values if v.metric == metric
            and v.phase == phase and v.value is not None and v.status == "ok"]
    return rows, metric, m.label, m.unit, phase, list(arms), title, _pairs(configs)


def _draw_schedule_plot(values: Sequence[ValueRow], metric: str, phase: str, arms: list[str], title: str,
                        configs: dict[str, str] | None) -> VectorFigure:
    m = METRICS[metric]
    scale, unit = axis_scale(m.unit)
    fig, ax = pyplot().subplots(figsize=(6.4, 2.8))
    markers = "os^vDP*X"
    for i, a in enumerate(arms):
        pts = [(math.nan if v.position is None else v.position, v.value * scale, v) for v in values if v.metric == metric and v.phase == phase
               and v.arm == a and v.value is not None and v.status == "ok"]
        meas = [p for p in pts if not p[2].warmup]
        warm = [p for p in pts if p[2].warmup]
        for k, cid in enumerate(configs or [None]):
            sel = [p for p in meas if cid is None or p[2].config_id == cid]
            ax.plot([p[0] for p in sel], [p[1] for p in sel], f"{markers[k % len(markers)]}-", ms=3,
                    lw=0.8, color=arm_color(a, i), label=a if cid is None else f"{a} · {configs[cid]}")  # type: ignore[index]
        if warm:
            ax.plot([p[0] for p in warm], [p[1] for p in warm], "x", color=arm_color(a, i),
                    label=f"{a} (warm-up, excluded)")
    ax.set_xlabel("position in the schedule")
    if configs:
        ax.set_yscale("log")
    ax.set_ylabel(f"{m.label} ({unit})" + (", log scale" if configs else ""))
    from_zero(ax, m.unit)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return to_svg(fig)


def finish_lines(fig: Any, ax: Any, xlabel: str, ylabel: str, title: str, title_size: int = 10) -> str:
    """The common ending of a line chart with several series: labels, title, light grid, a small two-column
    legend; the figure as SVG (shared by the studies' report.py)."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=title_size)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    return to_svg(fig)
