"""Metrics: how one number per trial and phase is derived from the raw record.

A metric is either a result the harness measured (``time_s`` is the train or
infer phase duration), a summary of host telemetry over the phase (``cpu_util_pct``
is the mean of the host-wide CPU utilisation readings inside the phase: every
process, 100 % = all logical CPUs), a difference between the trial's own phase
markers (``trial_cpu_util_pct`` = the CPU seconds of the trial's process and
the children it waited for, ``cpu_s`` in the markers, over the phase's
seconds, × 100: 100 % = one CPU for the whole phase; exact, no sampling, so
it resolves a phase of any length and other tenants never enter it), an
energy difference over the phase (gross, and net of the run's idle power:
``*_energy_net_j``, kit.analysis.energy), or the phase's power from that
energy (``gpu_power_phase_w`` = NVML energy-counter difference / phase
duration). Only the trial's own GPUs count (``telemetry.trial_samples``).

Every value row has a ``bound``: the worst-case error of the value in its own
unit where one is known, None elsewhere. Energy: what the counter's sampling at
the two phase boundaries can misattribute (power there × sampling period,
:func:`kit.analysis.telemetry.boundary_bound_j`); phase power: that bound over
the phase duration. A run directory of an older kit analyses unchanged: every
value is derived from the raw records again, and a reader of an older
analysis.json finds no ``bound`` key (``row.get("bound")``).

GPU power comes three ways. ``gpu_power_w`` is nvmlDeviceGetPowerUsage, which
Ampere and newer drivers average over about one second: the reading of a phase
shorter than a few seconds is mostly the previous phase's. ``gpu_power_phase_w``
(energy counter, Volta+) is exact to the sampling of the phase boundaries and is
preferred wherever it exists (``preferred_power_metric``); ``gpu_power_instant_w``
is the driver's instantaneous field where it has one. ``trial_values`` turns a run directory into
the long table every statistic is computed from; each row names its trial,
so every number in a report traces back to a trial file and its samples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kit.metric_catalog import METRICS, MetricDef

if TYPE_CHECKING:  # pandas is the callers' (kit compare and the report read METRICS here without it)
    import pandas as pd

    from kit.analysis.energy import IdleByHost, IdlePower
    from kit.analysis.phase_stats import PhaseEnergy, PhaseSummary
    from kit.analysis.sample_arrays import SampleArrays
    from kit.analysis.telemetry import TrialTelemetry

TEST_PHASES = ("train", "infer")
VALUE_COLUMNS = ["trial_id", "arm", "framework", "config_id", "block", "repetition", "position", "warmup",
                 "status", "phase", "metric", "value", "unit", "n_samples", "bound"]


# What the report shows by default, in this order.
DEFAULT_METRICS = ("time_s", "cpu_util_pct", "trial_cpu_util_pct", "cpu_temp_c", "gpu_util_pct", "gpu_temp_c",
                   "gpu_power_w", "trial_rss_bytes", "host_mem_used_bytes", "gpu_mem_used_bytes", "gpu_energy_j",
                   "gpu_energy_net_j", "cpu_energy_j", "cpu_energy_net_j", "dram_energy_j", "dram_energy_net_j",
                   "throughput_ips", "accuracy")
# Shown as well when the run sampled NVML: GPU power from the energy counter and the instantaneous field.
NVML_METRICS = ("gpu_power_phase_w", "gpu_power_instant_w")


Groups = dict[tuple[str, str, str], list["PhaseSummary"]]  # (phase, source, metric) -> its summary rows, in order


def _groups(summaries: Sequence[PhaseSummary]) -> Groups:
    """The summary rows by (phase, source, metric), split once per trial instead of filtered once per metric."""
    out: Groups = {}
    for row in summaries:
        out.setdefault((row.phase, row.source, row.metric), []).append(row)
    return out


def _nansum(xs: Sequence[float]) -> float:
    """pandas' Series.sum: NaN counts as 0, then numpy's (pairwise) sum of the values in order."""
    arr = np.array(xs, dtype=np.float64)
    arr[np.isnan(arr)] = 0.0
    return float(arr.sum())


def _nanmean(xs: Sequence[float]) -> float:
    """pandas' Series.mean (no bottleneck): the NaN-as-0 sum over the count of values that are not NaN."""
    arr = np.array(xs, dtype=np.float64)
    count = float(np.count_nonzero(~np.isnan(arr)))
    with np.errstate(all="ignore"):
        return float(_nansum(xs) / count) if count else float("nan")


