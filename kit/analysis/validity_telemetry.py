"""Threats to validity read from the telemetry: temperatures, throttling, foreign load, clocks, sensors.

Two halves. ``trial_facts`` and ``baseline_facts`` are pure functions that
reduce one trial's (or the idle baseline's) long-format samples to a few
numbers; ``compute_analysis`` stores them in analysis.json
(``trial_telemetry``, ``baseline``), so the evidence of every rule below is
in the analysis and a stored run is re-assessed without its samples. The
rules then read only those facts and the trial records (start temperatures
from the thermal control).

Only the trial's own GPUs count: a record with ``gpus`` (the NVML indices the
host gave the trial) has its NVML rows and its GPU start temperatures cut to
those devices, so a foreign process or a hot GPU elsewhere on an 8-GPU node
is not blamed on it; old records without ``gpus`` keep every GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from kit import disturbance_cpus as on_cpus
from kit import slow_phase
from kit.analysis.telemetry import (
    LIMITING_REASONS,
    TrialTelemetry,
    phase_intervals,
    trial_gpu_indices,
    trial_interval,
    trial_samples,
)
from kit.analysis.threats import Ctx, Threat, rule
from kit.records import TrialRecord, counted, counts

# NVML clock-event reason bits (nvml.h, nvmlClocksEventReason*)
REASON_NAMES = {0x1: "GPU idle", 0x2: "applications clocks setting", 0x4: "software power cap",
                0x8: "hardware slowdown", 0x10: "sync boost", 0x20: "software thermal slowdown",
                0x40: "hardware thermal slowdown", 0x80: "hardware power brake", 0x100: "display clock setting"}
APP_CLOCKS_BIT = 0x2
START_TEMP_DIFF_C = 2.0  # a larger gap between the frameworks' median start temperatures is a threat
IDLE_CPU_UTIL_PCT = 10.0  # idle baseline busier than this: something else runs
CLOCK_SPREAD = 0.01  # SM clock range / median below this inside phases: clocks held constant
MEASURED_PHASES = ("train", "infer")


def reason_names(bits: int) -> list[str]:
    return [name for bit, name in REASON_NAMES.items() if bits & bit]


def _series(samples: pd.DataFrame, source: str, metric: str) -> pd.DataFrame:
    if samples is None or samples.empty:
        return samples.iloc[0:0] if samples is not None else pd.DataFrame()
    return samples[(samples["source"] == source) & (samples["metric"] == metric)].dropna(subset=["value"])


def trial_facts(record: TrialRecord, samples: pd.DataFrame, tel: TrialTelemetry | None = None) -> dict[str, Any]:
    """Throttling, foreign GPU processes and SM clocks of one trial (None where not sampled). ``tel``: the trial's
    samples already attributed to phases (shared with the metrics); built here when not given."""
    out: dict[str, Any] = {"trial_id": record.trial_id, "arm": record.arm, "position": record.position,
                           "warmup": record.warmup, "status": record.status}
    tel = tel if tel is not None else TrialTelemetry.of(record.to_json(), samples)
    samples, intervals = tel.rows_of("nvml"), tel.intervals  # the facts below read only NVML series
    span = trial_interval(intervals)
    cool = record.cooldown
    out["start_temps_c"] = own_start_temps(record)
    out["cooldown_reached"] = cool.get("reached")
    out["cooldown_waited_s"] = cool.get("waited_s")
    out.update(throttle_n=0, throttle_frac_limited=None, throttle_bits=None, foreign_procs_max=None,
               sm_clock_min_mhz=None, sm_clock_median_mhz=None, sm_clock_max_mhz=None, app_clocks_frac=None)
    if span is None:
        return out
    inside = {p: iv for p, iv in intervals.items() if p in MEASURED_PHASES}
    thr = _series(samples, "nvml", "throttle_reasons")
    if len(thr) and inside:
        thr = thr[thr["phase"].isin(MEASURED_PHASES)]
        if len(thr):
            bits = thr["value"].astype("int64").to_numpy()
            out["throttle_n"] = int(bits.size)
            out["throttle_frac_limited"] = float(np.mean((bits & LIMITING_REASONS) != 0))
            out["throttle_bits"] = int(np.bitwise_or.reduce(bits))
            out["app_clocks_frac"] = float(np.mean((bits & APP_CLOCKS_BIT) != 0))
    procs = _series(samples, "nvml", "foreign_procs")
    procs = procs[(procs["t"] >= span[0]) & (procs["t"] <= span[1])] if len(procs) else procs
    if len(procs):
        out["foreign_procs_max"] = int(procs["value"].max())
    clk = _series(samples, "nvml", "sm_clock_mhz")
    if len(clk) and inside:
        v = clk.loc[clk["phase"].isin(MEASURED_PHASES), "value"].to_numpy(float)
        if v.size:
            out.update(sm_clock_min_mhz=float(v.min()), sm_clock_median_mhz=float(np.median(v)),
                       sm_clock_max_mhz=float(v.max()))
    return out


def own_start_temps(record: TrialRecord) -> dict[str, float]:
    """The start temperatures of the cool-down, GPU sensors ("gpu<i>") cut to the trial's GPUs."""
    temps = dict(record.cooldown.get("start_temps") or {})
    indices = trial_gpu_indices(record.to_json())
    if indices is None:
        return temps
    own = {f"gpu{i}" for i in indices}
    return {s: v for s, v in temps.items() if not (str(s).startswith("gpu") and s not in own)}


