"""Statistics for "is framework A faster than B, by how much, and can I trust that?".

Pure functions over arrays of per-trial measurements: descriptives, normality
diagnostics, the rank tests the design calls for, Holm's correction, outlier
classification and drift. Every test result records what is needed to
recompute it (method, exact or asymptotic, ties, zeros, continuity correction,
the scipy call). Exact-versus-asymptotic choices follow R's ``wilcox.test`` so
an artifact evaluator can check any number in R. Effect sizes, the unpaired
Hodges–Lehmann shift and the ratio of medians live in
:mod:`kit.analysis.effects` and are re-exported here; the paired shift is
here, beside the signed-rank test whose rule for zero differences it shares.
Trend tests across an ordered factor (batch size) and paired ratios
(throughput of two strategies) serve the study-specific analyses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps
from scipy.special import comb
from statsmodels.stats.diagnostic import lilliefors

from kit.analysis import effects as _effects
from kit.analysis.effects import (
    ALTERNATIVES,
    EXACT_MAX_N,
    MAX_PAIRWISE,
    Effect,
    Ratio,
    Shift,
    _AsDict,
    _check_alternative,
    _check_level,
    _check_pair,
    _check_pairwise_size,
    _check_sample,
    _exact_rank,
    _signed_rank_pmf,
    _superiority_counts,
    _tie_sum,
    cliffs_delta,
    ratio_of_medians,
    vargha_delaney_a12,
)
from kit.errors import AnalysisError

__all__ = [
    "ALTERNATIVES",
    "MIN_N_FOR_TESTS",
    "Comparison",
    "Descriptives",
    "Effect",
    "Normality",
    "NormalityTest",
    "Outliers",
    "PairedRatio",
    "PairedShift",
    "Ratio",
    "Shift",
    "StratifiedTrend",
    "TestResult",
    "Trend",
    "brunner_munzel",
    "cliffs_delta",
    "compare_two",
    "describe",
    "hodges_lehmann",
    "holm",
    "linear_trend",
    "mann_whitney",
    "normality",
    "paired_log_ratio",
    "ratio_of_medians",
    "spreads_differ",
    "stratified_trend",
    "tukey_outliers",
    "vargha_delaney_a12",
    "wilcoxon_paired",
]

MIN_N_FOR_TESTS = 10
NO_TEST_REASON = f"fewer than {MIN_N_FOR_TESTS} samples per arm: descriptives only"
QUANTILES = "linear interpolation (numpy default; R type 7)"
# Plain KS with the mean and sd estimated from the same sample is CONSERVATIVE: the fitted normal
# lies closer to the data than the true one, so D is small and Kolmogorov's null distribution (for a
# fully specified F) gives large p. Simulated in tests/test_normality_labels.py (normal samples,
# n = 99): it rejects 0 of 2,000 at 0.05 (3 of 20,000 in a longer run), Lilliefors 96 of 2,000 (4.8 %).
KS_PLAIN = (
    "plain KS with estimated mean and sd (conservative: almost never rejects normal data at 0.05, "
    "because the null distribution assumes known parameters; Lilliefors corrects this)"
)
# The paper's numbers (p < 1e-10 for every variable, seed 000) are what KS against the STANDARD normal
# gives when the data are not standardised: timings of seconds, temperatures of tens of degrees lie
# far from N(0, 1), so it rejects any such sample whatever its shape. Shown so a reader sees why.
KS_PAPER = "the paper's test (invalid: compares with N(0,1))"


# --------------------------------------------------------------------------- descriptives


@dataclass(frozen=True)
class Descriptives(_AsDict):
    """Summary of one arm. Quantiles use numpy's default linear interpolation (R type 7)."""

    n: int
    mean: float
    sd: float  # ddof=1; NaN for n = 1
    median: float
    mad: float  # raw median absolute deviation from the median
    mad_normal: float  # mad × 1/Φ⁻¹(3/4) ≈ 1.4826: estimates sd for normal data
    q1: float
    q3: float
    iqr: float
    cv: float  # sd / mean; NaN when the mean is 0
    min: float
    max: float
    olympic_mean: float  # MLPerf: mean without the single lowest and highest value; NaN for n < 3
    quantile_method: str = QUANTILES


