"""Tests across k groups and an ordered factor, and what a "no trend" can claim (pure).

The study folders compare more than two groups where the kit's two-sample tests
(:mod:`kit.stats`) do not reach: a value against batch size (Patel's
GPU power "did not significantly change with batch size"), a curve of k points.
Two things live here rather than beside the two-arm tests:

* :func:`kruskal_wallis`, written out with R's arithmetic (``stats::kruskal.test``:
  mid-ranks, the tie-corrected H, always the chi-square approximation with k − 1
  degrees of freedom; R has no exact Kruskal–Wallis and neither has scipy), with
  the degenerate shapes (one group, all values equal) answered as R answers them
  rather than scipy's exception;
* :func:`trend_mde`, the smallest monotone trend the stratified Jonckheere–Terpstra
  test (:func:`kit.stats.stratified_trend`) would have detected with a
  given power, by a seeded simulation at the run's own layout (the same strata,
  levels and units) and its observed noise. A non-rejection of "no trend" is not
  evidence of no trend: it says only that a trend of this size or more was not
  there, and :func:`no_trend_text` words it so.

The stratified Jonckheere–Terpstra test itself is in kit.stats.trends; its p-value is
the normal approximation on Kendall's S with the exact permutation variance with
ties (Kendall 1970), which is what ``coin::independence_test`` with ordered
scores and strata ("blocks") gives asymptotically and what R's
``clinfun::jonckheere.test`` uses whenever ties are present or n >= 100. For
unstratified, untied data with n < 100 clinfun would use the exact distribution;
the kit's callers test within strata, where only the asymptotic form is defined.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps

from kit.errors import AnalysisError
from kit.stats.common import AsDict, check_alternative, check_level, check_sample

__all__ = ["KruskalWallis", "TrendMDE", "kruskal_wallis", "no_trend_text", "trend_mde"]

# ---------------------------------------------------------------------------------------------- Kruskal-Wallis


@dataclass(frozen=True)
class KruskalWallis(AsDict):
    """R's ``kruskal.test(list(g1, g2, ...))``: H (tie-corrected), df = k − 1, p from the chi-square."""

    method: str
    statistic: float  # Kruskal-Wallis chi-squared (R's name), NaN where R gives NaN
    df: int
    p: float  # NaN where R gives NA
    n: int
    groups: int  # non-empty groups (R drops empty factor levels)
    ties: bool
    tie_correction: float  # 1 − Σ(t³ − t)/(n³ − n), the divisor of H
    call: str
    reason: str | None = None


def kruskal_wallis(groups: Sequence[ArrayLike]) -> KruskalWallis:
    """Kruskal–Wallis rank-sum test of k groups, R's ``kruskal.test`` to the last digit.

    H = (12 / (n(n+1)) · Σ R_j² / n_j − 3(n+1)) / (1 − Σ(t³ − t)/(n³ − n)) with mid-ranks R, and
    p = P(χ²_{k−1} ≥ H). R never computes an exact distribution here (nor does scipy), so neither does
    the kit; the approximation is poor with fewer than about 5 values per group, which the caller
    should say beside the p-value. Empty groups are dropped as R drops unused factor levels. Fewer
    than two non-empty groups: R stops with an error, the kit returns NaN with the reason. Every value
    equal: R returns a NaN statistic and NA p-value (0/0), the kit NaN with the reason, never a p of 1
    made up for data that hold no ranking.
    """
    where = "ordered.kruskal_wallis"
    arrays = [check_sample(g, name=f"group {i}", where=where, min_n=0) for i, g in enumerate(groups)]
    arrays = [a for a in arrays if a.size]
    call = "R: kruskal.test(list(g1, g2, ...)) (stats); chi-square approximation, tie-corrected"
    method = "Kruskal-Wallis rank sum test"
    n = int(sum(a.size for a in arrays))
    k = len(arrays)
    if k < 2:
        return KruskalWallis(method, math.nan, max(k - 1, 0), math.nan, n, k, False, math.nan, call,
                             reason="fewer than two non-empty groups: nothing to compare (R: 'all observations "
                                    "are in the same group')")
    allv = np.concatenate(arrays)
    ranks = sps.rankdata(allv)
    _, counts = np.unique(allv, return_counts=True)
    ties = bool((counts > 1).any())
    correction = 1.0 - float(np.sum(counts.astype(float) ** 3 - counts)) / (float(n) ** 3 - n)
    if correction <= 0:
        return KruskalWallis(method, math.nan, k - 1, math.nan, n, k, ties, correction, call,
                             reason="every value is equal: no ranking, H is 0/0 (R: NaN statistic, NA p-value)")
    bounds = np.cumsum([0, *[a.size for a in arrays]])
    sums = [float(ranks[bounds[i]:bounds[i + 1]].sum()) for i in range(k)]
    h = (12.0 / (n * (n + 1)) * sum(s * s / a.size for s, a in zip(sums, arrays, strict=True)) - 3.0 * (n + 1))
    h /= correction
    return KruskalWallis(method, float(h), k - 1, float(sps.chi2.sf(h, k - 1)), n, k, ties, correction, call)


