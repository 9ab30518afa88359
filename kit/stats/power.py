"""Power of the kit's rank tests at small n, from their actual rejection regions (pure: arrays in, numbers out).

The asymptotic formula the kit used before (a t-test's MDE scaled by the signed-rank test's
efficiency 3/pi) overstates power at the n the studies run: at n = 11 and a Holm level of
0.05/30 the exact signed-rank test rejects only when all 11 differences share a sign, and the
formula's "80 %" was 28 % (issue 25). Here power is simulated against the test the kit really
runs, at its level and n:

* Wilcoxon signed-rank, two-sided, as :func:`kit.stats.rank_tests.wilcoxon_paired` chooses it:
  exact null distribution up to ``EXACT_MAX_N`` non-zero untied differences, else the normal
  approximation with continuity correction. Either way the test rejects "positive" exactly when
  R+ >= n(n+1)/2 - c for a critical count c fixed by (n, level, exact), and R+ counts the Walsh
  averages (d_i + d_j)/2 above 0, so the test rejects after a shift delta exactly when
  delta > -W_(c), the (c+1)-th smallest Walsh average of the unshifted noise. Power at delta is
  the share of simulated noise samples whose threshold -W_(c) lies below delta, and the MDE at
  power 0.8 is the 0.8-quantile of those thresholds: no search, no approximation but the
  simulation's (``SIMS`` standard-normal samples, fixed seed: SE of a power of 0.8 is 0.006).
* Mann-Whitney U (two runs): the same with the pairwise differences b_j - a_i in place of the
  Walsh averages and the exact U distribution (both samples <= ``EXACT_MAX_N``, no ties).
* Equivalence (TOST at level alpha, i.e. the 1 - 2 alpha rank interval inside +-margin): the
  interval's ends are order statistics of the same averages, so the n a "no change" needs is
  found the same way.

Ties change which test runs (the normal approximation, whose smallest p is larger) and, on coarse
data, drop zero differences and shrink the tie-corrected variance: ``ties=True`` simulates the kit's
test on data rounded to the metric's resolution (``step_sd``, in SDs; the design's default
``TIES_STEP_SD``), zeros dropped (issue 38: the continuous-noise approximation used before had power
0.69 instead of 0.80 on the DLBench accuracy row at half-SD steps). Beyond ``SIM_MAX_N`` the
normal-theory formula is within 0.01 of the simulated power and is used instead. Results are cached in
memory per (n, level, power): a design table or a comparison of many rows simulates each distinct n once.

The simulated order statistics cost seconds per process, so every function that needs them takes
``keep``, the store that hands them out (:data:`Keep`: called with the draw's kind, arguments and shape
and the function that simulates it). The default, :func:`simulate_now`, keeps nothing; the kit's disk
cache (:mod:`kit.analysis.power_cache`, which binds these functions to it under the same names) lives
outside this package because it reads the environment and the user's key. What a kept draw depends on
besides its arguments is :func:`simulation_facts` (the simulation's code, sizes, seed and numpy version),
so a store can key its entries by it.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np

from kit.stats.common import EXACT_MAX_N
from kit.stats.normal import norm_isf, norm_ppf, norm_sf
from kit.stats.ranks import signed_rank_pmf as _signed_rank_pmf

POWER = 0.8
SIMS = 4000
SIMS_LARGE = 2000  # n > 150: a simulation costs n^2/2 per draw; SE of a power of 0.8 is then 0.009
SIM_SEED = 20261126
SIM_MAX_N = 400  # beyond: the normal-theory formula (ARE 3/pi), within 0.01 in power there
SEARCH_SIM_MAX_N = 150  # n_for: beyond, the formula's n (a forecast, within a few % of the simulated one)
ARE_SIGNED_RANK = 3 / math.pi
_CHUNK_VALUES = 4_000_000  # floats per simulation chunk (memory bound at n = 400: ~32 MB)


Simulate = Callable[[], np.ndarray]
# kind ("paired", "unpaired"), arguments (n..., ks...), shape (sims, len(ks)), the simulation: the draws
Keep = Callable[[str, tuple[int, ...], tuple[int, int], Simulate], np.ndarray]


def simulate_now(kind: str, args: tuple[int, ...], shape: tuple[int, int], simulate: Simulate) -> np.ndarray:
    """The store that keeps nothing: every draw is simulated when asked (the in-memory caches still hold the
    thresholds derived from it for the process)."""
    return simulate()


def _level_key(level: float) -> float:
    """Levels rounded to 12 significant digits: alpha/m computed two ways hits one cache entry."""
    return float(f"{level:.12g}")


# --------------------------------------------------------------------------- critical counts


@lru_cache(maxsize=256)
def _signed_rank_cdf(n: int) -> np.ndarray:
    return np.cumsum(_signed_rank_pmf(n))


def signed_rank_critical(n: int, level: float, exact: bool) -> int:
    """Largest t such that T = min(R+, R-) = t gives two-sided p < ``level`` (-1: no outcome rejects).

    The p-values are those :func:`kit.stats.rank_tests.wilcoxon_paired` reports: exact 2 P(T+ <= t), or
    the normal approximation 2 sf((n(n+1)/4 - t - 0.5) / se) with continuity correction.
    """
    if n <= 0:
        return -1
    mean = n * (n + 1) / 4
    if exact:
        cdf = _signed_rank_cdf(n)
        ok = np.nonzero(np.minimum(1.0, 2.0 * cdf[: int(mean) + 1]) < level)[0]
        return int(ok[-1]) if ok.size else -1
    se = math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    # p(t) is increasing in t below the mean: solve 2 sf(z) < level for the largest integer t
    z = norm_isf(level / 2)
    t = math.floor(mean - 0.5 - z * se)
    while t >= 0 and 2 * norm_sf((mean - t - 0.5) / se) >= level:
        t -= 1
    while t + 1 < mean and 2 * norm_sf((mean - (t + 1) - 0.5) / se) < level:
        t += 1
    return max(t, -1)


@lru_cache(maxsize=256)
def _rank_sum_cdf(n_a: int, n_b: int) -> np.ndarray:
    """Null cdf of the Mann-Whitney U for samples of n_a and n_b untied values (counts of subsets)."""
    # c[m][u]: ways to choose m of the first j positions with rank-sum offset u; grown column by column
    ways = [np.zeros(1, dtype=float) for _ in range(n_a + 1)]
    ways[0][0] = 1.0
    for j in range(1, n_a + n_b + 1):
        for m in range(min(j, n_a), 0, -1):
            # adding position j as a member shifts U by the number of non-members before it: j - m
            shift = j - m
            prev = ways[m - 1]
            cur = ways[m]
            size = max(cur.size, prev.size + shift)
            nxt = np.zeros(size)
            nxt[: cur.size] += cur
            nxt[shift: shift + prev.size] += prev
            ways[m] = nxt
    pmf = ways[n_a][: n_a * n_b + 1]
    pmf = np.pad(pmf, (0, n_a * n_b + 1 - pmf.size))
    return np.cumsum(pmf / pmf.sum())


def rank_sum_critical(n_a: int, n_b: int, level: float, exact: bool) -> int:
    """Largest u such that min(U_a, U_b) = u gives two-sided Mann-Whitney p < ``level`` (-1: none)."""
    if min(n_a, n_b) <= 0:
        return -1
    mean = n_a * n_b / 2
    if exact:
        cdf = _rank_sum_cdf(n_a, n_b)
        ok = np.nonzero(np.minimum(1.0, 2.0 * cdf[: int(mean) + 1]) < level)[0]
        return int(ok[-1]) if ok.size else -1
    se = math.sqrt(n_a * n_b * (n_a + n_b + 1) / 12)
    z = norm_isf(level / 2)
    t = math.floor(mean - 0.5 - z * se)
    while t >= 0 and 2 * norm_sf((mean - t - 0.5) / se) >= level:
        t -= 1
    while t + 1 < mean and 2 * norm_sf((mean - (t + 1) - 0.5) / se) < level:
        t += 1
    return max(t, -1)


# --------------------------------------------------------------------------- smallest attainable p


def min_p_exact(n: int) -> float:
    """Smallest two-sided exact signed-rank p with n non-zero untied differences: 2 / 2^n (capped at 1)."""
    return min(1.0, 2.0 / 2.0 ** n) if n > 0 else 1.0


def min_p_asymptotic(n: int) -> float:
    """Smallest two-sided p of the normal approximation (continuity-corrected, no ties) at R+ = 0."""
    if n <= 0:
        return 1.0
    mean = n * (n + 1) / 4
    sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    return float(min(1.0, 2 * norm_sf((mean - 0.5) / sd)))


def min_p(n: int) -> float:
    """Smallest attainable p under the kit's rule: exact up to EXACT_MAX_N pairs, else the approximation."""
    return min_p_exact(n) if n <= EXACT_MAX_N else min_p_asymptotic(n)


