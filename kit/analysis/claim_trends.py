"""A claim along a factor (``kind = "trend"``: Jonckheere-Terpstra per arm, stratified by the other keys) and a
claim that the paper's test found nothing (``kind = "not_significant"``: this run's test at the paper's n, with its
power stated); kit.analysis.claim_tests' module docstring gives the procedures and their error rates."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kit.analysis import power_cache as pc
from kit.analysis.across import min_p_free
from kit.analysis.claim_tests import (
    DEFAULT_DIFFERENCE_MARGIN,
    EVIDENCE,
    Evidence,
    Outcome,
    _out,
    _pairs,
    _rank_p,
    _value_text,
    min_n,
    networks_needed,
)
from kit.claim_spec import Claim
from kit.stats import detectability as det
from kit.stats import power as pw
from kit.stats import stratified_trend, wilcoxon_paired

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
                 family_size: int = 1, enforce: bool = True) -> tuple[str, str, Evidence]:
    series = {arm: _series(claim, sel, configs, cids, arm) for arm in arms}
    return trend_decision(claim, series, alpha, networks, family_size=family_size, enforce=enforce)


Series = Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[str]]]


def trend_decision(claim: Claim, series: Mapping[str, Series], alpha: float,
                   networks: Mapping[str, str] | None = None, *, family_size: int = 1,
                   enforce: bool = True) -> tuple[str, str, Evidence]:
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
    extra: Evidence = {"per_config": tuple(tests), "n": min((t["n"] for t in tests), default=0)}
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
                          ) -> tuple[str, str, Evidence]:
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
        mde = pc.mde_of(noise, paper_n, paper_n, paired, alpha) if noise is not None else None
        power5 = None
        if noise is not None and noise > 0 and paired and paper_n <= pw.SIM_MAX_N:
            power5 = pc.power_paired(math.log1p(DEFAULT_DIFFERENCE_MARGIN) / noise, paper_n, alpha)
        rows.append({"config_id": cid, "n": n, "n_used": use_n, "paired": paired, "p": p,
                     "estimate": hl.estimate, "low": hl.low, "high": hl.high, "mde": mde, "power_at_5pct": power5,
                     "rejects": p is not None and p < alpha / k})
    extra: Evidence = {"per_config": tuple(rows), "n": min((r["n_used"] for r in rows), default=0)}
    if len(rows) == 1:
        r = rows[0]
        extra |= Evidence(estimate=r["estimate"], low=r["low"], high=r["high"],
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
                           paper_n: int) -> tuple[str, str, Evidence]:
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
    extra: Evidence = {"per_config": tuple(tests), "n": min((t["n"] for t in tests), default=0),
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