def baseline_facts(samples: pd.DataFrame | None, gpu_indices: list[int] | None = None) -> dict[str, Any]:
    """Idle load before the trials: CPU utilisation and load average, foreign GPU processes.

    ``gpu_indices``: the GPUs the trials used (None: every GPU in the samples).
    """
    if samples is not None and gpu_indices is not None and not samples.empty:
        samples = trial_samples({"gpus": [{"index": i} for i in gpu_indices]}, samples)
    out: dict[str, Any] = {"recorded": samples is not None and not samples.empty, "cpu_util_mean_pct": None,
                           "cpu_util_max_pct": None, "load1_median": None, "foreign_procs_max": None}
    if not out["recorded"]:
        return out
    assert samples is not None
    util = _series(samples, "cpu", "util_pct")
    util = util[util["device"] == "total"] if len(util) else util
    if len(util):
        out["cpu_util_mean_pct"] = float(util["value"].mean())
        out["cpu_util_max_pct"] = float(util["value"].max())
    load = _series(samples, "cpu", "load1")
    if len(load):
        out["load1_median"] = float(load["value"].median())
    procs = _series(samples, "nvml", "foreign_procs")
    if len(procs):
        out["foreign_procs_max"] = int(procs["value"].max())
    return out


def _measured(c: Ctx) -> list[dict[str, Any]]:
    return [f for f in c.analysis.get("trial_telemetry", []) if counts(f)]


# -- rules ----------------------------------------------------------------------

@rule
def start_temperature(c: Ctx) -> list[Threat]:
    """Frameworks that start their trials at different temperatures run at different clocks."""
    by: dict[str, dict[str, list[float]]] = {}
    for t in c.trials:
        if not t.counts:
            continue
        for sensor, temp in own_start_temps(t).items():
            if temp is not None:
                by.setdefault(sensor, {}).setdefault(t.arm, []).append(float(temp))
    if not by:
        return []
    not_reached = sum(1 for t in c.trials if t.cooldown.get("reached") is False and not t.warmup)
    medians = {s: {a: round(float(np.median(v)), 2) for a, v in arms.items()} for s, arms in by.items()}
    gaps = {s: round(max(m.values()) - min(m.values()), 2) for s, m in medians.items() if len(m) >= 2}
    if not gaps:
        return []
    worst = max(gaps, key=lambda s: gaps[s])
    numbers = {"median_start_c": medians, "gap_c": gaps, "cooldown_not_reached": not_reached}
    text = "; ".join(f"{s}: " + ", ".join(f"{a} {v:.1f} °C" for a, v in m.items()) + f" (gap {gaps[s]:.1f} °C)"
                     for s, m in medians.items() if s in gaps)
    if gaps[worst] > START_TEMP_DIFF_C:
        return [Threat("start_temperature", "internal", "high" if gaps[worst] > 2 * START_TEMP_DIFF_C else "medium",
                       "Frameworks start at different temperatures",
                       f"median temperature at trial start {text}; {not_reached} trial(s) started before the cool-down "
                       "was reached", "lengthen telemetry.cooldown_max_s or narrow cooldown_band_c, interleave the "
                       "frameworks", numbers=numbers)]
    return [Threat("start_temperature", "internal", "info", "Starting temperature",
                   f"median temperature at trial start {text}: within {START_TEMP_DIFF_C:g} °C",
                   "bounded cool-down to the idle baseline before every trial", status="mitigated", numbers=numbers)]


