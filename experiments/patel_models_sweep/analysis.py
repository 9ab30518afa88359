"""Patel et al. (seed 001): model x batch x shape sweep, TF/PT ratios, batch curves, power, MFU.

Pure: the run (kit.study_api.RunView, STUDY_API 3) in, a ModelsSweepExtras record
out (``analysis["extras"]["zoo"]``). Per configuration (case x batch size x
input side) and framework: status (``oom`` and ``skipped`` configurations
are kept and drawn as missing points), step times, throughput, FLOPs and
model FLOP utilisation; the TF/PT time ratio; the parameter counts of each
model pair; per-image inference latency against batch size with the paper's
"decreases up to a limit" claim tested on trial-level values (never steps) per
curve by one-sided Mann-Whitney tests between neighbouring batch sizes
(Holm-corrected; "not testable" when the trials per point cannot reach the
threshold) and across curves by a signed-rank test with the curve as unit; GPU power and energy
against batch size (Kruskal-Wallis across batch sizes per curve, R's kruskal.test,
Holm over the curves: the paper found no effect), and the paper's Q4 itself, "does
batch size affect GPU power?", per framework and phase: a stratified Jonckheere-Terpstra trend test on trial-level
phase power (:func:`power_trend`), whose non-rejection is worded with the trend
it would have detected (:func:`kit.stats.ordered.trend_mde`). Every test goes
through the kit's R-matching functions (kit.stats, kit.stats.ordered).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import pandas as pd
from scipy import stats as sps

from kit import stats
from kit.analysis.cells import cell_stats
from kit.records import counted
from kit.stats import ordered
from kit.study_api import ExtrasRecord, RunView

STUDY_API = 3

PARAM_DIFF_PCT = 1.0  # a pair whose counts differ by more than this is flagged as differently defined
PLATEAU_REL = 0.05  # a neighbouring decrease smaller than this is "levelled off" even when significant
Q4 = "Q4: Does batch size affect GPU power?"


# one neighbouring pair of batch sizes in a latency-vs-batch test ("from" is a keyword: the functional form)
Step = TypedDict("Step", {"from": int, "to": int, "p": "float | None", "rel_decrease": float, "n_from": int,
                          "n_to": int, "n_curves": int, "p_holm": "float | None", "falls": bool}, total=False)


class Decrease(TypedDict, total=False):
    """The verdict of "per-image inference time decreases with batch size up to a limit" (one curve or across)."""

    verdict: str
    steps: list[Step]
    limit: int | None
    unit: str
    reason: str


@dataclass(frozen=True)
class ModelsSweepExtras(ExtrasRecord):
    """analysis.json's ``extras.zoo`` (fields in its key order)."""

    arms: list[str]
    alpha: float
    winners: list[dict[str, Any]]
    cells: list[dict[str, Any]]  # per configuration and arm: kit.analysis.cells.cell_stats, the setting, MFU
    ratios: list[dict[str, Any]]
    param_pairs: list[dict[str, Any]]
    curves: list[dict[str, Any]]  # per case, input side and arm: the latency curve and its Decrease test
    missing: list[dict[str, Any]]
    power_measured: bool
    decrease_summary: dict[str, int]
    decrease_across_curves: dict[str, Decrease]
    power_metric: str
    power_source: str
    power_trend: list[dict[str, Any]]


