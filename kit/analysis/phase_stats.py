"""Per-phase summaries and energies of one trial, computed on arrays (kit.analysis.sample_arrays).

The same rules and the same numbers as :func:`kit.analysis.telemetry.phase_summaries` and
:func:`kit.analysis.telemetry.phase_energy` (read their docstrings for the rules), as typed rows instead of
frames, and in one vectorised pass over the trial's samples instead of a pandas filter per series: the report
recomputes an analysis from up to millions of samples per run, and the metric table
(:func:`kit.analysis.metrics.trial_metric_rows`) reads only these rows.

Every number is the one the frame functions give, bit for bit (tests/test_fast_telemetry.py holds them side by
side): the reductions are the same ones, over the same values in the same order. The group means go through
pandas' group-by on integer codes, because its mean is a compensated (Kahan) sum that numpy has no equal of;
counts, maxima and minima come with it. The rows come in the frames' order (phase, source, device, metric; ties
in the order the frames met them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kit.analysis.telemetry import (
    COUNTER_METRICS,
    IDLE,
    INTERVAL_METRICS,
    METHOD_NVML_COUNTER,
    METHOD_NVML_POWER,
    METHOD_RAPL,
    PHASE_ORDER,
    TRIAL,
    TrialTelemetry,
    _periods,
    boundary_bound_j,
    counter_energy_j,
    power_integral_j,
    trial_interval,
)

_RANK = {p: i for i, p in enumerate(PHASE_ORDER)}


@dataclass(frozen=True)
class PhaseSummary:
    """One row of ``phase_summaries``: readings of one series in one phase (``n`` of them not NaN)."""

    phase: str
    source: str
    device: str
    metric: str
    unit: str
    n: int
    mean: float
    max: float
    min: float


@dataclass(frozen=True)
class PhaseEnergy:
    """One row of ``phase_energy``: joules of one domain in one phase (NaN with a note where not covered)."""

    phase: str
    domain: str
    energy_j: float
    bound_j: float
    method: str
    n: int
    note: str


def _phase_key(phase: str) -> tuple[int, str]:
    return _RANK.get(phase, len(_RANK)), phase


def summaries(tel: TrialTelemetry) -> list[PhaseSummary]:
    """``phase_summaries`` of the trial's own samples, as rows in the frame's order."""
    import pandas as pd

    a = tel.own
    if not len(a):
        return []
    counter = np.zeros(len(a), dtype=bool)
    for source, metric in COUNTER_METRICS:
        counter |= a.where("source", source) & a.where("metric", metric)
    keep = ~counter & ~a.where("unit", "bitmask")
    is_interval = np.zeros(len(a), dtype=bool)
    for source, metric in INTERVAL_METRICS:
        is_interval |= a.where("source", source) & a.where("metric", metric)
    series, n_series = a.series()
    point = keep & (~is_interval | (tel.phase == tel.code(IDLE)))
    span = trial_interval(tel.intervals)
    idx = np.flatnonzero(point)
    group = tel.phase[idx] * n_series + series[idx]
    values = a.value[idx]
    if span is not None:
        t = tel.t_attr[idx]
        inside = idx[(t >= span[0]) & (t < span[1])]
        group = np.concatenate([group, tel.code(TRIAL) * n_series + series[inside]])
        values = np.concatenate([values, a.value[inside]])
    out: list[PhaseSummary] = []
    if group.size:  # first appearance first, as the frame's group-by(sort=False); the same cython reductions
        by = pd.Series(values).groupby(group, sort=False)  # one grouping, read four times (half agg()'s cost)
        count, mean_, max_, min_ = by.count(), by.mean(), by.max(), by.min()
        where = _first_rows(series)
        for key, n, mean, hi, lo in zip(count.index.to_numpy().tolist(), count.to_numpy().tolist(),
                                        mean_.to_numpy().tolist(), max_.to_numpy().tolist(),
                                        min_.to_numpy().tolist(), strict=True):
            phase, s = divmod(int(key), n_series)
            out.append(_summary(tel, where[s], tel.phases[phase], int(n), mean, hi, lo))
    out += _windowed(tel, keep & is_interval, series)
    return sorted(out, key=lambda r: (*_phase_key(r.phase), r.source, r.device, r.metric))


def _first_rows(series: np.ndarray) -> dict[int, int]:
    """Per series code, its first row (to name the series)."""
    codes, first = np.unique(series, return_index=True)
    return dict(zip(codes.tolist(), first.tolist(), strict=True))


def _summary(tel: TrialTelemetry, row: int, phase: str, n: int, mean: float, hi: float, lo: float) -> PhaseSummary:
    a = tel.own
    names = [a.names[i][int(a.codes[i][row])] for i in range(4)]
    return PhaseSummary(phase, names[0], names[1], names[2], names[3], n, float(mean), float(hi), float(lo))


def _windowed(tel: TrialTelemetry, rows: np.ndarray, series: np.ndarray) -> list[PhaseSummary]:
    """``_window_summaries``: overlap-weighted phase means of interval readings (value over (t_prev, t])."""
    idx = np.flatnonzero(rows)
    if not idx.size:
        return []
    span = trial_interval(tel.intervals)
    periods = {**tel.intervals, **({TRIAL: span} if span else {})}
    codes, first = np.unique(series[idx], return_index=True)
    out: list[PhaseSummary] = []
    for code in codes[np.argsort(first, kind="stable")].tolist():  # series in order of first appearance
        g = idx[series[idx] == code]
        g = g[np.argsort(tel.own.t[g], kind="stable")]
        t = tel.own.t[g].astype(float)
        v = tel.own.value[g].astype(float)
        if len(t) < 2:
            continue
        lo, hi, val = t[:-1], t[1:], v[1:]  # the first reading has no window
        for phase, (a, b) in periods.items():
            overlap = np.clip(np.minimum(hi, b) - np.maximum(lo, a), 0.0, None)
            mask = (overlap > 0) & np.isfinite(val)
            if not mask.any():
                continue
            w = overlap[mask]
            out.append(_summary(tel, int(g[0]), phase, int(mask.sum()), float(np.sum(w * val[mask]) / np.sum(w)),
                                float(val[mask].max()), float(val[mask].min())))
    return out


def _series(tel: TrialTelemetry, source: str, device_code: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """One counter or power series (any unit): NaN rows dropped, in time order, a repeated time keeping its last."""
    a = tel.own
    m = a.where("source", source) & (a.device == device_code) & a.where("metric", metric)
    t, v = a.t[m], a.value[m]
    ok = ~(np.isnan(t) | np.isnan(v))
    t, v = t[ok], v[ok]
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    last = np.ones(t.size, dtype=bool)
    last[:-1] = t[1:] != t[:-1]
    return t[last], v[last]


def energies(tel: TrialTelemetry) -> list[PhaseEnergy]:
    """``phase_energy`` of the trial's own samples, as rows in the frame's order."""
    a = tel.own
    periods = _periods(tel.intervals)
    rows: list[PhaseEnergy] = []
    if not len(a) or not periods:
        return rows
    names = a.names[1]
    nvml = a.where("source", "nvml")
    for dev in sorted({names[c] for c in np.unique(a.device[nvml]).tolist()}, key=lambda d: (len(d), d)):
        code = names.index(dev)
        t, v = _series(tel, "nvml", code, "energy_j")
        method, counter = METHOD_NVML_COUNTER, True
        if len(t) < 2:
            t, v = _series(tel, "nvml", code, "power_w")
            method, counter = METHOD_NVML_POWER, False
            if len(t) < 2:
                continue
        for phase, lo, hi in periods:
            e, n, note = (counter_energy_j if counter else power_integral_j)(t, v, lo, hi)
            bound = boundary_bound_j(t, v, lo, hi, counter=counter) if e == e else float("nan")
            rows.append(PhaseEnergy(phase, f"gpu{dev}", float(e), float(bound), method, int(n), note))
    rapl = a.where("source", "rapl") & a.where("metric", "energy_j")
    for dev in sorted({names[c] for c in np.unique(a.device[rapl]).tolist()}):
        t, v = _series(tel, "rapl", names.index(dev), "energy_j")
        for phase, lo, hi in periods:
            e, n, note = counter_energy_j(t, v, lo, hi)
            bound = boundary_bound_j(t, v, lo, hi, counter=True) if e == e else float("nan")
            rows.append(PhaseEnergy(phase, f"rapl:{dev}", float(e), float(bound), METHOD_RAPL, int(n), note))
    return sorted(rows, key=lambda r: _phase_key(r.phase))