@rule
def throttling(c: Ctx) -> list[Threat]:
    """Power or thermal limits that slowed the GPU inside the measured phases (NVML clock-event reasons)."""
    facts = [f for f in _measured(c) if f.get("throttle_frac_limited") is not None]
    if not facts:
        return []
    limited = [f for f in facts if f["throttle_frac_limited"] > 0]
    per_arm = {a: round(float(np.mean([f["throttle_frac_limited"] for f in facts if f["arm"] == a])), 4)
               for a in sorted({f["arm"] for f in facts})}
    bits = 0
    for f in limited:
        bits |= int(f["throttle_bits"] or 0)
    reasons = reason_names(bits & LIMITING_REASONS)
    numbers = {"trials": len(facts), "trials_limited": len(limited), "mean_frac_limited_by_arm": per_arm,
               "reasons": reasons}
    if not limited:
        return [Threat("throttling", "internal", "info", "No GPU throttling",
                       f"no power or thermal limit in the NVML clock-event reasons of {len(facts)} trials",
                       "cool-down before every trial", status="mitigated", numbers=numbers)]
    worst = max(f["throttle_frac_limited"] for f in limited)
    spread = max(per_arm.values()) - min(per_arm.values())
    severity = "high" if spread > 0.1 or worst > 0.25 else "medium"
    return [Threat("throttling", "internal", severity, "GPU throttled during measured phases",
                   f"{len(limited)} of {len(facts)} trials had readings limited by {', '.join(reasons)}; "
                   f"share of limited readings per framework {per_arm}, worst trial {worst:.0%}",
                   "improve cooling, lengthen the cool-down, or lower the power limit for both frameworks alike",
                   numbers=numbers)]


