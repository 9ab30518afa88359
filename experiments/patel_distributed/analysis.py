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
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

import numpy as np
from scipy import stats as sps

from kit import stats
from kit.records import TrialRecord
from kit.study_api import ExtrasRecord, RunView

STUDY_API = 3

Q1 = "Q1: Does DistributedDataParallel scale better than DataParallel, and near-linearly?"
# The paper calls DDP's speed-ups "near-linear" without a figure; the kit reads near-linear as a
# scaling efficiency of at least 0.9 (90 % of N times one device) and says so wherever it is used.
NEAR_LINEAR_EFFICIENCY = 0.9
PAPER_DEVICES = 2  # one node with two RTX 2080 Ti (Section IV): Q1's DDP-vs-DataParallel test is asked there


class RatioCI(TypedDict):
    """A ratio of means with its interval and p (:func:`ratio_of_means`); ``reason`` where there is none."""

    ratio: float | None
    low: float | None
    high: float | None
    p: float | None
    reason: str | None


class EfficiencyCI(TypedDict):
    """Scaling efficiency with its interval and verdict against the near-linear threshold (:func:`efficiency_ci`)."""

    devices: int
    efficiency: float | None
    low: float | None
    high: float | None
    conf: float
    n_single: int
    n_multi: int
    speedup: float | None
    method: str
    verdict: str
    reason: str | None


class Scaling(TypedDict):
    """Speed-up over one device and efficiency (:func:`scaling`); the trial ratios' spread where measured."""

    speedup: float | None
    efficiency: float | None
    speedup_min: NotRequired[float]
    speedup_max: NotRequired[float]


class Row(TypedDict):
    """One configuration and arm: its setting, status, trial throughputs, then (added) speed-up and efficiency."""

    config_id: str
    case: str
    arm: str
    model: str | None
    strategy: str
    devices: int
    batch_size: int
    status: str
    reason: str | None
    ips: list[float]
    device_kind: str | None
    dist_backend: str | None
    ips_mean: NotRequired[float | None]
    speedup: NotRequired[float | None]
    efficiency: NotRequired[float | None]
    speedup_min: NotRequired[float]
    speedup_max: NotRequired[float]


class ScalingRow(EfficiencyCI):
    """A row of the scaling-efficiency table: the configuration's setting, then its :class:`EfficiencyCI`."""

    case: str
    arm: str
    strategy: str
    status: str
    device_kind: str | None


class Winner(TypedDict):
    """Which framework trained faster at one strategy and device count (:func:`framework_winners`)."""

    strategy: str
    devices: int
    model: str | None
    tf_arm: str
    pt_arm: str
    ratio_tf_over_pt: float | None
    low: float | None
    high: float | None
    p: float | None
    reason: str | None
    conf: float
    n_tf: int
    n_pt: int
    p_holm: NotRequired[float | None]
    decided: NotRequired[bool]
    leader: NotRequired[str]
    faster: NotRequired[str | None]
    factor: NotRequired[float]


class Paired(TypedDict):
    """Throughputs paired by repetition (:func:`_paired`): the geometric-mean ratio with its paired t interval."""

    n_pairs: int
    repetitions: list[int]
    ratio: float | None
    low: float | None
    high: float | None
    p: float | None
    reason: str | None


class DdpVsDp(TypedDict):
    """Q1, first half (:func:`ddp_vs_dp`)."""

    question: str
    arm: str
    ddp_speedup: float | None
    dp_speedup: float | None
    ratio_ddp_over_dp: float | None
    low: float | None
    high: float | None
    conf: float
    p: float | None
    n_pairs: int
    paired_by: str
    repetitions: list[int]
    method: str
    tested: bool
    verdict: str
    ddp_better: bool
    reason: str | None


class DdpScaling(TypedDict):
    """Q1, second half (:func:`ddp_scaling`)."""

    question: str
    arm: str
    devices: int
    device_kind: str | None
    speedup: float | None
    speedup_low: float | None
    speedup_high: float | None
    efficiency: float | None
    efficiency_low: float | None
    efficiency_high: float | None
    conf: float
    n_pairs: int
    paired_by: str
    near_linear_threshold: float
    tested: bool
    verdict: str
    reason: str | None


