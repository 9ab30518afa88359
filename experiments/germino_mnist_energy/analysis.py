"""Germino et al. (seed 002): the paper's Tables I–VI and per-run series from a finished run.

Pure: the run (kit.study_api.RunView, STUDY_API 2) in, plain data out
(``analysis["extras"]["germino"]``). Every row keeps the trial ids it
summarises. The k-NN baseline (scikit-learn, no framework) runs as one case
in both framework arms' environments: its two arms run identical code, so
their difference is an A/A control of the environment, not a framework
effect, and the tables show it as the paper's framework-independent baseline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from kit.analysis import stats
from kit.study_api import RunView

STUDY_API = 2

MODEL_ORDER = ("knn", "mlp", "cnn")
MODEL_LABEL = {"knn": "k-NN (scikit-learn, k = 5)", "mlp": "simple neural network", "cnn": "convolutional network"}
ENERGY_METRICS = {"cpu_energy_j": "rapl", "gpu_energy_j": "nvml"}
# Gross energy (the counter's difference: idle draw included) and the same net of the run's idle power
# (kit.analysis.energy); each gross value has a worst-case bound from the counter's sampling at the phase's
# boundaries (the value table's ``bound``), summarised per cell by its median and largest.
NET_OF = {"cpu_energy_j": "cpu_energy_net_j", "gpu_energy_j": "gpu_energy_net_j"}


def models_of(manifest: Mapping[str, Any]) -> dict[str, str]:
    """config id -> model (knn, mlp, cnn) from the stored spec and plan."""
    spec = manifest["spec"]
    base = spec["workload"].get("params", {}).get("model", "mlp")
    out = {}
    for cid, cfg in manifest["plan"]["configs"].items():
        case = (spec.get("cases") or {}).get(cfg.get("case"), {}) if cfg.get("case") else {}
        out[cid] = str(cfg.get("model") or (case.get("workload") or {}).get("model") or base)
    return out


def _summary(g: pd.DataFrame) -> dict[str, Any] | None:
    if g.empty:
        return None
    g = g.sort_values("position")
    d = stats.describe(g["value"].to_numpy(float)).as_dict()
    return {k: d[k] for k in ("n", "mean", "sd", "q1", "median", "q3", "min", "max")} | {
        "trial_ids": g["trial_id"].tolist()}


def _bounds(g: pd.DataFrame) -> dict[str, Any] | None:
    """Median and largest ± bound of a cell's energy values (None: none known, e.g. an older analysis)."""
    if "bound" not in g or g["bound"].notna().sum() == 0:
        return None
    b = g["bound"].dropna().astype(float)
    return {"median": float(b.median()), "max": float(b.max()), "n": int(b.size)}


def _sensor(manifest: Mapping[str, Any], name: str) -> dict[str, Any]:
    for c in manifest.get("collectors", []):
        if c["name"] == name:
            return {"ok": bool(c["ok"]), "detail": c.get("detail"), "fix": c.get("fix")}
    return {"ok": False, "detail": "collector not enabled in this run", "fix": f"add {name!r} to telemetry.collectors"}


def analyse(run: RunView) -> dict[str, Any]:
    arms = list(run.arms)
    model_of = models_of(run.manifest)
    use = run.measured_values()
    use = use.assign(model=use["config_id"].map(model_of))
    models = [m for m in MODEL_ORDER if m in set(model_of.values())]

    def cell(model: str, arm: str, metric: str, phase: str, scale: float = 1.0) -> dict[str, Any] | None:
        g = use[(use["model"] == model) & (use["arm"] == arm) & (use["metric"] == metric) & (use["phase"] == phase)]
        s = _summary(g)
        if s is not None and scale != 1.0:
            s = {k: (v * scale if isinstance(v, float) else v) for k, v in s.items()}
        return s

    time_rows, acc_rows, energy_rows = [], [], []
    for m in models:
        for a in arms:
            time_rows.append({"model": m, "arm": a, **(cell(m, a, "time_s", "train") or {"n": 0})})
            acc_rows.append({"model": m, "arm": a, **(cell(m, a, "accuracy", "infer", 100.0) or {"n": 0})})
            row: dict[str, Any] = {"model": m, "arm": a}
            for k in ENERGY_METRICS:
                row[k] = cell(m, a, k, "train")
                row[NET_OF[k]] = cell(m, a, NET_OF[k], "train")
                row[f"{k}_bound"] = _bounds(use[(use["model"] == m) & (use["arm"] == a) & (use["metric"] == k)
                                                & (use["phase"] == "train")])
            energy_rows.append(row)

    ratios = []
    for m in models:
        by = {r["arm"]: r for r in time_rows if r["model"] == m and r.get("n")}
        if len(by) >= 2 and all(by[a].get("mean") for a in arms[:2]):
            a, b = arms[0], arms[1]
            ratios.append({"model": m, "arm_a": a, "arm_b": b, "mean_ratio": by[a]["mean"] / by[b]["mean"],
                           "median_ratio": by[a]["median"] / by[b]["median"], "aa_control": m == "knn"})

    per_run = []
    for t in sorted(run.measured(), key=lambda r: r.position):
        rows = use[use["trial_id"] == t.trial_id]

        def val(metric: str, phase: str, rows: pd.DataFrame = rows) -> float | None:
            v = rows[(rows["metric"] == metric) & (rows["phase"] == phase)]["value"]
            return float(v.iloc[0]) if len(v) else None

        per_run.append({"trial_id": t.trial_id, "model": model_of[t.config_id], "arm": t.arm,
                        "repetition": t.repetition, "position": t.position,
                        "train_time_s": val("time_s", "train"), "accuracy": val("accuracy", "infer"),
                        "cpu_energy_j": val("cpu_energy_j", "train"), "gpu_energy_j": val("gpu_energy_j", "train"),
                        "cpu_energy_net_j": val("cpu_energy_net_j", "train"),
                        "gpu_energy_net_j": val("gpu_energy_net_j", "train"),
                        "device": t.env.get("device")})

    knn_same = None
    knn_acc = [r["accuracy"] for r in per_run if r["model"] == "knn" and r["accuracy"] is not None]
    if knn_acc:
        knn_same = bool(np.ptp(knn_acc) == 0)
    return {
        "models": models,
        "model_labels": {m: MODEL_LABEL.get(m, m) for m in models},
        "arms": arms,
        "time_train": time_rows,
        "accuracy_pct": acc_rows,
        "energy_train": energy_rows,
        "ratios": ratios,
        "per_run": per_run,
        "sensors": {src: _sensor(run.manifest, src) for src in ("rapl", "nvml")},
        "energy_measured": {k: bool(use[use["metric"] == k]["value"].notna().any())
                            for k in (*ENERGY_METRICS, *NET_OF.values())},
        "knn_accuracy_identical": knn_same,
        "devices": sorted({str(r["device"]) for r in per_run if r["device"]}),
    }