@rule
def foreign_load(c: Ctx) -> list[Threat]:
    """Other processes on the GPU during trials, or a busy CPU before them (idle baseline)."""
    out: list[Threat] = []
    facts = [f for f in _measured(c) if f.get("foreign_procs_max") is not None]
    crowded = [f for f in facts if f["foreign_procs_max"] > 0]
    if crowded:
        out.append(Threat("foreign_gpu", "internal", "high", "Other processes on the GPU",
                          f"{len(crowded)} of {len(facts)} trials shared the GPU with up to "
                          f"{max(f['foreign_procs_max'] for f in crowded)} foreign process(es)",
                          "run on a dedicated GPU (exclusive Slurm job, no other users)",
                          numbers={"trials": len(facts), "trials_shared": len(crowded),
                                   "trial_ids": [f["trial_id"] for f in crowded][:20]}))
    base = c.analysis.get("baseline") or {}
    logical = c.manifest.host.get("cpu_logical") or 1
    if not base.get("recorded"):
        out.append(Threat("foreign_cpu", "internal", "low", "Background load not checked",
                          "no idle baseline was recorded (telemetry.baseline_s = 0), so load before the trials is unknown",
                          "set telemetry.baseline_s (e.g. 10) to record idle load at run start"))
        return out
    util, load1 = base.get("cpu_util_mean_pct"), base.get("load1_median")
    # Utilisation, measured over the baseline itself, decides; the load average only where utilisation was not
    # sampled: it is a 1-minute damped average, still high for a minute after the kit's own previous run ended
    # (measured: 0.2 % busy with load 1.10 on 2 CPUs right after a run), which is no foreign load.
    busy = (util > IDLE_CPU_UTIL_PCT) if util is not None else (load1 is not None and load1 > 0.5 * logical)
    gpu_busy = (base.get("foreign_procs_max") or 0) > 0
    nums = {k: base.get(k) for k in ("cpu_util_mean_pct", "cpu_util_max_pct", "load1_median", "foreign_procs_max")}
    nums["cpu_logical"] = logical
    util_txt = "not sampled" if util is None else f"{util:.1f} %"
    load_txt = "" if load1 is None else f", load average {load1:.2f} on {logical} CPUs"
    shaken = c.analysis.get("disturbance") or {}
    during = bool(shaken.get("reruns") or shaken.get("still_disturbed_trials"))
    pinned = _pinned_quiet(c.manifest.baseline.get("load"))
    if busy and not gpu_busy and pinned is not None:  # issue 43: busy elsewhere, quiet where the trials ran
        out.append(Threat("foreign_cpu", "internal", "info", "Host busy before the trials, not on the trials' CPUs",
                          f"idle baseline: mean CPU utilisation {util_txt}{load_txt}; on the trials' CPU(s) "
                          f"{pinned[0]} other work kept {pinned[1]:.2f} CPUs busy",
                          "the trials were pinned away from the load (cpuset); their phases were judged on their own "
                          "CPUs", status="mitigated", numbers={**nums, "on_cpus": pinned[0], "foreign_cpu": pinned[1]}))
    elif busy or gpu_busy:
        gpu_txt = f", {base['foreign_procs_max']} process(es) on the GPU" if gpu_busy else ""
        there = _pinned_load(c.manifest.baseline.get("load"))
        if there is not None:  # a pinned run: the load on its trials' CPUs is what a trial would share
            nums.update(on_cpus=there[0], on_cpus_count=there[1], foreign_cpu_on_cpus=there[2])
        out.append(Threat("foreign_cpu", "internal", "medium", "Host busy before the trials",
                          f"idle baseline: mean CPU utilisation {util_txt}{load_txt}{gpu_txt}",
                          "stop other work on the host (or use an exclusive job) before running", numbers=nums))
    elif during:  # idle at the start is no evidence of a quiet run when trials were disturbed later
        out.append(Threat("foreign_cpu", "internal", "low", "Host idle before the trials, busy during some",
                          f"idle baseline: mean CPU utilisation {util_txt}{load_txt}; but other work ran during "
                          "trials (see 'Trials disturbed while they ran')",
                          "stop other work on the host (or use an exclusive job) before running", numbers=nums))
    else:
        out.append(Threat("foreign_cpu", "internal", "info", "Host idle before the trials",
                          f"idle baseline: mean CPU utilisation {util_txt}{load_txt}",
                          "idle baseline checked at run start", status="mitigated", numbers=nums))
    return out


def _pinned_load(load: object) -> tuple[str, int, float] | None:
    """A pinned run's idle-baseline load on its trials' CPUs (kit.run.host.baseline_load's ``on_cpus``): those
    CPUs as text, how many, and the foreign CPUs there; None when not pinned or not recorded as numbers."""
    if not isinstance(load, Mapping):
        return None
    cpus, figure = load.get("on_cpus"), load.get("foreign_cpu")
    if (not isinstance(cpus, list) or not cpus or len(cpus) > 4096
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in cpus)
            or isinstance(figure, bool) or not isinstance(figure, (int, float)) or not 0 <= figure < 1e6):
        return None
    return ",".join(map(str, cpus[:64])), len(cpus), float(figure)


def _pinned_quiet(load: object) -> tuple[str, float] | None:
    """A pinned run's idle baseline that was quiet on its trials' CPUs: those CPUs as text and the figure there;
    None when not pinned, not recorded, or busy there too."""
    got = _pinned_load(load)
    if got is None or not isinstance(load, Mapping) or load.get("busy") is not False:
        return None
    return got[0], got[2]


