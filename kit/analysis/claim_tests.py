"""The statistical procedures that judge one claim on a run's values (kit.analysis.claims decides whether a claim
may be judged at all: its conditions, its configurations, its metric; this module says how).

The quantity: the Hodges-Lehmann ratio A/B (kit.analysis.detectability.HLRatio): exp of the pseudo-median of the
per-block log ratios log(a_i / b_i) where the arms are paired by block, else exp of the median of all pairwise log
ratios, with the rank interval that inverts the signed-rank (Mann-Whitney) test of those log values. The printed
ratio and interval are the ones the verdict tests (issue 38): the ratio of medians with a BCa interval, printed
before, covered 0.55 of the time at n = 2 and 0.72 at n = 3, and was not what the rank tests test.

Verdicts per kind (alpha the run's level; p-values one-sided rank tests of the log ratio against a shift, made
two-sided where a 1 - alpha interval decides):

* direction: the two-sided rank test of the raw values (the hypotheses' own test: the same p for the same
  comparison) below alpha, and the 1 - alpha interval on the paper's side of 1 -> replicated; both on the other
  side (at alpha/k over k configurations) -> contradicted. Wrong verdicts at most alpha/2 each.
* difference: that test below alpha and the interval excluding 1 -> replicated (wrong at most alpha when A = B);
  TOST within ``margin`` (the 1 - 2 alpha interval inside it) -> contradicted (wrong at most alpha).
* magnitude: the 1 - alpha interval inside the paper's band -> replicated; disjoint from it -> contradicted (each
  wrong at most alpha/2).
* no_difference: TOST within ``margin`` -> replicated (wrong at most alpha); the 1 - alpha interval outside it ->
  contradicted (wrong at most alpha/2).
* trend: the Jonckheere-Terpstra test (stats.stratified_trend) of each arm along ``factor``; ``each``: in every
  series (stratum: the other configuration keys) significant the paper's way -> replicated, one the other way at
  alpha/k -> contradicted; ``overall``: each network's concordance, the network the unit (below).
* not_significant: the run's test at the paper's n (:func:`judge_not_significant`).

No verdict below the evidence a procedure needs (issue 38 item 1): :data:`MIN_N` holds, per kind, scope and
design, the smallest n at which the procedure keeps its stated error rates in a seeded simulation at the kit's
sizes (log-normal noise and occasional 30 % outliers; benchmarks/claims_verdicts_sim.py regenerates it, its output
is docs/evidence/claims-verdicts-sim-2026-11-29.md). Below it the claim is "inconclusive: N repetitions per arm
would decide it". An interval decides only where it can reach its confidence within 2 points at that n
(HLRatio.usable): at another alpha, or at alpha/k, that is checked on the exact distribution.

Scope ``overall`` (item 3): configurations nested in a network are summarised per network first (the mean of their
log median ratios, as kit.analysis.across does for hypotheses: the same p and interval for the same comparison);
the t test and interval run across networks, and only where even a distribution-free test of J networks could
reach the level: 2/2^J < alpha/m. Otherwise the claim says that J networks cannot decide it and how many would.

One family (item 5): every judged claim carries its p (the p of the verdict it reached; of the nearer one when
inconclusive); :func:`adjust_claims` applies Holm across the tested claims of a run and turns a verdict whose
adjusted p is not below alpha into "inconclusive", saying so.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from scipy.special import stdtr, stdtrit

from kit.analysis import detectability as det
from kit.analysis import power as pw
from kit.analysis.across import ConfigRatio, config_ratio, mean_log, min_p_free
from kit.analysis.stats import MIN_N_FOR_TESTS, holm, mann_whitney, stratified_trend, wilcoxon_paired
from kit.claim_spec import Claim

DEFAULT_DIFFERENCE_MARGIN = 0.05  # "they differ" is contradicted by equivalence within 5 % (the kit's practical threshold)
EVIDENCE = "docs/evidence/claims-verdicts-sim-2026-11-29.md (benchmarks/claims_verdicts_sim.py)"
SIMULATED_ALPHA = 0.05


@dataclass(frozen=True)
class MinN:
    """The smallest n at which a procedure keeps its error rates, and what the simulation saw below it."""

    simulated: int  # smallest n of the simulated grid from which every wrong-verdict rate is within its bound
    floor: int  # the kit's own minimum for a test on this unit (stats.MIN_N_FOR_TESTS per arm; 0 where none)
    below: str  # the worst wrong-verdict rate the simulation saw at the grid's n below ``simulated``

    @property
    def enforced(self) -> int:
        return max(self.simulated, self.floor)


# (kind, scope, design) -> MinN. design: "paired" / "unpaired" (each scope: repetitions per arm of one
# configuration, paired by block or not); "networks" (overall: repetitions per arm of each configuration; the
# networks' number is decided by 2/2^J < alpha/m); "levels" (trend: repetitions per arm at each level of a series).
# Simulated at alpha = 0.05 (EVIDENCE, section 1: seed 38, 300 draws per cell and noise model) on the grid n = 2, 3,
# 4, 5, 6, 8, 10, 12 (each) and 1, 2, 3, 5 (overall: 8 networks x 3 configurations; trend); ``below`` quotes the
# worst rate it printed at the n below. The kit's floor of MIN_N_FOR_TESTS pairs per arm for any test on trials
# (kit.analysis.design) binds where it is larger. Paired, one arm's occasional slow trials make the per-block log
# ratios skewed, which the signed-rank test and its interval assume they are not: below 12 that costs the level.
MIN_N: dict[tuple[str, str, str], MinN] = {
    ("direction", "each", "paired"): MinN(12, MIN_N_FOR_TESTS, "contradicted 0.053 with the truth on 1 at n = 10 "
                                                               "(outliers; bound 0.025)"),
    ("direction", "each", "unpaired"): MinN(4, MIN_N_FOR_TESTS, "no verdict reachable at n = 3"),
    ("difference", "each", "paired"): MinN(12, MIN_N_FOR_TESTS, "replicated 0.077 with no difference at n = 10 "
                                                                "(outliers; bound 0.050)"),
    ("difference", "each", "unpaired"): MinN(4, MIN_N_FOR_TESTS, "no verdict reachable at n = 3"),
    ("magnitude", "each", "paired"): MinN(12, MIN_N_FOR_TESTS, "contradicted 0.057 with the truth on the band's "
                                                               "lower edge at n = 10 (outliers; bound 0.025)"),
    ("magnitude", "each", "unpaired"): MinN(4, MIN_N_FOR_TESTS, "no verdict reachable at n = 3"),
    ("no_difference", "each", "paired"): MinN(5, MIN_N_FOR_TESTS, "no verdict reachable at n = 4"),
    ("no_difference", "each", "unpaired"): MinN(5, MIN_N_FOR_TESTS, "no verdict reachable at n = 4"),
    ("direction", "overall", "networks"): MinN(3, 0, "replicated 0.073 with the truth on 1 at n = 2 (8 networks x 3, "
                                                     "outliers; bound 0.025)"),
    ("difference", "overall", "networks"): MinN(3, 0, "replicated 0.080 with no difference at n = 2 (8 networks x 3, "
                                                      "outliers; bound 0.050)"),
    ("magnitude", "overall", "networks"): MinN(3, 0, "contradicted 0.077 with the truth on the band's upper edge at "
                                                     "n = 2 (8 networks x 3, outliers; bound 0.025)"),
    ("no_difference", "overall", "networks"): MinN(3, 0, "contradicted 0.073 with the truth on the margin at n = 2 "
                                                         "(8 networks x 3, outliers; bound 0.025)"),
    ("trend", "each", "levels"): MinN(2, 0, "replicated 0.053 with the truth just outside (falling) at n = 1 "
                                            "(outliers; bound 0.025)"),
    ("trend", "overall", "levels"): MinN(1, 0, "none: n = 1, the grid's smallest, keeps the bounds (8 networks x 3)"),
}


def min_n(kind: str, scope: str, design: str) -> MinN:
    """The table's entry; a kind or scope the table lacks gets the kit's floor (never less evidence than a test)."""
    return MIN_N.get((kind, "overall" if scope == "overall" else "each", design),
                     MinN(MIN_N_FOR_TESTS, MIN_N_FOR_TESTS, "not simulated: the kit's floor"))


def networks_needed(alpha: float, m: int = 1) -> int:
    """Smallest J with 2/2^J < alpha/m: the networks a population-level verdict needs (kit.analysis.across)."""
    j = 1
    while min_p_free(j) >= alpha / max(m, 1):
        j += 1
    return j


def _fmt_ratio(est: float | None, low: float | None, high: float | None) -> str:
    if est is None or not math.isfinite(est):
        return ""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return f"{est:.3g}"
    return f"{est:.3g} [{low:.3g}, {high:.3g}]"


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


# --------------------------------------------------------------------------- the limits a kind tests against


def _limits(claim: Claim) -> tuple[float, float]:
    """The log-ratio limits of a claim: direction/difference (0, 0); no_difference and a difference's contradiction
    +-log(1 + margin); magnitude the band's ends (lower end -inf when the band reaches 0)."""
    if claim.kind == "magnitude":
        lo, hi = claim.band() or (0.0, math.inf)
        return (math.log(lo) if lo > 0 else -math.inf), math.log(hi)
    if claim.kind in ("no_difference", "difference"):
        m = claim.margin or DEFAULT_DIFFERENCE_MARGIN
        return -math.log1p(m), math.log1p(m)
    return 0.0, 0.0


