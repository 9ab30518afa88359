"""Patel et al. VI-E: data-parallel speed-up over one device and scaling efficiency (pure).

Per framework and strategy: training throughput (global images per second,
mean over trials), speed-up = throughput on N devices / throughput of the
same framework's ``single`` strategy, and scaling efficiency = speed-up / N.
Weak scaling: every device keeps ``batch_size`` images per step. Skipped
strategies are listed with their reason.

The paper's question (Q1: does DistributedDataParallel scale better than
DataParallel, and near-linearly?) is answered within PyTorch on trial-level
throughputs paired by repetition (:func:`ddp_vs_dp`, :func:`ddp_scaling`), not
by the framework comparison of the hypotheses table.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats as sps

from kit.analysis import stats
from kit.records import TrialRecord
from kit.study_api import RunView

STUDY_API = 2

Q1 = "Q1: Does DistributedDataParallel scale better than DataParallel, and near-linearly?"
# The paper calls DDP's speed-ups "near-linear" without a figure; the kit reads near-linear as a
# scaling efficiency of at least 0.9 (90 % of N times one device) and says so wherever it is used.
NEAR_LINEAR_EFFICIENCY = 0.9
PAPER_DEVICES = 2  # one node with two RTX 2080 Ti (Section IV): Q1's DDP-vs-DataParallel test is asked there


def scaling(single_ips: list[float], multi_ips: list[float], devices: int) -> dict[str, Any]:
    """Speed-up and efficiency from per-trial throughputs (means), with the spread of the trial ratios."""
    if not single_ips or not multi_ips or devices < 1:
        return {"speedup": None, "efficiency": None}
    s = float(np.mean(multi_ips) / np.mean(single_ips))
    ratios = [m / float(np.mean(single_ips)) for m in multi_ips]
    return {"speedup": s, "efficiency": s / devices, "speedup_min": min(ratios), "speedup_max": max(ratios)}


def ratio_of_means(a_vals: list[float], b_vals: list[float], conf: float) -> dict[str, Any]:
    """mean(a) / mean(b) of independent trials with the delta-method interval on its log and the dual p.

    Var(log R) = s_a^2 / (n_a m_a^2) + s_b^2 / (n_b m_b^2); t quantile and p at Welch-Satterthwaite
    degrees of freedom. ``ratio`` None without a positive mean on both sides; no interval (``reason``)
    below two trials on either side.
    """
    a, b = np.asarray(a_vals, float), np.asarray(b_vals, float)
    out: dict[str, Any] = {"ratio": None, "low": None, "high": None, "p": None, "reason": None}
    if a.size == 0 or b.size == 0 or not (np.isfinite(a).all() and np.isfinite(b).all()) \
            or a.mean() <= 0 or b.mean() <= 0:
        return {**out, "reason": "no finished trial with a positive throughput on one side"}
    r = float(a.mean() / b.mean())
    if a.size < 2 or b.size < 2:
        return {**out, "ratio": r, "reason": f"{min(a.size, b.size)} trial(s) on one side: no interval (2 or more each)"}
    va, vb = a.var(ddof=1) / (a.size * a.mean() ** 2), b.var(ddof=1) / (b.size * b.mean() ** 2)
    se = math.sqrt(va + vb)
    if se == 0:
        return {**out, "ratio": r, "low": r, "high": r, "p": None if r == 1 else 0.0}
    df = (va + vb) ** 2 / ((va**2 / (a.size - 1) if va else 0.0) + (vb**2 / (b.size - 1) if vb else 0.0))
    q = float(sps.t.ppf(0.5 + conf / 2, df))
    return {**out, "ratio": r, "low": r * math.exp(-q * se), "high": r * math.exp(q * se),
            "p": float(2 * sps.t.sf(abs(math.log(r)) / se, df))}


def efficiency_ci(single_ips: list[float], multi_ips: list[float], devices: int, conf: float) -> dict[str, Any]:
    """Scaling efficiency throughput(N) / (N x throughput(1)) as a ratio of trial means, with a delta-method CI.

    The trials of the two strategies are independent processes (not paired: a profile may run one
    strategy more often than the other, and a skipped trial leaves no pair), so the interval is the
    delta method on the log of the ratio of means, Var(log R) = s_N^2 / (n_N m_N^2) + s_1^2 / (n_1 m_1^2),
    with a t quantile at Welch-Satterthwaite degrees of freedom, back-transformed and divided by N.
    Below two trials on either side there is no interval and ``reason`` says so. The verdict reads the
    interval against the kit's near-linear threshold (NEAR_LINEAR_EFFICIENCY).
    """
    out: dict[str, Any] = {"devices": devices, "efficiency": None, "low": None, "high": None, "conf": conf,
                           "n_single": len(single_ips), "n_multi": len(multi_ips), "speedup": None,
                           "method": "ratio of trial means; delta-method CI on its log (Welch df)",
                           "verdict": "not testable", "reason": None}
    r = ratio_of_means(multi_ips, single_ips, conf)
    if devices < 1 or r["ratio"] is None:
        return {**out, "reason": r["reason"] or "no device"}
    out.update(speedup=r["ratio"], efficiency=r["ratio"] / devices, reason=r["reason"])
    if r["low"] is None:
        return out
    lo, hi = r["low"] / devices, r["high"] / devices
    verdict = ("near-linear" if lo >= NEAR_LINEAR_EFFICIENCY else "below near-linear" if hi < NEAR_LINEAR_EFFICIENCY
               else "undecided")
    return {**out, "low": lo, "high": hi, "verdict": verdict}


def framework_winners(rows: list[dict[str, Any]], alpha: float) -> list[dict[str, Any]]:
    """Per strategy and device count run by both frameworks: which trained faster, by how much, decided or not.

    TF/PT training throughput as a ratio of trial means with its delta-method interval at 1 - alpha
    (:func:`ratio_of_means`); decided when the p, Holm-adjusted over these rows, is below alpha.
    DataParallel pairs with MirroredStrategy (both ``dp``: one process, a replica per device).
    """
    out = []
    for r in rows:
        if r["arm"].split("@")[0] != "tensorflow" or not r["ips"]:
            continue
        pt = next((b for b in rows if b["arm"].split("@")[0] == "pytorch" and b["strategy"] == r["strategy"]
                   and b["devices"] == r["devices"] and b["model"] == r["model"] and b["batch_size"] == r["batch_size"]
                   and b["ips"]), None)
        if pt is None:
            continue
        res = ratio_of_means(r["ips"], pt["ips"], 1.0 - alpha)
        out.append({"strategy": r["strategy"], "devices": r["devices"], "model": r["model"], "tf_arm": r["arm"],
                    "pt_arm": pt["arm"], "ratio_tf_over_pt": res["ratio"], "low": res["low"], "high": res["high"],
                    "p": res["p"], "reason": res["reason"], "conf": 1.0 - alpha, "n_tf": len(r["ips"]),
                    "n_pt": len(pt["ips"])})
    for w, p_adj in zip(out, stats.holm([w["p"] for w in out]), strict=True):
        ratio = w["ratio_tf_over_pt"]
        leader = "tensorflow" if ratio >= 1 else "pytorch"  # a throughput ratio: above 1, TensorFlow faster
        decided = p_adj is not None and p_adj < alpha and ratio != 1
        w.update(p_holm=p_adj, decided=decided, leader=leader, faster=leader if decided else None,
                 factor=ratio if ratio >= 1 else 1 / ratio)
    return out


def scaling_table(rows: list[dict[str, Any]], conf: float) -> list[dict[str, Any]]:
    """Per framework, strategy and device count (the one-device baseline left out): efficiency with its CI.

    Throughput(1) is the same framework's ``single`` strategy (one device, no wrapper) at the same model
    and per-device batch; a DDP run on one device (case ddp_x1) thus shows the wrapper's own cost.
    Strategies that did not run (skipped: too few devices) are listed with their status and reason.
    """
    out = []
    for r in rows:
        if r["strategy"] == "single":
            continue
        base = next((b for b in rows if b["arm"] == r["arm"] and b["strategy"] == "single" and b["model"] == r["model"]
                     and b["batch_size"] == r["batch_size"]), None)
        e = efficiency_ci(base["ips"] if base else [], r["ips"], int(r["devices"]), conf)
        if not r["ips"]:
            e["reason"] = r.get("reason") or r["status"]
        elif base is None or not base["ips"]:
            e["reason"] = "no one-device baseline of this framework finished"
        out.append({"case": r["case"], "arm": r["arm"], "strategy": r["strategy"], "status": r["status"],
                    "device_kind": r.get("device_kind"), **e})
    return sorted(out, key=lambda e: (e["arm"], e["strategy"], e["devices"]))


def _paper_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with the paper's two devices first (Q1 is asked of its node); the scaling steps after them."""
    return sorted(rows, key=lambda r: r["devices"] != PAPER_DEVICES)


