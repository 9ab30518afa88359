"""Per-phase telemetry: attribute raw samples to phases, summarise them, and compute energy per phase.

Pure functions over the run directory's long format (``kit.collectors.base.SAMPLE_COLUMNS``:
t, source, device, metric, value, unit) and the harness markers. Every frame
returned has a constant column order, and empty input gives an empty frame
with those columns.

Attribution rule (``attribute_phases``). A phase covers the half-open
interval [start, end) between its markers. Most readings are instantaneous
(a temperature, a power value, a counter) and are attributed by their
timestamp. A reading that describes an interval, the CPU utilisation since
the previous reading, (t_prev, t], is attributed by the midpoint of that
interval: when the interval straddles a phase boundary, the midpoint lies in
the phase that holds the larger part of it, so the rule is never off by more
than half a sampling period, where the timestamp alone would always lag by
half a period on average. The first such reading of a series has no
previous one and is attributed by its timestamp. Samples in no phase are
"idle". Overlapping phases (which the harness never writes) go to the one
that started last.

Energy (``phase_energy``). Counters (the NVML total-energy counter, RAPL) are
interpolated linearly at the phase boundaries and differenced: gaps in
sampling inside a phase cost nothing, only the boundaries are uncertain (by
the energy of one period at most). Without an NVML counter (GPUs before
Volta), the power readings are integrated over the phase (trapezoid rule):
"nvml_power_integral", less accurate because power is sampled, not
accumulated. A phase the samples do not cover from start to end gets NaN
(and the partial figure in the note) rather than an underestimate.

Each energy carries a worst-case bound (``bound_j``, :func:`boundary_bound_j`),
not a standard error: the counter is read once per sampling period, so what was
consumed between the last reading before a boundary and the first after it can
belong to either side, and linear interpolation can misattribute at most that
interval's energy, the power there × the period. Both boundaries' intervals
summed bound the phase's error from sampling; with a 0.1 s period at 300 W that
is up to 60 J, which matters for a phase of a few seconds and not for an hour.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from kit.collectors.base import SAMPLE_COLUMNS
from kit.errors import AnalysisError

if TYPE_CHECKING:
    from kit.analysis.sample_arrays import SampleArrays

PHASES = ("warmup", "train", "infer")
IDLE = "idle"
TRIAL = "trial"
PHASE_ORDER = (*PHASES, IDLE, TRIAL)
SUMMARY_COLUMNS = ("phase", "source", "device", "metric", "unit", "n", "mean", "max", "min")
ENERGY_COLUMNS = ("phase", "domain", "energy_j", "bound_j", "method", "n", "note")
PER_IMAGE_COLUMNS = (*ENERGY_COLUMNS, "images", "energy_per_image_j")
THROTTLE_COLUMNS = ("phase", "device", "n", "reasons_any", "frac_limited")

# Cumulative counters: a mean or max of them means nothing; they go to phase_energy.
COUNTER_METRICS = frozenset({("nvml", "energy_j"), ("rapl", "energy_j")})
# Readings that describe the interval since the previous reading of the same series.
INTERVAL_METRICS = frozenset({("cpu", "util_pct")})
# NVML clock-event bits that limit performance (power cap, slowdowns, thermal, power brake);
# GPU idle, applications-clocks setting, sync boost and display clock are not counted.
LIMITING_REASONS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80

Intervals = Mapping[str, tuple[float, float]]
METHOD_NVML_COUNTER = "nvml_energy_counter"
METHOD_NVML_POWER = "nvml_power_integral"
METHOD_RAPL = "rapl_counter"


def trial_gpu_indices(record: Mapping[str, Any]) -> list[int] | None:
    """NVML indices of the GPUs the host gave the trial and sampled (``record["gpus"]``).

    None for an old record without the field: every GPU in its samples counts as
    the trial's (what the collectors sampled then). ``[]`` for a trial given no GPU.
    """
    gpus = record.get("gpus")
    if gpus is None:
        return None
    return sorted({int(g["index"]) for g in gpus if isinstance(g, Mapping) and g.get("index") is not None})


def trial_samples(record: Mapping[str, Any], samples: pd.DataFrame) -> pd.DataFrame:
    """The samples that describe this trial: NVML rows of its own GPUs only.

    A record with ``gpus`` keeps the NVML rows whose device is one of those
    indices (a trial on GPU 3 of an 8-GPU node is not averaged with the other
    seven, nor blamed for their processes). A trial whose GPU, as reported from
    inside, is not the one the host sampled (``kit.analysis.devices.uuid_mismatch``)
    keeps no NVML row at all: its GPU telemetry is of another device. Rows of
    other sources (CPU, memory, RAPL) are kept.
    """
    from kit.analysis.devices import uuid_mismatch

    if samples is None or samples.empty or "source" not in samples.columns:
        return samples
    indices = trial_gpu_indices(record)
    wrong = uuid_mismatch(record) is not None
    if indices is None and not wrong:
        return samples
    nvml = samples["source"] == "nvml"
    if not nvml.any():
        return samples
    if wrong:
        keep = ~nvml
    else:
        keep = ~nvml | samples["device"].astype(str).isin({str(i) for i in indices or []})
    return samples[keep]


def phase_intervals(markers: Iterable[Mapping[str, Any]]) -> dict[str, tuple[float, float]]:
    """{phase: (start_t, end_t)} from the harness markers, in order of start.

    Only ``phase_start`` / ``phase_end`` events count. A phase started but
    never ended (the trial was killed) gets no interval; an end without a
    start is ignored; a phase run twice keeps its first complete occurrence.
    """
    events = [m for m in markers if m.get("event") in ("phase_start", "phase_end") and "phase" in m and "t" in m]
    events.sort(key=lambda m: float(m["t"]))  # stable: equal times keep file order
    open_: dict[str, float] = {}
    done: dict[str, tuple[float, float]] = {}
    for m in events:
        phase, t = str(m["phase"]), float(m["t"])
        if phase in done:
            continue
        if m["event"] == "phase_start":
            open_.setdefault(phase, t)
        elif phase in open_:
            done[phase] = (open_.pop(phase), t)
    return dict(sorted(done.items(), key=lambda kv: kv[1][0]))


def trial_interval(intervals: Intervals) -> tuple[float, float] | None:
    """The trial's span: first phase start to last phase end (None without phases)."""
    if not intervals:
        return None
    return min(a for a, _ in intervals.values()), max(b for _, b in intervals.values())