def config_info(manifest: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """config id -> {case, title, model, device, mode, batch_size, image_size}."""
    spec = manifest["spec"]
    wl, out = spec["workload"], {}
    for cid, cfg in manifest["plan"]["configs"].items():
        case = cfg.get("case") or cid
        over = ((spec.get("cases") or {}).get(case) or {}).get("workload") or {}
        merged = {**wl, **(wl.get("params") or {}), **over, **{k: v for k, v in cfg.items() if k != "case"}}
        out[cid] = {"config_id": cid, "case": case, "title": ((spec.get("cases") or {}).get(case) or {}).get("title")
                    or case, "model": merged.get("model"), "device": merged.get("device"), "mode": merged.get("mode",
                    "train_infer"), "batch_size": int(merged["batch_size"]), "image_size": merged.get("image_size"),
                    "cpu_cores": int(merged.get("cpu_cores") or 0)}
    return out


def _mean(xs: list[float]) -> float | None:
    return float(np.mean(xs)) if xs else None


def mfu(flops_fwd: float | None, throughput_ips: float | None, peak: float | None, train: bool) -> float | None:
    """Model FLOP utilisation: achieved FLOP/s (forward FLOPs x 3 for a training step) over the peak; None if unknown."""
    if not flops_fwd or not throughput_ips or not peak:
        return None
    return flops_fwd * (3.0 if train else 1.0) * throughput_ips / peak


def time_ratio(tf_means: list[float], pt_means: list[float]) -> dict[str, Any]:
    """TF/PT ratio of mean step times with a 95 % interval on the log scale (Welch) when both have 2+ trials."""
    if not tf_means or not pt_means:
        return {"ratio": None}
    ratio = float(np.mean(tf_means) / np.mean(pt_means))
    out: dict[str, Any] = {"ratio": ratio, "lo": None, "hi": None, "p": None}
    a, b = np.log(tf_means), np.log(pt_means)
    if len(a) >= 2 and len(b) >= 2 and (a.var(ddof=1) + b.var(ddof=1)) > 0:
        va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
        se = math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
        q = float(sps.t.ppf(0.975, df))
        d = float(a.mean() - b.mean())
        out.update(lo=math.exp(d - q * se), hi=math.exp(d + q * se), p=float(2 * sps.t.sf(abs(d / se), df)))
    return out


def param_pairs(cells: list[dict[str, Any]], arms: list[str]) -> list[dict[str, Any]]:
    """Per model and input side: each framework's parameter count and whether the libraries' definitions differ.

    Per side because a definition can depend on it (torchvision's VGG16 pools to 7x7 whatever the input;
    Keras' classifier grows with the feature map).
    """
    by: dict[tuple[str, Any], dict[str, int]] = {}
    for c in cells:
        if c.get("param_count") and c.get("model"):
            by.setdefault((c["model"], c.get("image_size")), {})[c["arm"]] = int(c["param_count"])
    out = []
    for (model, size), counts in by.items():
        vals = [counts.get(a) for a in arms]
        known = [v for v in vals if v]
        diff = (max(known) - min(known)) / min(known) * 100 if len(known) == len(arms) and known else None
        out.append({"model": model, "image_size": size, "counts": {a: counts.get(a) for a in arms}, "diff_pct": diff,
                    "differ": diff is not None and diff > PARAM_DIFF_PCT})
    return out


def _min_p_mannwhitney(n0: int, n1: int) -> float:
    """Smallest one-sided exact Mann-Whitney p with n0 and n1 values (all of one sample below the other)."""
    return 1.0 / math.comb(n0 + n1, n1)


def decreasing_to_limit(curve: list[tuple[int, list[float]]], alpha: float) -> Decrease:
    """Test "per-image inference time decreases with batch size up to a limit" on one curve.

    ``curve``: (batch size, per-image latency of each TRIAL) in increasing batch order, missing (oom)
    points left out. The unit is the trial (a process): the timed steps inside one trial are not
    independent and are summarised into its mean before this function sees them. Each neighbouring
    pair gets a one-sided Mann-Whitney test (larger batch faster per image), Holm-corrected over the
    curve. The limit is the first batch size after which the latency no longer falls significantly by
    more than PLATEAU_REL. Verdicts: ``supported`` (falls, then levels off inside the grid), ``no limit
    reached`` (falls over the whole grid), ``not supported`` (does not fall at the smallest batch sizes),
    ``not testable`` (too few trials per point for any p below the Holm threshold), ``too few points``.
    """
    pts = [(b, np.asarray(s, float)) for b, s in curve if len(s) >= 2]
    if len(pts) < 2:
        return Decrease(verdict="too few points", steps=[], limit=None, unit="trial")
    pairs = list(itertools.pairwise(pts))
    best = max(_min_p_mannwhitney(len(s0), len(s1)) for (_, s0), (_, s1) in pairs)
    if best >= alpha / len(pairs):
        n = sorted({len(s) for _, s in pts})
        return Decrease(verdict="not testable", steps=[], limit=None, unit="trial",
                        reason=f"{'/'.join(map(str, n))} trials per batch size: the smallest attainable one-sided "
                               f"Mann-Whitney p is {best:.3g}, not below alpha/{len(pairs)} = "
                               f"{alpha / len(pairs):.3g}; see the test across curves")
    raw: list[Step] = []
    for (b0, s0), (b1, s1) in pairs:
        p = stats.mann_whitney(s1, s0, alternative="less").p  # R's wilcox.test rule: exact below 50, no ties
        rel = float(1 - np.median(s1) / np.median(s0))
        raw.append({"from": b0, "to": b1, "p": p, "rel_decrease": rel, "n_from": len(s0), "n_to": len(s1)})
    for s, p_adj in zip(raw, stats.holm([s["p"] for s in raw]), strict=True):
        s["p_holm"] = p_adj
        s["falls"] = p_adj is not None and p_adj < alpha and s["rel_decrease"] > PLATEAU_REL
    out: Decrease = {**_verdict(raw, pts[0][0]), "unit": "trial"}
    return out


def _verdict(raw: list[Step], first_batch: int) -> Decrease:
    falls = [s["falls"] for s in raw]
    if not falls[0]:
        return Decrease(verdict="not supported", steps=raw, limit=first_batch)
    first_flat = next((i for i, f in enumerate(falls) if not f), None)
    if first_flat is None:
        return Decrease(verdict="no limit reached", steps=raw, limit=None)
    return Decrease(verdict="supported", steps=raw, limit=raw[first_flat]["from"])


def decreasing_across_curves(curves: list[list[tuple[int, list[float]]]], alpha: float) -> Decrease:
    """The same claim tested across curves (models x input sides) of one framework: the unit is the curve.

    For each neighbouring pair of batch sizes, every curve that measured both gives one value, the log
    ratio of its trial medians (never steps); a one-sided Wilcoxon signed-rank test across curves asks
    whether the latency falls by more than PLATEAU_REL (log ratio below log(1 - PLATEAU_REL)). Holm over
    the pairs. With 3 trials per point a single curve cannot decide; 15 curves can (smallest p 2^-15).
    """
    by_pair: dict[tuple[int, int], list[float]] = {}
    for curve in curves:
        pts = [(b, float(np.median(s))) for b, s in curve if len(s) >= 1]
        for (b0, m0), (b1, m1) in itertools.pairwise(pts):
            if m0 > 0 and m1 > 0:
                by_pair.setdefault((b0, b1), []).append(math.log(m1 / m0))
    shift = math.log(1 - PLATEAU_REL)
    raw: list[Step] = []
    for (b0, b1), logs in sorted(by_pair.items()):
        d = np.asarray(logs) - shift
        n = int(np.count_nonzero(d))
        # R's wilcox.test(d, mu = 0, alternative = "less"): zeros dropped, exact without ties or zeros
        p = stats.wilcoxon_paired(d, np.zeros_like(d), alternative="less").p if n >= stats.MIN_N_FOR_TESTS else None
        raw.append({"from": b0, "to": b1, "n_curves": len(logs), "p": p,
                    "rel_decrease": float(1 - math.exp(float(np.median(logs))))})
    tested = [s for s in raw if s["p"] is not None]
    if not tested:
        return Decrease(verdict="not testable", steps=raw, limit=None, unit="curve",
                        reason=f"fewer than {stats.MIN_N_FOR_TESTS} curves measured each pair of neighbouring batch "
                               "sizes")
    for s, p_adj in zip(tested, stats.holm([s["p"] for s in tested]), strict=True):
        s["p_holm"] = p_adj
        s["falls"] = p_adj is not None and p_adj < alpha and s["rel_decrease"] > PLATEAU_REL
    out: Decrease = {**_verdict(tested, tested[0]["from"]), "unit": "curve"}
    return out


def _telemetry(values: pd.DataFrame, cid: str, arm: str, metric: str, phase: str) -> list[float]:
    from kit.analysis.analyze import usable

    use = usable(values)
    g = use[(use["config_id"] == cid) & (use["arm"] == arm) & (use["metric"] == metric) & (use["phase"] == phase)]
    return g["value"].astype(float).tolist()


def power_trend(values: pd.DataFrame, infos: dict[str, dict[str, Any]], arms: list[str], metric: str,
                alpha: float) -> list[dict[str, Any]]:
    """Q4 per framework and phase: does GPU power rise or fall with batch size? Trial-level, stratified.

    Unit: the trial (one phase-mean power per process; never the 10 Hz samples within it). The
    design runs every batch size of a curve (model x input side) once per repetition, in shuffled
    order, so the strata are (model, input side, repetition): within one, the batch sizes ran close
    together, and comparing only within strata removes the models' different power levels and any
    drift between repetitions hours apart. Batch size is ordered and the question is whether power
    moves with it, so an ordered-alternative test rather than Kruskal-Wallis (which ignores the
    order): the stratified Jonckheere-Terpstra test (:func:`kit.stats.stratified_trend`),
    two-sided, Holm-corrected over the frameworks and phases tested here (a family of its own, the
    hypotheses' Holm family being the framework comparisons). Out-of-memory batch sizes are missing
    from their strata; a phase where some trials got no power reading is not tested (the trials
    with a reading would be the longer ones, a biased subset). CPU-inference cases are left out:
    the GPU idles through them.
    """
    from kit.analysis.analyze import usable

    rows: list[dict[str, Any]] = []
    layouts: dict[int, list[tuple[list[float], list[float]]]] = {}
    base = counted(values)
    base = base[base["metric"] == metric]
    use = usable(values)
    for arm, phase in itertools.product(arms, ("train", "infer")):
        allv = base[(base["arm"] == arm) & (base["phase"] == phase)]
        if allv.empty or allv["value"].notna().sum() == 0:
            continue  # not measured for this framework and phase (no GPU, or no such phase)
        row: dict[str, Any] = {"question": Q4, "arm": arm, "phase": phase, "metric": metric, "unit": "trial",
                               "h0": f"GPU power in the {phase} phase does not change with batch size ({arm})",
                               "h1": f"GPU power in the {phase} phase rises or falls with batch size ({arm})"}
        missing = int(allv["value"].isna().sum())
        if missing:
            row.update(tested=False, p=None, decision="not testable", reason=(
                f"{missing} of {len(allv)} {arm} trials got no power reading in the {phase} phase: the trials "
                "with one are a biased subset (the longer phases)"))
            rows.append(row)
            continue
        g = use[(use["arm"] == arm) & (use["phase"] == phase) & (use["metric"] == metric)]
        strata: dict[tuple[Any, ...], tuple[list[float], list[float]]] = {}
        for cid, rep, val in zip(g["config_id"], g["repetition"], g["value"], strict=True):
            info = infos[cid]
            if info.get("device") == "cpu":
                continue  # CPU-inference cases: the GPU idles, its power says nothing about batch size
            xs, ys = strata.setdefault((info["case"], info["image_size"], int(rep)), ([], []))
            xs.append(float(info["batch_size"]))
            ys.append(float(val))
        keys = sorted(strata, key=str)
        layouts[id(row)] = [strata[k] for k in keys]
        res = stats.stratified_trend(layouts[id(row)], names=[f"{c} {s}px rep {r}" for c, s, r in keys]).as_dict()
        row.update(tested=res["strata"] > 0 and res["p"] is not None, test=res, p=res["p"], n_trials=res["n"],
                   strata=res["strata"], concordance=res["concordance"], reason=res["reason"])
        rows.append(row)
    adjusted = stats.holm([r["p"] if r.get("tested") else None for r in rows])
    family = sum(p is not None for p in adjusted)
    for r, p_adj in zip(rows, adjusted, strict=True):
        r["p_holm"] = p_adj
        if not r.get("tested"):
            r.setdefault("decision", "not testable")
            continue
        if p_adj is not None and p_adj < alpha:
            r["decision"] = "power rises with batch size" if r["concordance"] > 0 else "power falls with batch size"
        else:
            # what the non-rejection can claim: the trend this layout and noise would have detected (power 0.8
            # at alpha/m, the threshold of the family's first rejection), by seeded simulation
            mde = ordered.trend_mde(layouts[id(r)], level=alpha / max(family, 1), seed=0)
            r["mde"] = mde.as_dict()
            r["decision"] = ordered.no_trend_text(mde, "W", "batch-size step")
    return rows


PHASE_TEXT = {"train": "training", "infer": "inference"}


def phase_label(phase: str, device: str, cores: int) -> str:
    """"training (GPU)", "inference (CPU, 1 core)": the phase as the paper's figures split it (Figs. 1-3)."""
    dev = {"gpu": "GPU", "cpu": "CPU"}.get(device, device)
    return f"{PHASE_TEXT[phase]} ({dev}" + (f", {cores} core{'s' if cores != 1 else ''}" if cores else "") + ")"


def paper_winners(spec: Mapping[str, Any], infos: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, str, str], str]:
    """(model, phase, device) -> the framework the paper's direction claims name as faster (time_s claims only)."""
    model_of = {i["case"]: i["model"] for i in infos.values()}
    out = {}
    for c in spec.get("claims") or []:
        if c.get("kind") != "direction" or c.get("metric") != "time_s" or c.get("direction") not in ("less", "greater"):
            continue
        cases = (c.get("where") or {}).get("case")
        for case in [cases] if isinstance(cases, str) else cases or []:
            if case in model_of:  # TF/PT "less": TensorFlow's time is smaller, TensorFlow faster
                out[(model_of[case], c.get("phase"), c.get("device"))] = (
                    "tensorflow" if c["direction"] == "less" else "pytorch")
    return out


