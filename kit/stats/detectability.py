"""What change could a comparison have seen, and did it show that nothing changed?

"No change" is a claim about the run, not about the frameworks: it is an equivalence verdict. This
module gives, for one comparison of a candidate B against a baseline A:

* the minimum detectable change (MDE) at power 0.8 and the comparison's level, from the n and the
  noise the run actually had, simulated against the rejection region of the test the kit runs at
  that n (:mod:`kit.stats.power`; the normal-theory formula overstated power by up to 0.5 at
  n <= 20);
* the equivalence interval: the 1 - 2 alpha rank interval (Hodges-Lehmann, the inverted signed-rank
  or Mann-Whitney test: :func:`kit.stats.paired.hodges_lehmann`) of the log ratio B/A, and whether
  it lies inside [1/(1+t), 1+t] for the practical threshold t. That is TOST at level alpha: a true
  change of more than t is called "no change" at most alpha of the time;
* the repetitions that would make the row conclusive either way, at the observed noise: the larger
  of the n at which TOST shows "no change" with power 0.8 when nothing changed and the n at which a
  change of the threshold is detected with power 0.8 at alpha/m.

Noise: paired (arms interleaved in blocks), the SD of the per-block log differences; unpaired (two
runs), the pooled SD of the log values. Values that are not all positive (a zero accuracy) use
differences relative to |median A| instead of logs. Identical paired values (a deterministic metric
under the same seeds) are the degenerate exact case: change 0, interval [1, 1], no repetitions needed.

The level of the MDE is alpha/m, the first (strictest) step of Holm's procedure over the m
comparisons of the family: a change of the MDE is detected with power 0.8 even when it is the only
one. The equivalence interval is per row at alpha (intersection-union: TOST needs no multiplicity
adjustment for the claim that this row did not change).

Pure (arrays in, records out): the functions that need simulated power take ``keep``, the store of the
simulated order statistics (:data:`kit.stats.power.Keep`; default: simulate now). The kit's disk cache and the
same functions bound to it are :mod:`kit.analysis.power_cache`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from kit.stats import power as pw
from kit.stats.common import MIN_N_FOR_TESTS
from kit.stats.normal import norm_sf
from kit.stats.power import POWER, Keep, min_p, simulate_now
from kit.stats.ranks import exact_rank as _exact_rank
from kit.stats.ranks import rank_sum_pmf as _rank_sum_pmf
from kit.stats.ranks import signed_rank_pmf as _signed_rank_pmf

MAX_N_NEEDED = 100_000  # beyond this the answer is "not with repetitions": reduce the noise instead
EXACT_MW_MAX = 49  # the kit's Mann-Whitney is exact while both samples have at most 49 untied values (R's rule)


@dataclass(frozen=True)
class Detectability:
    """What a comparison could see and whether it shows equivalence."""

    n_a: int
    n_b: int
    paired: bool
    level: float
    noise: float | None  # SD of log differences (paired) or pooled SD of log values (unpaired)
    mde: float | None  # minimum detectable relative change (0.05 = 5 %); inf: the design cannot reject; None: unknown
    n_needed: int | None  # repetitions for "no change" to be shown (TOST power 0.8 at no change); None: unknown/too many
    why: str  # one sentence a user can read
    equivalent: bool | None = None  # the 1 - 2 alpha interval inside the margin; None: not assessable
    eq_low: float | None = None  # that interval on the ratio scale B/A
    eq_high: float | None = None
    eq_conf: float | None = None
    deterministic: bool = False  # every paired difference exactly zero

    def as_dict(self) -> dict[str, object]:
        """Plain JSON (no Infinity): an undecidable design has mde None and decidable False."""
        finite = self.mde is not None and math.isfinite(self.mde)
        return {"n_a": self.n_a, "n_b": self.n_b, "paired": self.paired, "level": self.level, "noise": self.noise,
                "mde": self.mde if finite else None, "decidable": self.mde is None or finite,
                "n_needed": self.n_needed, "mde_why": self.why, "equivalent": self.equivalent,
                "eq_low": self.eq_low, "eq_high": self.eq_high, "eq_conf": self.eq_conf,
                "deterministic": self.deterministic}


def min_p_unpaired(n_a: int, n_b: int) -> float:
    """Smallest two-sided Mann-Whitney p with every B value above every A value (the kit's exact/asymptotic rule)."""
    if min(n_a, n_b) <= 0:
        return 1.0
    if max(n_a, n_b) <= EXACT_MW_MAX:
        return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))
    mean = n_a * n_b / 2
    sd = math.sqrt(n_a * n_b * (n_a + n_b + 1) / 12)
    return float(min(1.0, 2 * norm_sf((mean - 0.5) / sd)))


