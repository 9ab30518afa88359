"""What change could a comparison have seen, and did it show that nothing changed?

"No change" is a claim about the run, not about the frameworks: it is an equivalence verdict. This
module gives, for one comparison of a candidate B against a baseline A:

* the minimum detectable change (MDE) at power 0.8 and the comparison's level, from the n and the
  noise the run actually had, simulated against the rejection region of the test the kit runs at
  that n (:mod:`kit.analysis.power`; the normal-theory formula overstated power by up to 0.5 at
  n <= 20);
* the equivalence interval: the 1 - 2 alpha rank interval (Hodges-Lehmann, the inverted signed-rank
  or Mann-Whitney test: :func:`kit.analysis.stats.hodges_lehmann`) of the log ratio B/A, and whether
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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from kit.analysis import power as pw
from kit.analysis.design import POWER, min_p
from kit.analysis.stats import MIN_N_FOR_TESTS, hodges_lehmann

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
    return float(min(1.0, 2 * norm.sf((mean - 0.5) / sd)))


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
           ties: bool = False) -> float:
    """The MDE as a relative change (exp of the log-scale MDE, minus 1); inf when nothing can be detected."""
    sd = pw.mde_paired_sd(n_a, level, power, ties) if paired else pw.mde_unpaired_sd(n_a, n_b, level, power, ties)
    return math.inf if not math.isfinite(sd) else math.expm1(sd * noise)


def n_needed(noise: float, threshold: float, paired: bool, level: float, power: float = POWER) -> int | None:
    """Repetitions (pairs; or trials in each run) with which TOST at ``level`` shows "no change" (the interval
    inside +-threshold) with ``power`` when nothing changed; None beyond MAX_N_NEEDED. Zero noise: none needed."""
    target = math.log1p(threshold)
    if target <= 0:
        return None
    if noise <= 0:
        return MIN_N_FOR_TESTS
    n = pw.n_for(target / noise, "equivalence", paired=paired, level=level, power=power,
                 n_min=MIN_N_FOR_TESTS, n_max=MAX_N_NEEDED)
    return n


def n_to_detect(noise: float, threshold: float, paired: bool, level: float, power: float = POWER) -> int | None:
    """Repetitions with which a change of ``threshold`` is detected at ``level`` with ``power``."""
    target = math.log1p(threshold)
    if target <= 0 or noise <= 0:
        return None if target <= 0 else MIN_N_FOR_TESTS
    return pw.n_for(target / noise, "difference", paired=paired, level=level, power=power,
                    n_min=MIN_N_FOR_TESTS, n_max=MAX_N_NEEDED)


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
    shift = hodges_lehmann(lb, la, paired=paired, conf=1 - 2 * alpha)
    if shift.low is None or shift.high is None:
        return None, None, None, False
    low, high = (math.exp(shift.low), math.exp(shift.high)) if logs else (1 + shift.low, 1 + shift.high)
    inside = 1 / (1 + threshold) < low and high < 1 + threshold
    return inside, low, high, False


def detectability(a: np.ndarray, b: np.ndarray, *, paired: bool, level: float, threshold: float,
                  power: float = POWER, alpha: float | None = None) -> Detectability:
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
    need_eq, need_diff = n_needed(noise, threshold, paired, alpha, power), n_to_detect(noise, threshold, paired,
                                                                                      level, power)
    need = None if need_eq is None or need_diff is None else max(need_eq, need_diff)
    need_text = (f"{need} {unit} would decide it either way (a change of {threshold:.0%} detected, or no change "
                 f"shown if there is none, each with power {power:.0%})"
                 if need else f"more than {MAX_N_NEEDED} {unit} would be needed: reduce the noise instead")
    if min(n_a, n_b) < MIN_N_FOR_TESTS or _attainable(n_a, n_b, paired) >= level:
        return made(noise, math.inf, need, f"with n = {min(n_a, n_b)} no outcome can reach p < {level:.3g}; {need_text}")
    mde = mde_of(noise, n_a, n_b, paired, level, power, _ties(a, b, paired))
    if not math.isfinite(mde):
        return made(noise, math.inf, need, f"with these ties no outcome can reach p < {level:.3g}; {need_text}")
    seen = f"a change of {mde:.1%} or more would have been detected (power {power:.0%})"
    why = seen if inside else f"{seen}; {need_text}"
    return made(noise, mde, None if inside else need, why)
