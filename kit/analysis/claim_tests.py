"""The statistical procedures that judge one claim on a run's values (kit.analysis.claims decides whether a claim
may be judged at all: its conditions, its configurations, its metric; this module says how).

The quantity: the Hodges-Lehmann ratio A/B (kit.stats.detectability.HLRatio): exp of the pseudo-median of the
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
* not_significant: the run's test at the paper's n (:func:`kit.analysis.claim_trends.judge_not_significant`).

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
inconclusive); :func:`kit.analysis.claim_family.adjust_claims` applies Holm across the tested claims of a run and turns a verdict whose
adjusted p is not below alpha into "inconclusive", saying so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import pandas as pd

from kit.analysis import power_cache as pc
from kit.analysis.across import min_p_free
from kit.claim_spec import Claim
from kit.stats import MIN_N_FOR_TESTS, mann_whitney, wilcoxon_paired
from kit.stats import detectability as det

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
        return pc.n_to_detect(noise, threshold, paired, alpha)
    return pc.n_needed(noise, threshold, paired, alpha)


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
               enforce: bool = True) -> tuple[str, str, Evidence]:
    k = len(cids)
    rows = []
    for cid in cids:
        a, b, paired = _pairs(sel[sel["config_id"] == cid], arms[0], arms[1])
        rows.append(judge_cell(claim, cid, a, b, paired, alpha, k, enforce=enforce))
    extra: Evidence = {"per_config": tuple(rows), "n": min((r["n"] for r in rows), default=0),
                             "estimator": det.HL_RATIO_TEXT}
    if len(rows) == 1:
        r = rows[0]
        extra |= Evidence(estimate=r["estimate"], low=r["low"], high=r["high"],
                     value_text=_value_text(r["estimate"], r["low"], r["high"], alpha,
                                            r["p"] if claim.kind in ("direction", "difference") else None))
    else:
        ests = [r["estimate"] for r in rows if r["estimate"] is not None and r["estimate"] > 0]
        gm = float(np.exp(np.mean(np.log(ests)))) if ests else None
        extra |= Evidence(estimate=gm, value_text=(f"Hodges-Lehmann ratios {min(ests):.3g} to {max(ests):.3g} over "
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


# --------------------------------------------------------------------------- the interface kit.analysis.claims calls

# The ClaimVerdict fields every caller accepts; with_p=True adds FIELDS_WITH_P (the claim's p for Holm across the
# run's claims, the estimator's name, the networks an overall claim would need).
FIELDS = ("estimate", "low", "high", "value_text", "n", "n_needed", "per_config")
FIELDS_WITH_P = ("p", "estimator", "networks_needed")


class Evidence(TypedDict, total=False):
    """What a procedure found, filled step by step as it decides: each key a ClaimVerdict field (kit.analysis.
    claim_records) the verdict carries, except ``networks`` (the networks' names, which stay in per_config). A
    TypedDict, not a record, because it is the keyword contract with ClaimVerdict: ``**evidence`` is checked."""

    per_config: tuple[Mapping[str, Any], ...]  # one JSON row per configuration, network or series
    n: int
    estimate: float | None
    low: float | None
    high: float | None
    value_text: str
    n_needed: int | None
    p: float | None
    estimator: str
    networks_needed: int | None
    networks: tuple[str, ...]


Outcome = tuple[str, str, Evidence]


def _out(got: Outcome, with_p: bool) -> Outcome:
    """The evidence a caller's record accepts: FIELDS, and FIELDS_WITH_P where ``with_p``."""
    verdict, reason, extra = got
    kept = extra.copy()
    kept.pop("networks", None)
    if not with_p:
        kept.pop("p", None)
        kept.pop("estimator", None)
        kept.pop("networks_needed", None)
    return verdict, reason, kept


def judge_each(claim: Claim, sel: pd.DataFrame, cids: list[str], arms: tuple[str, ...], alpha: float, *,
               enforce: bool = True, with_p: bool = False) -> Outcome:
    """Every matching configuration on its own (:func:`judge_cell`): all replicate -> replicated, one contradicts
    at alpha/k -> contradicted. ``with_p``: the caller's record has the fields FIELDS_WITH_P."""
    return _out(_judge_each(claim, sel, cids, arms, alpha, enforce=enforce), with_p)