def _nanmax(xs: Sequence[float]) -> float:
    arr = np.array(xs, dtype=np.float64)
    arr = arr[~np.isnan(arr)]
    return float(arr.max()) if arr.size else float("nan")


def _telemetry_value(m: MetricDef, groups: Groups, phase: str) -> tuple[float | None, int]:
    sel = groups.get((phase, m.source, m.metric))
    if sel is None:
        return None, 0
    if m.device is not None:
        sel = [r for r in sel if r.device == m.device]
    sel = [r for r in sel if r.n > 0]
    if not sel:
        return None, 0
    if m.agg == "max":
        value = _nanmax([r.max for r in sel])
    elif m.agg == "sum":
        value = _nansum([r.mean for r in sel])
    else:
        value = _nanmean([r.mean for r in sel])
    return value, sum(r.n for r in sel)


Value = tuple[float | None, int, float | None]  # (value, readings behind it, ± bound or None)


def _bound(x: float) -> float | None:
    return float(x) if x == x else None  # NaN (phase not covered at a boundary): no bound


def _energy_value(m: MetricDef, energy: Sequence[PhaseEnergy], phase: str,
                  intervals: Mapping[str, tuple[float, float]], idle: IdlePower | None) -> Value:
    """Joules of the metric's domains over the phase, gross or net of idle, with the boundary bound."""
    from kit.analysis.energy import net_energy

    sel = [r for r in energy if r.phase == phase and r.domain.startswith(m.domain_prefix) and r.energy_j == r.energy_j]
    if not sel:
        return None, 0, None
    gross = _nansum([r.energy_j for r in sel])
    n, bound = sum(r.n for r in sel), _bound(_nansum([r.bound_j for r in sel]))
    if not m.net_of_idle:
        return gross, n, bound
    a, b = intervals.get(phase, (0.0, 0.0))
    net = net_energy([r.domain for r in sel], gross, b - a, idle)
    return (net, n, bound) if net is not None else (None, 0, None)


def _phase_power_value(energy: Sequence[PhaseEnergy], phase: str,
                       intervals: Mapping[str, tuple[float, float]]) -> Value:
    """Watts of the trial's GPUs over the phase from their energy counters; None unless every GPU has one."""
    from kit.analysis.telemetry import METHOD_NVML_COUNTER

    if not energy or phase not in intervals:
        return None, 0, None
    a, b = intervals[phase]
    sel = [r for r in energy if r.phase == phase and r.domain.startswith("gpu")]
    if not sel or b <= a or any(r.method != METHOD_NVML_COUNTER for r in sel) or any(r.energy_j != r.energy_j
                                                                                      for r in sel):
        return None, 0, None
    bound = _bound(_nansum([r.bound_j for r in sel]))
    return _nansum([r.energy_j for r in sel]) / (b - a), sum(r.n for r in sel), \
        None if bound is None else bound / (b - a)


