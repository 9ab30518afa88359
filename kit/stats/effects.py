"""How much two arms differ: effect sizes, location shift and ratio of medians.

A p-value only says whether the arms differ; these say by how much, in units a
reader can act on: a probability of superiority (Cliff's δ, Vargha–Delaney
A12), a shift in the measured unit (Hodges–Lehmann) and a speed-up factor
(ratio of medians with a BCa bootstrap interval). Direction is always "a
relative to b". The paired Hodges–Lehmann shift lives in :mod:`kit.stats.paired`,
beside the signed-rank test whose rule for zero differences it shares.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps
from scipy.special import ndtri

from kit.errors import AnalysisError
from kit.stats.common import EXACT_MAX_N, AsDict, check_level, check_pair, check_pairwise_size, check_sample
from kit.stats.ranks import exact_rank, rank_sum_pmf, superiority_counts, tie_sum

# Romano et al. (2006) thresholds on |δ|, Vargha & Delaney (2000) on |A12 − 0.5|; exact
# rationals so that e.g. A12 = 0.71 is "large" and not lost to 0.71 − 0.5 = 0.20999….
_ROMANO = ((Fraction("0.147"), "negligible"), (Fraction("0.33"), "small"), (Fraction("0.474"), "medium"))
_VARGHA = ((Fraction("0.06"), "negligible"), (Fraction("0.14"), "small"), (Fraction("0.21"), "medium"))


# --------------------------------------------------------------------------- effect sizes


@dataclass(frozen=True)
class Effect(AsDict):
    """A probability-of-superiority effect size of a over b, with its magnitude label."""

    name: str
    value: float
    magnitude: str
    n_a: int
    n_b: int
    p_greater: float  # P(a > b) over all pairs
    p_less: float  # P(a < b)
    p_equal: float  # P(a = b)
    definition: str
    thresholds: str



def _magnitude(distance: Fraction, thresholds: tuple[tuple[Fraction, str], ...]) -> str:
    for limit, label in thresholds:
        if distance < limit:
            return label
    return "large"


def cliffs_delta(a: ArrayLike, b: ArrayLike) -> Effect:
    """Cliff's δ = P(a > b) − P(a < b) over all pairs, in [−1, 1]; ties count for neither side.

    Positive δ: values of a tend to be larger (for times: a is slower). Labelled
    with Romano et al. (2006): |δ| < 0.147 negligible, < 0.33 small, < 0.474 medium, else large.
    """
    where = "stats.cliffs_delta"
    x = check_sample(a, name="a", where=where)
    y = check_sample(b, name="b", where=where)
    gt, lt, eq = superiority_counts(x, y)
    total = x.size * y.size
    return Effect(
        name="cliffs_delta",
        value=(gt - lt) / total,
        magnitude=_magnitude(Fraction(abs(gt - lt), total), _ROMANO),
        n_a=int(x.size),
        n_b=int(y.size),
        p_greater=gt / total,
        p_less=lt / total,
        p_equal=eq / total,
        definition="P(a > b) - P(a < b) over all pairs (a_i, b_j)",
        thresholds="Romano et al. (2006): |d| < 0.147 negligible, < 0.33 small, < 0.474 medium, else large",
    )


def vargha_delaney_a12(a: ArrayLike, b: ArrayLike) -> Effect:
    """Vargha–Delaney A12 = P(a > b) + ½·P(a = b), in [0, 1]; 0.5 means no tendency.

    Labelled by the distance from 0.5 (Vargha & Delaney 2000: 0.56 small,
    0.64 medium, 0.71 large): < 0.06 negligible, < 0.14 small, < 0.21 medium, else large.
    """
    where = "stats.vargha_delaney_a12"
    x = check_sample(a, name="a", where=where)
    y = check_sample(b, name="b", where=where)
    gt, lt, eq = superiority_counts(x, y)
    total = x.size * y.size
    return Effect(
        name="vargha_delaney_a12",
        value=(gt + 0.5 * eq) / total,
        magnitude=_magnitude(Fraction(abs(2 * gt + eq - total), 2 * total), _VARGHA),
        n_a=int(x.size),
        n_b=int(y.size),
        p_greater=gt / total,
        p_less=lt / total,
        p_equal=eq / total,
        definition="P(a > b) + 0.5 * P(a = b) over all pairs (a_i, b_j)",
        thresholds="Vargha & Delaney (2000): |A12 - 0.5| < 0.06 negligible, < 0.14 small, < 0.21 medium, else large",
    )


# --------------------------------------------------------------------------- Hodges–Lehmann


@dataclass(frozen=True)
class Shift(AsDict):
    """Hodges–Lehmann location shift of a relative to b, with its distribution-free CI."""

    estimate: float
    low: float
    high: float
    conf: float  # requested confidence level
    achieved_conf: float  # exact coverage of the order-statistic interval (NaN for the normal approximation)
    paired: bool
    n_a: int
    n_b: int
    method: str  # "exact" or "normal approximation (inverted test)"
    ties: bool
    zeros: int  # paired: differences equal to zero (kept in the Walsh averages)
    rank: int  # k: the interval is [k-th smallest, k-th largest] of the pairwise values
    definition: str
    note: str | None = None


def hodges_lehmann_unpaired(a: ArrayLike, b: ArrayLike, *, conf: float = 0.95) -> Shift:
    """Unpaired Hodges–Lehmann shift of a relative to b with its rank-based confidence interval.

    The kit's one Hodges–Lehmann is :func:`kit.stats.hodges_lehmann`; this is its unpaired
    half, kept beside the Mann–Whitney distribution it inverts. Median of
    all a_i − b_j with k from the Mann–Whitney distribution (Bauer 1972). This is
    R's ``wilcox.test(..., conf.int=TRUE)`` where R is exact (n < 50, no ties, no
    zero differences). Otherwise k inverts the normal approximation the tests use
    (tie-corrected variance, continuity correction), which is where R's numerical
    root lands too; the estimate stays the median above (R's asymptotic estimate is
    a root with tolerance 1e-4).
    """
    where = "stats.hodges_lehmann"
    conf = check_level(conf, "conf", where)
    alpha = 1.0 - conf
    x = check_sample(a, name="a", where=where)
    y = check_sample(b, name="b", where=where)
    total = x.size * y.size
    check_pairwise_size(total, where)
    ties = bool(np.unique(np.concatenate([x, y])).size < x.size + y.size)
    exact = x.size <= EXACT_MAX_N and y.size <= EXACT_MAX_N and not ties
    values = np.subtract.outer(x, y).ravel()
    definition = "median of all pairwise differences a_i - b_j"
    big_n = x.size + y.size
    var = x.size * y.size / 12.0 * (big_n + 1 - (tie_sum(x) + tie_sum(y)) / (big_n * (big_n - 1)))
    pmf = rank_sum_pmf(x.size, y.size) if exact else None
    if pmf is not None:
        k, achieved = exact_rank(pmf, alpha)
        method = "exact"
    else:
        # smallest k with (#values above W_(k) − M/2 − ½)/σ below z: where the inverted test crosses z
        k = max(1, math.floor(total / 2.0 - 0.5 - float(ndtri(1.0 - alpha / 2.0)) * math.sqrt(max(var, 0.0))) + 1)
        achieved = math.nan
        method = "normal approximation (inverted test)"
    k = min(k, (total + 1) // 2)
    kth = sorted({k - 1, total - k, (total - 1) // 2, total // 2})
    part = np.partition(values, kth)
    note = None
    if ties:
        note = "ties or zero differences present: the interval's coverage is approximate"
    if method == "exact" and achieved < conf - alpha / 2:
        note = f"requested conf {conf} not achievable with these sample sizes; achieved {achieved:.4g}"
    return Shift(
        estimate=float(0.5 * (part[(total - 1) // 2] + part[total // 2])),
        low=float(part[k - 1]),
        high=float(part[total - k]),
        conf=conf,
        achieved_conf=achieved,
        paired=False,
        n_a=int(x.size),
        n_b=int(y.size),
        method=method,
        ties=ties,
        zeros=0,
        rank=k,
        definition=definition,
        note=note,
    )


# --------------------------------------------------------------------------- ratio of medians


@dataclass(frozen=True)
class Ratio(AsDict):
    """median(a) / median(b) with a BCa bootstrap interval: the speed-up factor readers ask for."""

    estimate: float
    low: float
    high: float
    conf: float
    paired: bool
    n_a: int
    n_b: int
    n_boot: int
    seed: int
    method: str
    reason: str | None = None


def _median_ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(x, axis=axis) / np.median(y, axis=axis)


def ratio_of_medians(
    a: ArrayLike, b: ArrayLike, *, conf: float = 0.95, n_boot: int = 5000, seed: int = 0, paired: bool = False,
    interval: bool = True,
) -> Ratio:
    """median(a)/median(b) with a BCa interval from ``scipy.stats.bootstrap``.

    paired=True resamples blocks (a_i, b_i) jointly, keeping the pairing the
    design built; otherwise each arm is resampled on its own. Degenerate data
    never raise: both arms constant, or (paired) every pair identical, gives the
    point as interval, an undefined BCa interval gives NaN, each with the reason.
    """
    where = "stats.ratio_of_medians"
    conf = check_level(conf, "conf", where)
    if paired:
        x, y = check_pair(a, b, where=where)
    else:
        x = check_sample(a, name="a", where=where)
        y = check_sample(b, name="b", where=where)
    if int(n_boot) < 100:
        raise AnalysisError(f"n_boot={n_boot} is too few for a BCa interval", where=where, fix="use n_boot >= 1000")
    method = f"BCa bootstrap (scipy.stats.bootstrap, method='BCa', paired={paired}, rng=default_rng(seed))"

    def result(est: float, low: float, high: float, reason: str | None) -> Ratio:
        return Ratio(est, low, high, conf, paired, int(x.size), int(y.size), int(n_boot), int(seed), method, reason)

    med_b = float(np.median(y))
    if med_b == 0.0:
        return result(math.nan, math.nan, math.nan, "median of b is 0: the ratio is undefined")
    est = float(np.median(x)) / med_b
    if np.ptp(x) == 0 and np.ptp(y) == 0:
        return result(
            est, est, est, "both arms constant: every resample gives the same ratio, so the interval is the point"
        )
    if paired and np.array_equal(x, y):
        return result(est, est, est, "every pair identical (a deterministic metric under the same seeds): every "
                      "resample of the pairs gives the ratio 1, so the interval is the point")
    if min(x.size, y.size) < 2:
        return result(est, math.nan, math.nan, "an arm has a single value: no bootstrap interval")
    if not interval:  # the caller uses the estimate only (kit compare, where the verdict rests on another ratio)
        return result(est, math.nan, math.nan, "interval not drawn: the caller needed the estimate only")
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = sps.bootstrap(
            (x, y),
            _median_ratio,
            n_resamples=int(n_boot),
            vectorized=True,
            paired=paired,
            confidence_level=conf,
            method="BCa",
            rng=np.random.default_rng(seed),
        )
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if math.isfinite(low) and math.isfinite(high):
        return result(est, low, high, None)
    said = "; ".join(sorted({str(w.message).split(".")[0] for w in caught})) or "non-finite bootstrap quantiles"
    return result(est, math.nan, math.nan, f"BCa interval undefined for these data ({said})")
