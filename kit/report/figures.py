"""Figures drawn from finished analysis data only (no run directory access).

Each function takes plain data and returns an SVG string (vector, inline in
HTML, convertible for LaTeX). Matplotlib runs headless (Agg).
"""

from __future__ import annotations

import io
import re
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from kit.analysis.metrics import METRICS

PALETTE = {"pytorch": "#ee4c2c", "tensorflow": "#ff8f00"}
FALLBACK = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf"]
PHASE_LABEL = {"train": "learning", "infer": "inference"}


def arm_color(arm: str, i: int) -> str:
    return PALETTE.get(arm.split("@", 1)[0], FALLBACK[i % len(FALLBACK)]) if "@" not in arm else FALLBACK[i % len(FALLBACK)]


def to_svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    # let the page scale the figure: drop fixed width/height, keep the viewBox
    return re.sub(r'<svg([^>]*?) width="[^"]+" height="[^"]+"', r'<svg\1', svg, count=1)


def boxplot(values: list[dict[str, Any]], metric: str, phase: str, arms: list[str], title: str) -> str:
    """Box plot per arm (whiskers 1.5 IQR, outliers drawn, every point jittered on top)."""
    import numpy as np

    m = METRICS[metric]
    data = [[v["value"] for v in values if v["metric"] == metric and v["phase"] == phase and v["arm"] == a]
            for a in arms]
    fig, ax = plt.subplots(figsize=(4.2, 3.2))
    bp = ax.boxplot(data, patch_artist=True, widths=0.5, showfliers=True)
    ax.set_xticks(range(1, len(arms) + 1), arms)
    rng = np.random.default_rng(0)
    for i, (patch, d) in enumerate(zip(bp["boxes"], data, strict=True)):
        patch.set_facecolor(arm_color(arms[i], i))
        patch.set_alpha(0.35)
        ax.scatter(i + 1 + rng.uniform(-0.12, 0.12, len(d)), d, s=8, color=arm_color(arms[i], i), alpha=0.8, zorder=3)
    ax.set_ylabel(f"{m.label} ({m.unit})")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return to_svg(fig)


def schedule_plot(values: list[dict[str, Any]], metric: str, phase: str, arms: list[str], title: str) -> str:
    """Metric against position in the schedule, warm-ups marked: drift shows here."""
    m = METRICS[metric]
    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    for i, a in enumerate(arms):
        pts = [v for v in values if v["metric"] == metric and v["phase"] == phase and v["arm"] == a
               and v["value"] is not None and v["status"] == "ok"]
        meas = [p for p in pts if not p["warmup"]]
        warm = [p for p in pts if p["warmup"]]
        ax.plot([p["position"] for p in meas], [p["value"] for p in meas], "o-", ms=3, lw=0.8,
                color=arm_color(a, i), label=a)
        if warm:
            ax.plot([p["position"] for p in warm], [p["value"] for p in warm], "x", color=arm_color(a, i),
                    label=f"{a} (warm-up, excluded)")
    ax.set_xlabel("position in the schedule")
    ax.set_ylabel(f"{m.label} ({m.unit})")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return to_svg(fig)