def winner_table(cells: list[dict[str, Any]], alpha: float,
                 paper: Mapping[tuple[str, str, str], str] | None = None) -> list[dict[str, Any]]:
    """Per model and phase (training, GPU inference, CPU inference on its cores): which framework was faster.

    Reuses the kit's across-configurations arithmetic (kit.analysis.across): per configuration (batch
    size x input side) log(TF/PT) of the two arms' trial medians, then per model the mean of those logs,
    i.e. the geometric-mean TF/PT ratio over its configurations, with its t interval at 1 - alpha and the
    one-sample t test of log ratio 0 over the configurations (the interval the claims ledger uses for the
    paper's per-model findings, scope "overall"). A row is decided when its Holm-adjusted p (over the
    table's rows, one family) is below alpha; otherwise "no winner (undecided)". A model with one
    configuration has no interval and is undecided. ``cells``: analyse()'s, with ``device_used``.
    """
    from kit.analysis.across import config_ratio, mean_log

    groups: dict[tuple[str, str, str, int], list[Any]] = {}
    by_cfg: dict[str, dict[str, dict[str, Any]]] = {}
    for c in cells:
        by_cfg.setdefault(c["config_id"], {})[c["arm"]] = c
    for cid, arms in sorted(by_cfg.items()):
        tf_c, pt_c = arms.get("tensorflow"), arms.get("pytorch")
        if not tf_c or not pt_c or not tf_c.get("model"):
            continue
        device = tf_c.get("device_used") or pt_c.get("device_used") or str(tf_c.get("device"))
        for phase in ("train", "infer"):
            a, b = tf_c.get(f"{phase}_trial_means_s"), pt_c.get(f"{phase}_trial_means_s")
            if a and b:
                r = config_ratio(cid, tf_c["model"], device, a, b)
                if r.log_ratio is not None:
                    groups.setdefault((tf_c["model"], phase, device, int(tf_c.get("cpu_cores") or 0)), []).append(r)
    rows: list[dict[str, Any]] = []
    order = {"train": 0, "infer": 1, "gpu": 0, "cpu": 2}  # the paper's Figs. 1-3: training, GPU, CPU inference
    for (model, phase, device, cores), rs in sorted(groups.items(), key=lambda kv: (
            kv[0][0], order.get(kv[0][1], 9), order.get(kv[0][2], 1), kv[0][3])):
        m = mean_log([r.log_ratio for r in rs], 1.0 - alpha)
        rows.append({"model": model, "phase": phase, "device": device, "cpu_cores": cores,
                     "label": phase_label(phase, device, cores), "n_configs": m.n, "ratio_tf_over_pt": m.ratio,
                     "low": m.low, "high": m.high, "conf": 1.0 - alpha, "p": m.p, "reason": m.reason,
                     "config_ids": [r.config_id for r in rs],
                     "paper": (paper or {}).get((model, phase, device))})
    for row, p_adj in zip(rows, stats.holm([r["p"] for r in rows]), strict=True):
        ratio = row["ratio_tf_over_pt"]
        faster, slower = ("pytorch", "tensorflow") if ratio > 1 else ("tensorflow", "pytorch")
        inv = ratio < 1  # the factor reads "faster by", always >= 1: TF/PT when PyTorch wins, PT/TF when TensorFlow
        lo: float | None = row["low"]
        hi: float | None = row["high"]
        decided = p_adj is not None and p_adj < alpha and ratio != 1
        row.update(p_holm=p_adj, decided=decided, faster=faster if decided else None, leader=faster,
                   factor=1 / ratio if inv else ratio,
                   factor_low=(1 / hi if inv else lo) if hi is not None and lo is not None else None,
                   factor_high=(1 / lo if inv else hi) if hi is not None and lo is not None else None,
                   slower=slower)
        row["agrees_with_paper"] = None if not decided or row["paper"] is None else row["paper"] == faster
    return rows