def _per_repetition(trials: tuple[TrialRecord, ...], cids: set[str], arm: str) -> dict[int, float]:
    """Training throughput of each measured, finished trial of these configurations and arm, by repetition."""
    return {t.repetition: float(t.results["train_throughput_ips"]) for t in trials
            if t.config_id in cids and t.arm == arm and t.counts and t.results.get("train_throughput_ips")}


def _paired(a: dict[int, float], b: dict[int, float], conf: float) -> dict[str, Any]:
    reps = sorted(set(a) & set(b))
    if not reps:
        return {"n_pairs": 0, "repetitions": [], "ratio": None, "low": None, "high": None, "p": None,
                "reason": "no repetition has a finished trial of both"}
    r = stats.paired_log_ratio([a[k] for k in reps], [b[k] for k in reps], conf=conf).as_dict()
    return {**r, "repetitions": reps}


def ddp_vs_dp(trials: tuple[TrialRecord, ...], rows: list[dict[str, Any]], alpha: float) -> dict[str, Any] | None:
    """Q1, first half, within PyTorch: DDP throughput / DataParallel throughput, paired by repetition.

    Both run on the same devices in the same process count budget, so the ratio of their
    throughputs is the ratio of their speed-ups over one device (the same baseline). The plan runs
    every configuration once per repetition in shuffled order, so a repetition pairs a DDP trial
    with a DataParallel trial run close in time; the interval is the paired t interval on the log
    ratios (:func:`kit.analysis.stats.paired_log_ratio`) at 1 − alpha and the test its dual:
    ``ddp_better`` only when the whole interval lies above 1. None when either strategy has no
    finished trial (DataParallel needs two CUDA devices).
    """
    dp = next((r for r in _paper_first(rows) if r["strategy"] == "dp" and r["arm"].split("@")[0] == "pytorch"
               and r["ips"]), None)
    if dp is None:
        return None
    ddp = next((r for r in rows if r["strategy"] == "ddp" and r["arm"] == dp["arm"] and r["model"] == dp["model"]
                and r["batch_size"] == dp["batch_size"] and r["devices"] == dp["devices"] and r["ips"]), None)
    if ddp is None:
        return None
    arm = dp["arm"]
    res = _paired(_per_repetition(trials, {ddp["config_id"]}, arm), _per_repetition(trials, {dp["config_id"]}, arm),
                  1.0 - alpha)
    lo, hi = res.get("low"), res.get("high")
    decided = lo is not None and hi is not None
    verdict = ("not testable: " + (res.get("reason") or "too few pairs") if not decided else
               "DDP faster than DataParallel" if lo > 1 else "DataParallel faster than DDP" if hi < 1 else
               "no difference shown")
    return {"question": Q1, "arm": arm, "ddp_speedup": ddp["speedup"], "dp_speedup": dp["speedup"],
            "ratio_ddp_over_dp": res.get("ratio"), "low": lo, "high": hi, "conf": 1.0 - alpha, "p": res.get("p"),
            "n_pairs": res["n_pairs"], "paired_by": "repetition", "repetitions": res["repetitions"],
            "method": "paired t on log(DDP/DataParallel throughput) per repetition; CI of the geometric-mean ratio",
            "tested": decided, "verdict": verdict, "ddp_better": bool(decided and lo > 1), "reason": res.get("reason")}


