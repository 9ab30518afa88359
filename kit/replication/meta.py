"""Random-effects meta-analysis of log ratios across host classes (pure functions).

A claim's ratio (A/B) is measured on several host classes; the question "does it hold on a new host?" is answered
by the DerSimonian-Laird random-effects model on the log scale: each class contributes its log ratio ``y_i`` with
its within-class variance ``v_i``, the between-host variance ``tau^2`` is estimated by the method of moments, and
the prediction interval for a new host follows Higgins, Thompson & Spiegelhalter (2009): a t distribution with
k - 2 degrees of freedom around the pooled estimate, scaled by ``sqrt(tau^2 + se^2)``. statsmodels'
``combine_effects`` (method_re="dl") computes the estimate, tau^2, Q and I^2; this module adds the intervals.

Standard errors come from a run's interval: a claim's interval of level ``conf`` on the ratio is taken as a
symmetric normal interval on the log scale, so ``se = (log high - log low) / (2 z_{(1 + conf) / 2})``. The kit's
intervals are rank (Hodges-Lehmann) or bootstrap intervals, roughly symmetric in log; this is the assumption the
pooled figure rests on, stated in the map. Replicate runs of one host class are combined by fixed-effect inverse
variance (they measure the same host class, so no between-run variance is modelled inside a class).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kit.errors import KitError

MIN_CLASSES = 3  # below this the between-host variance is not estimated (and the prediction interval needs k - 2 df)


@dataclass(frozen=True)
class LogEffect:
    """One estimate on the log scale with its standard error."""

    log_ratio: float
    se: float

    @property
    def variance(self) -> float:
        return self.se * self.se


@dataclass(frozen=True)
class RandomEffects:
    """The DerSimonian-Laird pooled log ratio across k host classes, its heterogeneity and intervals."""

    k: int
    log_ratio: float
    se: float
    tau2: float
    q: float
    i2: float  # a fraction in [0, 1]
    ci_low: float  # log scale, normal interval of level ``level``
    ci_high: float
    pi_low: float  # the prediction interval for a new host class (t, k - 2 df), log scale
    pi_high: float
    level: float = 0.95


def se_from_interval(low: float, high: float, conf: float = 0.95) -> float:
    """The log-scale standard error a ratio interval of level ``conf`` implies (module docstring: the assumption)."""
    from scipy.stats import norm

    if not (0 < low <= high and math.isfinite(high) and 0 < conf < 1):
        raise KitError(f"interval [{low}, {high}] at level {conf} gives no standard error", where="kit map",
                       fix="a claim's interval must be positive and finite (a ratio), with a level in (0, 1)")
    return (math.log(high) - math.log(low)) / (2 * float(norm.ppf((1 + conf) / 2)))


def fixed_effect(effects: Sequence[LogEffect]) -> LogEffect:
    """Inverse-variance fixed-effect combination (the replicate runs of one host class). A zero standard error
    (an interval of zero width) takes the other runs' smallest positive one, so one degenerate run does not
    swallow the class."""
    if not effects:
        raise KitError("no estimate to combine", where="kit map", fix="give at least one run with an estimate")
    if len(effects) == 1:
        return effects[0]
    floor = min((e.se for e in effects if e.se > 0), default=1e-12)
    w = [1.0 / max(e.se, floor) ** 2 for e in effects]
    total = sum(w)
    return LogEffect(sum(wi * e.log_ratio for wi, e in zip(w, effects, strict=True)) / total, math.sqrt(1.0 / total))


def random_effects(effects: Sequence[LogEffect], level: float = 0.95) -> RandomEffects:
    """DerSimonian-Laird over ``effects`` (one per host class; at least :data:`MIN_CLASSES`)."""
    from scipy.stats import norm, t
    from statsmodels.stats.meta_analysis import combine_effects

    k = len(effects)
    if k < MIN_CLASSES:
        raise KitError(f"{k} host classes: a between-host variance needs at least {MIN_CLASSES}", where="kit map",
                       fix="add runs of more host classes")
    import numpy as np

    floor = min((e.se for e in effects if e.se > 0), default=1e-12)
    y = np.array([e.log_ratio for e in effects], dtype=float)
    v = np.array([max(e.se, floor) ** 2 for e in effects], dtype=float)
    import warnings

    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        # an untruncated negative tau^2 makes statsmodels take the square root of a negative variance for its
        # random-effects figure; that figure is replaced by the fixed effect below, so its warning says nothing
        warnings.simplefilter("ignore", RuntimeWarning)
        res = combine_effects(y, v, method_re="dl")
    mu, se = float(res.mean_effect_re), float(res.sd_eff_w_re)
    tau2 = float(res.tau2)
    if tau2 <= 0:  # statsmodels returns the untruncated moment estimate; DL truncates at 0 (= the fixed effect)
        mu, se, tau2 = float(res.mean_effect_fe), float(res.sd_eff_w_fe), 0.0
    z = float(norm.ppf((1 + level) / 2))
    half_pi = float(t.ppf((1 + level) / 2, k - 2)) * math.sqrt(tau2 + se * se)
    q = float(res.q)
    i2 = max(0.0, (q - (k - 1)) / q) if q > 0 else 0.0
    return RandomEffects(k=k, log_ratio=mu, se=se, tau2=tau2, q=q, i2=i2, ci_low=mu - z * se, ci_high=mu + z * se,
                         pi_low=mu - half_pi, pi_high=mu + half_pi, level=level)