def _check(samples: pd.DataFrame) -> None:
    missing = [c for c in SAMPLE_COLUMNS if c not in samples.columns]
    if missing:
        raise AnalysisError(f"telemetry samples lack column(s) {', '.join(missing)}",
                            where="samples", fix=f"expected the long format {', '.join(SAMPLE_COLUMNS)}")


def _attribution_time(samples: pd.DataFrame) -> pd.Series:
    """Per row, the time the phase rule uses: midpoint (t_prev, t] for interval metrics, else t."""
    t = samples["t"].astype(float)
    out = t.copy()
    is_interval = _is_in(samples, INTERVAL_METRICS)
    if is_interval.any():
        sub = samples.loc[is_interval, ["source", "device", "metric"]].assign(t=t[is_interval])
        sub = sub.sort_values("t", kind="stable")
        prev = sub.groupby(["source", "device", "metric"], sort=False)["t"].shift(1)
        mid = (prev + sub["t"]) / 2
        out.loc[sub.index] = mid.fillna(sub["t"])
    return out


def _is_in(samples: pd.DataFrame, pairs: frozenset[tuple[str, str]]) -> pd.Series:
    """Row mask: (source, metric) is one of ``pairs`` (vectorised; runs over ~1e6 rows)."""
    if not len(samples):
        return pd.Series(False, index=samples.index, dtype=bool)
    # "source<US>metric" strings (US = the ASCII unit separator, in no name the kit's pairs use, so a key matches
    # only its own pair): a plain isin, several times faster than building a MultiIndex of the two columns
    keys = [f"{s}\x1f{m}" for s, m in zip(samples["source"].astype(str), samples["metric"].astype(str), strict=True)]
    return pd.Series(pd.Index(keys, dtype=object).isin([f"{s}\x1f{m}" for s, m in pairs]), index=samples.index)


