"""Figures drawn from finished analysis data only (no run directory access).

Each function takes the analysis' rows (value rows, telemetry series) and returns an SVG string (vector; the HTML page
shows it as an image the kit encodes, kit.report.svg_safe) that also carries the
same figure as PDF (``.pdf``, for LaTeX).
Matplotlib runs headless (Agg).
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from kit.analysis.metrics import METRICS
from kit.analysis_record import TrialSeries
from kit.analysis_rows import ValueRow

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
    """An SVG string that also holds the same figure as PDF bytes (``pdf``) for LaTeX."""

    pdf: bytes | None = None


def to_svg(fig: Any) -> VectorFigure:
    """SVG for the HTML report and PDF for LaTeX, from one matplotlib figure (then closed)."""
    buf = io.StringIO()
    # a fixed salt makes matplotlib's SVG ids (clip paths, glyphs) the same on every render: the same run
    # gives the same report, byte for byte (tests/test_report_golden.py)
    with matplotlib.rc_context({"svg.hashsalt": "kit-report"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    pdf = io.BytesIO()
    fig.savefig(pdf, format="pdf", bbox_inches="tight", metadata={"CreationDate": None, "ModDate": None})
    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    # let the page scale the figure: drop fixed width/height, keep the viewBox
    out = VectorFigure(re.sub(r'<svg([^>]*?) width="[^"]+" height="[^"]+"', r'<svg\1', svg, count=1))
    out.pdf = pdf.getvalue()
    return out


def telemetry_series(series: Sequence[TrialSeries], arms: list[str], panels: list[tuple[str, str]],
                     title: str) -> VectorFigure:
    """Telemetry against time since the start of each trial's training, one line per trial.

    ``series``: one line each (:class:`kit.analysis_record.TrialSeries`, time relative to the train phase
    start); ``panels``: (metric key, axis label).
    """
    fig, axes = plt.subplots(len(panels), 1, figsize=(6.4, 1.7 * len(panels) + 0.4), sharex=True, squeeze=False)
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
    import numpy as np

    m = METRICS[metric]
    scale, unit = axis_scale(m.unit)
    groups = list(configs) if configs else [None]
    rng = np.random.default_rng(0)
    fig, ax = plt.subplots(figsize=(4.2 if configs is None else max(4.2, 1.6 * len(groups)), 3.2))
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
    m = METRICS[metric]
    scale, unit = axis_scale(m.unit)
    fig, ax = plt.subplots(figsize=(6.4, 2.8))
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