@rule
def disturbed_trials(c: Ctx) -> list[Threat]:
    """Trials whose timed phases shared the host (kit.disturbance): re-run by the runner; those still
    disturbed after the re-runs are counted, flagged and their effect shown."""
    shaken = c.analysis.get("disturbance") or {}
    still = list(shaken.get("still_disturbed_trials") or [])
    reruns = int(shaken.get("reruns") or 0)
    measured = int(shaken.get("measured_trials") or 0)
    if not still and not reruns:
        return []
    numbers: dict[str, Any] = {"measured_trials": measured, "reruns": reruns,
                               "rerun_trials": list(shaken.get("rerun_trials") or [])[:20],
                               "still_disturbed_trials": still[:20]}
    if not still:
        return [Threat("disturbed", "internal", "info", "Disturbed trials re-run",
                       f"{reruns} attempt(s) of {len(numbers['rerun_trials'])} trial(s) had a timed phase disturbed "
                       "(other work on the CPUs or GPU, or throttling); each was set aside under attempts/ and the "
                       "trial re-run in its plan position; no counted trial was disturbed",
                       "disturbed trials re-run in place (design.disturbance_retries)", status="mitigated",
                       numbers=numbers)]
    rows = [r for r in shaken.get("phases") or [] if r.get("disturbed")]
    causes = sorted({cause.split(" (")[0] for r in rows for cause in r.get("causes") or []})
    effect = _disturbed_effect(c, rows)
    numbers["effect_ratio_median"] = effect
    share = len(still) / measured if measured else 1.0
    effect_txt = (f"; their time was {effect:.3g}x the median of the quiet trials of the same arm and phase"
                  if effect is not None else "")
    if slow_phase.SLOW_CAUSE in causes:  # contention by its effect alone: the rule is stated with the count
        effect_txt += f"; {slow_phase.SlowRule().text()}"
    return [Threat("disturbed", "internal", "high" if share > 0.1 else "medium", "Trials disturbed while they ran",
                   f"{len(still)} of {measured} counted trials were still disturbed after the re-runs "
                   f"({', '.join(causes)[:300]}){effect_txt}; they are counted, and comparisons whose sides differ "
                   "in them are called suspect", "re-run on a quiet host or an exclusive job (kit doctor)",
                   numbers=numbers)]


@rule
def late_telemetry(c: Ctx) -> list[Threat]:
    """Phases whose samples came late (kit.disturbance_cpus.SamplingGaps): the kit's own CPU was busy or the sampler
    stalled. That touches the telemetry (power and energy integrals are interpolated over the gaps), never the
    timing, which the trial measures itself; so it is a threat to the telemetry only."""
    late: list[tuple[str, str, int]] = []
    judged = 0
    for rec in c.trials:
        if rec.warmup or not isinstance(rec.disturbance, Mapping):
            continue
        phases = rec.disturbance.get("phases")
        for name, stored in (phases.items() if isinstance(phases, Mapping) else ()):
            if not isinstance(stored, Mapping):
                continue
            got = on_cpus.phase_cpus(stored)
            if got.late_samples is None:
                continue
            judged += 1
            if got.late_samples:
                late.append((rec.trial_id, str(name)[:40], got.late_samples))
    if not late:
        return []
    gaps = sum(n for *_, n in late)
    return [Threat("late_telemetry", "internal", "low", "Telemetry late in some phases",
                   f"{len(late)} of {judged} timed phases had {gaps} sampling gap(s) longer than "
                   f"{on_cpus.LATE_SAMPLE_PERIODS:g} periods: the kit's CPU was busy or the sampler stalled; power, "
                   "energy and utilisation there are interpolated over the gaps (the phases' times are not affected)",
                   "keep the kit's CPU free: [container] cpuset = \"auto\" gives it one of its own",
                   numbers={"phases": judged, "late_phases": len(late), "gaps": gaps,
                            "trial_ids": sorted({t for t, _, _ in late})[:20]})]


def _disturbed_effect(c: Ctx, rows: list[Mapping[str, Any]]) -> float | None:
    """Median over disturbed (trial, phase) of its time_s over the median of the quiet trials of its arm,
    configuration and phase: what the disturbance did to the values that were kept."""
    use = c.use
    use = use[use["metric"] == "time_s"]
    if use.empty or not rows:
        return None
    bad = {(r["trial_id"], r["phase"]) for r in rows}
    ratios = []
    for r in rows:
        same = use[(use["arm"] == r["arm"]) & (use["config_id"] == r["config_id"]) & (use["phase"] == r["phase"])]
        mine = same[same["trial_id"] == r["trial_id"]]["value"]
        quiet = same[[(t, r["phase"]) not in bad for t in same["trial_id"]]]["value"]
        if len(mine) and len(quiet) and float(quiet.median()) > 0:
            ratios.append(float(mine.iloc[0]) / float(quiet.median()))
    return float(np.median(ratios)) if ratios else None