def _side_ok(low: float | None, high: float | None, direction: str) -> bool:
    if low is None or high is None:
        return False
    return low > 1 if direction == "greater" else high < 1


def _inside(low: float | None, high: float | None, lo: float, hi: float) -> bool:
    return low is not None and high is not None and lo <= low and high <= hi


def _disjoint(low: float | None, high: float | None, lo: float, hi: float) -> bool:
    return low is not None and high is not None and (high < lo or low > hi)


def _need(a: np.ndarray, b: np.ndarray, paired: bool, threshold: float, alpha: float, detect: bool) -> int | None:
    noise = det.noise_of(a, b, paired)
    if noise is None or threshold <= 0:
        return None
    if detect:
        return det.n_to_detect(noise, threshold, paired, alpha)
    return det.n_needed(noise, threshold, paired, alpha)


def _rank_p(a: np.ndarray, b: np.ndarray, paired: bool) -> float | None:
    """The hypotheses' two-sided test of the raw values (kit.analysis.analyze): the same p for the same comparison."""
    res = wilcoxon_paired(a, b) if paired else mann_whitney(a, b)
    return float(res.p) if res.p is not None and math.isfinite(res.p) else None


# --------------------------------------------------------------------------- one configuration


def judge_cell(claim: Claim, config_id: str, a: np.ndarray, b: np.ndarray, paired: bool, alpha: float, k: int = 1,
               *, enforce: bool = True, advise: bool = True) -> dict[str, Any]:
    """One configuration: its Hodges-Lehmann ratio and interval, whether it replicates (at alpha) or contradicts
    (at alpha/k: one of k configurations suffices, Bonferroni), and the p of each route.

    ``enforce`` False: the bare procedure, without the minimum n and the coverage check (the simulation's
    baseline, to show where they are needed); never False in a report. ``advise`` False: no ``n_needed`` (the
    repetitions that would decide it at the noise seen: a power search the simulation does not need).
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n = int(min(a.size, b.size))
    design = "paired" if paired else "unpaired"
    need = min_n(claim.kind, "each", design)
    row: dict[str, Any] = {"config_id": config_id, "n": n, "paired": paired, "estimate": None, "low": None,
                           "high": None, "p": None, "p_replicate": None, "p_contradict": None, "replicates": False,
                           "contradicts": False, "n_needed": None, "min_n": need.enforced}
    if enforce and n < need.enforced:
        row["why"] = (f"{n} repetitions per arm, below the {need.enforced} the {claim.kind} procedure needs "
                      f"({'paired' if paired else 'unpaired'})")
        row["n_needed"] = need.enforced
        if advise and n >= 1:
            row["estimate"] = det.hl_ratio(a, b, paired=paired, conf=1 - alpha).estimate  # for information only
        return row
    hl = det.hl_ratio(a, b, paired=paired, conf=1 - alpha)
    row.update(estimate=hl.estimate, low=hl.low, high=hl.high, conf=hl.conf, estimator=det.HL_RATIO_TEXT)
    if hl.estimate is None:
        row["why"] = hl.note or "no ratio"
        return row
    usable = (lambda r: r.usable) if enforce else (lambda r: r.estimate is not None and r.low is not None)
    wide = det.hl_ratio(a, b, paired=paired, conf=1 - alpha / k) if k > 1 else hl
    lo, hi = _limits(claim)

    def p_at(shift: float, alternative: str) -> float:
        return det.shift_p(a, b, paired=paired, shift=shift, alternative=alternative)

    kind = claim.kind
    if kind in ("direction", "difference"):
        p = _rank_p(a, b, paired) if n >= 2 else None
        row["p"] = p
        row["p_replicate"] = p
        if kind == "direction":
            row["p_contradict"] = None if p is None else min(1.0, p * k)
            row["replicates"] = p is not None and p < alpha and usable(hl) and _side_ok(hl.low, hl.high,
                                                                                       claim.direction)
            other = "less" if claim.direction == "greater" else "greater"
            row["contradicts"] = (p is not None and p < alpha / k and usable(wide)
                                  and _side_ok(wide.low, wide.high, other))
        else:
            tost = det.hl_ratio(a, b, paired=paired, conf=1 - 2 * alpha / k)
            p_tost = max(p_at(lo, "greater"), p_at(hi, "less"))
            row["p_contradict"] = min(1.0, p_tost * k)
            row["replicates"] = (p is not None and p < alpha and usable(hl)
                                 and _disjoint(hl.low, hl.high, 1.0, 1.0))
            row["contradicts"] = (not row["replicates"] and p_tost < alpha / k and usable(tost)
                                  and _inside(tost.low, tost.high, math.exp(lo), math.exp(hi)))
            row["equivalence_interval"] = [tost.low, tost.high]
        if advise and not (row["replicates"] or row["contradicts"]):
            obs = abs(math.log(hl.estimate))
            row["n_needed"] = _need(a, b, paired, max(math.expm1(obs), 0.01), alpha, detect=True)
    elif kind == "magnitude":
        p_rep = min(1.0, 2 * max(p_at(lo, "greater"), p_at(hi, "less")))
        p_con = min(1.0, 2 * min(p_at(lo, "less"), p_at(hi, "greater")) * k)
        row.update(p_replicate=p_rep, p_contradict=p_con)
        row["replicates"] = p_rep < alpha and usable(hl) and _inside(hl.low, hl.high, math.exp(lo), math.exp(hi))
        row["contradicts"] = p_con < alpha and usable(wide) and _disjoint(wide.low, wide.high, math.exp(lo),
                                                                         math.exp(hi))
        if advise and not (row["replicates"] or row["contradicts"]):
            row["n_needed"] = _need(a, b, paired, claim.tolerance + claim.uncertainty, alpha, detect=False)
    elif kind == "no_difference":
        tost = det.hl_ratio(a, b, paired=paired, conf=1 - 2 * alpha)
        p_rep = max(p_at(lo, "greater"), p_at(hi, "less"))
        p_con = min(1.0, 2 * min(p_at(lo, "less"), p_at(hi, "greater")) * k)
        row.update(p_replicate=p_rep, p_contradict=p_con, equivalence_interval=[tost.low, tost.high])
        row["replicates"] = p_rep < alpha and usable(tost) and _inside(tost.low, tost.high, math.exp(lo),
                                                                        math.exp(hi))
        row["contradicts"] = p_con < alpha and usable(wide) and _disjoint(wide.low, wide.high, math.exp(lo),
                                                                         math.exp(hi))
        if advise and not (row["replicates"] or row["contradicts"]):
            row["n_needed"] = _need(a, b, paired, claim.margin, alpha, detect=False)
    if row["n_needed"] is not None and enforce:
        row["n_needed"] = max(row["n_needed"], need.enforced)
    return row


def _claim_p(rows: Sequence[Mapping[str, Any]], k: int, verdict: str) -> float | None:
    """The claim's p: replicated, the largest replicating p (every configuration must: intersection-union);
    contradicted, the smallest contradicting p (already times k); inconclusive, the nearer of the two routes."""
    rep = [float(r["p_replicate"]) for r in rows if r["p_replicate"] is not None]
    con = [float(r["p_contradict"]) for r in rows if r["p_contradict"] is not None]
    p_rep = max(rep) if rep and len(rep) == len(rows) else None
    p_con = min(con) if con else None
    if verdict == "replicated":
        return p_rep
    if verdict == "contradicted":
        return p_con
    got = [p for p in (p_rep, p_con) if p is not None]
    return min(got) if got else None


def _judge_each(claim: Claim, sel: pd.DataFrame, cids: list[str], arms: tuple[str, ...], alpha: float, *,
               enforce: bool = True) -> tuple[str, str, dict[str, Any]]:
    k = len(cids)
    rows = []
    for cid in cids:
        a, b, paired = _pairs(sel[sel["config_id"] == cid], arms[0], arms[1])
        rows.append(judge_cell(claim, cid, a, b, paired, alpha, k, enforce=enforce))
    extra: dict[str, Any] = {"per_config": tuple(rows), "n": min((r["n"] for r in rows), default=0),
                             "estimator": det.HL_RATIO_TEXT}
    if len(rows) == 1:
        r = rows[0]
        extra.update(estimate=r["estimate"], low=r["low"], high=r["high"],
                     value_text=_value_text(r["estimate"], r["low"], r["high"], alpha,
                                            r["p"] if claim.kind in ("direction", "difference") else None))
    else:
        ests = [r["estimate"] for r in rows if r["estimate"] is not None and r["estimate"] > 0]
        gm = float(np.exp(np.mean(np.log(ests)))) if ests else None
        extra.update(estimate=gm, value_text=(f"Hodges-Lehmann ratios {min(ests):.3g} to {max(ests):.3g} over "
                                              f"{len(ests)} configurations" if ests else ""))
    short = [r for r in rows if "min_n" in r and r["n"] < r["min_n"]]
    contra = [r for r in rows if r["contradicts"]]
    if contra:
        band = claim.band()
        shows = {"direction": "show the opposite direction",
                 "difference": f"are equivalent within {(claim.margin or DEFAULT_DIFFERENCE_MARGIN):.0%} (TOST)",
                 "magnitude": (f"lie outside the paper's band [{band[0]:.3g}, {band[1]:.3g}]" if band else
                               "lie outside the paper's band"),
                 "no_difference": f"differ by more than the margin of {claim.margin:.0%}"}[claim.kind]
        extra["p"] = _claim_p(rows, k, "contradicted")
        return "contradicted", (f"{len(contra)} of {k} configuration(s) {shows} "
                                f"({', '.join(r['config_id'] for r in contra)})"), extra
    if rows and all(r["replicates"] for r in rows):
        extra["p"] = _claim_p(rows, k, "replicated")
        return "replicated", f"every one of the {k} matching configuration(s) shows it", extra
    needs = [r["n_needed"] for r in rows if not r["replicates"] and r["n_needed"] is not None]
    extra["n_needed"] = max(needs) if needs else None
    extra["p"] = None if short else _claim_p(rows, k, "inconclusive")
    if short:
        n_have = min(r["n"] for r in short)
        why = (f"inconclusive: {extra['n_needed']} repetitions per arm would decide it ({n_have} here; the "
               f"{claim.kind} procedure keeps its error rates from {short[0]['min_n']} on: {EVIDENCE})")
        return "inconclusive", why, extra
    open_ = [r["config_id"] for r in rows if not r["replicates"]]
    why = f"not shown in {len(open_)} of {k} configuration(s)"
    if extra["n_needed"]:
        why += f"; about {extra['n_needed']} repetitions per arm would decide it at the noise seen"
    return "inconclusive", why, extra


def _value_text(est: float | None, low: float | None, high: float | None, alpha: float, p: float | None) -> str:
    shown = _fmt_ratio(est, low, high)
    if not shown:
        return ""
    what = "Hodges-Lehmann ratio" + (f", {1 - alpha:.0%} rank interval" if low is not None else "")
    return f"{shown} ({what}" + (f"; p = {p:.3g}" if p is not None else "") + ")"


# --------------------------------------------------------------------------- across networks


def _t_p(mean: float, se: float, df: int, shift: float, alternative: str) -> float:
    if math.isinf(shift):
        return 0.0 if (alternative == "greater") == (shift < 0) else 1.0
    t = (mean - shift) / se
    return float(stdtr(df, -t) if alternative == "greater" else stdtr(df, t))


def _judge_overall(claim: Claim, sel: pd.DataFrame, cids: list[str], arms: tuple[str, ...], alpha: float,
                   networks: Mapping[str, str] | None = None, *, family_size: int = 1,
                   enforce: bool = True) -> tuple[str, str, dict[str, Any]]:
    ratios = []
    for cid in cids:
        d = sel[sel["config_id"] == cid]
        va, vb = d[d["arm"] == arms[0]]["value"].to_numpy(float), d[d["arm"] == arms[1]]["value"].to_numpy(float)
        if va.size and vb.size:
            ratios.append(config_ratio(cid, (networks or {}).get(cid, cid), "", va, vb))
    return overall_decision(claim, ratios, alpha, by_network=bool(networks), family_size=family_size,
                            enforce=enforce)


def overall_decision(claim: Claim, ratios: Sequence[ConfigRatio], alpha: float, *, by_network: bool = True,
                     family_size: int = 1, enforce: bool = True) -> tuple[str, str, dict[str, Any]]:
    """The claim over the networks its configurations belong to (each :class:`ConfigRatio` names its network):
    per configuration log(median A / median B), per network their mean, and the one-sample t test and interval
    across the networks' means (kit.analysis.across's numbers), run only where 2/2^J < alpha/m (``family_size``
    m) for J networks. ``by_network`` False: the configurations are their own networks (the words say so)."""
    per = [{"config_id": r.config_id, "network": r.network, "n": min(r.n_a, r.n_b),
            "estimate": math.exp(r.log_ratio) if r.log_ratio is not None else None} for r in ratios]
    reps = [min(r.n_a, r.n_b) for r in ratios]
    by_net: dict[str, list[float]] = {}
    for r in ratios:
        if r.log_ratio is not None:
            by_net.setdefault(r.network, []).append(r.log_ratio)
    names = sorted(by_net)  # kit.analysis.across.network_ratios' order and means, without its per-network intervals
    j = len(names)
    extra: dict[str, Any] = {"per_config": tuple(per), "n": j, "networks": tuple(names),
                             "estimator": "geometric mean over networks of their configurations' median ratios"}
    unit = "network" if by_network else "configuration"
    need = min_n(claim.kind, "overall", "networks")
    if enforce and reps and min(reps) < need.enforced:
        extra["n_needed"] = need.enforced
        return "inconclusive", (f"inconclusive: {need.enforced} repetitions per arm would decide it ({min(reps)} in "
                                f"some configuration; {EVIDENCE})"), extra
    j_need = networks_needed(alpha, family_size)
    means = [float(np.mean(by_net[name])) for name in names]
    if j:
        extra["estimate"] = math.exp(float(np.mean(means)))
    if j < 2 or (enforce and min_p_free(j) >= alpha / max(family_size, 1)):
        extra["networks_needed"] = j_need
        return "inconclusive", (f"{j} {unit}{'s' if j != 1 else ''} cannot decide an overall claim: even with every "
                                f"{unit}'s gap of one sign a test that assumes nothing about their shape gives "
                                f"p = 2/2^{j} = {min_p_free(j):.3g}, not below {alpha / max(family_size, 1):.3g}; "
                                f"{j_need} {unit}s would (more repetitions would not)"), extra
    ml = mean_log(means, conf=1 - alpha)
    extra.update(low=ml.low, high=ml.high, value_text=_fmt_ratio(ml.ratio, ml.low, ml.high)
                 + f" (geometric mean over {j} {unit}s, {1 - alpha:.0%} t interval across them"
                 + (f"; p = {ml.p:.3g}" if ml.p is not None else "") + ")")
    if ml.sd_log is None or ml.sd_log == 0 or ml.low is None or ml.high is None:
        return "inconclusive", f"no interval across the {unit}s ({ml.reason})", extra
    se, df, m = ml.sd_log / math.sqrt(j), j - 1, ml.mean_log
    q2 = float(stdtrit(df, 1 - alpha))
    t_low, t_high = math.exp(m - q2 * se), math.exp(m + q2 * se)  # the 1 - 2 alpha interval (TOST)
    lo, hi = _limits(claim)

    def p_at(shift: float, alternative: str) -> float:
        return _t_p(m, se, df, shift, alternative)

    kind, p = claim.kind, ml.p
    band_text = ""
    if kind == "direction":
        good = claim.direction
        if p is not None and p < alpha and _side_ok(ml.low, ml.high, good):
            extra["p"] = p
            return "replicated", f"the interval across {j} {unit}s lies on the paper's side of 1", extra
        other = "less" if good == "greater" else "greater"
        extra["p"] = p
        if p is not None and p < alpha and _side_ok(ml.low, ml.high, other):
            return "contradicted", f"the interval across {j} {unit}s lies on the other side of 1", extra
        return "inconclusive", f"the interval across the {unit}s includes 1: more {unit}s or less noise would " \
                               "decide it", extra
    if kind == "difference":
        p_tost = max(p_at(lo, "greater"), p_at(hi, "less"))
        if p is not None and p < alpha and (ml.low > 1 or ml.high < 1):
            extra["p"] = p
            return "replicated", f"the interval across {j} {unit}s excludes 1", extra
        extra["p"] = min(x for x in (p, p_tost) if x is not None)
        if p_tost < alpha and _inside(t_low, t_high, math.exp(lo), math.exp(hi)):
            extra["p"] = p_tost
            mm = claim.margin or DEFAULT_DIFFERENCE_MARGIN
            return "contradicted", f"equivalent within {mm:.0%} across the {j} {unit}s (TOST)", extra
        return "inconclusive", f"the interval across the {unit}s includes 1: more {unit}s or less noise would " \
                               "decide it", extra
    if kind == "magnitude":
        blo, bhi = math.exp(lo), math.exp(hi)
        band_text = f"[{blo:.3g}, {bhi:.3g}]"
        p_rep = min(1.0, 2 * max(p_at(lo, "greater"), p_at(hi, "less")))
        p_con = min(1.0, 2 * min(p_at(lo, "less"), p_at(hi, "greater")))
        if p_rep < alpha and _inside(ml.low, ml.high, blo, bhi):
            extra["p"] = p_rep
            return "replicated", f"the interval across {j} {unit}s lies inside the paper's band {band_text}", extra
        if p_con < alpha and _disjoint(ml.low, ml.high, blo, bhi):
            extra["p"] = p_con
            return "contradicted", f"the interval across {j} {unit}s lies outside the paper's band {band_text}", extra
        extra["p"] = min(p_rep, p_con)
        return "inconclusive", f"the interval overlaps the edge of the paper's band {band_text}", extra
    mm = claim.margin
    p_rep = max(p_at(lo, "greater"), p_at(hi, "less"))
    p_con = min(1.0, 2 * min(p_at(lo, "less"), p_at(hi, "greater")))
    if p_rep < alpha and _inside(t_low, t_high, math.exp(lo), math.exp(hi)):
        extra["p"] = p_rep
        return "replicated", f"equivalent within {mm:.0%} across the {j} {unit}s (TOST)", extra
    if p_con < alpha and _disjoint(ml.low, ml.high, math.exp(lo), math.exp(hi)):
        extra["p"] = p_con
        return "contradicted", f"the interval across the {j} {unit}s lies outside the margin of {mm:.0%}", extra
    extra["p"] = min(p_rep, p_con)
    return "inconclusive", f"neither equivalent within {mm:.0%} nor outside it", extra


# --------------------------------------------------------------------------- trends


def _series(claim: Claim, sel: pd.DataFrame, configs: Mapping[str, Mapping[str, Any]], cids: list[str],
            arm: str) -> dict[str, tuple[list[float], list[float], list[str]]]:
    """Stratum (the other configuration keys) -> (levels, values, configuration ids) of one arm."""
    strata: dict[str, tuple[list[float], list[float], list[str]]] = {}
    for cid in cids:
        cfg = configs[cid]
        key = ",".join(f"{k}={v}" for k, v in sorted(cfg.items()) if k != claim.factor) or "all"
        vals = sel[(sel["config_id"] == cid) & (sel["arm"] == arm)]["value"].to_numpy(float)
        xs, ys, ids = strata.setdefault(key, ([], [], []))
        xs.extend([float(cfg[claim.factor])] * vals.size)
        ys.extend(vals.tolist())
        ids.append(cid)
    return strata


def _reps_per_level(xs: Sequence[float] | np.ndarray) -> int:
    _, counts = np.unique(np.asarray(xs), return_counts=True)
    return int(counts.min()) if counts.size else 0


def _judge_trend(claim: Claim, sel: pd.DataFrame, configs: Mapping[str, Mapping[str, Any]], cids: list[str],
                 arms: tuple[str, ...], alpha: float, networks: Mapping[str, str] | None = None, *,
                 family_size: int = 1, enforce: bool = True) -> tuple[str, str, dict[str, Any]]:
    series = {arm: _series(claim, sel, configs, cids, arm) for arm in arms}
    return trend_decision(claim, series, alpha, networks, family_size=family_size, enforce=enforce)


Series = Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[str]]]


def trend_decision(claim: Claim, series: Mapping[str, Series], alpha: float,
                   networks: Mapping[str, str] | None = None, *, family_size: int = 1,
                   enforce: bool = True) -> tuple[str, str, dict[str, Any]]:
    """Each arm's metric along ``claim.factor`` (``series``: arm -> series key -> (levels, values, configuration
    ids)). ``each`` scope: the Jonckheere-Terpstra test in every series (the other configuration keys fixed),
    each at alpha to replicate, one at alpha/k the other way to contradict. ``overall``: each network's pooled
    concordance (its series' Kendall S over their pairs), and the signed-rank test of the networks' concordances
    against 0, where 2/2^J < alpha/m (the network the unit)."""
    want = "greater" if claim.trend == "increasing" else "less"
    overall = claim.scope == "overall"
    need = min_n("trend", "overall" if overall else "each", "levels")
    tests: list[dict[str, Any]] = []
    for arm, strata in series.items():
        if not overall:
            for key in sorted(strata):
                xs, ys, ids = strata[key]
                res = stratified_trend([(np.asarray(xs), np.asarray(ys))], names=[key])
                tests.append({"arm": arm, "series": key, "n": _reps_per_level(xs),
                              "p": res.p if math.isfinite(res.p) else None,
                              "concordance": res.concordance if math.isfinite(res.concordance) else None,
                              "reason": res.reason})
            continue
        groups: dict[str, list[str]] = {}
        for key, (_, _, ids) in strata.items():
            groups.setdefault((networks or {}).get(ids[0], key), []).append(key)
        if enforce and min_p_free(len(groups)) >= alpha / max(family_size, 1):  # undecidable: say so at once
            tests.append({"arm": arm, "series": f"{len(groups)} networks", "n": 0, "networks": len(groups),
                          "concordances": [], "p": None, "concordance": None, "reason": "too few networks"})
            continue
        conc, n_min = [], []
        for net in sorted(groups):
            res = stratified_trend([(np.asarray(strata[s][0]), np.asarray(strata[s][1])) for s in groups[net]])
            if math.isfinite(res.concordance):
                conc.append(res.concordance)
            n_min.append(min(_reps_per_level(strata[s][0]) for s in groups[net]))
        tests.append({"arm": arm, "series": f"{len(conc)} networks", "n": min(n_min, default=0),
                      "networks": len(conc), "concordances": conc, "p": None,
                      "concordance": float(np.mean(conc)) if conc else None, "reason": None})
    k = len(tests)
    extra: dict[str, Any] = {"per_config": tuple(tests), "n": min((t["n"] for t in tests), default=0)}
    extra["value_text"] = "; ".join(f"{t['arm']} {t['series']}: concordance {t['concordance']:+.2f}"
                                    if t["concordance"] is not None else f"{t['arm']} {t['series']}: {t['reason']}"
                                    for t in tests[:6]) + (f"; and {k - 6} more" if k > 6 else "")
    few = [t for t in tests if overall and t["reason"] == "too few networks"]
    if enforce and extra["n"] < need.enforced and not few:
        extra["n_needed"] = need.enforced
        return "inconclusive", (f"inconclusive: {need.enforced} repetitions per arm at each level would decide it "
                                f"({extra['n']} here; {EVIDENCE})"), extra
    if overall:
        j = min((t["networks"] for t in tests), default=0)
        if j < 2 or (enforce and min_p_free(j) >= alpha / max(family_size, 1)):
            extra["networks_needed"] = networks_needed(alpha, family_size)
            return "inconclusive", (f"{j} networks cannot decide an overall trend: even with every network's "
                                    f"trend of one sign the signed-rank p is 2/2^{j} = {min_p_free(j):.3g}, not below "
                                    f"{alpha / max(family_size, 1):.3g}; {extra['networks_needed']} networks "
                                    "would"), extra
        for t in tests:
            c = np.asarray(t["concordances"], dtype=float)
            t["p"] = float(wilcoxon_paired(c, np.zeros(c.size)).p)
    for t in tests:
        side = t["concordance"] is not None and (t["concordance"] > 0 if want == "greater" else t["concordance"] < 0)
        t["replicates"] = t["p"] is not None and t["p"] < alpha and side
        t["contradicts"] = (t["p"] is not None and t["p"] < alpha / k and not side
                            and t["concordance"] not in (None, 0.0))
    rising = "rises" if want == "greater" else "falls"
    ps = [t["p"] for t in tests]
    if any(t["contradicts"] for t in tests):
        bad = [f"{t['arm']} ({t['series']})" for t in tests if t["contradicts"]]
        extra["p"] = min(1.0, k * min(t["p"] for t in tests if t["contradicts"]))
        return "contradicted", f"{', '.join(bad)} significantly {'falls' if want == 'greater' else 'rises'} " \
                               f"with {claim.factor}", extra
    if all(t["replicates"] for t in tests):
        extra["p"] = max(p for p in ps if p is not None)
        return "replicated", f"every arm{' and series' if not overall else ''} significantly {rising} with " \
                             f"{claim.factor}", extra
    got = [p for p in ps if p is not None]
    extra["p"] = min(got) if got else None
    return "inconclusive", f"not significant for {', '.join(t['arm'] + ' (' + t['series'] + ')' for t in tests if not t['replicates'])}" \
                           ": more repetitions or levels of the factor would decide it", extra


# --------------------------------------------------------------------------- not significant at the paper's n


def _judge_not_significant(claim: Claim, sel: pd.DataFrame, cids: list[str], arms: tuple[str, ...], alpha: float,
                          paper_n: int, configs: Mapping[str, Mapping[str, Any]] | None = None
                          ) -> tuple[str, str, dict[str, Any]]:
    """The paper's "H0 not rejected at its n": this run's test at the paper's design (its first ``paper_n``
    repetitions per arm, in block order) either rejects at alpha (at alpha/k over k configurations: contradicted)
    or not (replicated), with the power that test has at this run's noise stated: a non-rejection is evidence only
    to the size of change the test could have seen. Fewer repetitions than the paper's: a rejection still
    contradicts (at a smaller n), a non-rejection decides nothing. With ``claim.factor`` (and ``configs``): the
    trend test along it, per arm and series."""
    if claim.factor and configs is not None:
        return _not_significant_trend(claim, sel, configs, cids, arms, alpha, paper_n)
    k = len(cids)
    rows: list[dict[str, Any]] = []
    for cid in cids:
        a, b, paired = _pairs(sel[sel["config_id"] == cid], arms[0], arms[1])
        floor = attainable_p(paper_n, paired)
        if floor >= alpha / k:
            # the paper's design could not have rejected whatever the data: its "not significant" is no evidence,
            # and this run's test at that design can neither agree with it nor contradict it (DLBench's Wilcoxon
            # signed-rank test over 5 runs: smallest exact p 0.0625)
            design = "paired signed-rank" if paired else "Mann-Whitney"
            return "inconclusive", (
                f"no test at the paper's design can decide it: with {paper_n} repetitions per arm the {design} "
                f"test's smallest two-sided p is {floor:.3g}, not below {alpha / k:.3g}, so its 'not significant' "
                "held whatever the data (a non-rejection there is no evidence, and no rejection is possible)"), {
                "n": int(min(a.size, b.size)), "per_config": ()}
        n = int(min(a.size, b.size))
        use_n = min(n, paper_n)
        a_, b_ = a[:use_n], b[:use_n]
        p = _rank_p(a_, b_, paired) if use_n >= 2 else None
        hl = det.hl_ratio(a_, b_, paired=paired, conf=1 - alpha)
        noise = det.noise_of(a_, b_, paired)
        mde = det.mde_of(noise, paper_n, paper_n, paired, alpha) if noise is not None else None
        power5 = None
        if noise is not None and noise > 0 and paired and paper_n <= pw.SIM_MAX_N:
            power5 = pw.power_paired(math.log1p(DEFAULT_DIFFERENCE_MARGIN) / noise, paper_n, alpha)
        rows.append({"config_id": cid, "n": n, "n_used": use_n, "paired": paired, "p": p,
                     "estimate": hl.estimate, "low": hl.low, "high": hl.high, "mde": mde, "power_at_5pct": power5,
                     "rejects": p is not None and p < alpha / k})
    extra: dict[str, Any] = {"per_config": tuple(rows), "n": min((r["n_used"] for r in rows), default=0)}
    if len(rows) == 1:
        r = rows[0]
        extra.update(estimate=r["estimate"], low=r["low"], high=r["high"],
                     value_text=_value_text(r["estimate"], r["low"], r["high"], alpha, r["p"]))
    ps = [r["p"] for r in rows if r["p"] is not None]
    extra["p"] = min(1.0, k * min(ps)) if ps else None

    def power_text(r: Mapping[str, Any]) -> str:
        if r["mde"] is None:
            return "its power is unknown (no noise estimate)"
        if not math.isfinite(r["mde"]):
            out = f"at this run's noise the test at n = {paper_n} has power 80 % against no change of any size"
        else:
            out = f"at this run's noise the test at n = {paper_n} detects a change of {r['mde']:.1%} with power 80 %"
        if r["power_at_5pct"] is not None:
            out += f", and one of 5 % with power {r['power_at_5pct']:.0%}"
        return out

    bad = [r for r in rows if r["rejects"]]
    if bad:
        return "contradicted", (f"the test rejects at {alpha / k:.3g} in {', '.join(r['config_id'] for r in bad)} "
                                f"with {bad[0]['n_used']} repetitions per arm (the paper's n: {paper_n})"), extra
    short = [r for r in rows if r["n_used"] < paper_n]
    if short:
        extra["n_needed"] = paper_n
        return "inconclusive", (f"inconclusive: {paper_n} repetitions per arm would decide it (the paper's n; "
                                f"{min(r['n_used'] for r in short)} here, and a non-rejection at fewer says less than "
                                "the paper's)"), extra
    if not ps:
        return "inconclusive", "no test: fewer than two values per arm", extra
    return "replicated", (f"not rejected at the paper's n = {paper_n} (p = {min(ps):.3g}), as the paper found; "
                          + power_text(rows[0])), extra


def attainable_p(n: int, paired: bool) -> float:
    """The smallest two-sided p the kit's exact rank test can give with ``n`` untied repetitions per arm: 2/2^n
    paired (signed-rank), 2/C(2n, n) unpaired (Mann-Whitney); a design whose smallest p is not below the level
    cannot reject, so a "not significant" from it says nothing (and a normal approximation with ties must not
    seem to reject where the exact test cannot)."""
    if n < 1:
        return 1.0
    return min(1.0, 2.0 / 2.0 ** n) if paired else min(1.0, 2.0 / math.comb(2 * n, n))


def _not_significant_trend(claim: Claim, sel: pd.DataFrame, configs: Mapping[str, Mapping[str, Any]],
                           cids: list[str], arms: tuple[str, ...], alpha: float,
                           paper_n: int) -> tuple[str, str, dict[str, Any]]:
    tests: list[dict[str, Any]] = []
    for arm in arms:
        for key, (xs, ys, _) in sorted(_series(claim, sel, configs, cids, arm).items()):
            x, y = np.asarray(xs), np.asarray(ys)
            keep = np.zeros(x.size, dtype=bool)
            for level in np.unique(x):
                keep[np.flatnonzero(x == level)[:paper_n]] = True
            res = stratified_trend([(x[keep], y[keep])], names=[key])
            tests.append({"arm": arm, "series": key, "n": _reps_per_level(x[keep]),
                          "p": res.p if math.isfinite(res.p) else None,
                          "concordance": res.concordance if math.isfinite(res.concordance) else None})
    k = len(tests)
    ps = [t["p"] for t in tests if t["p"] is not None]
    extra: dict[str, Any] = {"per_config": tuple(tests), "n": min((t["n"] for t in tests), default=0),
                             "p": min(1.0, k * min(ps)) if ps else None,
                             "value_text": "; ".join(f"{t['arm']} {t['series']}: concordance {t['concordance']:+.2f}"
                                                     for t in tests[:6] if t["concordance"] is not None)}
    bad = [t for t in tests if t["p"] is not None and t["p"] < alpha / k]
    if bad:
        return "contradicted", f"a trend along {claim.factor} is significant at {alpha / k:.3g} in " + ", ".join(
            f"{t['arm']} ({t['series']})" for t in bad), extra
    if extra["n"] < paper_n:
        extra["n_needed"] = paper_n
        return "inconclusive", (f"inconclusive: {paper_n} repetitions per arm at each level would decide it (the "
                                f"paper's n; {extra['n']} here)"), extra
    return "replicated", f"no trend along {claim.factor} significant at the paper's n = {paper_n}", extra


# --------------------------------------------------------------------------- the interface kit.analysis.claims calls

# The ClaimVerdict fields every caller accepts; with_p=True adds FIELDS_WITH_P (the claim's p for Holm across the
# run's claims, the estimator's name, the networks an overall claim would need).
FIELDS = ("estimate", "low", "high", "value_text", "n", "n_needed", "per_config")
FIELDS_WITH_P = ("p", "estimator", "networks_needed")
Outcome = tuple[str, str, dict[str, Any]]


def _out(got: Outcome, with_p: bool) -> Outcome:
    verdict, reason, extra = got
    keep = FIELDS + (FIELDS_WITH_P if with_p else ())
    return verdict, reason, {k: v for k, v in extra.items() if k in keep}


def judge_each(claim: Claim, sel: pd.DataFrame, cids: list[str], arms: tuple[str, ...], alpha: float, *,
               enforce: bool = True, with_p: bool = False) -> Outcome:
    """Every matching configuration on its own (:func:`judge_cell`): all replicate -> replicated, one contradicts
    at alpha/k -> contradicted. ``with_p``: the caller's record has the fields FIELDS_WITH_P."""
    return _out(_judge_each(claim, sel, cids, arms, alpha, enforce=enforce), with_p)


