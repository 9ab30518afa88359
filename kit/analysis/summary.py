"""The descriptive parts of an analysis: the run's summary, per-arm descriptives, which metrics were measured
and the environment each arm reported from inside.

Apart from :mod:`kit.analysis.analyze`: these describe the run and decide nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from kit import stats
from kit.analysis.metrics import METRICS
from kit.analysis_rows import Descriptive, Measured, RunSummary
from kit.manifest import Manifest
from kit.records import TrialRecord


def trial_env(trials: Sequence[TrialRecord], arms: list[str]) -> list[dict[str, Any]]:
    """Versions reported from inside the first finished trial of each arm."""
    seen: dict[str, dict[str, Any]] = {}
    for t in trials:
        if t.status == "ok" and t.arm not in seen and t.env:
            seen[t.arm] = {"arm": t.arm, "trial_id": t.trial_id, **t.env}
    return [seen[a] for a in arms if a in seen]


def run_summary(manifest: Manifest, trials: Sequence[TrialRecord]) -> RunSummary:
    """The plan against what finished (a run stopped early by --until-conclusive planned only up to its stop),
    and how much of the trials' wall time was timed (:func:`timed_share`)."""
    planned = len(manifest.plan.trials)
    stop = (manifest.sequential or {}).get("stopped")
    if isinstance(stop, Mapping) and isinstance(stop.get("at_repetitions"), int):
        # --until-conclusive stopped at a look: the plan beyond it was never meant to run (kit.sequential_run)
        warm = int((manifest.spec.get("design") or {}).get("warmup_repetitions") or 0)
        planned = sum(1 for t in manifest.plan.trials if t.repetition < warm + int(stop["at_repetitions"]))
    status = Counter(t.status for t in trials)
    min_phase = (manifest.spec.get("workload") or {}).get("min_phase_s")
    share = timed_share(trials)
    return RunSummary(planned=planned, finished=len(trials), missing=planned - len(trials), by_status=dict(status),
                      warmup_trials=sum(1 for t in trials if t.warmup), status=manifest.status,
                      backend=manifest.backend.get("backend"), blocking=manifest.plan.blocking,
                      seed=manifest.plan.seed, started=manifest.started, ended=manifest.ended,
                      timed_share=share.share, timed_s=share.timed_s, trial_wall_s=share.wall_s,
                      timed_trials=share.n, phase_passes=share.passes, min_phase_s=finite(min_phase))


def finite(v: Any) -> float | None:
    """``v`` as a float where it is a finite number (not a bool), else None."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


@dataclass(frozen=True, slots=True)
class TimedShare:
    share: float | None  # timed / wall, None without a counted trial
    timed_s: float
    wall_s: float
    n: int  # counted trials with a wall time
    passes: dict[str, list[int]]  # per phase: the fewest and most passes of a calibrated run


def timed_share(trials: Iterable[TrialRecord]) -> TimedShare:
    """How much of the counted trials' wall time their timed phases fill, and how often each phase repeated.

    Timed: every phase but the warm-up; wall: the trial process from start to
    exit (imports, data loading, warm-up and teardown included). The larger
    the share, the more of the machine time a run costs measures the
    frameworks rather than process start-up. ``phase_passes``: the fewest and
    most passes per phase (results ``<phase>_passes``) of a calibrated run.
    """
    timed_s = wall_s = 0.0
    n = 0
    passes: dict[str, list[int]] = {}
    for t in trials:
        phases, wall, results = t.phases, t.wall_s, t.results
        # a trial file without a phase table (an older harness) says nothing of its timed share: left out, where an
        # empty table counts its wall time (the typed ``phases`` cannot tell the two apart; the file can)
        if not t.counts or wall is None or wall <= 0 or not isinstance(t.to_json().get("phases"), dict):
            continue
        durations = [ph.get("duration_s") for name, ph in phases.items() if name != "warmup"]
        timed_s += sum(d for d in durations if d is not None and d > 0)
        wall_s += wall
        n += 1
        for name in phases:
            k = results.get(f"{name}_passes")
            if isinstance(k, int) and not isinstance(k, bool) and k > 0:
                passes.setdefault(name, []).append(k)
    return TimedShare(share=timed_s / wall_s if wall_s > 0 else None, timed_s=timed_s, wall_s=wall_s, n=n,
                      passes={k: [min(v), max(v)] for k, v in sorted(passes.items())})


def descriptives(use: pd.DataFrame, arms: list[str], labels: dict[str, str] | None = None) -> list[Descriptive]:
    """Per configuration, metric, phase and arm: location, spread, normality and the outliers by trial id."""
    out = []
    for (cid, metric, phase), g in use.groupby(["config_id", "metric", "phase"], sort=True):
        for arm in arms:
            ga = g[g["arm"] == arm].sort_values("position")
            if ga.empty:
                continue
            x = ga["value"].to_numpy(dtype=float)
            out_ = stats.tukey_outliers(x).as_dict()
            ids = ga["trial_id"].tolist()
            out_["mild_trial_ids"] = [ids[i] for i in out_["mild_indices"]]
            out_["extreme_trial_ids"] = [ids[i] for i in out_["extreme_indices"]]
            n_m, n_e = len(out_["mild_trial_ids"]), len(out_["extreme_trial_ids"])
            out_["summary"] = "" if not (n_m or n_e) else (
                f"{n_m} mild, {n_e} extreme: " + ", ".join(out_["mild_trial_ids"] + out_["extreme_trial_ids"]))
            out.append(Descriptive(config_id=str(cid), metric=str(metric), phase=str(phase), arm=arm,
                                   unit=METRICS[str(metric)].unit, stats=stats.describe(x).as_dict(),
                                   config_label=labels.get(str(cid), str(cid)) if labels else None,
                                   normality=stats.normality(x).as_dict() if len(x) >= 3 else None, outliers=out_))
    return out


def measured(values: pd.DataFrame, manifest: Manifest) -> list[Measured]:
    """Per metric: measured or not, and why not (from the collectors' probes)."""
    probes = {c["name"]: c for c in manifest.collectors}
    out = []
    for metric, g in values.groupby("metric", sort=False):
        m = METRICS[metric]
        n = int(g["value"].notna().sum())
        reason = None
        if n == 0:
            probe = probes.get(m.source) if m.source else None
            if m.kind in ("energy", "phase_power"):
                src = "nvml" if m.domain_prefix.startswith("gpu") else "rapl"
                probe = probes.get(src)
            if m.kind == "marker":
                reason = "the trials' phase markers hold no CPU times (cpu_s): recorded by an older kit"
            elif probe is not None and not probe["ok"]:
                reason = f"{probe['name']}: {probe['detail']}" + (f" (fix: {probe['fix']})" if probe.get("fix") else "")
            elif probe is None and m.kind != "result":
                reason = "collector not enabled in this run"
            elif m.net_of_idle:
                reason = ("no idle power of this counter in the run's baseline (telemetry.baseline_s = 0, or the "
                          "counter was not sampled then): see the gross energy")
            elif m.kind == "phase_power":
                reason = "no NVML energy counter on these GPUs (before Volta?): see the 1-s averaged GPU power"
            elif m.metric == "power_instant_w":
                reason = "the driver does not expose NVML_FI_DEV_POWER_INSTANT: see the 1-s averaged GPU power"
            else:
                reason = "no readings inside the phases (phases shorter than the sampling period?)"
        out.append(Measured(metric=str(metric), label=m.label, unit=m.unit, measured=n > 0, n_values=n,
                            reason=reason))
    return out
