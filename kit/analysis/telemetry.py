"""Per-phase telemetry: attribute raw samples to harness phases and summarise.

Minimal version; the collectors work replaces it with the full one (energy
counters, power integration) behind the same functions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

SUMMARY_COLUMNS = ["phase", "source", "device", "metric", "unit", "n", "mean", "max", "min"]
ENERGY_COLUMNS = ["phase", "domain", "energy_j", "method", "n", "note"]
COUNTERS = {"energy_j"}


def phase_intervals(markers: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    starts: dict[str, float] = {}
    out: dict[str, tuple[float, float]] = {}
    for m in markers:
        if m.get("event") == "phase_start":
            starts[m["phase"]] = float(m["t"])
        elif m.get("event") == "phase_end" and m.get("phase") in starts:
            out[m["phase"]] = (starts[m["phase"]], float(m["t"]))
    return out


def attribute_phases(samples: pd.DataFrame, intervals: dict[str, tuple[float, float]]) -> pd.DataFrame:
    df = samples.copy()
    phase = np.full(len(df), "idle", dtype=object)
    t = df["t"].to_numpy(dtype=float)
    for name, (a, b) in intervals.items():
        phase[(t >= a) & (t <= b)] = name
    df["phase"] = phase
    return df


def phase_summaries(samples: pd.DataFrame, intervals: dict[str, tuple[float, float]]) -> pd.DataFrame:
    if samples.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    df = attribute_phases(samples, intervals)
    df = df[~df["metric"].isin(COUNTERS)]
    g = df.groupby(["phase", "source", "device", "metric", "unit"], dropna=False)["value"]
    out = g.agg(n="count", mean="mean", max="max", min="min").reset_index()
    return out[SUMMARY_COLUMNS]


def phase_energy(samples: pd.DataFrame, intervals: dict[str, tuple[float, float]]) -> pd.DataFrame:
    return pd.DataFrame(columns=ENERGY_COLUMNS)