class Skipped(TypedDict):
    case: str
    arm: str
    strategy: str
    status: str
    reason: str | None


@dataclass(frozen=True)
class DistributedExtras(ExtrasRecord):
    """analysis.json's ``extras.zoo_distributed`` (fields in its key order). The report reads it back with
    ``from_json``; the fields an older analysis may lack have defaults."""

    arms: list[str]
    rows: list[Row]  # per configuration and arm: its setting, throughputs, speed-up and efficiency
    ddp_vs_dp: DdpVsDp | None = None
    scaling_efficiency: list[ScalingRow] = field(default_factory=list)
    near_linear_threshold: float = NEAR_LINEAR_EFFICIENCY
    framework_winners: list[Winner] = field(default_factory=list)
    ddp_scaling: DdpScaling | None = None
    skipped: list[Skipped] = field(default_factory=list)


def scaling(single_ips: list[float], multi_ips: list[float], devices: int) -> Scaling:
    """Speed-up and efficiency from per-trial throughputs (means), with the spread of the trial ratios."""
    if not single_ips or not multi_ips or devices < 1:
        return {"speedup": None, "efficiency": None}
    s = float(np.mean(multi_ips) / np.mean(single_ips))
    ratios = [m / float(np.mean(single_ips)) for m in multi_ips]
    return {"speedup": s, "efficiency": s / devices, "speedup_min": min(ratios), "speedup_max": max(ratios)}


def ratio_of_means(a_vals: list[float], b_vals: list[float], conf: float) -> RatioCI:
    """mean(a) / mean(b) of independent trials with the delta-method interval on its log and the dual p.

    Var(log R) = s_a^2 / (n_a m_a^2) + s_b^2 / (n_b m_b^2); t quantile and p at Welch-Satterthwaite
    degrees of freedom. ``ratio`` None without a positive mean on both sides; no interval (``reason``)
    below two trials on either side.
    """
    a, b = np.asarray(a_vals, float), np.asarray(b_vals, float)
    out: RatioCI = {"ratio": None, "low": None, "high": None, "p": None, "reason": None}
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


def efficiency_ci(single_ips: list[float], multi_ips: list[float], devices: int, conf: float) -> EfficiencyCI:
    """Scaling efficiency throughput(N) / (N x throughput(1)) as a ratio of trial means, with a delta-method CI.

    The trials of the two strategies are independent processes (not paired: a profile may run one
    strategy more often than the other, and a skipped trial leaves no pair), so the interval is the
    delta method on the log of the ratio of means, Var(log R) = s_N^2 / (n_N m_N^2) + s_1^2 / (n_1 m_1^2),
    with a t quantile at Welch-Satterthwaite degrees of freedom, back-transformed and divided by N.
    Below two trials on either side there is no interval and ``reason`` says so. The verdict reads the
    interval against the kit's near-linear threshold (NEAR_LINEAR_EFFICIENCY).
    """
    out: EfficiencyCI = {"devices": devices, "efficiency": None, "low": None, "high": None, "conf": conf,
                         "n_single": len(single_ips), "n_multi": len(multi_ips), "speedup": None,
                         "method": "ratio of trial means; delta-method CI on its log (Welch df)",
                         "verdict": "not testable", "reason": None}
    r = ratio_of_means(multi_ips, single_ips, conf)
    ratio, low, high = r["ratio"], r["low"], r["high"]
    if devices < 1 or ratio is None:
        return {**out, "reason": r["reason"] or "no device"}
    out.update({"speedup": ratio, "efficiency": ratio / devices, "reason": r["reason"]})
    if low is None or high is None:
        return out
    lo, hi = low / devices, high / devices
    verdict = ("near-linear" if lo >= NEAR_LINEAR_EFFICIENCY else "below near-linear" if hi < NEAR_LINEAR_EFFICIENCY
               else "undecided")
    return {**out, "low": lo, "high": hi, "verdict": verdict}