def ddp_scaling(trials: tuple[TrialRecord, ...], rows: list[dict[str, Any]], alpha: float) -> dict[str, Any] | None:
    """Q1, second half: is DDP's scaling efficiency near-linear (>= NEAR_LINEAR_EFFICIENCY)? Paired by repetition.

    Efficiency = (DDP throughput / one-device throughput) / devices, per repetition; its interval
    is the paired t interval of the throughput ratio divided by the device count.
    """
    ddp = next((r for r in _paper_first(rows) if r["strategy"] == "ddp" and r["arm"].split("@")[0] == "pytorch"
                and r["ips"]), None)
    if ddp is None:
        return None
    single = next((r for r in rows if r["strategy"] == "single" and r["arm"] == ddp["arm"]
                   and r["model"] == ddp["model"] and r["batch_size"] == ddp["batch_size"] and r["ips"]), None)
    if single is None:
        return None
    n_dev = int(ddp["devices"])
    res = _paired(_per_repetition(trials, {ddp["config_id"]}, ddp["arm"]),
                  _per_repetition(trials, {single["config_id"]}, ddp["arm"]), 1.0 - alpha)
    eff = {k: (res[k] / n_dev if res.get(k) is not None else None) for k in ("ratio", "low", "high")}
    decided = eff["low"] is not None and eff["high"] is not None
    verdict = ("not testable: " + (res.get("reason") or "too few pairs") if not decided else
               "near-linear" if eff["low"] >= NEAR_LINEAR_EFFICIENCY else
               "below near-linear" if eff["high"] < NEAR_LINEAR_EFFICIENCY else "undecided")
    return {"question": Q1, "arm": ddp["arm"], "devices": n_dev, "device_kind": ddp.get("device_kind"),
            "speedup": res.get("ratio"), "speedup_low": res.get("low"), "speedup_high": res.get("high"),
            "efficiency": eff["ratio"], "efficiency_low": eff["low"], "efficiency_high": eff["high"],
            "conf": 1.0 - alpha, "n_pairs": res["n_pairs"], "paired_by": "repetition",
            "near_linear_threshold": NEAR_LINEAR_EFFICIENCY, "tested": decided, "verdict": verdict,
            "reason": res.get("reason")}


