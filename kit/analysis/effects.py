"""How much two arms differ: effect sizes, location shift and ratio of medians.

A p-value only says whether the arms differ; these say by how much, in units a
reader can act on: a probability of superiority (Cliff's δ, Vargha–Delaney
A12), a shift in the measured unit (Hodges–Lehmann) and a speed-up factor
(ratio of medians with a BCa bootstrap interval). Direction is always "a
relative to b". :mod:`kit.analysis.stats` re-exports the public names; the
input checks and the JSON conversion both modules share live here.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, fields, is_dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps
from scipy.special import ndtri

from kit.errors import AnalysisError

ALTERNATIVES: tuple[str, ...] = ("two-sided", "less", "greater")
# Hodges–Lehmann materialises all pairwise differences (or Walsh averages);
# past this many (160 MB of float64) it refuses rather than exhaust memory.
MAX_PAIRWISE = 20_000_000
# R's exact-distribution cut-off for wilcox.test (n < 50), kept so results can be checked in R.
EXACT_MAX_N = 49

# Romano et al. (2006) thresholds on |δ|, Vargha & Delaney (2000) on |A12 − 0.5|; exact
# rationals so that e.g. A12 = 0.71 is "large" and not lost to 0.71 − 0.5 = 0.20999….
_ROMANO = ((Fraction("0.147"), "negligible"), (Fraction("0.33"), "small"), (Fraction("0.474"), "medium"))
_VARGHA = ((Fraction("0.06"), "negligible"), (Fraction("0.14"), "small"), (Fraction("0.21"), "medium"))


# --------------------------------------------------------------------------- shared helpers


def _plain(value: Any) -> Any:
    """JSON-safe plain data: numpy scalars to Python, non-finite floats (NaN, ±inf) to None."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [_plain(v) for v in value]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        f = float(value)
        return f if math.isfinite(f) else None
    return value


class _AsDict:
    """Mixin for the result dataclasses: ``as_dict()`` gives JSON-safe plain data."""

    def as_dict(self) -> dict[str, Any]:
        return _plain(self)


def _check_sample(x: ArrayLike, *, name: str, where: str, min_n: int = 1) -> np.ndarray:
    """A 1-D float array of finite values, or an AnalysisError saying what to fix."""
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as exc:
        raise AnalysisError(
            f"{name} is not numeric ({exc})", where=where, fix="pass a 1-D sequence of numbers"
        ) from exc
    if arr.ndim != 1:
        raise AnalysisError(
            f"{name} must be 1-D, got shape {arr.shape}", where=where, fix="pass one arm as a flat sequence"
        )
    if arr.size < min_n:
        raise AnalysisError(
            f"{name} has {arr.size} value(s), needs at least {min_n}",
            where=where,
            fix="collect more trials for this arm",
        )
    bad = ~np.isfinite(arr)
    if bad.any():
        first = np.flatnonzero(bad)[:5].tolist()
        raise AnalysisError(
            f"{name} holds {int(bad.sum())} NaN or infinite value(s) (at index {first})",
            where=where,
            fix="drop or mark failed trials explicitly before analysis; the statistics never drop them silently",
        )
    return arr


