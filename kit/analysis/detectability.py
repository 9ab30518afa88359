"""What change could a comparison have seen? Minimum detectable change and repetitions needed.

"No change" is a claim about the run, not about the frameworks: it holds only
when the run could have seen a change of the practical threshold. This module
gives, for one comparison of a candidate B against a baseline A, the minimum
detectable change (MDE) at power 0.8 and the comparison's level, from the n
and the noise the run actually had, and the repetitions that would bring the
MDE down to the threshold. Pure functions over numbers (``kit compare``,
``kit bisect``).

How (the same normal approximation as :mod:`kit.analysis.design`, on the log
scale so that a change is a ratio):

* paired (arms interleaved in blocks; Wilcoxon signed-rank): s = SD of the
  per-block log differences log(b_i / a_i);
  MDE_log = (z_{1-level/2} + z_power) * s / sqrt(n * 3/pi).
* unpaired (two runs; Mann-Whitney or Brunner-Munzel): s = pooled SD of the
  log values within each run; MDE_log = (z_{1-level/2} + z_power) * s *
  sqrt(1/n_a + 1/n_b) / sqrt(3/pi).
* The MDE as a change is exp(MDE_log) - 1 (the larger of the two directions).
* A comparison whose smallest attainable p is not below the level (all
  differences of one sign: 2/2^n paired, 2/C(n_a+n_b, n_a) unpaired, exact
  test sizes as scipy uses them) cannot detect anything: MDE = inf.
* Values that are not all positive (rare: a zero accuracy) use differences
  relative to |median A| instead of logs.

The level is alpha/m, the first (strictest) step of Holm's procedure over the
m comparisons of the family: a change of the MDE is detected with power 0.8
even when it is the only one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from kit.analysis.design import ARE_SIGNED_RANK, POWER, min_p
from kit.analysis.stats import MIN_N_FOR_TESTS

MAX_N_NEEDED = 100_000  # beyond this the answer is "not with repetitions": reduce the noise instead
EXACT_MW_MAX = 8  # scipy.stats.mannwhitneyu(method="auto") is exact while both samples have at most 8 values


@dataclass(frozen=True)
class Detectability:
    """What a comparison could see: n, noise, minimum detectable change and the n a threshold needs."""

    n_a: int
    n_b: int
    paired: bool
    level: float
    noise: float | None  # SD of log differences (paired) or pooled SD of log values (unpaired)
    mde: float | None  # minimum detectable relative change (0.05 = 5 %); inf: the design cannot reject; None: unknown
    n_needed: int | None  # repetitions (pairs, or trials per run) for MDE <= threshold; None: unknown or > MAX_N_NEEDED
    why: str  # one sentence a user can read

    def as_dict(self) -> dict[str, object]:
        """Plain JSON (no Infinity): an undecidable design has mde None and decidable False."""
        finite = self.mde is not None and math.isfinite(self.mde)
        return {"n_a": self.n_a, "n_b": self.n_b, "paired": self.paired, "level": self.level, "noise": self.noise,
                "mde": self.mde if finite else None, "decidable": self.mde is None or finite,
                "n_needed": self.n_needed, "mde_why": self.why}


def min_p_unpaired(n_a: int, n_b: int) -> float:
    """Smallest two-sided Mann-Whitney p with every B value above every A value."""
    if min(n_a, n_b) <= 0:
        return 1.0
    if max(n_a, n_b) <= EXACT_MW_MAX:
        return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))
    mean = n_a * n_b / 2
    sd = math.sqrt(n_a * n_b * (n_a + n_b + 1) / 12)
    return float(min(1.0, 2 * norm.sf((mean - 0.5) / sd)))


def _log_or_relative(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    if a.size and b.size and np.all(a > 0) and np.all(b > 0):
        return np.log(a), np.log(b)
    scale = abs(float(np.median(a))) if a.size else 0.0
    if scale == 0.0 or not math.isfinite(scale):
        return None
    return a / scale, b / scale


def noise_of(a: np.ndarray, b: np.ndarray, paired: bool) -> float | None:
    """SD on the log scale that decides the MDE (see the module docstring); None without two values per arm."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if min(a.size, b.size) < 2:
        return None
    scaled = _log_or_relative(a, b)
    if scaled is None:
        return None
    la, lb = scaled
    if paired:
        return float(np.std(lb - la, ddof=1))
    pooled = ((la.size - 1) * np.var(la, ddof=1) + (lb.size - 1) * np.var(lb, ddof=1)) / (la.size + lb.size - 2)
    return float(math.sqrt(pooled))


def _mde_log(noise: float, n_a: int, n_b: int, paired: bool, level: float, power: float) -> float:
    z = norm.isf(level / 2) + norm.ppf(power)
    scale = math.sqrt(1.0 / n_a) if paired else math.sqrt(1.0 / n_a + 1.0 / n_b)
    return float(z * noise * scale / math.sqrt(ARE_SIGNED_RANK))


def _attainable(n_a: int, n_b: int, paired: bool) -> float:
    return min_p(n_a) if paired else min_p_unpaired(n_a, n_b)


def n_needed(noise: float, threshold: float, paired: bool, level: float, power: float = POWER) -> int | None:
    """Repetitions (pairs; or trials in each run) that bring the MDE to ``threshold``; None beyond MAX_N_NEEDED."""
    target = math.log1p(threshold)
    if target <= 0:
        return None
    z = norm.isf(level / 2) + norm.ppf(power)
    k = 1.0 if paired else 2.0  # equal n per run: sqrt(1/n + 1/n)
    n = max(MIN_N_FOR_TESTS, math.ceil(k * (z * noise / target) ** 2 / ARE_SIGNED_RANK))
    while n <= MAX_N_NEEDED and _attainable(n, n, paired) >= level:
        n += 1
    return n if n <= MAX_N_NEEDED else None


def detectability(a: np.ndarray, b: np.ndarray, *, paired: bool, level: float, threshold: float,
                  power: float = POWER) -> Detectability:
    """Minimum detectable change of comparing B with A at ``level`` (alpha/m) and ``power``."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n_a, n_b = int(a.size), int(b.size)
    noise = noise_of(a, b, paired)
    if noise is None:
        return Detectability(n_a, n_b, paired, level, None, None, None,
                             "fewer than two values per side (or a zero baseline): the noise is unknown")
    need = n_needed(noise, threshold, paired, level, power)
    unit = "pairs" if paired else "trials per run"
    need_text = f"{need} {unit} would make it conclusive" if need else \
        f"more than {MAX_N_NEEDED} {unit} would be needed: reduce the noise instead"
    if min(n_a, n_b) < MIN_N_FOR_TESTS or _attainable(n_a, n_b, paired) >= level:
        return Detectability(n_a, n_b, paired, level, noise, math.inf, need,
                             f"with n = {min(n_a, n_b)} no outcome can reach p < {level:.3g}; {need_text}")
    mde = math.expm1(_mde_log(noise, n_a, n_b, paired, level, power))
    if mde <= threshold:
        why = f"a change of {mde:.1%} or more would have been detected (power {power:.0%})"
    else:
        why = f"only a change of {mde:.1%} or more would have been detected (power {power:.0%}); {need_text}"
    return Detectability(n_a, n_b, paired, level, noise, mde, need, why)
