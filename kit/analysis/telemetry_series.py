"""The telemetry time series the report draws, computed where the analysis reads the samples.

Per measured trial of an even selection per arm (at most MAX_TRIALS_PER_ARM), the readings of a few host and
GPU series against the time since the trial's training started, thinned to MAX_POINTS per line so the inline
SVG stays small. The analysis step computes them from the samples it reads for the metrics
(:func:`kit.analysis.analyze.load_values`), so the report does not open the raw samples a second time; for an
analysis read back from disk (which does not store them) :func:`series_of_run` reads the run directory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from kit.analysis.sample_arrays import SampleArrays, read_sample_arrays
from kit.analysis_record import TelemetrySeries, TrialSeries
from kit.records import TrialRecord

if TYPE_CHECKING:
    import pandas as pd

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


def figure_trials(trials: Sequence[TrialRecord], arms: Sequence[str]) -> tuple[list[TrialRecord], int]:
    """(the measured trials drawn, in schedule order, an even selection per arm; how many there were)."""
    measured = sorted((t for t in trials if t.counts), key=lambda t: t.position)
    chosen: list[TrialRecord] = []
    total = 0
    for a in arms:
        of_arm = [t for t in measured if t.arm == a]
        total += len(of_arm)
        keep = set(_pick([t.trial_id for t in of_arm], MAX_TRIALS_PER_ARM))
        chosen += [t for t in of_arm if t.trial_id in keep]
    return chosen, total


def trial_series(t: TrialRecord, samples: pd.DataFrame) -> list[TrialSeries]:
    """One trial's lines, one per panel with readings inside its phases (none without a train phase).

    The pandas form, kept as the reference :func:`trial_series_arrays` is tested against
    (tests/test_telemetry_series_arrays.py); the analysis uses the arrays."""
    from kit.analysis.telemetry import phase_intervals, trial_samples

    iv = phase_intervals(t.markers)
    if "train" not in iv:
        return []
    t0, t_end = iv["train"][0], max(b for _, b in iv.values())
    s = trial_samples(t.to_json(), samples)  # the trial's own GPUs only
    if s.empty:
        return []
    out: list[TrialSeries] = []
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
        out.append(TrialSeries(arm=t.arm, trial_id=t.trial_id, metric=key,
                               t_s=tuple((sel["t"].to_numpy(float) - t0).round(3).tolist()),
                               value=tuple((sel["value"].to_numpy(float) * scale).tolist())))
    return out


def _own_rows(record: TrialRecord, s: SampleArrays) -> np.ndarray:
    """Row mask of the samples that describe the trial (kit.analysis.telemetry.trial_samples' rule): NVML rows of
    its own GPUs only, none when its GPU is not the one sampled; every row of the other sources."""
    from kit.analysis.devices import uuid_mismatch
    from kit.analysis.telemetry import trial_gpu_indices

    as_json = record.to_json()
    indices, wrong = trial_gpu_indices(as_json), uuid_mismatch(as_json) is not None
    keep = np.ones(len(s), dtype=bool)
    if indices is None and not wrong:
        return keep
    nvml = s.where("source", "nvml")
    if not nvml.any():
        return keep
    if wrong:
        return ~nvml
    own = np.isin(s.device, [s.code("device", str(i)) for i in indices or []])
    return ~nvml | own


def trial_series_arrays(t: TrialRecord, s: SampleArrays) -> list[TrialSeries]:
    """:func:`trial_series` on the arrays of kit.analysis.sample_arrays: the same lines, float for float.

    The selections keep the file's row order, as pandas' boolean filters do, and the time sort is numpy's
    quicksort on that same order, which is what pandas' ``sort_values`` runs on a column without NaN (the
    times are validated finite on read), so rows at equal times come out in the same order too. (kit.analysis
    .telemetry is imported here, not at the top: it loads pandas, which a report of a stored analysis needs not.)"""
    from kit.analysis.telemetry import phase_intervals

    iv = phase_intervals(t.markers)
    if "train" not in iv or not len(s):
        return []
    t0, t_end = iv["train"][0], max(b for _, b in iv.values())
    own = _own_rows(t, s)
    if not own.any():
        return []
    in_time = own & (s.t >= t0) & (s.t <= t_end) & ~np.isnan(s.value)
    out: list[TrialSeries] = []
    for source, device, metric, key, _label, scale in PANELS:
        mask = in_time & s.where("source", source) & s.where("metric", metric)
        if device is not None:
            mask &= s.where("device", device)
        rows = np.flatnonzero(mask)
        if rows.size == 0:
            continue
        rows = rows[np.argsort(s.t[rows], kind="quicksort")]
        if device is None:  # several GPUs: the first one
            rows = rows[s.device[rows] == s.device[rows[0]]]
        idx = np.unique(np.linspace(0, rows.size - 1, min(rows.size, MAX_POINTS)).round().astype(int))
        rows = rows[idx]
        out.append(TrialSeries(arm=t.arm, trial_id=t.trial_id, metric=key,
                               t_s=tuple((s.t[rows] - t0).round(3).tolist()),
                               value=tuple((s.value[rows] * scale).tolist())))
    return out


def telemetry_series(trials: Sequence[TrialRecord], arms: Sequence[str],
                     samples_of: Callable[[str], SampleArrays]) -> TelemetrySeries:
    """The series of the drawn trials; ``samples_of(trial_id)`` gives a trial's samples."""
    chosen, total = figure_trials(trials, arms)
    series = [line for t in chosen for line in trial_series_arrays(t, samples_of(t.trial_id))]
    return TelemetrySeries(series=tuple(series), total=total)


def series_of_run(rd: RunDir, arms: Sequence[str]) -> TelemetrySeries:
    """The series of a run whose analysis was read back from disk: its trials and samples read again."""
    return telemetry_series(rd.trial_records(), arms, lambda trial_id: read_sample_arrays(rd, trial_id))
