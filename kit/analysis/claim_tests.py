"""The statistical procedures that judge one claim on a run's values (kit.analysis.claims decides whether a claim
may be judged at all: its conditions, its configurations, its metric; this module says how).

See kit.analysis.claims for the procedures in words; ``procedure_text`` is what the report prints of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from kit.analysis import detectability as det
from kit.analysis.across import mean_log
from kit.analysis.effects import ratio_of_medians
from kit.analysis.stats import MIN_N_FOR_TESTS, mann_whitney, stratified_trend, wilcoxon_paired
from kit.claim_spec import Claim

DEFAULT_DIFFERENCE_MARGIN = 0.05  # "they differ" is contradicted by equivalence within 5 % (the kit's practical threshold)
N_BOOT = 2000


def _fmt_ratio(est: float | None, low: float | None, high: float | None) -> str:
    if est is None or not math.isfinite(est):
        return ""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return f"{est:.3g}"
    return f"{est:.3g} [{low:.3g}, {high:.3g}]"


def _side(est: float, direction: str) -> bool:
    return est > 1 if direction == "greater" else est < 1


def _pairs(df: pd.DataFrame, a: str, b: str) -> tuple[np.ndarray, np.ndarray, bool]:
    """Values of arms a and b in one configuration; paired by block where every value has its partner."""
    va, vb = df[df["arm"] == a], df[df["arm"] == b]
    if "block" in df.columns:
        ja = va.groupby("block")["value"].median()
        jb = vb.groupby("block")["value"].median()
        common = ja.index.intersection(jb.index)
        if len(common) >= 2 and len(common) == len(ja) == len(jb) and len(va) == len(ja) and len(vb) == len(jb):
            return ja.loc[common].to_numpy(float), jb.loc[common].to_numpy(float), True
    return va["value"].to_numpy(float), vb["value"].to_numpy(float), False


@dataclass
class _Cell:
    config_id: str
    a: np.ndarray
    b: np.ndarray
    paired: bool

    @property
    def n(self) -> int:
        return int(min(self.a.size, self.b.size))


def _test_p(c: _Cell) -> float | None:
    if c.n < MIN_N_FOR_TESTS:
        return None
    res = wilcoxon_paired(c.a, c.b) if c.paired else mann_whitney(c.a, c.b)
    return float(res.p) if res.p is not None and math.isfinite(res.p) else None


def _ratio(c: _Cell, conf: float) -> tuple[float | None, float | None, float | None]:
    if c.n < 1 or float(np.median(c.b)) == 0.0:
        return None, None, None
    r = ratio_of_medians(c.a, c.b, conf=conf, n_boot=N_BOOT, paired=c.paired)
    fin = (lambda v: float(v) if v is not None and math.isfinite(v) else None)  # noqa: E731
    return fin(r.estimate), fin(r.low), fin(r.high)


def _inside(low: float | None, high: float | None, lo: float, hi: float) -> bool:
    return low is not None and high is not None and lo <= low and high <= hi


def _disjoint(low: float | None, high: float | None, lo: float, hi: float) -> bool:
    return low is not None and high is not None and (high < lo or low > hi)


def _need(c: _Cell, threshold: float, alpha: float, detect: bool) -> int | None:
    noise = det.noise_of(c.a, c.b, c.paired)
    if noise is None or threshold <= 0:
        return None
    if detect:
        return det.n_to_detect(noise, threshold, c.paired, alpha)
    return det.n_needed(noise, threshold, c.paired, alpha)


def _judge_cell(claim: Claim, c: _Cell, alpha: float, k: int) -> dict[str, Any]:
    """One configuration: its value, and whether it replicates (at alpha) or contradicts (at alpha / k)."""
    level_any = alpha / k
    est, low, high = _ratio(c, 1 - alpha)
    row: dict[str, Any] = {"config_id": c.config_id, "n": c.n, "paired": c.paired, "estimate": est, "low": low,
                           "high": high, "p": None, "replicates": False, "contradicts": False, "n_needed": None}
    if est is None:
        row["why"] = "no ratio (an arm has no values, or B's median is 0)"
        return row
    if claim.kind in ("direction", "difference"):
        p = _test_p(c)
        row["p"] = p
        if p is not None:
            if claim.kind == "direction":
                row["replicates"] = p < alpha and _side(est, claim.direction)
                row["contradicts"] = p < level_any and not _side(est, claim.direction) and est != 1
            else:
                m = claim.margin or DEFAULT_DIFFERENCE_MARGIN
                inside, eq_low, eq_high, _ = det.equivalence_interval(c.b, c.a, paired=c.paired, alpha=level_any,
                                                                       threshold=m)
                row["replicates"] = p < alpha
                row["contradicts"] = bool(inside) and not p < alpha
        if not (row["replicates"] or row["contradicts"]):
            obs = abs(math.log(est)) if est > 0 else 0.0
            row["n_needed"] = _need(c, max(math.expm1(obs), 0.01), alpha, detect=True)
    elif claim.kind == "magnitude":
        lo, hi = claim.band() or (0.0, math.inf)
        wide = _ratio(c, 1 - level_any) if k > 1 else (est, low, high)
        row["replicates"] = _inside(wide[1], wide[2], lo, hi)
        row["contradicts"] = _disjoint(wide[1], wide[2], lo, hi)
        if not (row["replicates"] or row["contradicts"]):
            row["n_needed"] = _need(c, claim.tolerance + claim.uncertainty, alpha, detect=False)
    elif claim.kind == "no_difference":
        m = claim.margin
        inside, eq_low, eq_high, _ = det.equivalence_interval(c.b, c.a, paired=c.paired, alpha=alpha, threshold=m)
        wide = _ratio(c, 1 - level_any) if k > 1 else (est, low, high)
        row["replicates"] = bool(inside)
        row["contradicts"] = _disjoint(wide[1], wide[2], 1 / (1 + m), 1 + m)
        row["equivalence_interval"] = [eq_low, eq_high]
        if not (row["replicates"] or row["contradicts"]):
            row["n_needed"] = _need(c, m, alpha, detect=False)
    return row



def procedure_text(claim: Claim, alpha: float) -> str:
    scope = {"each": "in each matching configuration", "overall": "the geometric mean over the matching "
             "configurations, with a t interval across them"}[claim.scope]
    return {
        "direction": f"two-sided rank test at {alpha:g} ({scope}); significant on the paper's side: replicated, "
                     "on the other side: contradicted",
        "difference": f"two-sided rank test at {alpha:g} ({scope}); significant: replicated; equivalent within "
                      f"{(claim.margin or DEFAULT_DIFFERENCE_MARGIN):.0%} (TOST): contradicted",
        "magnitude": f"the {1 - alpha:.0%} interval of the ratio ({scope}) inside the paper's band: replicated, "
                     "outside it: contradicted",
        "no_difference": f"TOST at {alpha:g} with margin {claim.margin:.0%} ({scope}): replicated; the "
                         f"{1 - alpha:.0%} interval outside the margin: contradicted",
        "trend": f"stratified Jonckheere-Terpstra test per arm at {alpha:g} along {claim.factor}; every arm "
                 "significant the paper's way: replicated; any arm significant the other way: contradicted",
    }[claim.kind]



def judge_each(claim: Claim, sel: pd.DataFrame, cids: list[str], arms: tuple[str, ...],
                alpha: float) -> tuple[str, str, dict[str, Any]]:
    k = len(cids)
    rows = []
    for cid in cids:
        a, b, paired = _pairs(sel[sel["config_id"] == cid], arms[0], arms[1])
        rows.append(_judge_cell(claim, _Cell(cid, a, b, paired), alpha, k))
    ok = [r for r in rows if r["estimate"] is not None]
    extra: dict[str, Any] = {"per_config": tuple(rows), "n": min((r["n"] for r in rows), default=0)}
    if len(rows) == 1:
        r = rows[0]
        extra.update(estimate=r["estimate"], low=r["low"], high=r["high"],
                     value_text=_fmt_ratio(r["estimate"], r["low"], r["high"]) + (f" (p = {r['p']:.3g})"
                                                                                  if r["p"] is not None else ""))
    else:
        ests = [r["estimate"] for r in ok if r["estimate"] and r["estimate"] > 0]
        gm = float(np.exp(np.mean(np.log(ests)))) if ests else None
        extra.update(estimate=gm, value_text=(f"{min(ests):.3g} to {max(ests):.3g} over {len(ok)} configurations"
                                              if ests else ""))
    contra = [r for r in rows if r["contradicts"]]
    if contra:
        band = claim.band()
        shows = {"direction": "show the opposite direction",
                 "difference": f"are equivalent within {(claim.margin or DEFAULT_DIFFERENCE_MARGIN):.0%} (TOST)",
                 "magnitude": (f"lie outside the paper's band [{band[0]:.3g}, {band[1]:.3g}]" if band else
                               "lie outside the paper's band"),
                 "no_difference": f"differ by more than the margin of {claim.margin:.0%}"}[claim.kind]
        return "contradicted", (f"{len(contra)} of {k} configuration(s) {shows} "
                                f"({', '.join(r['config_id'] for r in contra)})"), extra
    if rows and all(r["replicates"] for r in rows):
        return "replicated", f"every one of the {k} matching configuration(s) shows it", extra
    few = [r for r in rows if r["n"] < MIN_N_FOR_TESTS and claim.kind in ("direction", "difference")]
    needs = [r["n_needed"] for r in rows if not r["replicates"] and r["n_needed"] is not None]
    extra["n_needed"] = max(needs) if needs else None
    open_ = [r["config_id"] for r in rows if not r["replicates"]]
    why = (f"not shown in {len(open_)} of {k} configuration(s)"
           + (f"; {len(few)} with fewer than {MIN_N_FOR_TESTS} repetitions per arm (no test)" if few else ""))
    if extra["n_needed"]:
        why += f"; about {extra['n_needed']} repetitions per arm would decide it at the noise seen"
    return "inconclusive", why, extra


def judge_overall(claim: Claim, sel: pd.DataFrame, cids: list[str], arms: tuple[str, ...],
                   alpha: float) -> tuple[str, str, dict[str, Any]]:
    logs, per = [], []
    for cid in cids:
        d = sel[sel["config_id"] == cid]
        ma, mb = d[d["arm"] == arms[0]]["value"].median(), d[d["arm"] == arms[1]]["value"].median()
        if ma > 0 and mb > 0 and math.isfinite(ma) and math.isfinite(mb):
            logs.append(math.log(ma / mb))
            per.append({"config_id": cid, "estimate": ma / mb, "n": int(min((d["arm"] == arms[0]).sum(),
                                                                               (d["arm"] == arms[1]).sum()))})
    extra: dict[str, Any] = {"per_config": tuple(per), "n": len(logs)}
    if len(logs) < 2:
        return "inconclusive", "fewer than two configurations with a positive ratio: no interval across them", extra
    ml = mean_log(logs, conf=1 - alpha)
    extra.update(estimate=ml.ratio, low=ml.low, high=ml.high,
                 value_text=_fmt_ratio(ml.ratio, ml.low, ml.high) + f" (geometric mean of {len(logs)} configurations)")
    if ml.low is None or ml.high is None:
        return "inconclusive", f"no interval across the configurations ({ml.reason})", extra
    lo, hi = ml.low, ml.high
    if claim.kind in ("direction", "difference"):
        sig = lo > 1 or hi < 1
        if claim.kind == "direction":
            if sig:
                good = _side(ml.ratio, claim.direction)
                return ("replicated" if good else "contradicted"), (
                    f"the interval across {len(logs)} configurations excludes 1 on the "
                    f"{'paper' if good else 'other'}'s side"), extra
        else:
            if sig:
                return "replicated", f"the interval across {len(logs)} configurations excludes 1", extra
            m = claim.margin or DEFAULT_DIFFERENCE_MARGIN
            tost = mean_log(logs, conf=1 - 2 * alpha)
            if tost.low is not None and tost.high is not None and 1 / (1 + m) < tost.low and tost.high < 1 + m:
                return "contradicted", f"equivalent within {m:.0%} across the configurations (TOST)", extra
        return "inconclusive", "the interval across the configurations includes 1: more configurations or " \
                               "less noise would decide it", extra
    if claim.kind == "magnitude":
        blo, bhi = claim.band() or (0.0, math.inf)
        if _inside(lo, hi, blo, bhi):
            return "replicated", f"the interval lies inside the paper's band [{blo:.3g}, {bhi:.3g}]", extra
        if _disjoint(lo, hi, blo, bhi):
            return "contradicted", f"the interval lies outside the paper's band [{blo:.3g}, {bhi:.3g}]", extra
        return "inconclusive", f"the interval overlaps the edge of the paper's band [{blo:.3g}, {bhi:.3g}]", extra
    m = claim.margin
    tost = mean_log(logs, conf=1 - 2 * alpha)
    if tost.low is not None and tost.high is not None and 1 / (1 + m) < tost.low and tost.high < 1 + m:
        return "replicated", f"equivalent within {m:.0%} across the configurations (TOST)", extra
    if _disjoint(lo, hi, 1 / (1 + m), 1 + m):
        return "contradicted", f"the interval lies outside the margin of {m:.0%}", extra
    return "inconclusive", f"neither equivalent within {m:.0%} nor outside it", extra


def judge_trend(claim: Claim, sel: pd.DataFrame, configs: Mapping[str, Mapping[str, Any]], cids: list[str],
                 arms: tuple[str, ...], alpha: float) -> tuple[str, str, dict[str, Any]]:
    want = "greater" if claim.trend == "increasing" else "less"
    per: list[dict[str, Any]] = []
    parts: list[str] = []
    for arm in arms:
        strata: dict[str, tuple[list[float], list[float]]] = {}
        for cid in cids:
            cfg = configs[cid]
            key = ",".join(f"{k}={v}" for k, v in sorted(cfg.items()) if k != claim.factor) or "all"
            vals = sel[(sel["config_id"] == cid) & (sel["arm"] == arm)]["value"].to_numpy(float)
            xs, ys = strata.setdefault(key, ([], []))
            xs.extend([float(cfg[claim.factor])] * vals.size)
            ys.extend(vals.tolist())
        names = sorted(strata)
        res = stratified_trend([(np.asarray(strata[s][0]), np.asarray(strata[s][1])) for s in names], names=names)
        p = res.p if math.isfinite(res.p) else None
        side = res.concordance > 0 if want == "greater" else res.concordance < 0
        per.append({"arm": arm, "p": p, "concordance": res.concordance if math.isfinite(res.concordance) else None,
                    "strata": res.strata, "n": res.n, "replicates": p is not None and p < alpha and side,
                    "contradicts": p is not None and p < alpha / len(arms) and not side and res.concordance != 0,
                    "reason": res.reason})
        parts.append(f"{arm}: concordance {res.concordance:+.2f}" + (f" (p = {p:.3g})" if p is not None else "")
                     if math.isfinite(res.concordance) else f"{arm}: {res.reason}")
    extra: dict[str, Any] = {"per_config": tuple(per), "n": min(r["n"] for r in per), "value_text": "; ".join(parts)}
    if any(r["contradicts"] for r in per):
        bad = [r["arm"] for r in per if r["contradicts"]]
        return "contradicted", f"{', '.join(bad)} significantly {'falls' if want == 'greater' else 'rises'} " \
                               f"with {claim.factor}", extra
    if all(r["replicates"] for r in per):
        return "replicated", f"every arm significantly {'rises' if want == 'greater' else 'falls'} with " \
                             f"{claim.factor}", extra
    return "inconclusive", f"not significant for {', '.join(r['arm'] for r in per if not r['replicates'])}: more " \
                           "repetitions or levels of the factor would decide it", extra