@rule
def gpu_clocks(c: Ctx) -> list[Threat]:
    """GPU clocks left to boost vary with temperature and power: a source of noise and drift."""
    facts = [f for f in _measured(c) if f.get("sm_clock_median_mhz") is not None]
    if not facts:
        return []
    lo = min(f["sm_clock_min_mhz"] for f in facts)
    hi = max(f["sm_clock_max_mhz"] for f in facts)
    med = float(np.median([f["sm_clock_median_mhz"] for f in facts]))
    app = [f["app_clocks_frac"] for f in facts if f.get("app_clocks_frac") is not None]
    app_frac = float(np.mean(app)) if app else 0.0
    numbers = {"sm_clock_min_mhz": lo, "sm_clock_median_mhz": med, "sm_clock_max_mhz": hi,
               "app_clocks_frac": round(app_frac, 4), "trials": len(facts)}
    spread = (hi - lo) / med if med else float("inf")
    if app_frac >= 0.9 or spread < CLOCK_SPREAD:
        return [Threat("gpu_clocks", "internal", "info", "GPU clocks held constant",
                       f"SM clock {lo:.0f}–{hi:.0f} MHz inside the measured phases of {len(facts)} trials"
                       + (f"; applications clocks set in {app_frac:.0%} of readings" if app else ""),
                       "locked clocks", status="mitigated", numbers=numbers)]
    return [Threat("gpu_clocks", "internal", "medium", "GPU clocks not locked",
                   f"SM clock ranged {lo:.0f}–{hi:.0f} MHz (median {med:.0f}) inside the measured phases "
                   f"({spread:.1%} of the median)", f"sudo nvidia-smi -lgc {med:.0f},{med:.0f} before the run "
                   "(and nvidia-smi -rgc after)", numbers=numbers)]


@rule
def sensors(c: Ctx) -> list[Threat]:
    """Collectors that could not read on this host, beyond the hypothesis metrics `unmeasured` reports."""
    probes = [p for p in c.manifest.collectors if not p.get("ok")]
    no_temp = sum(1 for t in c.trials if "no temperature sensor" in str(t.cooldown.get("note", "")))
    out = []
    if probes:
        out.append(Threat("sensors", "construct", "low", "Sensors unavailable",
                          "; ".join(f"{p['name']}: {p.get('detail', '')}" for p in probes),
                          "run on a host that exposes them (see `kit doctor`); the metrics they feed are missing",
                          numbers={"unavailable": [p["name"] for p in probes]}))
    if no_temp:
        out.append(Threat("sensors", "internal", "low", "No temperature control",
                          f"{no_temp} trial(s) had no temperature sensor to cool down against, so starting "
                          "temperatures are neither controlled nor compared", "enable the hwmon or nvml collectors",
                          numbers={"trials_without_sensor": no_temp}))
    return out


SHORT_PHASE_PERIODS = 10  # a phase shorter than this many sampling periods is poorly sampled
TELEMETRY_KINDS = ("telemetry", "energy", "phase_power")


def phase_durations(trials: Iterable[TrialRecord]) -> dict[tuple[str, str], list[float]]:
    """(arm, phase) -> durations (s) of the measured phases of the measured trials, from the markers."""
    out: dict[tuple[str, str], list[float]] = {}
    for t in trials:
        if not t.counts:
            continue
        for phase, (a, b) in phase_intervals(t.markers).items():
            if phase in MEASURED_PHASES:
                out.setdefault((t.arm, phase), []).append(b - a)
    return out


def trials_without_samples(values: pd.DataFrame, arm: str, phase: str) -> dict[str, int]:
    """Per telemetry metric the run measured at all: measured trials of (arm, phase) that got no value."""
    from kit.analysis.metrics import METRICS

    if values is None or values.empty or "metric" not in values:
        return {}
    v = counted(values)
    out = {}
    for metric, g in v.groupby("metric", sort=True):
        m = METRICS.get(str(metric))
        if m is None or m.kind not in TELEMETRY_KINDS or g["value"].notna().sum() == 0:
            continue
        sel = g[(g["arm"] == arm) & (g["phase"] == phase)]
        k = int(sel["value"].isna().sum())
        if k:
            out[str(metric)] = k
    return out