def describe(x: ArrayLike) -> Descriptives:
    """Location, spread and the MLPerf olympic mean of one arm."""
    v = _check_sample(x, name="x", where="stats.describe")
    n = int(v.size)
    mean = float(np.mean(v))
    sd = float(np.std(v, ddof=1)) if n > 1 else math.nan
    q1, median, q3 = (float(q) for q in np.percentile(v, [25, 50, 75]))
    # Olympic mean written here: scipy.stats.trim_mean trims a proportion, not exactly one value per end.
    olympic = float(np.mean(np.sort(v)[1:-1])) if n >= 3 else math.nan
    return Descriptives(
        n=n,
        mean=mean,
        sd=sd,
        median=median,
        mad=float(sps.median_abs_deviation(v)),
        mad_normal=float(sps.median_abs_deviation(v, scale="normal")),
        q1=q1,
        q3=q3,
        iqr=q3 - q1,
        cv=sd / mean if mean != 0 else math.nan,
        min=float(v.min()),
        max=float(v.max()),
        olympic_mean=olympic,
    )


# --------------------------------------------------------------------------- normality


@dataclass(frozen=True)
class NormalityTest(_AsDict):
    """One goodness-of-fit test against the normal family; NaN with a reason when undefined."""

    method: str
    statistic: float
    p: float
    reason: str | None = None


@dataclass(frozen=True)
class Normality(_AsDict):
    """Why rank tests: the valid normality diagnostics of one arm, and the paper's invalid one beside them."""

    n: int
    shapiro_wilk: NormalityTest
    lilliefors: NormalityTest
    ks_plain: NormalityTest
    ks_paper: NormalityTest


def normality(x: ArrayLike) -> Normality:
    """Shapiro–Wilk, Lilliefors, plain KS with estimated mean and sd, and the paper's KS against N(0, 1).

    The last is what Florencio et al. (seed 000) report (p < 1e-10 for every variable): it tests
    whether the values come from the standard normal, which no timing or temperature does, so it
    rejects every sample and says nothing about the shape. It is computed whenever n >= 3, even
    for constant data, because it needs no spread; it is shown, never used to choose a test.
    """
    v = _check_sample(x, name="x", where="stats.normality")
    n = int(v.size)
    sw_name = "Shapiro-Wilk (scipy.stats.shapiro)"
    lf_name = "Lilliefors (statsmodels lilliefors, dist='norm', pvalmethod='table')"
    ks_name = f"{KS_PLAIN}: scipy.stats.kstest against N(mean, sd with ddof=1)"
    paper_name = f"{KS_PAPER}: scipy.stats.kstest(x, 'norm'), no standardising"
    if n < 3:
        undefined = f"n = {n} < 3: normality tests are undefined"
        return Normality(n, *(NormalityTest(m, math.nan, math.nan, undefined)
                              for m in (sw_name, lf_name, ks_name, paper_name)))
    paper = sps.kstest(v, "norm")
    ks_paper = NormalityTest(paper_name, float(paper.statistic), float(paper.pvalue))
    if np.ptp(v) == 0:
        undefined = "constant data: zero spread, normality tests are undefined"
        sw_u, lf_u, ks_u = (NormalityTest(m, math.nan, math.nan, undefined) for m in (sw_name, lf_name, ks_name))
        return Normality(n, sw_u, lf_u, ks_u, ks_paper)
    sw = sps.shapiro(v)
    if n < 4:
        lf = NormalityTest(lf_name, math.nan, math.nan, f"n = {n} < 4: statsmodels' Lilliefors needs 4 values")
    else:
        stat, p = lilliefors(v, dist="norm", pvalmethod="table")
        lf = NormalityTest(lf_name, float(stat), float(p))
    ks = sps.kstest(v, "norm", args=(float(np.mean(v)), float(np.std(v, ddof=1))))
    return Normality(
        n,
        NormalityTest(sw_name, float(sw.statistic), float(sw.pvalue)),
        lf,
        NormalityTest(ks_name, float(ks.statistic), float(ks.pvalue)),
        ks_paper,
    )


# --------------------------------------------------------------------------- tests


