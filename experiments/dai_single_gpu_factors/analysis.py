"""Dai et al. (seed 004): single-GPU training throughput of seven networks and the factors behind the gap.

Pure. The design crosses networks (the grid's ``model``) with runs of a
two-level factorial over five factors (the ``[cases]``): cuDNN autotuning,
image layout, execution (eager vs compiled), precision and the input
pipeline. Per configuration and repetition (block) the response is the log
of the TF/PT ratio of mean training-step time (0: no gap). An OLS fit of that response on the
coded factors (-1/+1) plus the network gives each factor's effect on the gap
(the ratio multiplies by exp(2b) from its low to its high level) and, by
Type II sums of squares, the share of the gap's variation it explains. The
same fit on each framework's own log step time says which framework a
factor speeds up. Factors held constant are reported as not varied; factors
confounded with others in the design are reported as aliased.

A design cell (configuration x framework) whose every measured trial failed
(status error or timeout) is an error of the run, not missing data: dropping
it would fit the factors on an unbalanced remnant of the design and attribute
the failure's pattern (e.g. every TensorFlow NCHW cell) to a factor. The
factor fits are then not computed; ``failed_cells`` lists each cell with its
first error, and the validity rule ``failed_cells`` reports it as high.
Out-of-memory and skipped cells remain what they are, a result of the design.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy import stats as sps

from kit.analysis.cells import cell_stats
from kit.records import TrialRecord
from kit.study_api import RunView

STUDY_API = 2

# factor -> (label, low level, high level)
FACTORS: dict[str, tuple[str, Any, Any]] = {
    "cudnn_autotune": ("cuDNN autotuning", "off", "on"),
    "layout": ("data layout NHWC vs NCHW", "nchw", "nhwc"),
    "execution": ("compiled vs eager execution", "eager", "compiled"),
    "precision": ("mixed precision bf16 vs fp32", "fp32", "bf16"),
    "input_pipeline": ("input pipeline on vs off", False, True),
}


def factor_configs(manifest: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """config id -> {case, model, and the level of every factor}."""
    spec = manifest["spec"]
    wl = {**spec["workload"], **(spec["workload"].get("params") or {})}
    out = {}
    for cid, cfg in manifest["plan"]["configs"].items():
        case = cfg.get("case") or cid
        over = ((spec.get("cases") or {}).get(case) or {}).get("workload") or {}
        m = {**wl, **over, **{k: v for k, v in cfg.items() if k != "case"}}
        out[cid] = {"config_id": cid, "case": case, "model": m.get("model"),
                    **{f: m.get(f, FACTORS[f][1]) for f in FACTORS}}
    return out


def _rss(x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    r = y - x @ beta
    return float(r @ r), beta


def factor_effects(rows: list[dict[str, Any]], response: str, alpha: float = 0.05) -> dict[str, Any]:
    """OLS of ``response`` on coded factors (+ network dummies); effects, Type II shares, aliasing.

    ``rows``: one per configuration with the factor levels, ``model`` and the response.
    """
    rows = [r for r in rows if r.get(response) is not None and np.isfinite(r[response])]
    if len(rows) < 2:
        return {"n": len(rows), "factors": [], "note": "fewer than two configurations with a response"}
    y = np.array([r[response] for r in rows], float)
    cols: list[np.ndarray] = [np.ones(len(rows))]
    names = ["intercept"]
    models = sorted({str(r["model"]) for r in rows})
    for m in models[1:]:
        cols.append(np.array([1.0 if str(r["model"]) == m else 0.0 for r in rows]))
        names.append(f"model={m}")
    info: list[dict[str, Any]] = []
    for f, (label, lo, hi) in FACTORS.items():
        levels = {r[f] for r in rows}
        entry: dict[str, Any] = {"factor": f, "label": label, "low": lo, "high": hi}
        if len(levels) < 2:
            entry.update(status="not varied", level=next(iter(levels)))
            info.append(entry)
            continue
        col = np.array([1.0 if r[f] == hi else -1.0 for r in rows])
        if np.linalg.matrix_rank(np.column_stack([*cols, col])) <= np.linalg.matrix_rank(np.column_stack(cols)):
            entry.update(status="aliased", note="confounded with factors or networks before it in this design")
            info.append(entry)
            continue
        cols.append(col)
        names.append(f)
        entry["status"] = "estimated"
        info.append(entry)
    x = np.column_stack(cols)
    rss_full, beta = _rss(x, y)
    df_resid = len(y) - x.shape[1]
    ss_total = float(((y - y.mean()) ** 2).sum())
    for entry in info:
        if entry["status"] != "estimated":
            continue
        j = names.index(entry["factor"])
        rss_red, _ = _rss(np.delete(x, j, axis=1), y)
        ss = max(rss_red - rss_full, 0.0)
        b = float(beta[j])
        entry.update(coef=b, ratio_multiplier=math.exp(2 * b), ss=ss,
                     share=ss / ss_total if ss_total > 0 else None)
        if df_resid > 0 and rss_full > 0:
            f_stat = ss / (rss_full / df_resid)
            entry["p"] = float(sps.f.sf(f_stat, 1, df_resid))
            entry["significant"] = entry["p"] < alpha
        else:
            entry["p"] = None
    model_ss = None
    if len(models) > 1:
        keep = [i for i, n in enumerate(names) if not n.startswith("model=")]
        rss_red, _ = _rss(x[:, keep], y)
        model_ss = max(rss_red - rss_full, 0.0)
    return {"n": len(y), "df_resid": df_resid, "ss_total": ss_total, "residual_share":
            rss_full / ss_total if ss_total > 0 else None, "network_share": None if model_ss is None or ss_total == 0
            else model_ss / ss_total, "factors": info, "models": models}


def trial_pairs(confs: dict[str, dict[str, Any]], trials: tuple[TrialRecord, ...], arms: list[str]) -> list[dict[str, Any]]:
    """One observation per configuration and repetition (block): each framework's log mean step time and their
    difference, log(TF/PT). Replicated blocks give the fit its residual degrees of freedom."""
    out = []
    for cid, c in confs.items():
        reps = sorted({t.repetition for t in trials if t.config_id == cid and not t.warmup})
        for rep in reps:
            row: dict[str, Any] = {**c, "repetition": rep}
            for arm in arms:
                t = next((t for t in trials if t.config_id == cid and t.arm == arm and t.repetition == rep
                          and t.status == "ok" and t.results.get("train_step_s")), None)
                row[f"{arm}_log_step"] = math.log(float(np.mean(t.results["train_step_s"]))) if t else None
            if "tensorflow" in arms and "pytorch" in arms and row["tensorflow_log_step"] is not None \
                    and row["pytorch_log_step"] is not None:
                row["log_ratio"] = row["tensorflow_log_step"] - row["pytorch_log_step"]
            out.append(row)
    return out


FAILED = frozenset({"error", "timeout"})


def failed_cells(confs: dict[str, dict[str, Any]], trials: tuple[TrialRecord, ...], arms: list[str]) -> list[dict[str, Any]]:
    """Design cells whose every measured trial failed: (config, arm, status, trials, first error text)."""
    out = []
    for cid, c in confs.items():
        for arm in arms:
            measured = [t for t in trials if t.config_id == cid and t.arm == arm and not t.warmup]
            if measured and all(t.status in FAILED for t in measured):
                first = next((t for t in measured if t.error), measured[0])
                out.append({"config_id": cid, "case": c.get("case"), "model": c.get("model"), "arm": arm,
                            "status": "/".join(sorted({t.status for t in measured})), "trials": len(measured),
                            "trial_id": first.trial_id,
                            "error": str(first.error or first.raw.get("stderr_tail") or "no error text")[:500]})
    return out


def _not_computed(note: str) -> dict[str, Any]:
    return {"n": 0, "factors": [], "not_computed": True, "note": note}


def analyse(run: RunView) -> dict[str, Any]:
    arms = list(run.arms)
    alpha = float(run.spec["design"]["alpha"])
    confs = factor_configs(run.manifest)
    trials = run.trials
    rows = []
    for cid, c in confs.items():
        row = dict(c)
        for arm in arms:
            cell = cell_stats([t.to_json() for t in run.finished(arm=arm, config=cid)])
            items = [t.results.get("train_items_per_s") for t in run.measured(arm=arm, config=cid)]
            row[f"{arm}_status"] = cell["status"]
            row[f"{arm}_reason"] = cell.get("reason")
            row[f"{arm}_step_s"] = cell.get("train_step_s")
            row[f"{arm}_items_per_s"] = float(np.mean(items)) if items and all(items) else None
        tf_s, pt_s = row.get("tensorflow_step_s"), row.get("pytorch_step_s")
        row["ratio"] = tf_s / pt_s if tf_s and pt_s else None
        row["log_ratio"] = math.log(row["ratio"]) if row["ratio"] else None
        rows.append(row)
    failed = failed_cells(confs, trials, arms)
    error = None
    if failed:
        error = (f"{len(failed)} design cell(s) failed in every trial, so the factor analysis is not computed: "
                 + "; ".join(f"{f['model']} {f['case']} {f['arm']} ({f['status']}: {f['error'].splitlines()[-1] if f['error'].strip() else ''})"
                             for f in failed[:5]) + ("; ..." if len(failed) > 5 else ""))
        gap = _not_computed(error)
        per_fw = {arm: _not_computed(error) for arm in arms}
    else:
        obs = trial_pairs(confs, trials, arms)
        gap = factor_effects(obs, "log_ratio", alpha)
        per_fw = {arm: factor_effects(obs, f"{arm}_log_step", alpha) for arm in arms}
    baseline = []
    for model in sorted({r["model"] for r in rows}, key=str):
        rs = [r for r in rows if r["model"] == model and r["ratio"]]
        if rs:
            baseline.append({"model": model, "geomean_ratio": float(np.exp(np.mean([r["log_ratio"] for r in rs]))),
                             "min_ratio": min(r["ratio"] for r in rs), "max_ratio": max(r["ratio"] for r in rs),
                             "n": len(rs)})
    return {"arms": arms, "alpha": alpha, "rows": rows, "gap_effects": gap, "framework_effects": per_fw,
            "per_model": baseline, "factors": {f: list(v) for f, v in FACTORS.items()},
            "missing": [r for r in rows if r["ratio"] is None], "failed_cells": failed, "error": error}