def _check_pair(a: ArrayLike, b: ArrayLike, *, where: str, min_n: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Two arms of a paired design: same length, position i of a pairs with position i of b."""
    x = _check_sample(a, name="a", where=where, min_n=min_n)
    y = _check_sample(b, name="b", where=where, min_n=min_n)
    if x.size != y.size:
        raise AnalysisError(
            f"paired arms differ in length ({x.size} vs {y.size})",
            where=where,
            fix="pair trials by block so both arms have one value per block, or use paired=False",
        )
    return x, y


def _check_alternative(alternative: str, where: str) -> str:
    if alternative not in ALTERNATIVES:
        raise AnalysisError(f"alternative {alternative!r} is unknown", where=where, fix=f"use one of {ALTERNATIVES}")
    return alternative


def _check_level(value: float, name: str, where: str) -> float:
    if not 0.0 < float(value) < 1.0:
        raise AnalysisError(f"{name} must lie strictly between 0 and 1, got {value}", where=where)
    return float(value)


# --------------------------------------------------------------------------- effect sizes


@dataclass(frozen=True)
class Effect(_AsDict):
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


def _superiority_counts(a: np.ndarray, b: np.ndarray) -> tuple[int, int, int]:
    """Pairs (a_i, b_j) with a_i > b_j, a_i < b_j and a_i = b_j.

    Written here (neither scipy nor statsmodels counts the three separately):
    sort b once and binary-search every a_i, O((m + n) log n) instead of the
    O(m·n) pairwise table, so 10^4 trials per arm stay instant.
    """
    sb = np.sort(b)
    below = np.searchsorted(sb, a, side="left")  # b_j < a_i
    not_above = np.searchsorted(sb, a, side="right")  # b_j <= a_i
    greater = int(below.sum())
    equal = int((not_above - below).sum())
    return greater, a.size * b.size - greater - equal, equal


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
    x = _check_sample(a, name="a", where=where)
    y = _check_sample(b, name="b", where=where)
    gt, lt, eq = _superiority_counts(x, y)
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
    x = _check_sample(a, name="a", where=where)
    y = _check_sample(b, name="b", where=where)
    gt, lt, eq = _superiority_counts(x, y)
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
class Shift(_AsDict):
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


def _signed_rank_pmf(n: int) -> np.ndarray:
    """Null distribution of the signed-rank sum T+ for n untied, non-zero differences.

    Written here because scipy has no public signed-rank distribution (only the
    private ``scipy.stats._hypotests._get_wilcoxon_distr``): every rank k joins
    T+ with probability ½, so the pmf is the product of the polynomials (1 + x^k)/2.
    """
    pmf = np.ones(1)
    for k in range(1, n + 1):
        nxt = np.zeros(pmf.size + k)
        nxt[: pmf.size] += 0.5 * pmf
        nxt[k:] += 0.5 * pmf
        pmf = nxt
    return pmf


def _rank_sum_pmf(m: int, n: int) -> np.ndarray:
    """Null distribution of the Mann–Whitney U = #{a_i > b_j} for m and n untied values.

    Written here for the same reason as :func:`_signed_rank_pmf`. Recursion on the
    largest of the m + n values: it is an a (probability m/(m+n)) and then beats
    all n b's, or it is a b and adds nothing.
    """
    prev = [np.ones(1) for _ in range(n + 1)]  # i = 0 a's: U = 0
    for i in range(1, m + 1):
        cur = [np.ones(1)]  # j = 0 b's: U = 0
        for j in range(1, n + 1):
            pmf = np.zeros(i * j + 1)
            pmf[j:] += i / (i + j) * prev[j]
            pmf[: i * (j - 1) + 1] += j / (i + j) * cur[j - 1]
            cur.append(pmf)
        prev = cur
    return prev[n]


def _exact_rank(pmf: np.ndarray, alpha: float) -> tuple[int, float]:
    """R's ``qsignrank``/``qwilcox`` rule: smallest k with P(T <= k) >= alpha/2 (at least 1), and its coverage."""
    cdf = np.cumsum(pmf)
    k = int(np.searchsorted(cdf, alpha / 2 - 10 * np.finfo(float).eps, side="left"))
    k = max(k, 1)
    return k, 1.0 - 2.0 * float(cdf[k - 1])


def hodges_lehmann_unpaired(a: ArrayLike, b: ArrayLike, *, conf: float = 0.95) -> Shift:
    """Unpaired Hodges–Lehmann shift of a relative to b with its rank-based confidence interval.

    The kit's one Hodges–Lehmann is :func:`kit.analysis.stats.hodges_lehmann`; this is its unpaired
    half, kept beside the Mann–Whitney distribution it inverts. Median of
    all a_i − b_j with k from the Mann–Whitney distribution (Bauer 1972). This is
    R's ``wilcox.test(..., conf.int=TRUE)`` where R is exact (n < 50, no ties, no
    zero differences). Otherwise k inverts the normal approximation the tests use
    (tie-corrected variance, continuity correction), which is where R's numerical
    root lands too; the estimate stays the median above (R's asymptotic estimate is
    a root with tolerance 1e-4).
    """
    where = "stats.hodges_lehmann"
    conf = _check_level(conf, "conf", where)
    alpha = 1.0 - conf
    x = _check_sample(a, name="a", where=where)
    y = _check_sample(b, name="b", where=where)
    total = x.size * y.size
    _check_pairwise_size(total, where)
    ties = bool(np.unique(np.concatenate([x, y])).size < x.size + y.size)
    exact = x.size <= EXACT_MAX_N and y.size <= EXACT_MAX_N and not ties
    values = np.subtract.outer(x, y).ravel()
    definition = "median of all pairwise differences a_i - b_j"
    big_n = x.size + y.size
    var = x.size * y.size / 12.0 * (big_n + 1 - (_tie_sum(x) + _tie_sum(y)) / (big_n * (big_n - 1)))
    pmf = _rank_sum_pmf(x.size, y.size) if exact else None
    if pmf is not None:
        k, achieved = _exact_rank(pmf, alpha)
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


def _tie_sum(v: np.ndarray) -> float:
    """Σ(t³ − t) over groups of equal values: the tie term of rank-test variances."""
    t = np.unique(v, return_counts=True)[1].astype(float)
    return float(np.sum(t**3 - t))


def _check_pairwise_size(total: int, where: str) -> None:
    if total > MAX_PAIRWISE:
        raise AnalysisError(
            f"Hodges-Lehmann needs {total} pairwise values (limit {MAX_PAIRWISE})",
            where=where,
            fix="summarise fewer trials (e.g. per block) or rely on the ratio of medians",
        )


# --------------------------------------------------------------------------- ratio of medians


@dataclass(frozen=True)
class Ratio(_AsDict):
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
    a: ArrayLike, b: ArrayLike, *, conf: float = 0.95, n_boot: int = 5000, seed: int = 0, paired: bool = False
) -> Ratio:
    """median(a)/median(b) with a BCa interval from ``scipy.stats.bootstrap``.

    paired=True resamples blocks (a_i, b_i) jointly, keeping the pairing the
    design built; otherwise each arm is resampled on its own. Degenerate data
    never raise: both arms constant, or (paired) every pair identical, gives the
    point as interval, an undefined BCa interval gives NaN, each with the reason.
    """
    where = "stats.ratio_of_medians"
    conf = _check_level(conf, "conf", where)
    if paired:
        x, y = _check_pair(a, b, where=where)
    else:
        x = _check_sample(a, name="a", where=where)
        y = _check_sample(b, name="b", where=where)
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
