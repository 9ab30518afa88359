"""Elshawi et al., DLBench (seed 003): per-dataset results, convergence and the paper's Wilcoxon tests.

Pure: the run (kit.study_api.RunView, STUDY_API 2) in, plain data out
(``analysis["extras"]["dlbench"]``). Per dataset (one ``[cases]`` entry
each) and framework: accuracy, training time, CPU utilisation (host-wide, 1 s
samples, the paper's measure; and the trial's own, from its markers), mean resident memory and GPU utilisation of the training phase; the test
accuracy after every epoch (convergence); and the paired Wilcoxon
signed-rank test the paper used, with the smallest p-value its number of
pairs can reach, because with 5 runs an exact two-sided test can never
reject at α = 0.05 (smallest p = 2/2⁵ = 0.0625).

The paper's tests form one family, every dataset × metric tested in the
table, and are decided by Holm's step-down over it (the decision column
reads the Holm-adjusted p, never the raw one): a table of 30 tests at
α = 0.05 would otherwise show about 1.5 false "differences" by chance. Holm's
first threshold is α/m, so what the run can show depends on n twice: the
smallest exact two-sided p is 2/2ⁿ, and it must fall below α/m
(:func:`reach`, which the report words).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from kit.analysis import stats
from kit.analysis.effects import _signed_rank_pmf
from kit.records import TrialRecord
from kit.study_api import RunView

STUDY_API = 2

PER_DATASET = (  # (metric, phase, label, unit): the paper's measures, described and tested (its Wilcoxon tests)
    ("accuracy", "infer", "test accuracy", "fraction"),
    ("time_s", "train", "training time", "s"),
    ("cpu_util_pct", "train", "CPU utilisation, host-wide (the paper's Eq. 1)", "%"),
    ("trial_rss_mean_bytes", "train", "memory (mean RSS of the trial)", "B"),
    ("gpu_util_pct", "train", "GPU utilisation", "%"),
)
# Described beside them, not added to the paper's family of tests: the trial's own CPU utilisation (its process
# and waited-for children, from the CPU times in its phase markers; % of one CPU), which other processes on
# the host never enter, where the paper's host-wide figure counts them.
DESCRIBED_ONLY = (
    ("trial_cpu_util_pct", "train", "CPU utilisation of the trial's process (% of one CPU)", "%"),
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


def min_attainable_p(d: np.ndarray) -> float:
    """The smallest two-sided p the kit's signed-rank test can give with these differences' pattern.

    The same zeros and the same ties of |d|, every non-zero difference moved to one side: the most
    extreme data of this shape. Exact (no ties, no zeros, R's rule) it is 2/2^n; with a tie or a zero
    R's wilcox.test, and the kit, switch to the normal approximation, whose smallest p depends on the
    tie pattern and at small n is far larger (n = 11: 0.0039 with one tie against 2/2^11 = 0.00098).
    """
    return float(stats.wilcoxon_paired(np.abs(d), np.zeros_like(d)).p)


def max_minority_rank_sum(n: int, level: float) -> int | None:
    """Largest sum of the ranks on the minority sign that still gives an exact two-sided p < ``level``.

    0: the test rejects only when all n differences share a sign. None: not even that suffices (2/2^n
    >= level). Exact null distribution of the signed-rank sum (no ties, no zeros).
    """
    if n <= 0:
        return None
    cdf = np.cumsum(_signed_rank_pmf(n))
    ok = np.flatnonzero(np.minimum(1.0, 2.0 * cdf) < level)
    return int(ok[-1]) if ok.size else None


def reach(n: int, alpha: float, m: int) -> dict[str, Any]:
    """What n untied pairs can show in a Holm family of m two-sided signed-rank tests at ``alpha``.

    Holm rejects nothing unless the family's smallest p is below alpha/m, so the family can reject
    only if 2/2^n < alpha/m; a row whose smallest p lies between alpha/m and alpha can be rejected
    only after the others. ``pairs_for_alpha`` / ``pairs_for_family``: the n each bar needs.
    """
    first = alpha / max(m, 1)
    return {"n": n, "m": m, "alpha": alpha, "first_threshold": first, "min_exact_p": min_exact_p(n),
            "reaches_alpha": min_exact_p(n) < alpha, "reaches_family": min_exact_p(n) < first,
            "pairs_for_alpha": min_pairs_for(alpha), "pairs_for_family": min_pairs_for(first),
            "max_minority_rank_sum": max_minority_rank_sum(n, first)}


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


def holm_family(rows: list[dict[str, Any]], alpha: float) -> dict[str, Any]:
    """Holm over the table's tested rows (in place: ``p_holm``, ``significant``, ``can_reject``, ``reaches_first``).

    The family is every dataset × metric test of the table that has pairs; ``significant`` reads the
    Holm-adjusted p. ``can_reject``: the row's smallest attainable p is below alpha (necessary for any
    rejection); ``reaches_first``: below alpha/m, the threshold the family's first rejection must pass.
    """
    tested = [r for r in rows if r.get("tested")]
    adjusted = stats.holm([r["p"] for r in tested])
    m = len(tested)
    for r, p_adj in zip(tested, adjusted, strict=True):
        r["p_holm"] = p_adj
        r["significant"] = p_adj is not None and p_adj < alpha
        r["can_reject"] = r["n_used"] > 0 and r["min_attainable_p"] < alpha
        r["reaches_first"] = r["n_used"] > 0 and r["min_attainable_p"] < alpha / m
    return {"method": "holm", "size": m, "alpha": alpha, "first_threshold": alpha / m if m else None,
            "members": "every dataset x metric of this table with paired values (the paper's tests)",
            "rejected": sum(1 for r in tested if r["significant"])}


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
            for metric, phase, _, _ in (*PER_DATASET, *DESCRIBED_ONLY):
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
                d = np.asarray(xa, float) - np.asarray(xb, float)
                row.update(tested=True, statistic=t.statistic, p=t.p, exact=t.exact, n_used=t.n_used,
                           method=t.method_detail, call=t.call, note=t.note, min_attainable_p=min_attainable_p(d),
                           p_unadjusted_below_alpha=t.p < alpha, median_a=float(np.median(xa)),
                           median_b=float(np.median(xb)))
            wilcoxon.append(row)
    family = holm_family(wilcoxon, alpha)

    reps = int(run.spec["design"]["repetitions"])
    planned = len(cases) * len(PER_DATASET)
    return {
        "arms": arms,
        "alpha": alpha,
        "cases": cases,
        "metrics": [{"metric": m, "phase": p, "label": lab, "unit": u} for m, p, lab, u in PER_DATASET],
        "described_only": [{"metric": m, "phase": p, "label": lab, "unit": u} for m, p, lab, u in DESCRIBED_ONLY],
        "per_dataset": per_dataset,
        "convergence": convergence,
        "wilcoxon": wilcoxon,
        "wilcoxon_family": family,
        "wilcoxon_design": {
            "repetitions": reps,
            "min_attainable_p": min_exact_p(reps),
            "min_pairs_to_reject": min_pairs_for(alpha),
            "reach": reach(reps, alpha, family["size"] or planned),
            "planned_tests": planned,
            "kit_rule": stats.NO_TEST_REASON,
            "kit_min_n": stats.MIN_N_FOR_TESTS,
        },
        "synthetic_cases": sorted(i["case"] for i in cases.values() if i["synthetic"]),
        "paper_epochs": PAPER_EPOCHS,
        "not_reproduced": list(NOT_REPRODUCED),
    }