def trial_cpu_util(markers: Sequence[Mapping[str, Any]], phase: str) -> float | None:
    """The trial's own CPU utilisation over a phase, in % of one CPU, from its phase markers.

    ``cpu_s`` in a marker is user + system seconds of the trial's whole process tree: every process
    under the harness (all threads, every DDP rank and DataLoader worker still running) and the
    children each has waited for (kit.workloads.tree_cpu, read from /proc at the marker's ``t``).
    (cpu_s at the end − at the start) / (t end − t start) × 100: exact, with no sampling, so a phase
    of any length resolves; other processes never enter it. A rank that exits and is never waited for
    by a process of the tree is the one case it misses. The first complete occurrence of the phase
    counts, as for the phase intervals. None for markers without ``cpu_s`` (an older kit's trials).
    """
    start: Mapping[str, Any] | None = None
    for mk in markers:
        if mk.get("phase") != phase:
            continue
        if mk.get("event") == "phase_start" and start is None:
            start = mk
        elif mk.get("event") == "phase_end" and start is not None:
            c0, c1, t0, t1 = (_num(x.get(k)) for x, k in ((start, "cpu_s"), (mk, "cpu_s"), (start, "t"), (mk, "t")))
            if c0 is None or c1 is None or t0 is None or t1 is None or t1 <= t0 or c1 < c0:
                return None
            return 100.0 * (c1 - c0) / (t1 - t0)
    return None


def _num(x: Any) -> float | None:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


PHASE_POWER_METRIC = "gpu_power_phase_w"
AVERAGED_POWER_METRIC = "gpu_power_w"


def preferred_power_metric(values: pd.DataFrame) -> str:
    """The GPU power metric tables and hypotheses use: energy-counter phase power where the run has it."""
    if not values.empty and "metric" in values:
        ph = values[(values["metric"] == PHASE_POWER_METRIC) & values["value"].notna()]
        if len(ph):
            return PHASE_POWER_METRIC
    return AVERAGED_POWER_METRIC


def trial_metric_rows(record: dict[str, Any], samples: pd.DataFrame | SampleArrays | None, metrics: tuple[str, ...],
                      tel: TrialTelemetry | None = None, idle: IdleByHost | None = None) -> list[dict[str, Any]]:
    """Every (phase, metric) value of one trial, None where it could not be measured.

    Only the trial's own GPUs count (``telemetry.trial_samples``: the record's
    ``gpus``; none when the trial computed on another GPU than the one sampled).
    ``samples``: a long-format frame or the arrays of :func:`kit.analysis.sample_arrays.read_sample_arrays`;
    ``tel``: the trial's samples already attributed to phases (the caller shares it with the threat facts).
    ``idle``: the run's idle power per host (:func:`kit.analysis.energy.load_idle_power`); without it the
    net-of-idle energies are None.
    """
    from kit.analysis.energy import idle_for
    from kit.analysis.phase_stats import energies, summaries
    from kit.analysis.telemetry import TrialTelemetry

    tel = tel if tel is not None else TrialTelemetry.of(record, samples)
    intervals = tel.intervals
    groups = _groups(summaries(tel))  # one pass over the samples (kit.analysis.phase_stats), not one per metric
    energy = energies(tel)
    base = {k: record.get(k) for k in ("trial_id", "arm", "framework", "config_id", "block", "repetition",
                                       "position", "warmup", "status")}
    own_idle = idle_for(record, idle)
    markers = [mk for mk in record.get("markers") or [] if isinstance(mk, Mapping)]
    rows = []
    for name in metrics:
        m = METRICS[name]
        for phase in TEST_PHASES:
            value: float | None
            n = 0
            bound: float | None = None
            if m.kind == "result":
                key = m.result_key(phase)
                if key is None:
                    continue
                raw = record.get("results", {}).get(key)
                ok = isinstance(raw, (int, float)) and not isinstance(raw, bool)  # screened: else not a value
                value, n = (float(raw), 1) if ok else (None, 0)
            elif m.kind == "marker":
                value = trial_cpu_util(markers, phase)
                n = 0 if value is None else 1
            elif m.kind == "telemetry":
                value, n = _telemetry_value(m, groups, phase)
            elif m.kind == "phase_power":
                value, n, bound = _phase_power_value(energy, phase, intervals)
            else:
                value, n, bound = _energy_value(m, energy, phase, intervals, own_idle)
            rows.append({**base, "phase": phase, "metric": name, "value": value, "unit": m.unit, "n_samples": n,
                         "bound": bound})
    return rows