def judge_overall(claim: Claim, sel: pd.DataFrame, cids: list[str], arms: tuple[str, ...], alpha: float,
                  networks: Mapping[str, str] | None = None, *, family_size: int = 1, enforce: bool = True,
                  with_p: bool = False) -> Outcome:
    """The configurations' networks as units (:func:`_judge_overall`; ``networks``: configuration id -> network,
    None: each configuration its own network)."""
    return _out(_judge_overall(claim, sel, cids, arms, alpha, networks, family_size=family_size, enforce=enforce),
                with_p)


def judge_trend(claim: Claim, sel: pd.DataFrame, configs: Mapping[str, Mapping[str, Any]], cids: list[str],
                arms: tuple[str, ...], alpha: float, networks: Mapping[str, str] | None = None, *,
                family_size: int = 1, enforce: bool = True, with_p: bool = False) -> Outcome:
    """Each arm along ``claim.factor`` (:func:`_judge_trend`)."""
    return _out(_judge_trend(claim, sel, configs, cids, arms, alpha, networks, family_size=family_size,
                             enforce=enforce), with_p)


def judge_not_significant(claim: Claim, sel: pd.DataFrame, cids: list[str], arms: tuple[str, ...], alpha: float,
                          paper_n: int, configs: Mapping[str, Mapping[str, Any]] | None = None, *,
                          with_p: bool = False) -> Outcome:
    """The paper's "not rejected at its n", judged by this run's test at that n (:func:`_judge_not_significant`)."""
    return _out(_judge_not_significant(claim, sel, cids, arms, alpha, paper_n, configs), with_p)


