"""`kit history RUNS_DIR --metric …`: a metric over many runs of successive versions, and its steps.

Runs are ordered by their start time (or by label) and labelled by ``kit run
--label`` (else the framework versions reported from inside the trials).
Step detection: PELT (ruptures, L1 cost, robust to outliers) over the
trial-level values in run order, breakpoints snapped to run boundaries; each
candidate step is then validated like a comparison (Mann–Whitney between the
runs before and after it, up to the neighbouring steps; Holm; and the
practical threshold on the ratio of medians), so a step is reported only
where a change is both significant and large enough to matter.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from kit.analysis import stats
from kit.analysis.metrics import METRICS
from kit.compare import load_analysis
from kit.errors import AnalysisError
from kit.store import RunDir


def _label(man: dict[str, Any], analysis: dict[str, Any], arm: str) -> str:
    if man.get("label"):
        return str(man["label"])
    for env in analysis.get("trial_env", []):
        if env["arm"] == arm and env.get("framework_version"):
            return f"{arm} {env['framework_version']}"
    return Path(str(man.get("run_dir", "run"))).name


def collect(runs_dir: Path, metric: str, phase: str, arm: str | None, experiment: str | None) -> list[dict[str, Any]]:
    """Per run (in start order): label and the measured values of ``metric`` in ``phase`` for ``arm``."""
    if metric not in METRICS:
        raise AnalysisError(f"unknown metric {metric!r}", where="--metric", fix=f"use one of {', '.join(sorted(METRICS))}")
    found = sorted(p.parent for p in Path(runs_dir).glob("*/manifest.json"))
    if not found:
        raise AnalysisError("no run directories found", where=str(runs_dir), fix="give the directory that holds runs/<time>-<experiment>/")
    runs = []
    experiments = set()
    for path in found:
        rd = RunDir.open(path)
        man = rd.manifest()
        if experiment and man["experiment"] != experiment:
            continue
        experiments.add(man["experiment"])
        if not rd.finished_ids():
            continue
        analysis = load_analysis(path)
        chosen = arm or analysis["arms"][0]
        vals = [float(v["value"]) for v in analysis["values"] if v["metric"] == metric and v["phase"] == phase
                and v["arm"] == chosen and v["value"] is not None and not v["warmup"] and v["status"] == "ok"]
        if vals:
            runs.append({"run_dir": str(path), "started": man.get("started") or 0.0, "label": _label(man, analysis, chosen),
                         "arm": chosen, "values": vals, "median": float(np.median(vals)),
                         "q1": float(np.percentile(vals, 25)), "q3": float(np.percentile(vals, 75)), "n": len(vals)})
    if len(experiments) > 1 and not experiment:
        raise AnalysisError(f"runs of several experiments ({', '.join(sorted(experiments))})", where=str(runs_dir),
                            fix="pick one with --experiment")
    runs.sort(key=lambda r: r["started"])
    return runs


def detect_steps(runs: list[dict[str, Any]], *, threshold: float = 0.05, alpha: float = 0.05,
                 lower_is_better: bool | None = True) -> list[dict[str, Any]]:
    """Validated steps between runs: index of the first run after the step, ratio, p, verdict."""
    import ruptures as rpt

    if len(runs) < 2:
        return []
    series = np.concatenate([np.asarray(r["values"], float) for r in runs])
    bounds = np.cumsum([len(r["values"]) for r in runs])[:-1]  # index where run i+1 starts
    resid = np.concatenate([np.asarray(r["values"], float) - r["median"] for r in runs])
    sigma = float(stats.describe(resid).mad_normal) or float(np.std(resid)) or 1e-12
    pen = 2.0 * math.log(len(series)) * sigma  # BIC-like penalty on the L1 cost scale
    bkps = rpt.Pelt(model="l1", min_size=2, jump=1).fit(series.reshape(-1, 1)).predict(pen=pen)[:-1]
    cand = sorted({int(np.argmin(np.abs(bounds - b))) + 1 for b in bkps})  # run index after the step
    steps = []
    edges = [0, *cand, len(runs)]
    for k, i in enumerate(cand):
        before = np.concatenate([runs[j]["values"] for j in range(edges[k], i)])
        after = np.concatenate([runs[j]["values"] for j in range(i, edges[k + 2])])
        comp = stats.compare_two(after, before, paired=False, alpha=alpha).as_dict()
        ratio = (comp.get("ratio") or {}).get("estimate")
        steps.append({"index": i, "from": runs[i - 1]["label"], "to": runs[i]["label"], "ratio": ratio,
                      "ratio_low": (comp.get("ratio") or {}).get("low"), "ratio_high": (comp.get("ratio") or {}).get("high"),
                      "p": (comp.get("test") or {}).get("p"), "n_before": len(before), "n_after": len(after)})
    from kit.compare import verdict

    for s, p_adj in zip(steps, stats.holm([s["p"] for s in steps]), strict=True):
        s["p_adj"] = p_adj
        s["verdict"] = verdict(s["ratio"], p_adj, lower_is_better, threshold, alpha)
    return [s for s in steps if s["verdict"] in ("regression", "improvement")]


def history(runs_dir: Path, metric: str, phase: str = "train", arm: str | None = None, experiment: str | None = None,
            threshold: float = 0.05, alpha: float = 0.05) -> dict[str, Any]:
    runs = collect(runs_dir, metric, phase, arm, experiment)
    if not runs:
        raise AnalysisError(f"no run has measured {metric} in the {phase} phase", where=str(runs_dir),
                            fix="check --metric, --phase and --arm against the runs' analysis.json")
    steps = detect_steps(runs, threshold=threshold, alpha=alpha, lower_is_better=METRICS[metric].lower_is_better)
    return {"runs_dir": str(runs_dir), "metric": metric, "unit": METRICS[metric].unit, "phase": phase,
            "arm": runs[0]["arm"], "threshold": threshold, "alpha": alpha,
            "runs": [{k: v for k, v in r.items() if k != "values"} for r in runs], "steps": steps,
            "method": "PELT (ruptures, L1 cost, BIC-like penalty) on trial values, snapped to run boundaries, "
                      "each step validated by Mann-Whitney/Brunner-Munzel with Holm and the practical threshold"}


def plot_svg(result: dict[str, Any]) -> str:
    import matplotlib.pyplot as plt

    from kit.report.figures import to_svg

    runs = result["runs"]
    x = np.arange(len(runs))
    med = np.array([r["median"] for r in runs])
    lo = med - np.array([r["q1"] for r in runs])
    hi = np.array([r["q3"] for r in runs]) - med
    fig, ax = plt.subplots(figsize=(max(5.0, 0.6 * len(runs)), 3.2))
    ax.errorbar(x, med, yerr=[lo, hi], fmt="o-", ms=4, capsize=3)
    for s in result["steps"]:
        ax.axvline(s["index"] - 0.5, color="red" if s["verdict"] == "regression" else "green", ls="--", lw=1)
        ax.annotate(f"{s['ratio']:.2f}×", (s["index"] - 0.5, float(med.max())), color="red", fontsize=8, ha="center")
    ax.set_xticks(x, [r["label"] for r in runs], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"{METRICS[result['metric']].label} ({result['unit']})")
    ax.set_title(f"{result['metric']} ({result['phase']}, {result['arm']}): median and IQR per run", fontsize=10)
    ax.grid(alpha=0.3)
    return to_svg(fig)
