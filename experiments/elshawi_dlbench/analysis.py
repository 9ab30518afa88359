"""Elshawi et al., DLBench (seed 003): per-dataset results, convergence and the paper's Wilcoxon tests.

Pure: the run (kit.study_api.RunView, STUDY_API 2) in, plain data out
(``analysis["extras"]["dlbench"]``). Per dataset (one ``[cases]`` entry
each) and framework: accuracy, training time, CPU utilisation (1 s samples),
mean resident memory and GPU utilisation of the training phase; the test
accuracy after every epoch (convergence); and the paired Wilcoxon
signed-rank test the paper used, with the smallest p-value its number of
pairs can reach, because with 5 runs an exact two-sided test can never
reject at α = 0.05 (smallest p = 2/2⁵ = 0.0625).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from kit.analysis import stats
from kit.records import TrialRecord
from kit.study_api import RunView

STUDY_API = 2

PER_DATASET = (  # (metric, phase, label, unit)
    ("accuracy", "infer", "test accuracy", "fraction"),
    ("time_s", "train", "training time", "s"),
    ("cpu_util_pct", "train", "CPU utilisation", "%"),
    ("trial_rss_mean_bytes", "train", "memory (mean RSS of the trial)", "B"),
    ("gpu_util_pct", "train", "GPU utilisation", "%"),
)
NOT_REPRODUCED = (
    {"model": "LSTM encoder-decoder, English to Spanish (Many things / Tatoeba, 100,000 sentence pairs)",
     "paper": "Sections 4.2 and 5; Figs. 4b, 6, 10c, 19c",
     "why": "not yet reproduced: needs the sequence-to-sequence model in both frameworks and a pinned copy of the "
            "Tatoeba pairs (manythings.org/anki serves a moving file without a published checksum)"},
    {"model": "Faster R-CNN with a ResNet-50 backbone on PASCAL VOC2012",
     "paper": "Sections 4.3 and 5; Figs. 11, 16, 20",
     "why": "not yet reproduced: needs one detection implementation per framework with identical heads and "
            "anchors, and the 2 GB VOC2012 archive"},
)
PAPER_EPOCHS = {"mnist": 15, "cifar10": 100, "cifar100": 200, "svhn": 100, "imdb": 50, "ptb": 50}


def min_exact_p(n: int) -> float:
    """Smallest two-sided p-value of the exact Wilcoxon signed-rank test with n non-zero pairs: 2 / 2^n."""
    return min(1.0, 2.0 / 2**n) if n > 0 else 1.0


def min_pairs_for(alpha: float) -> int:
    """Fewest pairs with which an exact two-sided signed-rank test can reject at ``alpha``."""
    return math.floor(math.log2(2.0 / alpha)) + 1  # 2 / 2^n < alpha


def cases_of(manifest: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """config id -> {case, dataset name, source, real/synthetic origin} from the manifest."""
    spec = manifest["spec"]
    datasets = manifest.get("datasets") or {}
    out = {}
    for cid, cfg in manifest["plan"]["configs"].items():
        case = cfg.get("case") or cid
        c = (spec.get("cases") or {}).get(case, {})
        ds = c.get("dataset") or spec.get("dataset") or {}
        resolved = datasets.get(f"{ds.get('name')}:{ds.get('source')}") or manifest.get("dataset") or {}
        out[cid] = {"case": case, "title": c.get("title") or case, "dataset": ds.get("name"),
                    "source": ds.get("source"), "train_size": ds.get("train_size"), "test_size": ds.get("test_size"),
                    "synthetic": ds.get("source") == "synthetic", "origin": resolved.get("origin"),
                    "epochs": (c.get("workload") or {}).get("epochs", spec["workload"]["epochs"])}
    return out


def _convergence(measured: list[TrialRecord]) -> dict[str, Any] | None:
    curves = [(t.trial_id, t.results["epoch_test_accuracy"]) for t in measured
              if isinstance(t.results.get("epoch_test_accuracy"), list)]
    if not curves:
        return None
    length = min(len(c) for _, c in curves)
    mat = np.array([[np.nan if v is None else float(v) for v in c[:length]] for _, c in curves], dtype=float)
    mean = np.nanmean(mat, axis=0)
    sd = np.nanstd(mat, axis=0, ddof=1) if len(curves) > 1 else np.full(length, np.nan)
    peak = int(np.nanargmax(mean)) if np.isfinite(mean).any() else None
    return {"epochs": list(range(1, length + 1)), "mean": mean.tolist(), "sd": sd.tolist(),
            "runs": [{"trial_id": tid, "accuracy": c[:length]} for tid, c in curves],
            "peak_epoch": None if peak is None else peak + 1, "peak_accuracy": None if peak is None else float(mean[peak]),
            "final_accuracy": float(mean[-1])}


def analyse(run: RunView) -> dict[str, Any]:
    from kit.analysis.analyze import paired_arrays

    arms = list(run.arms)
    alpha = float(run.spec["design"]["alpha"])
    cases = cases_of(run.manifest)
    use = run.measured_values()

    per_dataset = []
    for cid, info in cases.items():
        for arm in arms:
            row: dict[str, Any] = {"config_id": cid, **info, "arm": arm}
            for metric, phase, _, _ in PER_DATASET:
                g = use[(use["config_id"] == cid) & (use["arm"] == arm) & (use["metric"] == metric)
                        & (use["phase"] == phase)].sort_values("position")
                if g.empty:
                    row[metric] = None
                    continue
                d = stats.describe(g["value"].to_numpy(float))
                row[metric] = {"n": d.n, "mean": d.mean, "sd": d.sd, "median": d.median,
                               "trial_ids": g["trial_id"].tolist()}
            per_dataset.append(row)

    convergence = []
    for cid, info in cases.items():
        for arm in arms:
            c = _convergence(run.measured(arm=arm, config=cid))
            if c is not None:
                convergence.append({"config_id": cid, "case": info["case"], "dataset": info["dataset"],
                                    "synthetic": info["synthetic"], "arm": arm, **c})

    wilcoxon = []
    a, b = arms[0], arms[1]
    for cid, info in cases.items():
        for metric, phase, label, unit in PER_DATASET:
            xa, xb, blocks = paired_arrays(use, cid, metric, phase, a, b)
            row = {"config_id": cid, "case": info["case"], "dataset": info["dataset"], "metric": metric,
                   "label": label, "unit": unit, "phase": phase, "arm_a": a, "arm_b": b, "n_pairs": len(blocks),
                   "blocks": blocks}
            if len(blocks) == 0:
                row.update(tested=False, reason=f"no paired values of {label}")
            else:
                t = stats.wilcoxon_paired(xa, xb)
                n_used = t.n_used
                min_p = min_exact_p(n_used) if t.exact else None
                row.update(tested=True, statistic=t.statistic, p=t.p, exact=t.exact, n_used=n_used,
                           method=t.method_detail, call=t.call, note=t.note, min_attainable_p=min_p,
                           can_reject=(min_p is None or min_p < alpha) and n_used > 0,
                           significant=t.p < alpha, median_a=float(np.median(xa)), median_b=float(np.median(xb)))
            wilcoxon.append(row)

    reps = int(run.spec["design"]["repetitions"])
    return {
        "arms": arms,
        "alpha": alpha,
        "cases": cases,
        "metrics": [{"metric": m, "phase": p, "label": lab, "unit": u} for m, p, lab, u in PER_DATASET],
        "per_dataset": per_dataset,
        "convergence": convergence,
        "wilcoxon": wilcoxon,
        "wilcoxon_design": {
            "repetitions": reps,
            "min_attainable_p": min_exact_p(reps),
            "min_pairs_to_reject": min_pairs_for(alpha),
            "kit_rule": stats.NO_TEST_REASON,
            "kit_min_n": stats.MIN_N_FOR_TESTS,
        },
        "synthetic_cases": sorted(i["case"] for i in cases.values() if i["synthetic"]),
        "paper_epochs": PAPER_EPOCHS,
        "not_reproduced": list(NOT_REPRODUCED),
    }
