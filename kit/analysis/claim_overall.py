"""An "overall" claim across networks: the network the unit, a t test and interval of the networks' log median
ratios (as kit.analysis.across does for hypotheses), decided only where even a distribution-free test of the J
networks could reach the level (kit.analysis.claim_tests' module docstring gives the procedures and their error
rates)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.special import stdtr, stdtrit

from kit.analysis.across import ConfigRatio, config_ratio, mean_log, min_p_free
from kit.analysis.claim_tests import (
    DEFAULT_DIFFERENCE_MARGIN,
    EVIDENCE,
    Evidence,
    Outcome,
    _disjoint,
    _fmt_ratio,
    _inside,
    _limits,
    _out,
    _side_ok,
    min_n,
    networks_needed,
)
from kit.claim_spec import Claim

# --------------------------------------------------------------------------- across networks


def _t_p(mean: float, se: float, df: int, shift: float, alternative: str) -> float:
    if math.isinf(shift):
        return 0.0 if (alternative == "greater") == (shift < 0) else 1.0
    t = (mean - shift) / se
    return float(stdtr(df, -t) if alternative == "greater" else stdtr(df, t))


def _judge_overall(claim: Claim, sel: pd.DataFrame, cids: list[str], arms: tuple[str, ...], alpha: float,
                   networks: Mapping[str, str] | None = None, *, family_size: int = 1,
                   enforce: bool = True) -> tuple[str, str, Evidence]:
    ratios = []
    for cid in cids:
        d = sel[sel["config_id"] == cid]
        va, vb = d[d["arm"] == arms[0]]["value"].to_numpy(float), d[d["arm"] == arms[1]]["value"].to_numpy(float)
        if va.size and vb.size:
            ratios.append(config_ratio(cid, (networks or {}).get(cid, cid), "", va, vb))
    return overall_decision(claim, ratios, alpha, by_network=bool(networks), family_size=family_size,
                            enforce=enforce)


def overall_decision(claim: Claim, ratios: Sequence[ConfigRatio], alpha: float, *, by_network: bool = True,
                     family_size: int = 1, enforce: bool = True) -> tuple[str, str, Evidence]:
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
    extra: Evidence = {"per_config": tuple(per), "n": j, "networks": tuple(names),
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
    extra |= Evidence(low=ml.low, high=ml.high, value_text=_fmt_ratio(ml.ratio, ml.low, ml.high)
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


def judge_overall(claim: Claim, sel: pd.DataFrame, cids: list[str], arms: tuple[str, ...], alpha: float,
                  networks: Mapping[str, str] | None = None, *, family_size: int = 1, enforce: bool = True,
                  with_p: bool = False) -> Outcome:
    """The configurations' networks as units (:func:`_judge_overall`; ``networks``: configuration id -> network,
    None: each configuration its own network)."""
    return _out(_judge_overall(claim, sel, cids, arms, alpha, networks, family_size=family_size, enforce=enforce),
                with_p)