def _log_or_relative(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """(a, b, logs): the values on the log scale, else relative to |median A| (logs False); None: no scale."""
    if a.size and b.size and np.all(a > 0) and np.all(b > 0):
        return np.log(a), np.log(b), True
    scale = abs(float(np.median(a))) if a.size else 0.0
    if scale == 0.0 or not math.isfinite(scale):
        return None
    return a / scale, b / scale, False


def noise_of(a: np.ndarray, b: np.ndarray, paired: bool) -> float | None:
    """SD on the log scale that decides the MDE (see the module docstring); None without two values per arm."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if min(a.size, b.size) < 2:
        return None
    scaled = _log_or_relative(a, b)
    if scaled is None:
        return None
    la, lb, _ = scaled
    if paired:
        return float(np.std(lb - la, ddof=1))
    pooled = ((la.size - 1) * np.var(la, ddof=1) + (lb.size - 1) * np.var(lb, ddof=1)) / (la.size + lb.size - 2)
    return float(math.sqrt(pooled))


def _attainable(n_a: int, n_b: int, paired: bool) -> float:
    return min_p(n_a) if paired else min_p_unpaired(n_a, n_b)


def _ties(a: np.ndarray, b: np.ndarray, paired: bool) -> bool:
    """Would the kit's test fall back to the normal approximation (ties or zero differences)?"""
    if paired:
        d = b - a
        nz = d[d != 0]
        return bool(nz.size < d.size or np.unique(np.abs(nz)).size < nz.size)
    both = np.concatenate([a, b])
    return bool(np.unique(both).size < both.size)


def mde_of(noise: float, n_a: int, n_b: int, paired: bool, level: float, power: float = POWER,
           ties: bool = False, step_sd: float | None = None, *, keep: Keep = simulate_now) -> float:
    """The MDE as a relative change (exp of the log-scale MDE, minus 1); inf when nothing can be detected.
    ``ties``: on values in steps of ``step_sd`` SDs (:func:`step_sd_of`; kit.stats.power, coarse data)."""
    sd = (pw.mde_paired_sd(n_a, level, power, ties, step_sd, keep=keep) if paired
          else pw.mde_unpaired_sd(n_a, n_b, level, power, ties, step_sd, keep=keep))
    return math.inf if not math.isfinite(sd) else math.expm1(sd * noise)


def step_sd_of(a: np.ndarray, b: np.ndarray, noise: float) -> float | None:
    """The data's resolution in SDs of the noise: the smallest gap between distinct values of both arms, relative
    to |median A| (the scale ``noise`` is on), over ``noise``; None when it cannot be told (one distinct value, no
    noise). An upper bound on the metric's step (a gap of two steps may be the smallest one seen)."""
    vals = np.unique(np.concatenate([np.asarray(a, dtype=float), np.asarray(b, dtype=float)]))
    scale = abs(float(np.median(a))) if np.size(a) else 0.0
    if vals.size < 2 or noise <= 0 or scale == 0.0 or not math.isfinite(scale):
        return None
    return float(np.min(np.diff(vals)) / scale / noise)


def n_needed(noise: float, threshold: float, paired: bool, level: float, power: float = POWER, *,
             keep: Keep = simulate_now) -> int | None:
    """Repetitions (pairs; or trials in each run) with which TOST at ``level`` shows "no change" (the interval
    inside +-threshold) with ``power`` when nothing changed; None beyond MAX_N_NEEDED. Zero noise: none needed."""
    target = math.log1p(threshold)
    if target <= 0:
        return None
    if noise <= 0:
        return MIN_N_FOR_TESTS
    n = pw.n_for(target / noise, "equivalence", paired=paired, level=level, power=power,
                 n_min=MIN_N_FOR_TESTS, n_max=MAX_N_NEEDED, keep=keep)
    return n


def n_to_detect(noise: float, threshold: float, paired: bool, level: float, power: float = POWER, *,
                keep: Keep = simulate_now) -> int | None:
    """Repetitions with which a change of ``threshold`` is detected at ``level`` with ``power``."""
    target = math.log1p(threshold)
    if target <= 0 or noise <= 0:
        return None if target <= 0 else MIN_N_FOR_TESTS
    return pw.n_for(target / noise, "difference", paired=paired, level=level, power=power,
                    n_min=MIN_N_FOR_TESTS, n_max=MAX_N_NEEDED, keep=keep)


COVERAGE_SLACK = 0.02  # an interval decides a verdict only where it can reach its confidence within 2 points
HL_RATIO_TEXT = "Hodges-Lehmann ratio"


@dataclass(frozen=True)
class HLRatio:
    """exp of the Hodges-Lehmann shift of log(a) against log(b), with the rank interval that inverts the kit's test.

    Paired: exp(pseudo-median of the per-block log ratios log(a_i / b_i)) and the inverted signed-rank interval;
    unpaired: exp(median of all log(a_i / b_j)) and the inverted Mann-Whitney interval. The interval holds 1 exactly
    when the rank test of the log values does not reject at 1 - conf, so a verdict read off this interval is the
    verdict of that test: the printed ratio is the tested one (issue 38; the ratio of medians with its BCa interval
    covered 0.55 of the time at n = 2 and 0.72 at n = 3, and is not what the rank tests test).

    ``attainable`` is the coverage the exact interval reaches at this n (n' non-zero differences when paired, no
    ties): below ``conf - COVERAGE_SLACK`` no outcome of the data can give the interval its stated confidence, and
    :func:`usable` says so; ``exact`` False (ties or zero differences) means the normal approximation was inverted.
    """

    estimate: float | None
    low: float | None
    high: float | None
    conf: float
    paired: bool
    n_used: int  # pairs with a non-zero log ratio (paired) or the smaller arm (unpaired)
    attainable: float  # the exact interval's coverage at n_used, whatever the data (0: none)
    exact: bool
    note: str | None = None

    @property
    def usable(self) -> bool:
        """Is the interval a verdict may rest on: an estimate, both ends, and coverage within the slack?"""
        return (self.estimate is not None and self.low is not None and self.high is not None
                and self.attainable >= self.conf - COVERAGE_SLACK)

    def as_dict(self) -> dict[str, object]:
        return {"estimator": HL_RATIO_TEXT, "estimate": self.estimate, "low": self.low, "high": self.high,
                "conf": self.conf, "paired": self.paired, "n_used": self.n_used, "attainable": self.attainable,
                "exact": self.exact, "usable": self.usable, "note": self.note,
                "definition": ("exp(pseudo-median of the per-block log ratios), signed-rank interval" if self.paired
                               else "exp(median of all pairwise log ratios), Mann-Whitney interval")}


def attainable_coverage(n_a: int, n_b: int, paired: bool, conf: float) -> float:
    """Coverage the exact rank interval reaches at these sizes (R's qsignrank/qwilcox rule; 0 without values)."""
    if min(n_a, n_b) <= 0:
        return 0.0
    return _attainable_coverage(n_a, n_b if not paired else n_a, paired, round(conf, 12))


@lru_cache(maxsize=1024)
def _attainable_coverage(n_a: int, n_b: int, paired: bool, conf: float) -> float:
    if (paired and n_a > EXACT_MW_MAX) or (not paired and max(n_a, n_b) > EXACT_MW_MAX):
        return conf  # the normal approximation: its coverage is nominal up to its accuracy at these sizes
    pmf = _signed_rank_pmf(n_a) if paired else _rank_sum_pmf(n_a, n_b)
    return float(max(0.0, _exact_rank(pmf, 1 - conf)[1]))


def hl_ratio(a: np.ndarray, b: np.ndarray, *, paired: bool, conf: float) -> HLRatio:
    """The :class:`HLRatio` of a against b (a over b); estimate None where a value is not positive or an arm is
    empty (no log ratio), ends None where the interval cannot be formed (one value, every difference zero)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if paired and a.size != b.size:
        raise ValueError(f"paired arms differ in length ({a.size} vs {b.size})")
    if min(a.size, b.size) == 0 or np.any(a <= 0) or np.any(b <= 0) or not (np.isfinite(a).all()
                                                                              and np.isfinite(b).all()):
        return HLRatio(None, None, None, conf, paired, 0, 0.0, False, "an arm has no values, or a value is not "
                       "positive: no log ratio")
    la, lb = np.log(a), np.log(b)
    if paired:
        d = la - lb
        n_used = int(np.count_nonzero(d))
        if n_used == 0:
            return HLRatio(1.0, 1.0, 1.0, conf, True, 0, 1.0, True, "every pair identical: the ratio is exactly 1")
    else:
        n_used = int(min(a.size, b.size))
    attain = attainable_coverage(n_used, int(b.size), paired, conf)
    from kit.stats.paired import hodges_lehmann  # scipy.stats (0.75 s): only where an interval is drawn

    shift = hodges_lehmann(la, lb, paired=paired, conf=conf)
    est = math.exp(shift.estimate)
    if (paired and n_used < 2) or (not paired and max(a.size, b.size) < 2):
        return HLRatio(est, None, None, conf, paired, n_used, attain, False, "one value: no interval")
    return HLRatio(est, math.exp(shift.low), math.exp(shift.high), conf, paired, n_used, attain,
                   shift.method == "exact", shift.note)


def equivalence_interval(a: np.ndarray, b: np.ndarray, *, paired: bool, alpha: float,
                         threshold: float) -> tuple[bool | None, float | None, float | None, bool]:
    """(inside, low, high, deterministic): the 1 - 2 alpha rank interval of B/A and whether it lies in the margin."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if min(a.size, b.size) < MIN_N_FOR_TESTS:
        return None, None, None, False
    if paired and a.size == b.size and np.array_equal(a, b):
        return True, 1.0, 1.0, True  # every pair identical: the change over these seeds is exactly none
    scaled = _log_or_relative(a, b)
    if scaled is None:
        return None, None, None, False
    la, lb, logs = scaled
    from kit.stats.paired import hodges_lehmann  # scipy.stats (0.75 s): only where an interval is drawn

    shift = hodges_lehmann(lb, la, paired=paired, conf=1 - 2 * alpha)
    if shift.low is None or shift.high is None:
        return None, None, None, False
    low, high = (math.exp(shift.low), math.exp(shift.high)) if logs else (1 + shift.low, 1 + shift.high)
    inside = 1 / (1 + threshold) < low and high < 1 + threshold
    return inside, low, high, False


def detectability(a: np.ndarray, b: np.ndarray, *, paired: bool, level: float, threshold: float,
                  power: float = POWER, alpha: float | None = None, keep: Keep = simulate_now) -> Detectability:
    """MDE of comparing B with A at ``level`` (alpha/m) and ``power``; equivalence at ``alpha`` (default: level)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n_a, n_b = int(a.size), int(b.size)
    alpha = level if alpha is None else alpha
    inside, low, high, det = equivalence_interval(a, b, paired=paired, alpha=alpha, threshold=threshold)
    conf = (1 - 2 * alpha) if low is not None else None

    def made(noise: float | None, mde: float | None, need: int | None, why: str) -> Detectability:
        return Detectability(n_a, n_b, paired, level, noise, mde, need, why, inside, low, high, conf, det)

    noise = noise_of(a, b, paired)
    if noise is None:
        return made(None, None, None, "fewer than two values per side (or a zero baseline): the noise is unknown")
    unit = "pairs" if paired else "trials per run"
    if det:
        return made(0.0, 0.0, None, "every pair is identical (a deterministic metric under the same seeds): no change, "
                    "and more repetitions would add nothing")
    need_eq = n_needed(noise, threshold, paired, alpha, power, keep=keep)
    need_diff = n_to_detect(noise, threshold, paired, level, power, keep=keep)
    need = None if need_eq is None or need_diff is None else max(need_eq, need_diff)
    need_text = (f"{need} {unit} would decide it either way (a change of {threshold:.0%} detected, or no change "
                 f"shown if there is none, each with power {power:.0%})"
                 if need else f"more than {MAX_N_NEEDED} {unit} would be needed: reduce the noise instead")
    if min(n_a, n_b) < MIN_N_FOR_TESTS or _attainable(n_a, n_b, paired) >= level:
        return made(noise, math.inf, need, f"with n = {min(n_a, n_b)} no outcome can reach p < {level:.3g}; {need_text}")
    ties = _ties(a, b, paired)
    mde = mde_of(noise, n_a, n_b, paired, level, power, ties, step_sd_of(a, b, noise) if ties else None, keep=keep)
    if not math.isfinite(mde):
        return made(noise, math.inf, need, f"with these ties no outcome can reach p < {level:.3g}; {need_text}")
    seen = f"a change of {mde:.1%} or more would have been detected (power {power:.0%})"
    why = seen if inside else f"{seen}; {need_text}"
    return made(noise, mde, None if inside else need, why)


def shift_p(a: np.ndarray, b: np.ndarray, *, paired: bool, shift: float, alternative: str) -> float:
    """One-sided p of the kit's rank test that the Hodges-Lehmann location of log(a) - log(b) lies above
    (``alternative`` "greater") or below ("less") ``shift``: the test the :class:`HLRatio` interval inverts.

    Values must be positive. Exact distributions are read from kit.stats.power's cached tables where the kit's
    tests are exact (no ties, no zero differences, n <= 49: what stats.wilcoxon_paired and stats.mann_whitney
    return, tests/test_claims_simulation.py checks it); otherwise those functions are called. A shift of -inf or
    +inf gives the limiting p (0 or 1)."""
    if math.isinf(shift):
        above = shift < 0
        return 0.0 if (alternative == "greater") == above else 1.0
    la, lb = np.log(np.asarray(a, dtype=float)), np.log(np.asarray(b, dtype=float))
    if paired:
        d = (la - shift) - lb
        nz = d[d != 0]
        if nz.size == 0:
            return 1.0
        mags = np.abs(nz)
        if nz.size == d.size and nz.size <= EXACT_MW_MAX and np.unique(mags).size == nz.size:
            cdf = pw._signed_rank_cdf(int(nz.size))
            order = np.argsort(mags)
            ranks = np.empty(nz.size, dtype=np.int64)
            ranks[order] = np.arange(1, nz.size + 1)
            t = int(ranks[nz > 0].sum())
            return float(cdf[t]) if alternative == "less" else float(1.0 - (cdf[t - 1] if t > 0 else 0.0))
        from kit.stats.rank_tests import wilcoxon_paired  # scipy.stats: only off the exact tables

        return float(wilcoxon_paired(la - shift, lb, alternative=alternative).p)
    x = la - shift
    both = np.concatenate([x, lb])
    if max(x.size, lb.size) <= EXACT_MW_MAX and np.unique(both).size == both.size:
        u = int((x[:, None] > lb[None, :]).sum())
        cdf = pw._rank_sum_cdf(int(x.size), int(lb.size))
        return float(cdf[u]) if alternative == "less" else float(1.0 - (cdf[u - 1] if u > 0 else 0.0))
    from kit.stats.rank_tests import mann_whitney  # scipy.stats: only off the exact tables

    return float(mann_whitney(x, lb, alternative=alternative).p)
