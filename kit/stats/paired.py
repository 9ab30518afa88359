"""Paired arms: the Hodges–Lehmann shift that inverts the signed-rank test, and the ratio of paired throughputs.

The paired shift lives beside :func:`kit.stats.rank_tests.wilcoxon_paired` in spirit: it uses the test's
rule for zero differences and for exact versus normal, so its interval excludes 0 exactly when the test rejects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps

from kit.errors import AnalysisError
from kit.stats.common import EXACT_MAX_N, AsDict, check_level, check_pair, check_pairwise_size
from kit.stats.effects import Shift, hodges_lehmann_unpaired
from kit.stats.rank_tests import ZERO_RULE
from kit.stats.ranks import exact_rank, signed_rank_pmf, tie_sum


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
    var = nx * (nx + 1) * (2 * nx + 1) / 24.0 - tie_sum(np.abs(xd)) / 48.0
    if var <= 0:
        return False
    return bool(abs(dz - 0.5 * np.sign(dz)) / math.sqrt(var) > z_crit)


def hodges_lehmann(a: ArrayLike, b: ArrayLike, *, paired: bool, conf: float = 0.95) -> Shift:
    """Hodges–Lehmann shift of a relative to b with its CI; paired, under the signed-rank test's rules.

    Unpaired: :func:`kit.stats.effects.hodges_lehmann_unpaired` (median of all a_i − b_j,
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
        return hodges_lehmann_unpaired(a, b, conf=conf)
    where = "stats.hodges_lehmann"
    conf = check_level(conf, "conf", where)
    alpha = 1.0 - conf
    x, y = check_pair(a, b, where=where)
    d = x - y
    nz = d[d != 0]
    zeros = int(d.size - nz.size)
    n = int(nz.size)
    total = n * (n + 1) // 2
    check_pairwise_size(total, where)
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
        k, achieved = exact_rank(signed_rank_pmf(n), alpha)
        method = "exact"
    else:
        # Between neighbouring Walsh averages |d' - shift| ties only where the d' are equal, so those
        # ties enter the variance, and T+ is the number of Walsh averages above the shift: k is the
        # smallest rank whose continuity-corrected statistic falls inside the critical value.
        sd = math.sqrt(max(n * (n + 1) * (2 * n + 1) / 24.0 - tie_sum(nz) / 48.0, 0.0))
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


# --------------------------------------------------------------------------- ratio of paired throughputs


@dataclass(frozen=True)
class PairedRatio(AsDict):
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
    x, y = check_pair(a, b, where=where)
    conf = check_level(conf, "conf", where)
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