def analyse(run: RunView) -> ModelsSweepExtras:
    arms = list(run.arms)
    alpha = float(run.spec["design"]["alpha"])
    infos = config_info(run.manifest)
    values = run.values
    from kit.analysis.metrics import METRICS, preferred_power_metric

    power_metric = preferred_power_metric(values)  # energy counter / phase duration where the GPU has it
    cells = []
    for cid, info in infos.items():
        for arm in arms:
            done = run.finished(arm=arm, config=cid)
            c = cell_stats(done)
            c.update(info, arm=arm)
            ok = [t for t in done if t.counts]
            kinds = sorted({t.device for t in ok if t.device})
            c["device_used"] = kinds[0] if len(kinds) == 1 else "/".join(kinds) or None
            pins: list[Mapping[str, Any]] = [p for p in (t.env.get("cpu_pinning") for t in ok) if isinstance(p, Mapping)]
            c["cpu_pinning"] = [{"cpus_pinned": p.get("cpus_pinned"), "smt_siblings": p.get("smt_siblings"),
                                 "intra_op_threads": p.get("intra_op_threads"),
                                 "inter_op_threads": p.get("inter_op_threads")} for p in pins]
            train = info["mode"] == "train_infer"
            c["mfu_train"] = mfu(c.get("flops_per_example_fwd"), c.get("train_throughput_ips"), c.get("peak_flops"), True)
            c["mfu_infer"] = mfu(c.get("flops_per_example_fwd"), c.get("infer_throughput_ips"), c.get("peak_flops"), False)
            for key, metric in (("gpu_power_w", power_metric), ("gpu_energy_j", "gpu_energy_j")):
                for phase in ("train", "infer") if train else ("infer",):
                    v = _telemetry(values, cid, arm, metric, phase) if not values.empty else []
                    c[f"{phase}_{key}"] = v
            cells.append(c)
    # FLOPs are a property of the model and shape: the PyTorch count serves both frameworks' MFU
    for c in cells:
        if not c.get("flops_per_example_fwd"):
            twin = next((d for d in cells if d["config_id"] == c["config_id"] and d.get("flops_per_example_fwd")), None)
            if twin:
                c["flops_per_example_fwd"] = twin["flops_per_example_fwd"]
                c["mfu_train"] = mfu(c["flops_per_example_fwd"], c.get("train_throughput_ips"), c.get("peak_flops"), True)
                c["mfu_infer"] = mfu(c["flops_per_example_fwd"], c.get("infer_throughput_ips"), c.get("peak_flops"), False)

    ratios = []
    if "tensorflow" in arms and "pytorch" in arms:
        for cid, info in infos.items():
            tf_c = next(c for c in cells if c["config_id"] == cid and c["arm"] == "tensorflow")
            pt_c = next(c for c in cells if c["config_id"] == cid and c["arm"] == "pytorch")
            for phase in ("train", "infer"):
                r = time_ratio(tf_c.get(f"{phase}_trial_means_s") or [], pt_c.get(f"{phase}_trial_means_s") or [])
                if r["ratio"] is None and info["mode"] == "infer" and phase == "train":
                    continue
                ratios.append({**info, "phase": phase, **r, "status": {"tensorflow": tf_c["status"],
                                                                      "pytorch": pt_c["status"]}})

    curves = []
    by_arm_samples: dict[str, list[list[tuple[int, list[float]]]]] = {}
    keys = sorted({(i["case"], i["image_size"]) for i in infos.values()}, key=str)
    for case, size in keys:
        cids = sorted((i for i in infos.values() if i["case"] == case and i["image_size"] == size),
                      key=lambda i: i["batch_size"])
        for arm in arms:
            row = [next(c for c in cells if c["config_id"] == i["config_id"] and c["arm"] == arm) for i in cids]
            # one value per TRIAL (its mean step time per image): steps within a trial are not independent
            samples = [(c["batch_size"], [m / c["batch_size"] for m in c.get("infer_trial_means_s") or []])
                       for c in row]
            test = decreasing_to_limit([(b, s) for b, s in samples if s], alpha)
            by_arm_samples.setdefault(arm, []).append([(b, s) for b, s in samples if s])
            power = [(c["batch_size"], c.get("train_gpu_power_w") or c.get("infer_gpu_power_w") or []) for c in row]
            groups = [p for _, p in power if len(p) >= 2]
            kw_p = ordered.kruskal_wallis(groups).p if len(groups) >= 2 else math.nan
            kw = None if math.isnan(kw_p) else kw_p  # NaN: one group, or every value equal (R: NA)
            curves.append({"case": case, "model": cids[0]["model"], "image_size": size, "arm": arm,
                           "mode": cids[0]["mode"], "device": cids[0]["device"],
                           "points": [{"batch_size": c["batch_size"], "status": c["status"],
                                       "infer_step_s": c.get("infer_step_s"),
                                       "latency_per_image_s": c.get("infer_latency_per_image_s"),
                                       "throughput_ips": c.get("infer_throughput_ips"),
                                       "power_w": _mean(c.get("train_gpu_power_w") or c.get("infer_gpu_power_w") or []),
                                       "energy_j": _mean(c.get("train_gpu_energy_j") or [])} for c in row],
                           "decrease_test": test, "power_kruskal_p": kw})
    # Holm over the curves' Kruskal-Wallis tests (a family of its own: one test per curve and framework)
    for c, p_adj in zip(curves, stats.holm([c["power_kruskal_p"] for c in curves]), strict=True):
        c["power_kruskal_p_holm"] = p_adj
    missing = [{"case": c["case"], "batch_size": c["batch_size"], "image_size": c["image_size"], "arm": c["arm"],
                "status": c["status"], "reason": (c.get("reason") or "")[:300]} for c in cells if c["status"] != "ok"]
    slim = cells  # per-step times never leave the trial records: every test above sees trial-level values
    verdicts = [c["decrease_test"]["verdict"] for c in curves]
    winners = winner_table(cells, alpha, paper_winners(run.spec, infos)) if {"tensorflow", "pytorch"} <= set(arms) \
        else []
    return ModelsSweepExtras(
        arms=arms, alpha=alpha, winners=winners, cells=slim, ratios=ratios, param_pairs=param_pairs(cells, arms),
        curves=curves, missing=missing,
        power_measured=any(c.get("train_gpu_power_w") or c.get("infer_gpu_power_w") for c in cells),
        decrease_summary={v: verdicts.count(v) for v in sorted(set(verdicts))},
        decrease_across_curves={arm: decreasing_across_curves(cs, alpha) for arm, cs in by_arm_samples.items()},
        power_metric=power_metric, power_source=METRICS[power_metric].label,
        power_trend=power_trend(values, infos, arms, power_metric, alpha) if not values.empty else [])