@dataclass(frozen=True)
class TestResult(_AsDict):
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
    x, y = _check_pair(a, b, where=where)
    alternative = _check_alternative(alternative, where)
    d = x - y
    nz = d[d != 0]
    zeros = int(d.size - nz.size)
    ties = bool(np.unique(np.abs(nz)).size < nz.size)
    common: dict[str, Any] = {
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


@dataclass(frozen=True)
class PairedShift(Shift):
    """A paired Hodges–Lehmann shift; an end is open when the signed-rank test rejects that shift itself.

    On integer data (temperatures) an end is often a Walsh average at which |d − end| ties, which
    changes the rank statistic there: the shifts the test does not reject are then (low, high] or
    [low, high), and 0 lies in the interval exactly when the test does not reject.
    """

    low_open: bool = False
    high_open: bool = False


def _rejects_shift(nz: np.ndarray, shift: float, z_crit: float) -> bool:
    """Does the normal-approximation signed-rank test (zeros dropped, ties, continuity) reject this shift?

    The statistic R's wilcox.test inverts for its interval; at shift 0 it is :func:`wilcoxon_paired`'s.
    """
    xd = nz - shift
    xd = xd[xd != 0]
    nx = xd.size
    if nx == 0:
        return False
    ranks = sps.rankdata(np.abs(xd))
    dz = float(ranks[xd > 0].sum()) - nx * (nx + 1) / 4.0
    var = nx * (nx + 1) * (2 * nx + 1) / 24.0 - _tie_sum(np.abs(xd)) / 48.0
    if var <= 0:
        return False
    return bool(abs(dz - 0.5 * np.sign(dz)) / math.sqrt(var) > z_crit)


def hodges_lehmann(a: ArrayLike, b: ArrayLike, *, paired: bool, conf: float = 0.95) -> Shift:
    """Hodges–Lehmann shift of a relative to b with its CI; paired, under the signed-rank test's rules.

    Unpaired: :func:`kit.analysis.effects.hodges_lehmann_unpaired` (median of all a_i − b_j,
    Mann–Whitney interval). Paired: the interval is the inversion of
    :func:`wilcoxon_paired`, so it uses the test's rules: zero differences are dropped
    first (the estimate is the median of the Walsh averages of the n' non-zero
    differences), the interval is exact only where the test is (n' < 50, no ties, no
    zeros: R's ``qsignrank`` rank), else it inverts the same normal approximation
    (variance with the ties of the non-zero differences, continuity correction), and
    an end that the test itself rejects is open (:class:`PairedShift`). Keeping the
    zeros in the Walsh averages while the test drops them (Hollander & Wolfe's
    interval beside Wilcoxon's test) let the two disagree on integer data such as
    temperatures, and put the interval a whole step of the data away from R's. Now
    the interval holds 0 exactly when the two-sided test does not reject at
    1 − conf (where conf is achievable; else the note says so and ``achieved_conf``
    what it is), and its ends are R's ``wilcox.test(a, b, paired=TRUE, conf.int=TRUE)``.
    """
    if not paired:
        return _effects.hodges_lehmann_unpaired(a, b, conf=conf)
    where = "stats.hodges_lehmann"
    conf = _check_level(conf, "conf", where)
    alpha = 1.0 - conf
    x, y = _check_pair(a, b, where=where)
    d = x - y
    nz = d[d != 0]
    zeros = int(d.size - nz.size)
    n = int(nz.size)
    total = n * (n + 1) // 2
    _check_pairwise_size(total, where)
    definition = f"median of Walsh averages (d_i + d_j)/2, i <= j, of the non-zero d = a - b ({ZERO_RULE})"
    if n == 0:
        return PairedShift(estimate=0.0, low=0.0, high=0.0, conf=conf, achieved_conf=math.nan, paired=True,
                           n_a=int(x.size), n_b=int(y.size), method="degenerate", ties=False, zeros=zeros, rank=0,
                           definition=definition,
                           note="all paired differences are zero: the shift is 0 and no interval can be formed")
    ties = bool(np.unique(np.abs(nz)).size < nz.size)
    exact = n <= EXACT_MAX_N and not ties and zeros == 0  # the test's condition (wilcoxon_paired)
    z_crit = float(sps.norm.ppf(1.0 - alpha / 2.0))
    if exact:
        k, achieved = _exact_rank(_signed_rank_pmf(n), alpha)
        method = "exact"
    else:
        # Between neighbouring Walsh averages |d' - shift| ties only where the d' are equal, so those
        # ties enter the variance, and T+ is the number of Walsh averages above the shift: k is the
        # smallest rank whose continuity-corrected statistic falls inside the critical value.
        sd = math.sqrt(max(n * (n + 1) * (2 * n + 1) / 24.0 - _tie_sum(nz) / 48.0, 0.0))
        k = math.floor(total / 2.0 - 0.5 - z_crit * sd) + 1
        achieved = math.nan
        if k < 1:  # even T+ = 0 or M is not significant: [min, max] is the widest, at a lower level (R too)
            k = 1
            achieved = float(2.0 * sps.norm.cdf((total / 2.0 - 0.5) / sd) - 1.0) if sd > 0 else 0.0
        method = "normal approximation (inverted test)"
    k = min(k, (total + 1) // 2)
    i, j = np.triu_indices(n)
    values = (nz[i] + nz[j]) / 2.0
    part = np.partition(values, sorted({k - 1, total - k, (total - 1) // 2, total // 2}))
    low, high = float(part[k - 1]), float(part[total - k])
    # An exact interval's ends are never rejected shifts; a normal one's can be, where ties change T+.
    low_open = not exact and math.isnan(achieved) and _rejects_shift(nz, low, z_crit)
    high_open = not exact and math.isnan(achieved) and _rejects_shift(nz, high, z_crit)
    notes = []
    if zeros:
        notes.append(f"{zeros} zero difference(s) dropped, as the signed-rank test drops them")
    if ties or zeros:
        notes.append("ties or zero differences present: the interval's coverage is approximate")
    if low_open or high_open:
        notes.append("the test rejects the shift at the " + " and ".join(
            e for e, o in (("lower end", low_open), ("upper end", high_open)) if o) + " itself: open there")
    if achieved < (conf - alpha / 2 if exact else conf):  # NaN (normal, achievable) compares False
        notes.append(f"requested conf {conf} not achievable with these sample sizes; achieved {achieved:.4g}")
    return PairedShift(
        estimate=float(0.5 * (part[(total - 1) // 2] + part[total // 2])),
        low=low,
        high=high,
        conf=conf,
        achieved_conf=achieved,
        paired=True,
        n_a=int(x.size),
        n_b=int(y.size),
        method=method,
        ties=ties,
        zeros=zeros,
        rank=k,
        definition=definition,
        note="; ".join(notes) or None,
        low_open=low_open,
        high_open=high_open,
    )


def mann_whitney(a: ArrayLike, b: ArrayLike, alternative: str = "two-sided") -> TestResult:
    """Mann–Whitney U test, exact when both arms have fewer than 50 values and no ties (R's rule).

    Otherwise the normal approximation with tie-corrected variance and continuity
    correction. scipy's ``method='auto'`` is exact only when an arm has <= 8 values.
    """
    where = "stats.mann_whitney"
    x = _check_sample(a, name="a", where=where)
    y = _check_sample(b, name="b", where=where)
    alternative = _check_alternative(alternative, where)
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
    x = _check_sample(a, name="a", where=where, min_n=2)
    y = _check_sample(b, name="b", where=where, min_n=2)
    alternative = _check_alternative(alternative, where)
    m, n = int(x.size), int(y.size)
    gt, lt, eq = _superiority_counts(x, y)
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


def spreads_differ(a: ArrayLike, b: ArrayLike, alpha: float = 0.05) -> tuple[bool, dict[str, Any]]:
    """Fligner–Killeen test (median-centred) of equal spreads, with the evidence.

    Fligner–Killeen because it is rank-based like the tests it chooses between
    and was among the few tests that kept their level and power under
    non-normal, skewed data in Conover, Johnson & Johnson (1981); trial times
    are typically right-skewed. Two constant arms count as equal spread.
    """
    where = "stats.spreads_differ"
    x = _check_sample(a, name="a", where=where, min_n=2)
    y = _check_sample(b, name="b", where=where, min_n=2)
    alpha = _check_level(alpha, "alpha", where)
    evidence: dict[str, Any] = {
        "method": "Fligner-Killeen (scipy.stats.fligner, center='median')",
        "alpha": alpha,
        "mad_a": float(sps.median_abs_deviation(x)),
        "mad_b": float(sps.median_abs_deviation(y)),
        "iqr_a": float(sps.iqr(x)),
        "iqr_b": float(sps.iqr(y)),
    }
    if np.ptp(x) == 0 and np.ptp(y) == 0:
        evidence.update(statistic=None, p=None, differ=False, reason="both arms constant: equal (zero) spread")
        return False, evidence
    res = sps.fligner(x, y, center="median")
    differ = bool(res.pvalue < alpha)
    evidence.update(statistic=float(res.statistic), p=float(res.pvalue), differ=differ, reason=None)
    return differ, evidence


# --------------------------------------------------------------------------- the design-chosen comparison


@dataclass(frozen=True)
class Comparison(_AsDict):
    """Arm a against arm b: the test the design calls for, why, and how large the difference is."""

    paired: bool
    alternative: str
    alpha: float
    a: Descriptives
    b: Descriptives
    test: TestResult | None
    reason: str
    spreads: dict[str, Any] | None = None
    cliffs_delta: Effect | None = None
    a12: Effect | None = None
    shift: Shift | None = None
    ratio: Ratio | None = None
    notes: tuple[str, ...] = ()


def compare_two(
    a: ArrayLike,
    b: ArrayLike,
    *,
    paired: bool,
    alpha: float = 0.05,
    alternative: str = "two-sided",
    conf: float = 0.95,
    n_boot: int = 5000,
    seed: int = 0,
) -> Comparison:
    """Compare two arms with the test the design calls for, plus effect sizes and intervals.

    paired (randomised complete blocks): Wilcoxon signed-rank on a − b.
    Unpaired: Mann–Whitney U, or Brunner–Munzel when Fligner–Killeen finds the
    spreads differ (Mann–Whitney then no longer tests location alone). Fewer than
    MIN_N_FOR_TESTS values in an arm: descriptives only.
    """
    where = "stats.compare_two"
    if paired:
        x, y = _check_pair(a, b, where=where)
    else:
        x = _check_sample(a, name="a", where=where)
        y = _check_sample(b, name="b", where=where)
    alternative = _check_alternative(alternative, where)
    alpha = _check_level(alpha, "alpha", where)
    da, db = describe(x), describe(y)
    if min(x.size, y.size) < MIN_N_FOR_TESTS:
        return Comparison(paired, alternative, alpha, da, db, test=None, reason=NO_TEST_REASON)
    spreads = None
    if paired:
        test = wilcoxon_paired(x, y, alternative)
        reason = "paired design (one trial per arm per block): Wilcoxon signed-rank test on d = a - b"
    else:
        differ, spreads = spreads_differ(x, y, alpha)
        if differ:
            test = brunner_munzel(x, y, alternative)
            reason = (
                f"unpaired; spreads differ (Fligner-Killeen p = {spreads['p']:.3g} < {alpha}): Brunner-Munzel, "
                "which tests P(a > b) = P(a < b) without assuming equal spreads"
            )
        else:
            test = mann_whitney(x, y, alternative)
            reason = "unpaired; no evidence that spreads differ (Fligner-Killeen): Mann-Whitney U"
    reason += f" ({test.method_detail})"
    notes = ["Cliff's delta and A12 compare the arms' values as two samples (pairing ignored)"]
    total = x.size * (x.size + 1) // 2 if paired else x.size * y.size
    if total <= MAX_PAIRWISE:
        shift = hodges_lehmann(x, y, paired=paired, conf=conf)
    else:
        shift = None
        notes.append(f"Hodges-Lehmann shift skipped: {total} pairwise values exceed {MAX_PAIRWISE}")
    return Comparison(
        paired=paired,
        alternative=alternative,
        alpha=alpha,
        a=da,
        b=db,
        test=test,
        reason=reason,
        spreads=spreads,
        cliffs_delta=cliffs_delta(x, y),
        a12=vargha_delaney_a12(x, y),
        shift=shift,
        ratio=ratio_of_medians(x, y, conf=conf, n_boot=n_boot, seed=seed, paired=paired),
        notes=tuple(notes),
    )


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values, the arithmetic of statsmodels ``multipletests(method='holm')`` (and R's
    ``p.adjust(method = "holm")``): sorted ascending, the i-th (from 0) times m - i, made monotone by a running
    maximum, capped at 1. Written out here because ``multipletests`` runs ``gc.collect()`` on every call (23 ms
    in a small process, far more in a large one), which made the sequential-stopping simulation, tens of
    thousands of calls, take over ten minutes; tests/test_stats.py checks it equals statsmodels.

    None (and NaN) entries mean "no test" and pass through as None without
    counting towards the family size.
    """
    where = "stats.holm"
    values = list(pvalues)
    keep = [i for i, p in enumerate(values) if p is not None and not math.isnan(float(p))]
    raw = [float(values[i]) for i in keep]  # type: ignore[arg-type]
    if any(not 0.0 <= p <= 1.0 for p in raw):
        raise AnalysisError("p-values must lie in [0, 1]", where=where, fix="pass raw p-values, not scores or logs")
    out: list[float | None] = [None] * len(values)
    if raw:
        arr = np.asarray(raw, dtype=float)
        order = np.argsort(arr, kind="mergesort")
        stepped = np.minimum(np.maximum.accumulate(arr[order] * np.arange(arr.size, 0, -1)), 1.0)
        adjusted = np.empty_like(stepped)
        adjusted[order] = stepped
        for i, p in zip(keep, adjusted, strict=True):
            out[i] = float(p)
    return out


# --------------------------------------------------------------------------- outliers and drift


@dataclass(frozen=True)
class Outliers(_AsDict):
    """Tukey's fences. Classification only: nothing is dropped."""

    n: int
    k: float
    q1: float
    q3: float
    iqr: float
    lower_fence: float  # q1 - k·IQR
    upper_fence: float  # q3 + k·IQR
    lower_outer_fence: float  # q1 - 2k·IQR
    upper_outer_fence: float  # q3 + 2k·IQR
    mild_indices: tuple[int, ...]  # beyond an inner fence, not beyond the outer one
    mild_values: tuple[float, ...]
    extreme_indices: tuple[int, ...]  # beyond an outer fence
    extreme_values: tuple[float, ...]
    quantile_method: str = QUANTILES


def tukey_outliers(x: ArrayLike, k: float = 1.5) -> Outliers:
    """Mild (beyond k·IQR) and extreme (beyond 2k·IQR, i.e. 3·IQR by default) values, for reporting."""
    where = "stats.tukey_outliers"
    v = _check_sample(x, name="x", where=where)
    if not k > 0:
        raise AnalysisError(f"k must be positive, got {k}", where=where, fix="use k=1.5 (Tukey's default)")
    q1, q3 = (float(q) for q in np.percentile(v, [25, 75]))
    iqr = q3 - q1
    lo, hi, lo2, hi2 = q1 - k * iqr, q3 + k * iqr, q1 - 2 * k * iqr, q3 + 2 * k * iqr
    extreme = (v < lo2) | (v > hi2)
    mild = ((v < lo) | (v > hi)) & ~extreme
    return Outliers(
        n=int(v.size),
        k=float(k),
        q1=q1,
        q3=q3,
        iqr=iqr,
        lower_fence=lo,
        upper_fence=hi,
        lower_outer_fence=lo2,
        upper_outer_fence=hi2,
        mild_indices=tuple(int(i) for i in np.flatnonzero(mild)),
        mild_values=tuple(float(t) for t in v[mild]),
        extreme_indices=tuple(int(i) for i in np.flatnonzero(extreme)),
        extreme_values=tuple(float(t) for t in v[extreme]),
    )


@dataclass(frozen=True)
class Trend(_AsDict):
    """Monotone drift of a measurement with schedule position."""

    n: int
    method: str
    tau: float
    p: float
    p_method: str
    slope: float  # Theil–Sen: change of value per unit of position
    slope_low: float
    slope_high: float
    intercept: float
    conf: float
    reason: str | None = None


class _TrendCommon(TypedDict):
    """The fields of a Trend that do not depend on whether tau is defined."""

    n: int
    method: str
    slope: float
    slope_low: float
    slope_high: float
    intercept: float
    conf: float


def linear_trend(position: ArrayLike, value: ArrayLike, *, conf: float = 0.95) -> Trend:
    """Kendall's τ_b with its p, and the Theil–Sen slope with its CI, of value against position.

    Kendall rather than Spearman because the Theil–Sen interval is built on
    Kendall's statistic, so test and slope agree. The p-value is exact (scipy)
    when there are no ties and n <= 33 (scipy's own cut-off), else asymptotic.
    """
    where = "stats.linear_trend"
    pos = _check_sample(position, name="position", where=where, min_n=3)
    val = _check_sample(value, name="value", where=where, min_n=3)
    conf = _check_level(conf, "conf", where)
    if conf <= 0.5:  # scipy.stats.theilslopes reads alpha <= 0.5 as 1 - confidence
        raise AnalysisError(f"conf must exceed 0.5, got {conf}", where=where, fix="use conf=0.95")
    if pos.size != val.size:
        raise AnalysisError(f"position and value differ in length ({pos.size} vs {val.size})", where=where)
    if np.ptp(pos) == 0:
        raise AnalysisError("all positions are equal: no trend can be estimated", where=where)
    ts = sps.theilslopes(val, pos, alpha=conf, method="separate")
    common: _TrendCommon = {
        "n": int(pos.size),
        "method": "Kendall tau-b (scipy.stats.kendalltau) + Theil-Sen (scipy.stats.theilslopes, method='separate')",
        "slope": float(ts.slope),
        "slope_low": float(ts.low_slope),
        "slope_high": float(ts.high_slope),
        "intercept": float(ts.intercept),
        "conf": conf,
    }
    if np.ptp(val) == 0:
        return Trend(
            tau=math.nan, p=math.nan, p_method="none", reason="constant values: no drift, tau undefined", **common
        )
    ties = np.unique(pos).size < pos.size or np.unique(val).size < val.size
    p_method = "exact" if not ties and pos.size <= 33 else "asymptotic"
    kt = sps.kendalltau(pos, val, method=p_method)
    return Trend(tau=float(kt.statistic), p=float(kt.pvalue), p_method=p_method, **common)


# --------------------------------------------------------------------------- trend across an ordered factor


@dataclass(frozen=True)
class StratifiedTrend(_AsDict):
    """Does a value rise or fall with an ordered factor (e.g. batch size), within strata, all strata combined."""

    method: str
    alternative: str
    n: int  # values in strata that contribute (at least two levels)
    strata: int  # strata that contribute
    s: float  # Σ Kendall S: concordant − discordant pairs within strata
    var_s: float  # Σ exact permutation variance of S under H0 (no trend), ties in both variables
    z: float  # s / sqrt(var_s), no continuity correction
    p: float
    concordance: float  # s / pairs at different levels, in [−1, 1]: P(higher level, higher value) − P(… lower)
    pairs: int
    per_stratum: tuple[dict[str, Any], ...] = ()
    reason: str | None = None


class _StratifiedCommon(TypedDict):
    """The fields of a StratifiedTrend that do not depend on whether z is defined."""

    method: str
    alternative: str
    n: int
    strata: int
    s: float
    var_s: float
    pairs: int
    per_stratum: tuple[dict[str, Any], ...]


def _kendall_s_var(x: np.ndarray, y: np.ndarray) -> tuple[float, float, int]:
    """Kendall's S, its permutation variance under H0 with ties in x and y (Kendall 1970), pairs with x_i != x_j."""
    n = x.size
    dx = np.sign(np.subtract.outer(x, x))
    dy = np.sign(np.subtract.outer(y, y))
    iu = np.triu_indices(n, 1)
    s = float((dx * dy)[iu].sum())
    t = np.unique(x, return_counts=True)[1].astype(float)
    u = np.unique(y, return_counts=True)[1].astype(float)
    var = (n * (n - 1) * (2 * n + 5) - np.sum(t * (t - 1) * (2 * t + 5)) - np.sum(u * (u - 1) * (2 * u + 5))) / 18.0
    if n > 2:
        var += np.sum(t * (t - 1) * (t - 2)) * np.sum(u * (u - 1) * (u - 2)) / (9.0 * n * (n - 1) * (n - 2))
    var += np.sum(t * (t - 1)) * np.sum(u * (u - 1)) / (2.0 * n * (n - 1))
    pairs = int((dx[iu] != 0).sum())
    return s, float(var), pairs


def stratified_trend(strata: Sequence[tuple[ArrayLike, ArrayLike]], *, alternative: str = "two-sided",
                     names: Sequence[str] | None = None) -> StratifiedTrend:
    """Trend of y with an ordered factor x, tested within strata and combined: a stratified Jonckheere test.

    Each stratum is (x, y): x the factor's level (batch size), y one value per independent unit
    (a trial). Within a stratum Kendall's S counts concordant minus discordant pairs; pairs at the
    same level count for neither, so S is Jonckheere–Terpstra's statistic (S = 2·JT − pairs at
    different levels). The strata's S and their exact permutation variances (Kendall 1970, ties in
    both variables) are summed, as the seasonal Kendall test (Hirsch, Slack & Smith 1982) sums
    seasons; z = S/sd without continuity correction (scipy's kendalltau does the same). Stratifying
    removes level differences between strata (models, input sides, repetitions run hours apart), so
    only within-stratum order counts. alternative: "greater" = y rises with x.
    """
    where = "stats.stratified_trend"
    alternative = _check_alternative(alternative, where)
    method = ("stratified Jonckheere-Terpstra (Kendall's S between level and value within each stratum, summed; "
              "exact permutation variance with ties, Kendall 1970; normal approximation)")
    tot_s = tot_var = 0.0
    n = pairs = used = 0
    per: list[dict[str, Any]] = []
    for i, (sx, sy) in enumerate(strata):
        x = _check_sample(sx, name="x", where=where)
        y = _check_sample(sy, name="y", where=where)
        if x.size != y.size:
            raise AnalysisError(f"stratum {i}: x and y differ in length ({x.size} vs {y.size})", where=where,
                                fix="pass one level per value")
        if x.size < 2 or np.unique(x).size < 2:
            continue  # one level (or one value): no pair says anything about the trend
        s, var, k = _kendall_s_var(x, y)
        tot_s, tot_var, n, pairs, used = tot_s + s, tot_var + var, n + int(x.size), pairs + k, used + 1
        per.append({"stratum": names[i] if names is not None else str(i), "n": int(x.size), "s": s, "var_s": var,
                    "concordance": s / k})
    common: _StratifiedCommon = {"method": method, "alternative": alternative, "n": n, "strata": used, "s": tot_s,
                                 "var_s": tot_var, "pairs": pairs, "per_stratum": tuple(per)}
    if used == 0:
        return StratifiedTrend(z=math.nan, p=math.nan, concordance=math.nan,
                               reason="no stratum holds two levels of the factor: no trend can be tested", **common)
    if tot_var <= 0:
        return StratifiedTrend(z=math.nan, p=1.0, concordance=tot_s / pairs,
                               reason="every value equal within its stratum: no ordering, p = 1", **common)
    z = tot_s / math.sqrt(tot_var)
    p = {"two-sided": 2 * sps.norm.sf(abs(z)), "greater": sps.norm.sf(z), "less": sps.norm.cdf(z)}[alternative]
    return StratifiedTrend(z=float(z), p=float(min(1.0, p)), concordance=tot_s / pairs, **common)


# --------------------------------------------------------------------------- ratio of paired throughputs


@dataclass(frozen=True)
class PairedRatio(_AsDict):
    """Geometric mean of paired ratios a_i / b_i with its t interval, and the paired t test of ratio 1."""

    n_pairs: int
    ratio: float
    low: float
    high: float
    conf: float
    t: float
    df: int
    p: float
    method: str
    reason: str | None = None


def paired_log_ratio(a: ArrayLike, b: ArrayLike, *, conf: float = 0.95) -> PairedRatio:
    """How many times a is b, pair by pair: exp(mean log(a_i/b_i)) with a paired t interval on the logs.

    For throughputs and times, which are positive and multiplicative: the log ratio of a pair is
    symmetric around the true log ratio when both vary by a similar factor, and the t interval and
    test are dual (the interval excludes 1 exactly when p < 1 − conf). With 2 pairs the interval is
    very wide; with fewer or with all log ratios equal, none is given and the reason says why.
    """
    where = "stats.paired_log_ratio"
    x, y = _check_pair(a, b, where=where)
    conf = _check_level(conf, "conf", where)
    if (x <= 0).any() or (y <= 0).any():
        raise AnalysisError("ratios need positive values", where=where, fix="pass throughputs or times, not deltas")
    lr = np.log(x / y)
    n = int(lr.size)
    method = "paired t test and interval on log(a_i / b_i); ratio = exp(mean)"
    est = float(np.exp(lr.mean()))
    if n < 2:
        return PairedRatio(n, est, math.nan, math.nan, conf, math.nan, 0, math.nan, method,
                           reason=f"{n} pair(s): no interval")
    sd = float(lr.std(ddof=1))
    if sd == 0:
        return PairedRatio(n, est, est, est, conf, math.nan, n - 1, math.nan, method,
                           reason="every pair has the same ratio: no spread, the t test is undefined")
    se = sd / math.sqrt(n)
    q = float(sps.t.ppf(0.5 + conf / 2, n - 1))
    t = float(lr.mean() / se)
    return PairedRatio(n, est, float(np.exp(lr.mean() - q * se)), float(np.exp(lr.mean() + q * se)), conf, t, n - 1,
                       float(2 * sps.t.sf(abs(t), n - 1)), method)