def _phase_labels(t_attr: pd.Series, intervals: Intervals) -> pd.Series:
    phase = pd.Series(IDLE, index=t_attr.index, dtype=object)
    for name, (a, b) in sorted(intervals.items(), key=lambda kv: kv[1][0]):
        phase[(t_attr >= a) & (t_attr < b)] = name
    return phase


@dataclass(frozen=True, eq=False)
class TrialTelemetry:
    """One trial's own samples (``own``, as arrays: kit.analysis.sample_arrays), each attributed to its phase once,
    with the trial's phase intervals. The metrics (kit.analysis.metrics) and the threat facts
    (kit.analysis.validity_telemetry) both read this one attribution instead of each attributing again.

    ``t_attr``: per row, the time the attribution rule used (module docstring); ``phase``: per row, a code into
    ``phases`` (``phases[0]`` is "idle"; one code per distinct name, so a phase a marker calls "idle" or "trial"
    is that phase, as it was when the labels were strings). ``samples`` and :meth:`rows_of` give pandas frames
    with the columns ``t_attr`` and ``phase`` added, built only when asked.
    """

    own: SampleArrays
    intervals: Intervals
    t_attr: np.ndarray
    phase: np.ndarray
    phases: tuple[str, ...]
    _frames: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, record: Mapping[str, Any], samples: pd.DataFrame | SampleArrays | None) -> TrialTelemetry:
        from kit.analysis.sample_arrays import SampleArrays, empty, from_frame

        arrays = samples if isinstance(samples, SampleArrays) else empty() if samples is None else from_frame(samples)
        own = own_rows(record, arrays)
        intervals = phase_intervals(record.get("markers", []))
        t_attr = attribution_times(own)
        phase, phases = phase_codes(t_attr, intervals)
        return cls(own, intervals, t_attr, phase, phases)

    def code(self, phase: str) -> int:
        """The code of a phase name; -1 (no row) when no interval and no label has it."""
        return self.phases.index(phase) if phase in self.phases else -1

    @property
    def samples(self) -> pd.DataFrame:
        """The own rows as the pandas readers had them (the frame of ``RunDir.read_samples``, other GPUs' rows
        cut, ``t_attr`` and ``phase`` added)."""
        return self._frame(None)

    def rows_of(self, source: str) -> pd.DataFrame:
        """``samples`` cut to one source (the threat facts read only NVML's): no frame of the other rows is made."""
        return self._frame(source)

    def _frame(self, source: str | None) -> pd.DataFrame:
        key = "" if source is None else source
        if key not in self._frames:
            mask = None if source is None else self.own.where("source", source)
            part = self.own if mask is None else self.own.take(mask)
            df = part.frame()
            if len(part):
                labels = np.asarray(self.phases, dtype=object)[self.phase if mask is None else self.phase[mask]]
                t_attr = self.t_attr if mask is None else self.t_attr[mask]
                df = df.assign(t_attr=t_attr, phase=pd.Series(labels, index=df.index, dtype=object))
            self._frames[key] = df
        return self._frames[key]


def own_rows(record: Mapping[str, Any], arrays: SampleArrays) -> SampleArrays:
    """``trial_samples`` on arrays: NVML rows of the trial's own GPUs only (none on a UUID mismatch)."""
    from kit.analysis.devices import uuid_mismatch

    if not len(arrays):
        return arrays
    indices = trial_gpu_indices(record)
    wrong = uuid_mismatch(record) is not None
    if indices is None and not wrong:
        return arrays
    nvml = arrays.where("source", "nvml")
    if not nvml.any():
        return arrays
    if wrong:
        return arrays.take(~nvml)
    wanted = {str(i) for i in indices or []}
    mine = [c for c, name in enumerate(arrays.names[1]) if name in wanted]
    return arrays.take(~nvml | np.isin(arrays.device, mine))