# --------------------------------------------------------------------------- the family of claims


@dataclass(frozen=True)
class Adjustment:
    """One claim after Holm's procedure over the run's tested claims."""

    verdict: str
    p_adjusted: float | None
    family_size: int
    note: str  # "" when the verdict stands as judged


def holm_claims(verdicts: Sequence[str], ps: Sequence[float | None], alpha: float,
                kinds: Sequence[str] | None = None) -> list[Adjustment]:
    """Holm over the claims with a p (those a test judged); a replicated or contradicted verdict stands only where
    its adjusted p is below alpha, else it becomes inconclusive with the note saying why. A not_significant claim's
    "replicated" is a non-rejection and is not turned by it (its "contradicted" is)."""
    tested = [p if v != "not testable" else None for v, p in zip(verdicts, ps, strict=True)]
    adj = holm(tested)
    m = sum(1 for p in tested if p is not None)
    out = []
    for i, (v, p_adj) in enumerate(zip(verdicts, adj, strict=True)):
        kind = kinds[i] if kinds is not None else ""
        rests_on_p = v == "contradicted" or (v == "replicated" and kind != "not_significant")
        if p_adj is not None and rests_on_p and not p_adj < alpha:
            out.append(Adjustment("inconclusive", p_adj, m, f"{v} at p = {tested[i]:.3g}, but not after Holm over the "
                                  f"{m} tested claims (adjusted p = {p_adj:.3g}, not below {alpha:g})"))
        else:
            out.append(Adjustment(v, p_adj, m if p_adj is not None else 0, ""))
    return out


