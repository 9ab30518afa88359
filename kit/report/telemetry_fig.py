"""The telemetry time series of the trials, read from the run directory's samples.

Reporting reads the stored long-format samples (never the collectors): per
trial, the readings of a few host and GPU series against the time since the
trial's training started, thinned to a few hundred points per line so the
inline SVG stays small. With many trials, an even selection per framework is
drawn (the caption says which).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kit.analysis.telemetry import phase_intervals, trial_samples
from kit.records import counts
from kit.report import figures
from kit.store import RunDir

# (source, device or None for any, metric, panel key, axis label, scale)
PANELS = (
    ("cpu", "total", "util_pct", "cpu_util", "CPU util. (%)", 1.0),
    ("hwmon", "cpu", "cpu_temp_c", "cpu_temp", "CPU temp. (°C)", 1.0),
    ("memory", "trial", "rss_bytes", "rss", "trial RSS (MiB)", 1 / 2**20),
    ("nvml", None, "gpu_util_pct", "gpu_util", "GPU util. (%)", 1.0),
    ("nvml", None, "power_w", "gpu_power", "GPU power, 1-s avg. (W)", 1.0),
    ("nvml", None, "temp_c", "gpu_temp", "GPU temp. (°C)", 1.0),
)
MAX_TRIALS_PER_ARM = 8
MAX_POINTS = 300


def _pick(ids: list[str], k: int) -> list[str]:
    if len(ids) <= k:
        return ids
    return [ids[int(i)] for i in np.linspace(0, len(ids) - 1, k).round()]


def telemetry_figure(run_path: Path, arms: list[str]) -> dict[str, Any] | None:
    """One figure (a panel per available series, a line per trial) or None without telemetry."""
    rd = RunDir.open(run_path)
    trials = [t for t in rd.iter_trials() if counts(t)]
    trials.sort(key=lambda t: t["position"])
    chosen: list[dict[str, Any]] = []
    total = 0
    for a in arms:
        of_arm = [t for t in trials if t["arm"] == a]
        total += len(of_arm)
        keep = set(_pick([t["trial_id"] for t in of_arm], MAX_TRIALS_PER_ARM))
        chosen += [t for t in of_arm if t["trial_id"] in keep]
    series: list[dict[str, Any]] = []
    for t in chosen:
        iv = phase_intervals(t.get("markers", []))
        if "train" not in iv:
            continue
        t0, t_end = iv["train"][0], max(b for _, b in iv.values())
        s = trial_samples(t, rd.read_samples(t["trial_id"]))  # the trial's own GPUs only
        if s.empty:
            continue
        for source, device, metric, key, _label, scale in PANELS:
            sel = s[(s["source"] == source) & (s["metric"] == metric)]
            if device is not None:
                sel = sel[sel["device"] == device]
            sel = sel[(sel["t"] >= t0) & (sel["t"] <= t_end)].dropna(subset=["value"]).sort_values("t")
            if sel.empty:
                continue
            if device is None:  # several GPUs: the first one
                sel = sel[sel["device"] == sel["device"].iloc[0]]
            idx = np.unique(np.linspace(0, len(sel) - 1, min(len(sel), MAX_POINTS)).round().astype(int))
            sel = sel.iloc[idx]
            series.append({"arm": t["arm"], "trial_id": t["trial_id"], "metric": key,
                           "t_s": (sel["t"].to_numpy(float) - t0).round(3).tolist(),
                           "value": (sel["value"].to_numpy(float) * scale).tolist()})
    if not series:
        return None
    present = {s["metric"] for s in series}
    panels = [(key, label) for _s, _d, _m, key, label, _x in PANELS if key in present]
    n_trials = len({s["trial_id"] for s in series})
    title = "telemetry per trial (train and infer phases)"
    return {"id": "telemetry-series", "title": f"{title}: {n_trials} of {total} measured trials, one line each",
            "kind": "telemetry", "svg": figures.telemetry_series(series, arms, panels, title)}