def attribution_times(arrays: SampleArrays) -> np.ndarray:
    """``_attribution_time`` on arrays: t, or for interval readings the midpoint (t_prev, t] within their series
    ((source, device, metric), rows in time order, ties in file order; no previous reading or a NaN: t)."""
    t = arrays.t.astype(float)
    out = t.copy()
    if not len(arrays):
        return out
    is_interval = np.zeros(len(arrays), dtype=bool)
    for source, metric in INTERVAL_METRICS:
        is_interval |= arrays.where("source", source) & arrays.where("metric", metric)
    idx = np.flatnonzero(is_interval)
    if not idx.size:
        return out
    s, d, m = arrays.source[idx], arrays.device[idx], arrays.metric[idx]
    order = np.lexsort((t[idx], m, d, s))  # stable: equal times keep file order, NaN last, as sort_values
    ti, s, d, m = t[idx][order], s[order], d[order], m[order]
    first = np.ones(idx.size, dtype=bool)
    first[1:] = (s[1:] != s[:-1]) | (d[1:] != d[:-1]) | (m[1:] != m[:-1])
    prev = np.empty_like(ti)
    prev[0] = np.nan
    prev[1:] = ti[:-1]
    prev[first] = np.nan
    mid = (prev + ti) / 2
    out[idx[order]] = np.where(np.isnan(mid), ti, mid)
    return out


def phase_codes(t_attr: np.ndarray, intervals: Intervals) -> tuple[np.ndarray, tuple[str, ...]]:
    """``_phase_labels`` as codes: (per row, the code of its phase; the names by code, "idle" first)."""
    names = [IDLE]
    codes = np.zeros(t_attr.size, dtype=np.int64)
    for name, (a, b) in sorted(intervals.items(), key=lambda kv: kv[1][0]):
        if name not in names:
            names.append(name)
        codes[(t_attr >= a) & (t_attr < b)] = names.index(name)
    for extra in (TRIAL,):
        if extra not in names:
            names.append(extra)
    return codes, tuple(names)


def attribute_phases(samples: pd.DataFrame, intervals: Intervals) -> pd.DataFrame:
    """The samples with a ``phase`` column ("warmup", "train", "infer" or "idle"); see the module docstring."""
    _check(samples)
    out = samples.copy()
    out["phase"] = _phase_labels(_attribution_time(samples), intervals) if len(samples) else pd.Series(dtype=object)
    return out


