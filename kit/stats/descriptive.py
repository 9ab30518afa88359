"""One arm on its own: descriptives, normality diagnostics and Tukey's outlier fences.

Quantiles are numpy's default linear interpolation (R type 7), stated in every record, so a number can be
recomputed in R. The normality tests are shown to say why the kit uses rank tests, never to choose one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps

from kit.errors import AnalysisError
from kit.stats.common import AsDict, check_sample

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
class Descriptives(AsDict):
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
    v = check_sample(x, name="x", where="stats.describe")
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
class NormalityTest(AsDict):
    """One goodness-of-fit test against the normal family; NaN with a reason when undefined."""

    method: str
    statistic: float
    p: float
    reason: str | None = None


@dataclass(frozen=True)
class Normality(AsDict):
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
    v = check_sample(x, name="x", where="stats.normality")
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
        from statsmodels.stats.diagnostic import lilliefors  # here: statsmodels costs `kit compare` 0.2 s to import

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



# --------------------------------------------------------------------------- outliers and drift


@dataclass(frozen=True)
class Outliers(AsDict):
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
    v = check_sample(x, name="x", where=where)
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