Row = TypeVar("Row")


def adjust_claims(rows: Sequence[Row], alpha: float) -> list[Row]:
    """The rows (dataclasses with ``verdict``, ``reason``, ``kind``, ``p``, ``p_adjusted`` and ``family_size``:
    kit.analysis.claims.ClaimVerdict) with Holm applied over the tested claims of the run (:func:`holm_claims`)."""
    got = holm_claims([r.verdict for r in rows], [r.p for r in rows], alpha,  # type: ignore[attr-defined]
                      [r.kind for r in rows])  # type: ignore[attr-defined]
    out = []
    for r, a in zip(rows, got, strict=True):
        reason = r.reason + (f"; {a.note}" if a.note else "")  # type: ignore[attr-defined]
        out.append(dataclasses.replace(r, verdict=a.verdict, p_adjusted=a.p_adjusted,  # type: ignore[type-var]
                                       family_size=a.family_size, reason=reason))
    return out


def p_label(family_size: int) -> str:
    """How the ledger labels a claim's adjusted p (the hypotheses' table says "Holm over the hypotheses' family")."""
    return f"p (Holm over {family_size} claim{'s' if family_size != 1 else ''})" if family_size else "p"


# --------------------------------------------------------------------------- in words


def procedure_text(claim: Claim, alpha: float) -> str:
    need = min_n(claim.kind, claim.scope, "levels" if claim.kind == "trend" else
                 "networks" if claim.scope == "overall" else "paired").enforced
    floor = f"; no verdict below {need} repetitions per arm (simulated: {EVIDENCE.split(' (')[0]})"
    if claim.scope == "overall":
        scope = (f"per network the mean log median ratio of its configurations, then a t test and interval across "
                 f"the networks, only where 2/2^J < {alpha:g}/m for J networks")
    else:
        scope = "in each matching configuration (one contradicting at alpha/k suffices)"
    ratio = "the Hodges-Lehmann ratio A/B (exp of the pseudo-median of the per-block log ratios)"
    family = "; Holm across the run's tested claims"
    text = {
        "direction": f"two-sided rank test at {alpha:g} and the {1 - alpha:.0%} interval of {ratio} ({scope}); on "
                     "the paper's side of 1: replicated, on the other side: contradicted",
        "difference": f"two-sided rank test at {alpha:g} with {ratio} excluding 1 ({scope}): replicated; equivalent "
                      f"within {(claim.margin or DEFAULT_DIFFERENCE_MARGIN):.0%} (TOST, the {1 - 2 * alpha:.0%} "
                      "interval inside the margin): contradicted",
        "magnitude": f"the {1 - alpha:.0%} interval of {ratio} ({scope}) inside the paper's band: replicated, "
                     "outside it: contradicted",
        "no_difference": f"TOST at {alpha:g} with margin {claim.margin:.0%} on {ratio} ({scope}): replicated; the "
                         f"{1 - alpha:.0%} interval outside the margin: contradicted",
        "trend": f"Jonckheere-Terpstra test per arm at {alpha:g} along {claim.factor} "
                 + ("per network, then the signed-rank test of the networks' concordances across networks"
                    if claim.scope == "overall" else "in each series") + "; every one significant the paper's way: "
                 "replicated; one significant the other way: contradicted",
        "not_significant": f"the run's two-sided rank test at {alpha:g} at the paper's n; not rejected: replicated "
                           "(with the power it had), rejected: contradicted",
    }.get(claim.kind, "")
    return text + (floor if claim.kind != "not_significant" else "") + family