# --------------------------------------------------------------------------- order statistics of the noise


def _noise(rows: int, cols: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, cols))


def _sims(values_per_draw: int) -> int:
    return SIMS if values_per_draw <= 150 * 151 // 2 else SIMS_LARGE


def simulation_facts() -> str | None:
    """What the simulated order statistics depend on besides their arguments: the simulation's code, sizes, seed
    and numpy version (None: the code is not readable, so a store cannot tell its entries apart)."""
    try:
        code = "".join(inspect.getsource(f) for f in (_noise, _sims, _simulate_paired, _simulate_unpaired))
    except (OSError, TypeError):
        return None
    return f"{code}\0{SIMS}\0{SIMS_LARGE}\0{SIM_SEED}\0{_CHUNK_VALUES}\0{np.__version__}"


def _paired_order_stats(n: int, ks: tuple[int, ...], keep: Keep = simulate_now) -> np.ndarray:
    """(sims, len(ks)): the k-th smallest Walsh average of each simulated N(0, 1) sample of n differences."""
    shape = (_sims(n * (n + 1) // 2), len(ks))
    return keep("paired", (n, *ks), shape, lambda: _simulate_paired(n, ks))


def _unpaired_order_stats(n_a: int, n_b: int, ks: tuple[int, ...], keep: Keep = simulate_now) -> np.ndarray:
    """(sims, len(ks)): the k-th smallest pairwise difference b_j - a_i of simulated N(0, 1) samples."""
    shape = (_sims(n_a * n_b), len(ks))
    return keep("unpaired", (n_a, n_b, *ks), shape, lambda: _simulate_unpaired(n_a, n_b, ks))


def _simulate_paired(n: int, ks: tuple[int, ...]) -> np.ndarray:
    iu, ju = np.triu_indices(n)
    sims = _sims(iu.size)
    z = _noise(sims, n, SIM_SEED + n)
    per = max(1, _CHUNK_VALUES // iu.size)
    out = np.empty((sims, len(ks)))
    for s in range(0, sims, per):
        w = 0.5 * (z[s: s + per, iu] + z[s: s + per, ju])
        out[s: s + per] = np.partition(w, list(ks), axis=1)[:, list(ks)]
    return out


def _simulate_unpaired(n_a: int, n_b: int, ks: tuple[int, ...]) -> np.ndarray:
    sims = _sims(n_a * n_b)
    z = _noise(sims, n_a + n_b, SIM_SEED + 7919 * n_a + n_b)
    a, b = z[:, :n_a], z[:, n_a:]
    per = max(1, _CHUNK_VALUES // (n_a * n_b))
    out = np.empty((sims, len(ks)))
    for s in range(0, sims, per):
        d = (b[s: s + per, None, :] - a[s: s + per, :, None]).reshape(-1, n_a * n_b)
        out[s: s + per] = np.partition(d, list(ks), axis=1)[:, list(ks)]
    return out


def _exact_paired(n: int, ties: bool) -> bool:
    return n <= EXACT_MAX_N and not ties


def _exact_unpaired(n_a: int, n_b: int, ties: bool) -> bool:
    return n_a <= EXACT_MAX_N and n_b <= EXACT_MAX_N and not ties


# --------------------------------------------------------------------------- MDE and power


@lru_cache(maxsize=4096)
def _paired_thresholds(n: int, level: float, ties: bool, keep: Keep) -> np.ndarray | None:
    c = signed_rank_critical(n, level, _exact_paired(n, ties))
    if c < 0:
        return None
    return np.sort(-_paired_order_stats(n, (c,), keep)[:, 0])


@lru_cache(maxsize=4096)
def _unpaired_thresholds(n_a: int, n_b: int, level: float, ties: bool, keep: Keep) -> np.ndarray | None:
    c = rank_sum_critical(n_a, n_b, level, _exact_unpaired(n_a, n_b, ties))
    if c < 0:
        return None
    return np.sort(-_unpaired_order_stats(n_a, n_b, (c,), keep)[:, 0])


def _formula_mde(level: float, power: float, scale: float) -> float:
    return float((norm_isf(level / 2) + norm_ppf(power)) * scale / math.sqrt(ARE_SIGNED_RANK))


def mde_paired_sd(n: int, level: float, power: float = POWER, ties: bool = False,
                  step_sd: float | None = None, *, keep: Keep = simulate_now) -> float:
    """Smallest shift, in SDs of the paired differences, the signed-rank test detects with ``power``.

    inf when no outcome of n differences can reach p < level (the design cannot decide). ``ties``: coarse data,
    simulated on values rounded to steps of ``step_sd`` SDs (default TIES_STEP_SD) with zeros dropped
    (:func:`mde_rounded_sd`; see "coarse data" below).
    """
    if n <= 0:
        return math.inf
    step = TIES_STEP_SD if step_sd is None else float(step_sd)
    if ties and n <= SIM_MAX_N and step >= MIN_GRID_STEP_SD:
        return mde_rounded_sd(n, n, True, _level_key(level), power, step)
    if n > SIM_MAX_N:
        if signed_rank_critical(n, level, False) < 0:
            return math.inf
        return _formula_mde(level, power, 1 / math.sqrt(n))
    th = _paired_thresholds(n, _level_key(level), ties, keep)
    if th is None:
        return math.inf
    return float(np.quantile(th, power))


def power_paired(delta_sd: float, n: int, level: float, ties: bool = False, *, keep: Keep = simulate_now) -> float:
    """Power of the two-sided signed-rank test at a shift of ``delta_sd`` SDs (upper tail; the lower is < level/2)."""
    if n <= 0 or n > SIM_MAX_N:
        raise ValueError(f"power_paired is simulated for 1 <= n <= {SIM_MAX_N}, not {n}")
    th = _paired_thresholds(n, _level_key(level), ties, keep)
    return 0.0 if th is None else float(np.searchsorted(th, abs(delta_sd), side="left") / th.size)


def mde_unpaired_sd(n_a: int, n_b: int, level: float, power: float = POWER, ties: bool = False,
                    step_sd: float | None = None, *, keep: Keep = simulate_now) -> float:
    """Smallest shift, in SDs of either sample, the two-sided Mann-Whitney test detects with ``power`` (``ties``:
    on values rounded to steps of ``step_sd`` SDs, as :func:`mde_paired_sd`)."""
    if min(n_a, n_b) <= 0:
        return math.inf
    step = TIES_STEP_SD if step_sd is None else float(step_sd)
    if ties and max(n_a, n_b) <= SIM_MAX_N and n_a * n_b <= 40_000 and step >= MIN_GRID_STEP_SD:
        return mde_rounded_sd(n_a, n_b, False, _level_key(level), power, step)
    if max(n_a, n_b) > SIM_MAX_N or n_a * n_b > 40_000:
        if rank_sum_critical(n_a, n_b, level, False) < 0:
            return math.inf
        return _formula_mde(level, power, math.sqrt(1 / n_a + 1 / n_b))
    th = _unpaired_thresholds(n_a, n_b, _level_key(level), ties, keep)
    if th is None:
        return math.inf
    return float(np.quantile(th, power))


def power_unpaired(delta_sd: float, n_a: int, n_b: int, level: float, ties: bool = False, *,
                   keep: Keep = simulate_now) -> float:
    """Power of the two-sided Mann-Whitney test at a shift of ``delta_sd`` SDs (as :func:`power_paired`)."""
    th = _unpaired_thresholds(n_a, n_b, _level_key(level), ties, keep)
    return 0.0 if th is None else float(np.searchsorted(th, abs(delta_sd), side="left") / th.size)


# --------------------------------------------------------------------------- equivalence (TOST)


@lru_cache(maxsize=4096)
def _equivalence_quantile(n_a: int, n_b: int, paired: bool, alpha: float, power: float, keep: Keep) -> float:
    """The margin, in SDs, that the 1 - 2 alpha rank interval stays inside with ``power`` when nothing changed."""
    if paired:
        c = signed_rank_critical(n_a, 2 * alpha, _exact_paired(n_a, False))
        total = n_a * (n_a + 1) // 2
        if c < 0:
            return math.inf
        lo_hi = _paired_order_stats(n_a, (c, total - 1 - c), keep)
    else:
        c = rank_sum_critical(n_a, n_b, 2 * alpha, _exact_unpaired(n_a, n_b, False))
        total = n_a * n_b
        if c < 0:
            return math.inf
        lo_hi = _unpaired_order_stats(n_a, n_b, (c, total - 1 - c), keep)
    reach = np.maximum(-lo_hi[:, 0], lo_hi[:, 1])
    return float(np.quantile(reach, power))


def equivalence_margin_sd(n_a: int, n_b: int, paired: bool, alpha: float, power: float = POWER, *,
                          keep: Keep = simulate_now) -> float:
    """Smallest margin (SDs of the differences, or of either sample) that TOST at ``alpha`` shows with ``power``
    when the true change is zero."""
    if min(n_a, n_b) <= 0:
        return math.inf
    big = n_a > SIM_MAX_N if paired else (max(n_a, n_b) > SIM_MAX_N or n_a * n_b > 40_000)
    if big:
        scale = 1 / math.sqrt(n_a) if paired else math.sqrt(1 / n_a + 1 / n_b)
        return float((norm_isf(alpha) + norm_isf((1 - power) / 2)) * scale / math.sqrt(ARE_SIGNED_RANK))
    return _equivalence_quantile(n_a, n_b, paired, _level_key(alpha), power, keep)


def n_for(target_sd: float, measure: str, *, paired: bool, level: float, power: float = POWER,
          n_min: int = 2, n_max: int = 100_000, keep: Keep = simulate_now) -> int | None:
    """Smallest n (pairs, or trials per run with equal n) whose ``measure`` ("difference": the MDE at
    ``level``; "equivalence": the TOST margin at ``level`` = alpha) is at most ``target_sd``; None beyond n_max."""
    if not target_sd > 0 or not math.isfinite(target_sd):
        return None

    def need(n: int) -> float:
        if measure == "difference":
            return (mde_paired_sd(n, level, power, keep=keep) if paired
                    else mde_unpaired_sd(n, n, level, power, keep=keep))
        return equivalence_margin_sd(n, n, paired, level, power, keep=keep)

    # the normal-theory n as a start (about right for large n), then the smallest n that simulation confirms
    z = (norm_isf(level / 2) + norm_ppf(power)) if measure == "difference" else (norm_isf(level) + norm_isf((1 - power) / 2))
    guess = max(n_min, math.ceil((1.0 if paired else 2.0) * (z / target_sd) ** 2 / ARE_SIGNED_RANK))
    if guess > n_max:
        return None
    if guess > SEARCH_SIM_MAX_N:
        return guess
    lo, hi = n_min, guess
    while need(hi) > target_sd:  # the formula overstates power at small n: grow until it holds
        lo, hi = hi + 1, max(hi + 1, math.ceil(hi * 1.25))
        if hi > n_max:
            return None
    while lo < hi:  # smallest n in [lo, hi] that holds (need() decreases with n up to simulation noise)
        mid = (lo + hi) // 2
        if need(mid) <= target_sd:
            hi = mid
        else:
            lo = mid + 1
    return hi


# --------------------------------------------------------------------------- coarse data (ties)
#
# ``ties=True`` used to mean "the normal-approximation test's critical count on continuous noise": right only where
# values are fine enough that a tie is a rare accident. Coarse values (an accuracy on a few thousand test images,
# a temperature in whole degrees) lie on a grid: their differences are multiples of the step, zeros are dropped
# (fewer pairs), and the many ties shrink the tie-corrected variance. On data rounded to half an SD of the paired
# differences, the old figure's "80 %" was 0.69 on the DLBench accuracy row (n 12, alpha/m 0.05/16; issue 38).
# So the MDE with ties is now simulated on data rounded to the metric's resolution, ``step_sd`` (the step in SDs of
# the paired differences, or of either sample), zeros dropped, through the kit's own decision rule (exact where no
# tie and no zero is left, else the tie-corrected normal approximation with continuity correction:
# kit.stats.rank_tests.wilcoxon_paired and mann_whitney), at the shift where the simulated power crosses ``power``.

TIES_STEP_SD = 0.5  # the design's coarse case when it does not know the metric's resolution against its noise
# Finer than this (in SDs) a grid is as good as continuous for the test: a tie is an accident, and the old figure (the
# normal approximation's critical count on continuous noise) applies; it also bounds the grid the simulation counts on.
MIN_GRID_STEP_SD = 0.05
ROUNDED_SIMS = 4000  # SE of a power of 0.8: 0.006
_BISECT_STEPS = 22


def _grid_counts(k: np.ndarray, top: int) -> np.ndarray:
    """(rows, top + 1) counts of each non-negative integer 0..top in each row of ``k``."""
    rows = k.shape[0]
    flat = (np.arange(rows)[:, None] * (top + 1) + k).ravel()
    return np.bincount(flat, minlength=rows * (top + 1)).reshape(rows, top + 1)


def signed_rank_rejects_on_grid(k: np.ndarray, level: float) -> np.ndarray:
    """Per row of integer differences ``k`` (the data in units of its step): does the kit's two-sided signed-rank
    test (zeros dropped; exact without ties or zeros, else the tie-corrected normal approximation with continuity
    correction) give p < level? Vectorised; tests/test_power.py checks it against kit.stats.wilcoxon_paired."""
    k = np.asarray(k, dtype=np.int64)
    rows, n = k.shape
    mag = np.abs(k)
    top = int(mag.max()) if mag.size else 0
    counts = _grid_counts(mag, top)
    zeros = counts[:, 0]
    nz = n - zeros
    c = counts.astype(float)
    c[:, 0] = 0.0
    below = np.cumsum(c, axis=1) - c  # non-zero values below each magnitude
    midrank = below + (c + 1.0) / 2.0
    ranks = np.take_along_axis(midrank, mag, axis=1)
    t_plus = np.where(k > 0, ranks, 0.0).sum(axis=1)
    tie_sum = (c ** 3 - c).sum(axis=1)
    untied = (tie_sum == 0) & (zeros == 0) & (nz <= EXACT_MAX_N)
    out = np.zeros(rows, dtype=bool)
    for m in np.unique(nz[untied]):
        sel = untied & (nz == m)
        cdf = _signed_rank_cdf(int(m))
        tp = t_plus[sel].astype(np.int64)
        low = np.minimum(tp, m * (m + 1) // 2 - tp)
        out[sel] = np.minimum(1.0, 2.0 * cdf[low]) < level
    approx = ~untied & (nz > 0)
    m = nz[approx].astype(float)
    mean = m * (m + 1) / 4.0
    var = m * (m + 1) * (2 * m + 1) / 24.0 - tie_sum[approx] / 48.0
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.sqrt(np.maximum(var, 0.0))
        z = (t_plus[approx] - mean) / se
        z = z - np.sign(z) * 0.5 / se
        p = 2.0 * norm_sf(np.abs(z))
    out[approx] = np.where(se > 0, p < level, False)
    return out


def rank_sum_rejects_on_grid(ka: np.ndarray, kb: np.ndarray, level: float) -> np.ndarray:
    """Per row: does the kit's two-sided Mann-Whitney test (exact without ties, else the tie-corrected normal
    approximation with continuity correction) reject at ``level`` for integer-valued samples ``ka``, ``kb``?"""
    ka, kb = np.asarray(ka, dtype=np.int64), np.asarray(kb, dtype=np.int64)
    rows, n_a = ka.shape
    n_b = kb.shape[1]
    both = np.concatenate([ka, kb], axis=1)
    lo = both.min(axis=1, keepdims=True)
    shifted = both - lo
    top = int(shifted.max()) if shifted.size else 0
    c = _grid_counts(shifted, top).astype(float)
    below = np.cumsum(c, axis=1) - c
    midrank = below + (c + 1.0) / 2.0
    r_a = np.take_along_axis(midrank, shifted[:, :n_a], axis=1).sum(axis=1)
    u_a = r_a - n_a * (n_a + 1) / 2.0
    tie_sum = (c ** 3 - c).sum(axis=1)
    big_n = n_a + n_b
    mean = n_a * n_b / 2.0
    out = np.zeros(rows, dtype=bool)
    untied = tie_sum == 0
    if max(n_a, n_b) <= EXACT_MAX_N and untied.any():
        cdf = _rank_sum_cdf(n_a, n_b)
        ua = u_a[untied].astype(np.int64)
        low = np.minimum(ua, n_a * n_b - ua)
        out[untied] = np.minimum(1.0, 2.0 * cdf[low]) < level
        approx = ~untied
    else:
        approx = np.ones(rows, dtype=bool)
    var = n_a * n_b / 12.0 * (big_n + 1 - tie_sum[approx] / (big_n * (big_n - 1)))
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.sqrt(np.maximum(var, 0.0))
        dev = np.abs(u_a[approx] - mean) - 0.5
        p = 2.0 * norm_sf(np.maximum(dev, 0.0) / se)
    out[approx] = np.where(se > 0, p < level, False)
    return out


def _rounded_noise(n_a: int, n_b: int, paired: bool, sims: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((sims, n_a if paired else n_a + n_b))


def power_rounded(delta_sd: float, n_a: int, n_b: int, paired: bool, level: float, step_sd: float,
                  sims: int = ROUNDED_SIMS, seed: int = SIM_SEED) -> float:
    """Power of the kit's two-sided rank test at a shift of ``delta_sd`` SDs on data rounded to steps of
    ``step_sd`` SDs (differences of grid values are multiples of the step; zeros dropped by the test)."""
    z = _rounded_noise(n_a, n_b, paired, sims, seed + 7 * n_a + 13 * n_b)
    return float(_rejects_rounded(z, delta_sd, n_a, paired, level, step_sd).mean())


def _rejects_rounded(z: np.ndarray, delta_sd: float, n_a: int, paired: bool, level: float,
                     step_sd: float) -> np.ndarray:
    if paired:
        return signed_rank_rejects_on_grid(np.rint((z + delta_sd) / step_sd).astype(np.int64), level)
    ka = np.rint(z[:, :n_a] / step_sd).astype(np.int64)
    kb = np.rint((z[:, n_a:] + delta_sd) / step_sd).astype(np.int64)
    return rank_sum_rejects_on_grid(ka, kb, level)


@lru_cache(maxsize=1024)
def mde_rounded_sd(n_a: int, n_b: int, paired: bool, level: float, power: float, step_sd: float) -> float:
    """Smallest shift (SDs) at which the kit's test on data rounded to ``step_sd`` rejects with ``power``; inf when
    none up to 50 SD does. Bisection on common random numbers (one set of draws for every shift tried)."""
    if min(n_a, n_b) <= 0 or not step_sd > 0:
        return math.inf
    z = _rounded_noise(n_a, n_b, paired, ROUNDED_SIMS, SIM_SEED + 7 * n_a + 13 * n_b + 1)

    def pw_at(d: float) -> float:
        return float(_rejects_rounded(z, d, n_a, paired, level, step_sd).mean())

    hi = 1.0
    while pw_at(hi) < power:
        hi *= 2.0
        if hi > 50.0:
            return math.inf
    lo = 0.0
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        if pw_at(mid) >= power:
            hi = mid
        else:
            lo = mid
    return hi