def framework_winners(rows: list[Row], alpha: float) -> list[Winner]:
    """Per strategy and device count run by both frameworks: which trained faster, by how much, decided or not.

    TF/PT training throughput as a ratio of trial means with its delta-method interval at 1 - alpha
    (:func:`ratio_of_means`); decided when the p, Holm-adjusted over these rows, is below alpha.
    DataParallel pairs with MirroredStrategy (both ``dp``: one process, a replica per device).
    """
    out: list[Winner] = []
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
        assert ratio is not None  # both sides have throughputs: ratio_of_means gives a ratio
        leader = "tensorflow" if ratio >= 1 else "pytorch"  # a throughput ratio: above 1, TensorFlow faster
        decided = p_adj is not None and p_adj < alpha and ratio != 1
        w["p_holm"], w["decided"], w["leader"] = p_adj, decided, leader
        w["faster"], w["factor"] = leader if decided else None, ratio if ratio >= 1 else 1 / ratio
    return out


def scaling_table(rows: list[Row], conf: float) -> list[ScalingRow]:
    """Per framework, strategy and device count (the one-device baseline left out): efficiency with its CI.

    Throughput(1) is the same framework's ``single`` strategy (one device, no wrapper) at the same model
    and per-device batch; a DDP run on one device (case ddp_x1) thus shows the wrapper's own cost.
    Strategies that did not run (skipped: too few devices) are listed with their status and reason.
    """
    out: list[ScalingRow] = []
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
                    "device_kind": r["device_kind"], **e})
    return sorted(out, key=lambda e: (e["arm"], e["strategy"], e["devices"]))


def _paper_first(rows: list[Row]) -> list[Row]:
    """The rows with the paper's two devices first (Q1 is asked of its node); the scaling steps after them."""
    return sorted(rows, key=lambda r: r["devices"] != PAPER_DEVICES)


def _per_repetition(trials: tuple[TrialRecord, ...], cids: set[str], arm: str) -> dict[int, float]:
    """Training throughput of each measured, finished trial of these configurations and arm, by repetition."""
    return {t.repetition: float(t.results["train_throughput_ips"]) for t in trials
            if t.config_id in cids and t.arm == arm and t.counts and t.results.get("train_throughput_ips")}


def _paired(a: dict[int, float], b: dict[int, float], conf: float) -> Paired:
    reps = sorted(set(a) & set(b))
    if not reps:
        return {"n_pairs": 0, "repetitions": [], "ratio": None, "low": None, "high": None, "p": None,
                "reason": "no repetition has a finished trial of both"}
    r = stats.paired_log_ratio([a[k] for k in reps], [b[k] for k in reps], conf=conf)
    return {"n_pairs": r.n_pairs, "repetitions": reps, "ratio": _finite(r.ratio), "low": _finite(r.low),
            "high": _finite(r.high), "p": _finite(r.p), "reason": r.reason}


def _finite(x: float) -> float | None:
    """The value as analysis.json keeps it: a float, or None for NaN (kit.stats.common.plain)."""
    return float(x) if math.isfinite(x) else None


