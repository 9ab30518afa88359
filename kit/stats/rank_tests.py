"""The two-sample rank tests the design calls for, each chosen the way R's ``wilcox.test`` chooses.

Every result records what is needed to recompute it (method, exact or asymptotic, ties, zeros, continuity
correction, the scipy call). Exact-versus-asymptotic choices follow R so an artifact evaluator can check any
number in R. Fligner–Killeen (:func:`spreads_differ`) decides between Mann–Whitney and Brunner–Munzel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps
from scipy.special import comb

from kit.stats.common import EXACT_MAX_N, AsDict, check_alternative, check_level, check_pair, check_sample
from kit.stats.ranks import superiority_counts


@dataclass(frozen=True)
class TestResult(AsDict):
    """One hypothesis test with everything needed to recompute it (e.g. in R)."""

    __test__ = False  # not a pytest test class

    method: str
    statistic: float
    statistic_name: str
    p: float
    alternative: str  # "greater": a tends to be larger than b
    n_a: int
    n_b: int
    n_pairs: int | None
    n_used: int  # observations entering the statistic (paired: non-zero differences)
    exact: bool
    method_detail: str
    zero_method: str | None
    ties: bool
    ties_handling: str
    continuity_correction: bool
    call: str
    details: dict[str, float] = field(default_factory=dict)
    note: str | None = None


class _SignedRankCommon(TypedDict):
    """The fields of a signed-rank TestResult that do not depend on whether any difference is non-zero."""

    method: str
    alternative: str
    n_a: int
    n_b: int
    n_pairs: int
    n_used: int
    zero_method: str
    ties: bool
    ties_handling: str


def wilcoxon_paired(a: ArrayLike, b: ArrayLike, alternative: str = "two-sided") -> TestResult:
    """Wilcoxon signed-rank test on d = a − b, chosen explicitly the way R does.

    Zero differences are dropped (Wilcoxon's convention, R's and scipy's
    ``zero_method='wilcox'``). Exact null distribution when fewer than 50
    differences remain and there are neither ties nor zeros; otherwise the normal
    approximation with tie-corrected variance and continuity correction. scipy's
    ``method='auto'`` would differ: exact up to n = 50, a permutation test for
    n <= 13 with ties or zeros, and no continuity correction by default.
    :func:`hodges_lehmann` (paired) follows the same rule for zeros and for exact
    versus normal, so its interval excludes 0 exactly when this test rejects.
    """
    where = "stats.wilcoxon_paired"
    x, y = check_pair(a, b, where=where)
    alternative = check_alternative(alternative, where)
    d = x - y
    nz = d[d != 0]
    zeros = int(d.size - nz.size)
    ties = bool(np.unique(np.abs(nz)).size < nz.size)
    common: _SignedRankCommon = {
        "method": "wilcoxon signed-rank",
        "alternative": alternative,
        "n_a": int(x.size),
        "n_b": int(y.size),
        "n_pairs": int(d.size),
        "n_used": int(nz.size),
        "zero_method": f"wilcox: {ZERO_RULE}",
        "ties": ties,
        "ties_handling": "average ranks of |d|; tie-corrected variance in the normal approximation",
    }
    if nz.size == 0:
        return TestResult(
            statistic=math.nan,
            statistic_name="none",
            p=1.0,
            exact=True,
            method_detail="degenerate",
            continuity_correction=False,
            call="none",
            details={"zeros": zeros},
            note="all paired differences are zero: every sign flip gives the same data, so p = 1",
            **common,
        )
    exact = nz.size <= EXACT_MAX_N and not ties and zeros == 0
    if exact:
        res = sps.wilcoxon(nz, alternative=alternative, method="exact")
        call = f"scipy.stats.wilcoxon(d[d != 0], alternative={alternative!r}, method='exact')"
    else:
        res = sps.wilcoxon(nz, alternative=alternative, method="asymptotic", correction=True)
        call = f"scipy.stats.wilcoxon(d[d != 0], alternative={alternative!r}, method='asymptotic', correction=True)"
    ranks = sps.rankdata(np.abs(nz))
    details = {"r_plus": float(ranks[nz > 0].sum()), "r_minus": float(ranks[nz < 0].sum()), "zeros": zeros}
    if hasattr(res, "zstatistic"):
        details["z"] = float(res.zstatistic)
    return TestResult(
        statistic=float(res.statistic),
        statistic_name="min(R+, R-)" if alternative == "two-sided" else "R+ (R's V)",
        p=float(res.pvalue),
        exact=exact,
        method_detail="exact" if exact else "asymptotic",
        continuity_correction=not exact,
        call=call,
        details=details,
        **common,
    )


ZERO_RULE = (
    "zero differences dropped before ranking (Wilcoxon's convention; R's wilcox.test, scipy's "
    "zero_method='wilcox'), in the signed-rank test and in the Hodges-Lehmann interval alike"
)


def mann_whitney(a: ArrayLike, b: ArrayLike, alternative: str = "two-sided") -> TestResult:
    """Mann–Whitney U test, exact when both arms have fewer than 50 values and no ties (R's rule).

    Otherwise the normal approximation with tie-corrected variance and continuity
    correction. scipy's ``method='auto'`` is exact only when an arm has <= 8 values.
    """
    where = "stats.mann_whitney"
    x = check_sample(a, name="a", where=where)
    y = check_sample(b, name="b", where=where)
    alternative = check_alternative(alternative, where)
    ties = bool(np.unique(np.concatenate([x, y])).size < x.size + y.size)
    exact = x.size <= EXACT_MAX_N and y.size <= EXACT_MAX_N and not ties
    method = "exact" if exact else "asymptotic"
    res = sps.mannwhitneyu(x, y, alternative=alternative, method=method, use_continuity=True)
    u_a = float(res.statistic)
    return TestResult(
        method="mann-whitney u",
        statistic=u_a,
        statistic_name="U of a = #(a > b) + 0.5 #(a = b) (R's W)",
        p=float(res.pvalue),
        alternative=alternative,
        n_a=int(x.size),
        n_b=int(y.size),
        n_pairs=None,
        n_used=int(x.size + y.size),
        exact=exact,
        method_detail=method,
        zero_method=None,
        ties=ties,
        ties_handling="mid-ranks; tie-corrected variance in the normal approximation",
        continuity_correction=not exact,
        call=f"scipy.stats.mannwhitneyu(a, b, alternative={alternative!r}, method={method!r}, use_continuity=True)",
        details={"u_a": u_a, "u_b": float(x.size * y.size) - u_a},
    )


def brunner_munzel(a: ArrayLike, b: ArrayLike, alternative: str = "two-sided") -> TestResult:
    """Brunner–Munzel test of P(a < b) = P(a > b) without assuming equal spreads (t approximation).

    When the arms do not overlap at all the statistic is infinite and scipy's p is
    NaN; then p is the exact permutation probability of a split at least that
    extreme (Neubert & Brunner 2007's permutation version, written here in closed
    form: one labelling in C(m+n, m) separates the arms that way). All values
    equal: p = 1 for the same reason.
    """
    where = "stats.brunner_munzel"
    x = check_sample(a, name="a", where=where, min_n=2)
    y = check_sample(b, name="b", where=where, min_n=2)
    alternative = check_alternative(alternative, where)
    m, n = int(x.size), int(y.size)
    gt, lt, eq = superiority_counts(x, y)
    ties = bool(np.unique(np.concatenate([x, y])).size < m + n)
    p_hat = (lt + 0.5 * eq) / (m * n)  # scipy's and R's estimate P(a < b) + 0.5 P(a = b)
    call = f"scipy.stats.brunnermunzel(a, b, alternative={alternative!r}, distribution='t')"
    note = None
    if gt == m * n or lt == m * n:
        s = np.sort(np.concatenate([x, y]))
        a_high = gt == m * n
        # the opposite separation is possible unless ties straddle its boundary
        opposite = bool(s[m - 1] < s[m]) if a_high else bool(s[n - 1] < s[n])
        favoured = "greater" if a_high else "less"
        one = 1.0 / float(comb(m + n, m))
        if alternative == "two-sided":
            p = min(1.0, (1 + opposite) * one)
        else:
            p = one if alternative == favoured else 1.0
        stat, detail, exact = (-math.inf if a_high else math.inf), "permutation (complete separation)", True
        call = "closed form: 1 / C(m+n, m) per separating labelling"
        note = "arms do not overlap: Brunner-Munzel variance is zero, p from the permutation distribution"
    elif np.ptp(np.concatenate([x, y])) == 0:
        stat, p, detail, exact, call = math.nan, 1.0, "degenerate", True, "none"
        note = "all values equal: every relabelling gives the same data, so p = 1"
    else:
        res = sps.brunnermunzel(x, y, alternative=alternative, distribution="t")
        stat, p, detail, exact = float(res.statistic), float(res.pvalue), "t approximation", False
    return TestResult(
        method="brunner-munzel",
        statistic=stat,
        statistic_name="W_BF (positive when b tends to be larger, scipy's sign)",
        p=p,
        alternative=alternative,
        n_a=m,
        n_b=n,
        n_pairs=None,
        n_used=m + n,
        exact=exact,
        method_detail=detail,
        zero_method=None,
        ties=ties,
        ties_handling="mid-ranks (placements)",
        continuity_correction=False,
        call=call,
        details={"p_hat": p_hat},
        note=note,
    )


class SpreadsEvidence(TypedDict):
    """What :func:`spreads_differ` saw: the JSON shape a Comparison's ``spreads`` carries into analysis.json."""

    method: str
    alpha: float
    mad_a: float
    mad_b: float
    iqr_a: float
    iqr_b: float
    statistic: float | None
    p: float | None
    differ: bool
    reason: str | None


def spreads_differ(a: ArrayLike, b: ArrayLike, alpha: float = 0.05) -> tuple[bool, SpreadsEvidence]:
    """Fligner–Killeen test (median-centred) of equal spreads, with the evidence.

    Fligner–Killeen because it is rank-based like the tests it chooses between
    and was among the few tests that kept their level and power under
    non-normal, skewed data in Conover, Johnson & Johnson (1981); trial times
    are typically right-skewed. Two constant arms count as equal spread.
    """
    where = "stats.spreads_differ"
    x = check_sample(a, name="a", where=where, min_n=2)
    y = check_sample(b, name="b", where=where, min_n=2)
    alpha = check_level(alpha, "alpha", where)
    mads = float(sps.median_abs_deviation(x)), float(sps.median_abs_deviation(y))
    iqrs = float(sps.iqr(x)), float(sps.iqr(y))

    def evidence(statistic: float | None, p: float | None, differ: bool, reason: str | None) -> SpreadsEvidence:
        return {"method": "Fligner-Killeen (scipy.stats.fligner, center='median')", "alpha": alpha,
                "mad_a": mads[0], "mad_b": mads[1], "iqr_a": iqrs[0], "iqr_b": iqrs[1],
                "statistic": statistic, "p": p, "differ": differ, "reason": reason}

    if np.ptp(x) == 0 and np.ptp(y) == 0:
        return False, evidence(None, None, False, "both arms constant: equal (zero) spread")
    res = sps.fligner(x, y, center="median")
    differ = bool(res.pvalue < alpha)
    return differ, evidence(float(res.statistic), float(res.pvalue), differ, None)