@rule
def short_phases(c: Ctx) -> list[Threat]:
    """Phases shorter than ~10 sampling periods: few or no telemetry readings, and those biased to the slower arm."""
    from kit.analysis.metrics import METRICS

    tel = c.manifest.spec.get("telemetry") or {}
    period = tel.get("period_s")
    if not period or not tel.get("collectors"):
        return []
    threshold = SHORT_PHASE_PERIODS * float(period)
    rows: list[dict[str, Any]] = []  # the Threat's numbers (JSON)
    for (arm, phase), ds in sorted(phase_durations(c.trials).items()):
        med = float(np.median(ds))
        if med < threshold:
            rows.append({"arm": arm, "phase": phase, "trials": len(ds), "median_s": round(med, 6),
                         "periods": round(med / float(period), 3),
                         "trials_without_samples": trials_without_samples(c.values, arm, phase)})
    numbers: dict[str, Any] = {"period_s": float(period), "threshold_s": threshold, "phases": rows}
    if not rows:
        return [Threat("short_phases", "construct", "info", "Phases long enough for the telemetry",
                       f"every measured phase lasts at least {SHORT_PHASE_PERIODS} sampling periods "
                       f"({threshold:g} s) in median", "phase length checked against telemetry.period_s",
                       status="mitigated", numbers=numbers)]
    short = {r["phase"] for r in rows}
    hyps = [h for h in c.analysis.get("hypotheses", []) if h["phase"] in short and
            METRICS.get(h.get("metric_tested") or h["metric"], METRICS["time_s"]).kind in TELEMETRY_KINDS]
    numbers["hypotheses"] = sorted({f"{h['id']} ({h['phase']}): {h['decision']}" for h in hyps})
    text = "; ".join(f"{r['arm']} {r['phase']}: median {r['median_s']:.3g} s = {r['periods']:.2g} periods"
                     + (", trials without samples " + ", ".join(f"{m} {k} of {r['trials']}"
                                                              for m, k in r["trials_without_samples"].items())
                        if r["trials_without_samples"] else "") for r in rows)
    return [Threat("short_phases", "construct", "high" if hyps else "medium",
                   "Phases shorter than the telemetry can resolve",
                   f"{text} (sampling period {float(period):g} s; {SHORT_PHASE_PERIODS} periods = {threshold:g} s): "
                   "the telemetry of these phases has few or no readings, and a trial gets a reading more often "
                   "the slower it is" + ("; telemetry hypotheses on them are not testable" if hyps else ""),
                   f"set [workload] min_phase_s = {threshold:g} (the workload repeats the measured operation until "
                   "the phase lasts that long; time is still reported per pass), or shorten telemetry.period_s",
                   numbers=numbers)]


GPU_BUSY_PCT = 50.0  # median GPU utilisation of a timed phase below this: the GPU mostly waits for the host


@rule
def gpu_underused(c: Ctx) -> list[Threat]:
    """A GPU that idles through the timed phases: the comparison then measures each framework's per-step work on
    the host (kernel launches, Python, synchronisation) more than GPU computation. Seen for real: LeNet-5's
    paper protocol on an H100 peaked at 1-20 % utilisation in training (docs/evidence/gpu-2026-11-26-*)."""
    v = c.use
    v = v[(v["metric"] == "gpu_util_pct") & v["phase"].isin(MEASURED_PHASES)]
    if v.empty:
        return []
    medians = v.groupby(["arm", "phase"], sort=True)["value"].median()
    low = {f"{arm} {phase}": round(float(m), 1) for (arm, phase), m in medians.items() if m < GPU_BUSY_PCT}
    if not low:
        return []
    return [Threat("gpu_underused", "construct", "medium", "GPU mostly idle in the timed phases",
                   f"median GPU utilisation {', '.join(f'{k} {u:g} %' for k, u in low.items())} (below "
                   f"{GPU_BUSY_PCT:g} %): the phases are bound by the host's per-step work (kernel launches, Python), "
                   "so the comparison measures framework overhead more than GPU computation",
                   "where the question is about the GPU, use a larger model or batch; otherwise report the result as "
                   "per-step overhead", numbers={"median_util_pct": low, "threshold_pct": GPU_BUSY_PCT})]