# ---------------------------------------------------------------------------------------------- trend MDE


@dataclass(frozen=True)
class TrendMDE(AsDict):
    """The smallest monotone trend (value change per step of the ordered factor) detected with ``power``.

    ``mde_per_step`` is None when no trend, however large, can reach ``level`` with this layout
    (too few pairs at different levels), or when the noise is unknown; ``reason`` says which.
    """

    mde_per_step: float | None
    power: float  # the target power
    power_at_mde: float | None  # the simulated power at mde_per_step (>= power, within the bisection's step)
    level: float  # the test's level the power is computed at (a Holm family: alpha / m, say so)
    alternative: str
    noise_sd: float | None  # pooled within-stratum residual SD of the observed values (value units)
    noise_df: int
    steps: int  # levels of the factor across all strata, minus one
    n: int  # units in strata with two or more levels
    strata: int
    max_z: float | None  # |z| when every pair at different levels is concordant: the test's ceiling
    n_sim: int
    seed: int
    method: str
    reason: str | None = None


def _layout(strata: Sequence[tuple[ArrayLike, ArrayLike]], where: str
            ) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """The strata that can show a trend (two or more levels), as (step index, value), and the level grid."""
    checked = []
    for i, (sx, sy) in enumerate(strata):
        x = check_sample(sx, name="x", where=where, min_n=0)
        y = check_sample(sy, name="y", where=where, min_n=0)
        if x.size != y.size:
            raise AnalysisError(f"stratum {i}: x and y differ in length ({x.size} vs {y.size})", where=where,
                                fix="pass one level per value")
        checked.append((x, y))
    grid = np.unique(np.concatenate([x for x, _ in checked])) if checked else np.empty(0)
    kept = [(np.searchsorted(grid, x).astype(float), y) for x, y in checked if np.unique(x).size >= 2]
    return kept, grid


def _noise(kept: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float | None, int]:
    """Pooled residual SD after a straight line in the step index within each stratum, and its df.

    The line takes out each stratum's level and any linear trend, so a trend present in the data does
    not inflate the noise the MDE is computed at; curvature (a trend that levels off) stays in the
    residuals and makes the MDE larger (conservative). Strata of two values have no residual df.
    """
    rss, df = 0.0, 0
    for s, y in kept:
        if y.size < 3:
            continue
        coef = np.polyfit(s, y, 1)
        rss += float(np.sum((y - np.polyval(coef, s)) ** 2))
        df += int(y.size - 2)
    return (math.sqrt(rss / df), df) if df > 0 else (None, 0)


class _Simulator:
    """Stratified S for many simulated draws at once: the pairs at different levels are fixed by the layout."""

    def __init__(self, kept: list[tuple[np.ndarray, np.ndarray]]) -> None:
        steps, i_idx, j_idx, sign, var = [], [], [], [], 0.0
        offset = 0
        for s, _ in kept:
            n = s.size
            iu, ju = np.triu_indices(n, 1)
            dx = np.sign(s[ju] - s[iu])
            keep = dx != 0
            i_idx.append(iu[keep] + offset)
            j_idx.append(ju[keep] + offset)
            sign.append(dx[keep])
            t = np.unique(s, return_counts=True)[1].astype(float)
            # Kendall's permutation variance of S with ties in x only (simulated values are continuous)
            var += (n * (n - 1) * (2 * n + 5) - float(np.sum(t * (t - 1) * (2 * t + 5)))) / 18.0
            steps.append(s)
            offset += n
        self.steps = np.concatenate(steps)
        self.i = np.concatenate(i_idx)
        self.j = np.concatenate(j_idx)
        self.sign = np.concatenate(sign)
        self.sd_s = math.sqrt(var)
        self.pairs = int(self.sign.size)

    def z(self, noise: np.ndarray, delta: float) -> np.ndarray:
        """z of each draw (rows of ``noise``) with ``delta`` per step added."""
        y = noise + delta * self.steps
        s = (np.sign(y[:, self.j] - y[:, self.i]) * self.sign).sum(axis=1)
        return np.asarray(s / self.sd_s, dtype=float)