def analyse(run: RunView) -> dict[str, Any]:
    arms = list(run.arms)
    spec = run.spec
    wl = {**spec["workload"], **(spec["workload"].get("params") or {})}
    rows = []
    for cid, cfg in run.configs.items():
        case = cfg.get("case") or cid
        over = ((spec.get("cases") or {}).get(case) or {}).get("workload") or {}
        m = {**wl, **over, **{k: v for k, v in cfg.items() if k != "case"}}
        for arm in arms:
            ts = [t for t in run.finished(arm=arm, config=cid) if not t.warmup]
            ok = [t for t in ts if t.counts]
            statuses = sorted({t.status for t in ts})
            rows.append({"config_id": cid, "case": case, "arm": arm, "model": m.get("model"),
                         "strategy": m.get("strategy"), "devices": int(ok[0].results["devices"]) if ok else
                         (1 if m.get("strategy") == "single" else int(m.get("devices", 1))),
                         "batch_size": int(m["batch_size"]), "status": "ok" if ok else "/".join(statuses) or "missing",
                         "reason": next((t.error for t in ts if t.status != "ok"), None),
                         "ips": [float(t.results["train_throughput_ips"]) for t in ok],
                         "device_kind": ok[0].results.get("device_kind") if ok else None,
                         "dist_backend": ok[0].env.get("dist_backend") if ok else None})
    for r in rows:
        r["ips_mean"] = float(np.mean(r["ips"])) if r["ips"] else None
        base = next((b for b in rows if b["arm"] == r["arm"] and b["strategy"] == "single" and b["model"] == r["model"]
                     and b["batch_size"] == r["batch_size"] and b["ips"]), None)
        r.update(scaling(base["ips"] if base else [], r["ips"], r["devices"]) if r["strategy"] != "single"
                 else {"speedup": 1.0 if r["ips"] else None, "efficiency": 1.0 if r["ips"] else None})
    alpha = float(spec["design"]["alpha"])
    return {"arms": arms, "rows": rows, "ddp_vs_dp": ddp_vs_dp(run.trials, rows, alpha),
            "scaling_efficiency": scaling_table(rows, 1.0 - alpha), "near_linear_threshold": NEAR_LINEAR_EFFICIENCY,
            "framework_winners": framework_winners(rows, alpha),
            "ddp_scaling": ddp_scaling(run.trials, rows, alpha),
            "skipped": [{k: r[k] for k in ("case", "arm", "strategy", "status", "reason")} for r in rows
                        if r["status"] != "ok"]}