def ddp_vs_dp(trials: tuple[TrialRecord, ...], rows: list[Row], alpha: float) -> DdpVsDp | None:
    """Q1, first half, within PyTorch: DDP throughput / DataParallel throughput, paired by repetition.

    Both run on the same devices in the same process count budget, so the ratio of their
    throughputs is the ratio of their speed-ups over one device (the same baseline). The plan runs
    every configuration once per repetition in shuffled order, so a repetition pairs a DDP trial
    with a DataParallel trial run close in time; the interval is the paired t interval on the log
    ratios (:func:`kit.stats.paired_log_ratio`) at 1 − alpha and the test its dual:
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
    lo, hi = res["low"], res["high"]
    decided = lo is not None and hi is not None
    if lo is None or hi is None:
        verdict = "not testable: " + (res["reason"] or "too few pairs")
    else:
        verdict = ("DDP faster than DataParallel" if lo > 1 else "DataParallel faster than DDP" if hi < 1 else
                   "no difference shown")
    return {"question": Q1, "arm": arm, "ddp_speedup": ddp.get("speedup"), "dp_speedup": dp.get("speedup"),
            "ratio_ddp_over_dp": res["ratio"], "low": lo, "high": hi, "conf": 1.0 - alpha, "p": res["p"],
            "n_pairs": res["n_pairs"], "paired_by": "repetition", "repetitions": res["repetitions"],
            "method": "paired t on log(DDP/DataParallel throughput) per repetition; CI of the geometric-mean ratio",
            "tested": decided, "verdict": verdict, "ddp_better": bool(lo is not None and hi is not None and lo > 1),
            "reason": res["reason"]}


def ddp_scaling(trials: tuple[TrialRecord, ...], rows: list[Row], alpha: float) -> DdpScaling | None:
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
    ratio, low, high = (None if x is None else x / n_dev for x in (res["ratio"], res["low"], res["high"]))
    decided = low is not None and high is not None
    if low is None or high is None:
        verdict = "not testable: " + (res["reason"] or "too few pairs")
    else:
        verdict = ("near-linear" if low >= NEAR_LINEAR_EFFICIENCY else
                   "below near-linear" if high < NEAR_LINEAR_EFFICIENCY else "undecided")
    return {"question": Q1, "arm": ddp["arm"], "devices": n_dev, "device_kind": ddp["device_kind"],
            "speedup": res["ratio"], "speedup_low": res["low"], "speedup_high": res["high"],
            "efficiency": ratio, "efficiency_low": low, "efficiency_high": high,
            "conf": 1.0 - alpha, "n_pairs": res["n_pairs"], "paired_by": "repetition",
            "near_linear_threshold": NEAR_LINEAR_EFFICIENCY, "tested": decided, "verdict": verdict,
            "reason": res["reason"]}


def analyse(run: RunView) -> DistributedExtras:
    arms = list(run.arms)
    spec = run.spec
    wl = {**spec["workload"], **(spec["workload"].get("params") or {})}
    rows: list[Row] = []
    for cid, cfg in run.configs.items():
        case = cfg.get("case") or cid
        over = ((spec.get("cases") or {}).get(case) or {}).get("workload") or {}
        m = {**wl, **over, **{k: v for k, v in cfg.items() if k != "case"}}
        for arm in arms:
            ts = [t for t in run.finished(arm=arm, config=cid) if not t.warmup]
            ok = [t for t in ts if t.counts]
            statuses = sorted({t.status for t in ts})
            rows.append({"config_id": cid, "case": case, "arm": arm, "model": m.get("model"),
                         "strategy": str(m.get("strategy", "single")), "devices": int(ok[0].results["devices"]) if ok else
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
        sc = (scaling(base["ips"] if base else [], r["ips"], r["devices"]) if r["strategy"] != "single"
              else Scaling(speedup=1.0 if r["ips"] else None, efficiency=1.0 if r["ips"] else None))
        r["speedup"], r["efficiency"] = sc["speedup"], sc["efficiency"]
        if "speedup_min" in sc and "speedup_max" in sc:
            r["speedup_min"], r["speedup_max"] = sc["speedup_min"], sc["speedup_max"]
    alpha = float(spec["design"]["alpha"])
    return DistributedExtras(
        arms=arms, rows=rows, ddp_vs_dp=ddp_vs_dp(run.trials, rows, alpha),
        scaling_efficiency=scaling_table(rows, 1.0 - alpha), near_linear_threshold=NEAR_LINEAR_EFFICIENCY,
        framework_winners=framework_winners(rows, alpha),
        ddp_scaling=ddp_scaling(run.trials, rows, alpha),
        skipped=[Skipped(case=r["case"], arm=r["arm"], strategy=r["strategy"], status=r["status"], reason=r["reason"])
                 for r in rows if r["status"] != "ok"])