def _order(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    rank = {p: i for i, p in enumerate(PHASE_ORDER)}
    key = df["phase"].map(lambda p: (rank.get(p, len(rank)), p))
    return df.assign(_k=key).sort_values(["_k", *by], kind="stable").drop(columns="_k").reset_index(drop=True)


def phase_summaries(samples: pd.DataFrame, intervals: Intervals) -> pd.DataFrame:
    """n, mean, max, min per phase and series; plus phase "trial" over the whole trial span.

    Instantaneous readings are grouped by the attribution rule. Interval
    readings (CPU utilisation over (t_prev, t]) are averaged over the phase
    weighted by how much of each window lies inside it: a phase shorter than
    the sampling period (inference on a small test set) still gets the value
    of the window(s) that cover it, and ``n`` counts those windows. Idle
    keeps the midpoint rule. Counters (energy_j) and bitmasks
    (throttle_reasons) are left out: their mean is meaningless; see
    ``phase_energy`` and ``phase_throttle``. The trial rows give, for
    instance, the GPU memory peak per trial (max of ``nvml/<i>/mem_used_bytes``).

    The analysis computes these rows on arrays (:func:`kit.analysis.phase_stats.summaries`, one pass instead of
    a pandas filter per series); this frame version is the reference the tests hold that one to, bit for bit.
    """
    _check(samples)
    if not len(samples):
        return pd.DataFrame(columns=list(SUMMARY_COLUMNS))
    keep = ~_is_in(samples, COUNTER_METRICS) & (samples["unit"] != "bitmask")
    df = samples.loc[keep, list(SAMPLE_COLUMNS)].copy()
    df["value"] = pd.to_numeric(df["value"], errors="coerce")
    if "t_attr" in samples.columns and "phase" in samples.columns:  # attributed once already (TrialTelemetry)
        t_attr = samples.loc[keep, "t_attr"].astype(float)
        df["phase"] = samples.loc[keep, "phase"]
    else:
        t_attr = _attribution_time(df)
        df["phase"] = _phase_labels(t_attr, intervals)
    is_interval = _is_in(df, INTERVAL_METRICS)
    span = trial_interval(intervals)
    point = df[~is_interval | (df["phase"] == IDLE)]
    if span is not None:
        t_point = t_attr[point.index]
        trial = point[(t_point >= span[0]) & (t_point < span[1])].assign(phase=TRIAL)
        point = pd.concat([point, trial], ignore_index=True)
    parts = []
    if len(point):
        g = point.groupby(["phase", "source", "device", "metric", "unit"], sort=False)["value"]
        parts.append(g.agg(n="count", mean="mean", max="max", min="min").reset_index())
    windowed = _window_summaries(df[is_interval], {**intervals, **({TRIAL: span} if span else {})})
    if len(windowed):
        parts.append(windowed)
    if not parts:
        return pd.DataFrame(columns=list(SUMMARY_COLUMNS))
    out = pd.concat(parts, ignore_index=True)
    out["n"] = out["n"].astype(int)
    return _order(out, ["source", "device", "metric"])[list(SUMMARY_COLUMNS)]


def _window_summaries(rows: pd.DataFrame, intervals: Intervals) -> pd.DataFrame:
    """Overlap-weighted phase means of interval readings (value over (t_prev, t])."""
    out: list[dict[str, Any]] = []
    for (source, device, metric, unit), g in rows.groupby(["source", "device", "metric", "unit"], sort=False):
        g = g.sort_values("t", kind="stable")
        t = g["t"].to_numpy(float)
        v = g["value"].to_numpy(float)
        if len(t) < 2:
            continue
        lo, hi, val = t[:-1], t[1:], v[1:]  # the first reading has no window
        for phase, (a, b) in intervals.items():
            overlap = np.clip(np.minimum(hi, b) - np.maximum(lo, a), 0.0, None)
            mask = (overlap > 0) & np.isfinite(val)
            if not mask.any():
                continue
            w = overlap[mask]
            out.append({"phase": phase, "source": source, "device": device, "metric": metric, "unit": unit,
                        "n": int(mask.sum()), "mean": float(np.sum(w * val[mask]) / np.sum(w)),
                        "max": float(val[mask].max()), "min": float(val[mask].min())})
    return pd.DataFrame(out, columns=list(SUMMARY_COLUMNS))


# -- energy --------------------------------------------------------------------


def _series(samples: pd.DataFrame, source: str, device: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
    rows = samples[
        (samples["source"] == source) & (samples["device"].astype(str) == device) & (samples["metric"] == metric)
    ]
    rows = rows[["t", "value"]].apply(pd.to_numeric, errors="coerce").dropna()
    rows = rows.sort_values("t", kind="stable").drop_duplicates("t", keep="last")
    return rows["t"].to_numpy(float), rows["value"].to_numpy(float)


def _coverage_note(t: np.ndarray, a: float, b: float) -> str | None:
    """None when the samples bracket [a, b]; else why they do not."""
    if len(t) < 2:
        return "fewer than two samples"
    if t[0] > a or t[-1] < b:
        lo, hi = max(a, t[0]), min(b, t[-1])
        if hi <= lo:
            return "no samples during the phase"
        return f"samples cover only {hi - lo:.3f} of {b - a:.3f} s of the phase"
    return None


def counter_energy_j(t: np.ndarray, v: np.ndarray, a: float, b: float) -> tuple[float, int, str]:
    """Energy of a cumulative counter over [a, b]: (joules or NaN, samples inside, note)."""
    n = int(((t >= a) & (t <= b)).sum())
    note = _coverage_note(t, a, b)
    if note is None:
        i0 = int(np.searchsorted(t, a, side="right")) - 1  # last sample at or before a
        i1 = int(np.searchsorted(t, b, side="left"))  # first sample at or after b
        if np.any(np.diff(v[i0 : i1 + 1]) < 0):
            return float("nan"), n, "counter went backwards during the phase (reset?)"
        return float(np.interp(b, t, v) - np.interp(a, t, v)), n, ""
    if len(t) >= 2 and min(b, t[-1]) > max(a, t[0]):
        lo, hi = max(a, t[0]), min(b, t[-1])
        partial = float(np.interp(hi, t, v) - np.interp(lo, t, v))
        note += f" (partial {partial:.3f} J)"
    return float("nan"), n, note


def power_integral_j(t: np.ndarray, p: np.ndarray, a: float, b: float) -> tuple[float, int, str]:
    """Power readings (W) integrated over [a, b] by the trapezoid rule, endpoints interpolated."""
    n = int(((t >= a) & (t <= b)).sum())
    note = _coverage_note(t, a, b)
    base = f"less accurate: power sampled (median step {np.median(np.diff(t)):.3f} s), not accumulated" if len(t) > 1 else ""
    if note is not None:
        return float("nan"), n, f"{note}; {base}" if base else note
    inside = (t > a) & (t < b)
    tt = np.concatenate(([a], t[inside], [b]))
    pp = np.concatenate(([np.interp(a, t, p)], p[inside], [np.interp(b, t, p)]))
    return float(np.sum((pp[1:] + pp[:-1]) / 2 * np.diff(tt))), n, base


def boundary_bound_j(t: np.ndarray, v: np.ndarray, a: float, b: float, counter: bool) -> float:
    """Worst-case error of a phase's energy from sampling at its two boundaries, in joules (NaN if uncovered).

    At each boundary x the readings that bracket it (the last at or before x, the first at or after)
    span one sampling interval; the energy consumed in it can lie on either side of x, and linear
    interpolation can put at most all of it on the wrong side. For a counter that energy is the
    counter's increase over the interval (its mean power there × the interval); for sampled power
    (no counter) the larger of the two readings × the interval. A reading exactly at x contributes
    nothing. The sampled-power integral has error inside the phase as well (between readings), which
    this bound does not cover.
    """
    if len(t) < 2 or t[0] > a or t[-1] < b:
        return float("nan")
    total = 0.0
    for x in (a, b):
        i0 = int(np.searchsorted(t, x, side="right")) - 1
        i1 = int(np.searchsorted(t, x, side="left"))
        if i0 == i1 or t[i0] == x or t[i1] == x:
            continue
        gap = float(t[i1] - t[i0])
        total += abs(float(v[i1] - v[i0])) if counter else max(float(v[i0]), float(v[i1]), 0.0) * gap
    return total


def _periods(intervals: Intervals) -> list[tuple[str, float, float]]:
    out = [(k, a, b) for k, (a, b) in sorted(intervals.items(), key=lambda kv: kv[1][0])]
    span = trial_interval(intervals)
    if span is not None:
        out.append((TRIAL, *span))
    return out


def phase_energy(samples: pd.DataFrame, intervals: Intervals) -> pd.DataFrame:
    """Joules per phase and domain (GPUs from NVML, RAPL zones), plus phase "trial"; see the module docstring.

    The analysis computes these rows on arrays (:func:`kit.analysis.phase_stats.energies`); this frame version
    is the reference the tests hold that one to."""
    _check(samples)
    periods = _periods(intervals)
    rows: list[dict[str, Any]] = []
    if len(samples) and periods:
        nvml = samples[samples["source"] == "nvml"]
        for dev in sorted(nvml["device"].astype(str).unique(), key=lambda d: (len(d), d)):
            t, v = _series(samples, "nvml", dev, "energy_j")
            fn: Callable[[np.ndarray, np.ndarray, float, float], tuple[float, int, str]]
            method, fn = METHOD_NVML_COUNTER, counter_energy_j
            if len(t) < 2:
                t, v = _series(samples, "nvml", dev, "power_w")
                method, fn = METHOD_NVML_POWER, power_integral_j
                if len(t) < 2:
                    continue
            for phase, a, b in periods:
                e, n, note = fn(t, v, a, b)
                bound = boundary_bound_j(t, v, a, b, counter=method == METHOD_NVML_COUNTER) if e == e else float("nan")
                rows.append({"phase": phase, "domain": f"gpu{dev}", "energy_j": e, "bound_j": bound, "method": method,
                             "n": n, "note": note})
        rapl = samples[(samples["source"] == "rapl") & (samples["metric"] == "energy_j")]
        for dev in sorted(rapl["device"].astype(str).unique()):
            t, v = _series(samples, "rapl", dev, "energy_j")
            for phase, a, b in periods:
                e, n, note = counter_energy_j(t, v, a, b)
                bound = boundary_bound_j(t, v, a, b, counter=True) if e == e else float("nan")
                rows.append({"phase": phase, "domain": f"rapl:{dev}", "energy_j": e, "bound_j": bound,
                             "method": METHOD_RAPL, "n": n, "note": note})
    if not rows:
        return pd.DataFrame(columns=list(ENERGY_COLUMNS))
    out = pd.DataFrame(rows, columns=list(ENERGY_COLUMNS))
    out["n"] = out["n"].astype(int)
    out["energy_j"] = out["energy_j"].astype(float)
    out["bound_j"] = out["bound_j"].astype(float)
    return _order(out, [])[list(ENERGY_COLUMNS)]


def phase_images(markers: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Images processed per phase, from the ``images`` field of ``phase_end`` markers (first occurrence)."""
    out: dict[str, int] = {}
    for m in markers:
        if m.get("event") == "phase_end" and "images" in m and m.get("phase") not in out:
            out[str(m["phase"])] = int(m["images"])
    return out


def energy_per_image(energy: pd.DataFrame, markers: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """``phase_energy`` with the phase's image count and joules per image (NaN where no count is known).

    The trial total has no image count of its own (training and inference
    images are not the same work), so its per-image figure is NaN.
    """
    images = phase_images(markers)
    out = energy.copy()
    out["images"] = out["phase"].map(lambda p: images.get(p, np.nan)).astype(float)
    out["energy_per_image_j"] = out["energy_j"].astype(float) / out["images"]
    return out[list(PER_IMAGE_COLUMNS)].reset_index(drop=True)


def phase_throttle(samples: pd.DataFrame, intervals: Intervals) -> pd.DataFrame:
    """Per phase and GPU: readings, the OR of all clock-event reasons seen, and the share limited.

    ``frac_limited`` is the share of readings with a performance-limiting bit
    set (``LIMITING_REASONS``: power cap, hardware / thermal slowdown, power brake).
    """
    _check(samples)
    sel = samples[(samples["source"] == "nvml") & (samples["metric"] == "throttle_reasons")]
    if not len(sel) or not intervals:
        return pd.DataFrame(columns=list(THROTTLE_COLUMNS))
    df = attribute_phases(sel, intervals)
    span = trial_interval(intervals)
    assert span is not None
    df = pd.concat([df, df[(df["t"] >= span[0]) & (df["t"] < span[1])].assign(phase=TRIAL)], ignore_index=True)
    df = df.dropna(subset=["value"])
    bits = df["value"].astype("int64")
    df = df.assign(bits=bits, limited=(bits & LIMITING_REASONS) != 0)
    rows = []
    for (phase, dev), g in df.groupby(["phase", "device"], sort=False):
        any_bits = int(np.bitwise_or.reduce(g["bits"].to_numpy())) if len(g) else 0
        rows.append({"phase": phase, "device": str(dev), "n": len(g), "reasons_any": any_bits,
                     "frac_limited": float(g["limited"].mean())})
    out = pd.DataFrame(rows, columns=list(THROTTLE_COLUMNS))
    return _order(out, ["device"])[list(THROTTLE_COLUMNS)]
