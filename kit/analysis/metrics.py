"""Metrics: how one number per trial and phase is derived from the raw record.

A metric is either a result the harness measured (``time_s`` is the train or
infer phase duration), a summary of host telemetry over the phase (``cpu_util_pct``
is the mean of the total CPU utilisation readings inside the phase), an
energy difference over the phase, or the phase's power from that energy
(``gpu_power_phase_w`` = NVML energy-counter difference / phase duration).
Only the trial's own GPUs count (``telemetry.trial_samples``).

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

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from kit.metric_catalog import METRICS, MetricDef

if TYPE_CHECKING:
    from kit.analysis.telemetry import TrialTelemetry

TEST_PHASES = ("train", "infer")
VALUE_COLUMNS = ["trial_id", "arm", "framework", "config_id", "block", "repetition", "position", "warmup",
                 "status", "phase", "metric", "value", "unit", "n_samples"]


# What the report shows by default, in this order.
DEFAULT_METRICS = ("time_s", "cpu_util_pct", "cpu_temp_c", "gpu_util_pct", "gpu_temp_c", "gpu_power_w",
                   "trial_rss_bytes", "host_mem_used_bytes", "gpu_mem_used_bytes", "gpu_energy_j", "cpu_energy_j",
                   "dram_energy_j", "throughput_ips", "accuracy")
# Shown as well when the run sampled NVML: GPU power from the energy counter and the instantaneous field.
NVML_METRICS = ("gpu_power_phase_w", "gpu_power_instant_w")


Groups = dict[tuple[str, str, str], pd.DataFrame]  # (phase, source, metric) -> its summary rows, in order


def _groups(summaries: pd.DataFrame) -> Groups:
    """The summary rows by (phase, source, metric), split once per trial instead of filtered once per metric."""
    if summaries.empty:
        return {}
    return {(str(k[0]), str(k[1]), str(k[2])): g
            for k, g in summaries.groupby(["phase", "source", "metric"], sort=False, observed=True)}


def _telemetry_value(m: MetricDef, groups: Groups, phase: str) -> tuple[float | None, int]:
    sel = groups.get((phase, m.source, m.metric))
    if sel is None:
        return None, 0
    if m.device is not None:
        sel = sel[sel["device"] == m.device]
    sel = sel[sel["n"] > 0]
    if sel.empty:
        return None, 0
    if m.agg == "max":
        value = float(sel["max"].max())
    elif m.agg == "sum":
        value = float(sel["mean"].sum())
    else:
        value = float(sel["mean"].mean())
    return value, int(sel["n"].sum())


def _energy_value(m: MetricDef, energy: pd.DataFrame, phase: str) -> tuple[float | None, int]:
    if energy.empty:
        return None, 0
    sel = energy[(energy["phase"] == phase) & energy["domain"].astype(str).str.startswith(m.domain_prefix)]
    sel = sel[sel["energy_j"].notna()]
    if sel.empty:
        return None, 0
    return float(sel["energy_j"].sum()), int(sel["n"].sum())


def _phase_power_value(energy: pd.DataFrame, phase: str, intervals: Mapping[str, tuple[float, float]]) -> tuple[float | None, int]:
    """Watts of the trial's GPUs over the phase from their energy counters; None unless every GPU has one."""
    from kit.analysis.telemetry import METHOD_NVML_COUNTER

    if energy.empty or phase not in intervals:
        return None, 0
    a, b = intervals[phase]
    sel = energy[(energy["phase"] == phase) & energy["domain"].astype(str).str.startswith("gpu")]
    if sel.empty or b <= a or (sel["method"] != METHOD_NVML_COUNTER).any() or sel["energy_j"].isna().any():
        return None, 0
    return float(sel["energy_j"].sum()) / (b - a), int(sel["n"].sum())


PHASE_POWER_METRIC = "gpu_power_phase_w"
AVERAGED_POWER_METRIC = "gpu_power_w"


def preferred_power_metric(values: pd.DataFrame) -> str:
    """The GPU power metric tables and hypotheses use: energy-counter phase power where the run has it."""
    if not values.empty and "metric" in values:
        ph = values[(values["metric"] == PHASE_POWER_METRIC) & values["value"].notna()]
        if len(ph):
            return PHASE_POWER_METRIC
    return AVERAGED_POWER_METRIC


def trial_metric_rows(record: dict[str, Any], samples: pd.DataFrame, metrics: tuple[str, ...],
                      tel: TrialTelemetry | None = None) -> list[dict[str, Any]]:
    """Every (phase, metric) value of one trial, None where it could not be measured.

    Only the trial's own GPUs count (``telemetry.trial_samples``: the record's
    ``gpus``; none when the trial computed on another GPU than the one sampled).
    ``tel``: the trial's samples already attributed to phases (the caller shares it with the threat facts).
    """
    from kit.analysis.telemetry import TrialTelemetry, phase_energy, phase_summaries

    tel = tel if tel is not None else TrialTelemetry.of(record, samples)
    samples, intervals = tel.samples, tel.intervals
    summaries = phase_summaries(samples, intervals) if not samples.empty else pd.DataFrame()
    groups = _groups(summaries)
    energy = phase_energy(samples, intervals) if not samples.empty else pd.DataFrame()
    base = {k: record.get(k) for k in ("trial_id", "arm", "framework", "config_id", "block", "repetition",
                                       "position", "warmup", "status")}
    rows = []
    for name in metrics:
        m = METRICS[name]
        for phase in TEST_PHASES:
            value: float | None
            n = 0
            if m.kind == "result":
                key = m.result_key(phase)
                if key is None:
                    continue
                raw = record.get("results", {}).get(key)
                ok = isinstance(raw, (int, float)) and not isinstance(raw, bool)  # screened: else not a value
                value, n = (float(raw), 1) if ok else (None, 0)
            elif m.kind == "telemetry":
                value, n = _telemetry_value(m, groups, phase)
            elif m.kind == "phase_power":
                value, n = _phase_power_value(energy, phase, intervals)
            else:
                value, n = _energy_value(m, energy, phase)
            rows.append({**base, "phase": phase, "metric": name, "value": value, "unit": m.unit, "n_samples": n})
    return rows
