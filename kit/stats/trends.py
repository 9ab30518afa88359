"""Drift and trend: Kendall/Theil–Sen against schedule position, and the stratified Jonckheere test.

Trend tests across an ordered factor (batch size) serve the study-specific analyses; the drift of a
measurement with its position in the schedule serves the validity checks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps

from kit.errors import AnalysisError
from kit.stats.common import AsDict, check_alternative, check_level, check_sample


@dataclass(frozen=True)
class Trend(AsDict):
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
    pos = check_sample(position, name="position", where=where, min_n=3)
    val = check_sample(value, name="value", where=where, min_n=3)
    conf = check_level(conf, "conf", where)
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




class StratumRow(TypedDict):
    """One stratum's share of a :class:`StratifiedTrend` (its JSON shape in the study analyses)."""

    stratum: str
    n: int
    s: float
    var_s: float
    concordance: float


@dataclass(frozen=True)
class StratifiedTrend(AsDict):
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
    per_stratum: tuple[StratumRow, ...] = ()
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
    per_stratum: tuple[StratumRow, ...]


def _tie_counts(v: np.ndarray) -> np.ndarray:
    """Sizes of the groups of equal values in ``v`` (np.unique's counts, from one sort without its bookkeeping)."""
    s = np.sort(v)
    edges = np.flatnonzero(s[1:] != s[:-1]) + 1
    return np.diff(np.concatenate(([0], edges, [v.size]))).astype(float)


def _kendall_s_var(x: np.ndarray, y: np.ndarray) -> tuple[float, float, int]:
    """Kendall's S, its permutation variance under H0 with ties in x and y (Kendall 1970), pairs with x_i != x_j.

    S is half the sum over the whole sign matrix (it is antisymmetric, so each pair counts twice), which spares
    the upper-triangle indexing: the claims simulation calls this some 10^5 times. Sums of small integers in
    float64 are exact, so S and the pair count are the same numbers the triangle gives."""
    n = x.size
    dx = np.sign(np.subtract.outer(x, x))
    dy = np.sign(np.subtract.outer(y, y))
    s = float((dx * dy).sum()) / 2.0
    t, u = _tie_counts(x), _tie_counts(y)
    var = (n * (n - 1) * (2 * n + 5) - np.sum(t * (t - 1) * (2 * t + 5)) - np.sum(u * (u - 1) * (2 * u + 5))) / 18.0
    if n > 2:
        var += np.sum(t * (t - 1) * (t - 2)) * np.sum(u * (u - 1) * (u - 2)) / (9.0 * n * (n - 1) * (n - 2))
    var += np.sum(t * (t - 1)) * np.sum(u * (u - 1)) / (2.0 * n * (n - 1))
    pairs = int(np.count_nonzero(dx)) // 2
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
    alternative = check_alternative(alternative, where)
    method = ("stratified Jonckheere-Terpstra (Kendall's S between level and value within each stratum, summed; "
              "exact permutation variance with ties, Kendall 1970; normal approximation)")
    tot_s = tot_var = 0.0
    n = pairs = used = 0
    per: list[StratumRow] = []
    for i, (sx, sy) in enumerate(strata):
        x = check_sample(sx, name="x", where=where)
        y = check_sample(sy, name="y", where=where)
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