def _rejects(z: np.ndarray, level: float, alternative: str) -> np.ndarray:
    if alternative == "two-sided":
        return np.asarray(np.abs(z) > sps.norm.isf(level / 2))
    if alternative == "greater":
        return np.asarray(z > sps.norm.isf(level))
    return np.asarray(z < -sps.norm.isf(level))


def trend_mde(strata: Sequence[tuple[ArrayLike, ArrayLike]], *, level: float, power: float = 0.8,
              alternative: str = "two-sided", n_sim: int = 2000, seed: int = 0,
              noise_sd: float | None = None) -> TrendMDE:
    """Smallest monotone trend per step of the factor that the stratified Jonckheere–Terpstra test detects.

    ``strata``: the (level, value) pairs exactly as given to :func:`kit.stats.stratified_trend`.
    Each simulated draw keeps the run's layout (which levels each stratum measured, how many units) and
    replaces the values by ``delta · step + noise``: step = the level's position in the grid of all
    levels (batch sizes 16, 32, 64 are steps 0, 1, 2 wherever they occur), noise normal with the
    observed within-stratum residual SD (:func:`_noise`, or ``noise_sd``). The same ``n_sim`` noise
    draws serve every delta (common random numbers: each draw's S only grows with delta, so the
    estimated power is monotone in it for a one-sided test) and delta is bisected to 0.5 % of itself.
    Power is at ``level``: for a row decided by Holm over m rows pass alpha / m, the threshold the row
    must pass when it is the smallest p of its family. Stratum level shifts do not matter (the test
    compares within strata), so none are simulated. ``alternative="greater"``: the value rises.

    2000 draws give the power to about ±0.01 (binomial SE at 0.8: 0.009); a layout of 45 strata of 5
    levels runs in well under a second.
    """
    where = "ordered.trend_mde"
    level = check_level(level, "level", where)
    power = check_level(power, "power", where)
    alternative = check_alternative(alternative, where)
    kept, grid = _layout(strata, where)
    n = int(sum(y.size for _, y in kept))
    method = (f"seeded simulation ({n_sim} draws, seed {seed}) of the stratified Jonckheere-Terpstra test at the "
              "run's strata and levels; values = delta x level step + normal noise at the pooled within-stratum "
              "residual SD (a straight line per stratum removed); delta bisected to 0.5 %")
    sd, df = (noise_sd, 0) if noise_sd is not None else _noise(kept)
    steps = max(int(grid.size) - 1, 0)

    def result(mde: float | None, at: float | None, max_z: float | None, reason: str | None = None) -> TrendMDE:
        return TrendMDE(mde, power, at, level, alternative, sd, df, steps, n, len(kept), max_z, n_sim, seed,
                        method, reason)

    if not kept:
        return result(None, None, None, "no stratum holds two levels of the factor: no trend can be tested")
    sim = _Simulator(kept)
    max_z = sim.pairs / sim.sd_s
    crit = sps.norm.isf(level / 2 if alternative == "two-sided" else level)
    if max_z <= crit:
        return result(None, None, float(max_z), (
            f"even a trend that orders every pair gives |z| = {max_z:.3g}, not beyond {crit:.3g} (level {level:.3g}): "
            f"{sim.pairs} pairs at different levels are too few for this test to detect any trend"))
    if sd is None or not sd > 0:
        return result(None, None, float(max_z),
                      "the noise is unknown (no stratum has three or more values, or they all lie on a line)")
    noise = np.random.default_rng(seed).standard_normal((n_sim, sim.steps.size)) * sd
    sign = -1.0 if alternative == "less" else 1.0

    def pw(delta: float) -> float:
        return float(_rejects(sim.z(noise, sign * delta), level, alternative).mean())

    lo, hi = 0.0, sd
    while pw(hi) < power:
        lo, hi = hi, hi * 2
        if hi > 1e6 * sd:  # unreachable after the max_z check, kept as a guard against a silent endless loop
            return result(None, None, float(max_z), "power not reached")
    while hi - lo > 0.005 * hi:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if pw(mid) >= power else (mid, hi)
    return result(float(hi), pw(hi), float(max_z))


def no_trend_text(mde: TrendMDE, unit: str, step: str = "step of the factor") -> str:
    """Neutral words for a non-rejection: what was not detected and what would have been."""
    if mde.mde_per_step is None:
        return f"no monotone trend detected; this layout could not have detected one ({mde.reason})"
    return (f"no monotone trend detected; a trend of {mde.mde_per_step:.3g} {unit} per {step} or more would have "
            f"been detected with power {mde.power:.2g} (level {mde.level:.3g}, simulated)")
