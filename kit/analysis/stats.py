"""Statistics for "is framework A faster than B, by how much, and can I trust that?".

Pure functions over arrays of per-trial measurements: descriptives, normality
diagnostics, the rank tests the design calls for, Holm's correction, outlier
classification and drift. Every test result records what is needed to
recompute it (method, exact or asymptotic, ties, zeros, continuity correction,
the scipy call). Exact-versus-asymptotic choices follow R's ``wilcox.test`` so
an artifact evaluator can check any number in R. Effect sizes, the
Hodges–Lehmann shift and the ratio of medians live in
:mod:`kit.analysis.effects` and are re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps
from scipy.special import comb
from statsmodels.stats.diagnostic import lilliefors
from statsmodels.stats.multitest import multipletests

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
    _check_sample,
    _superiority_counts,
    cliffs_delta,
    hodges_lehmann,
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
    "Ratio",
    "Shift",
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
    "ratio_of_medians",
    "spreads_differ",
    "tukey_outliers",
    "vargha_delaney_a12",
    "wilcoxon_paired",
]

MIN_N_FOR_TESTS = 10
NO_TEST_REASON = f"fewer than {MIN_N_FOR_TESTS} samples per arm: descriptives only"
QUANTILES = "linear interpolation (numpy default; R type 7)"
KS_PLAIN = "plain KS with estimated parameters (anti-conservative; shown for comparison with the paper)"


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
    """Why rank tests: three normality diagnostics of one arm, side by side."""

    n: int
    shapiro_wilk: NormalityTest
    lilliefors: NormalityTest
    ks_plain: NormalityTest


def normality(x: ArrayLike) -> Normality:
    """Shapiro–Wilk, Lilliefors, and the paper's plain KS with estimated mean and sd."""
    v = _check_sample(x, name="x", where="stats.normality")
    n = int(v.size)
    sw_name = "Shapiro-Wilk (scipy.stats.shapiro)"
    lf_name = "Lilliefors (statsmodels lilliefors, dist='norm', pvalmethod='table')"
    ks_name = f"{KS_PLAIN}: scipy.stats.kstest against N(mean, sd with ddof=1)"
    undefined = None
    if n < 3:
        undefined = f"n = {n} < 3: normality tests are undefined"
    elif np.ptp(v) == 0:
        undefined = "constant data: zero spread, normality tests are undefined"
    if undefined:
        return Normality(n, *(NormalityTest(m, math.nan, math.nan, undefined) for m in (sw_name, lf_name, ks_name)))
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
        "zero_method": "wilcox (zero differences dropped)",
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
    """Holm-adjusted p-values (statsmodels ``multipletests(method='holm')``).

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
        adjusted = multipletests(raw, method="holm")[1]
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
    common = {
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
