"""DLBench's Pearson correlation between the number of epochs and the accuracy (Sec. 5.5.4, last paragraph).

The paper: "the Pearson correlation coefficient between the number of epochs and the accuracy is 0.0005,
which indicates that there is no linear relationship". It does not say what it pooled. Read beside its
convergence figures (Figs. 9-11 and 18-20: test accuracy after every epoch, one curve per framework and
dataset), the only data with an epoch axis, it is read here as: every (epoch number, test accuracy after
that epoch) point of every convergence curve, all frameworks and datasets together, in one coefficient.

Pooled that way the coefficient mixes two things: how accuracy moves with epochs inside a curve, and how
the datasets differ (MNIST's 15 epochs near 99 %, CIFAR-100's 200 epochs near 50 %, Penn Treebank near
20 %). A value near 0 can come from the second alone while every curve rises, so the kit gives the pooled
value the paper's way and one coefficient per dataset and framework beside it.

Two intervals, because the points are not independent: consecutive accuracies of one run are serially
correlated and the epoch number is a fixed design variable, not a random draw, so Fisher's z interval
(which assumes independent pairs from a bivariate normal distribution) is too narrow; it is shown for
comparison. The cluster bootstrap resamples whole runs (the independent units, each curve kept intact),
within each dataset and framework when several are pooled, and takes the percentile interval.

Pure: plain numbers in, frozen dataclasses out (``as_json`` for analysis.json).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import numpy as np

PAPER_R = 0.0005  # Sec. 5.5.4: "the Pearson correlation coefficient between the number of epochs and the accuracy"
LEVEL = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20210405  # fixed: the same run gives the same interval (the experiment's seed)
MIN_CLUSTERS = 5  # runs per dataset and framework below which a bootstrap over runs means little
MAX_EPOCHS = 10_000  # a longer per-epoch list is not a training run's: the curve is refused
MAX_ACCURACY_POINTS = 5_000_000  # every curve together; beyond it the analysis refuses to pool


class CorrelationJson(TypedDict):
    """A :class:`Correlation` as analysis.json keeps it."""

    pooled: str
    n_points: int
    n_runs: int
    r: float | None
    reason: str
    fisher_ci: list[float] | None
    bootstrap_ci: list[float] | None
    bootstrap_reason: str
    bootstrap_resamples: int
    bootstrap_undefined: int


class CaseArmCorrelation(CorrelationJson):
    case: str
    arm: str


class Bootstrap(TypedDict):
    resamples: int
    seed: int
    min_runs: int
    unit: str
    strata: str


class RefusedJson(TypedDict):
    trial_id: str
    reason: str


class EpochAccuracy(TypedDict):
    """Epochs vs accuracy (:func:`epoch_accuracy`): pooled as the paper did, per dataset and framework; the
    analysis adds the refused curves."""

    paper_r: float
    level: float
    overall: CorrelationJson
    per_case_arm: list[CaseArmCorrelation]
    bootstrap: Bootstrap
    refused: NotRequired[list[RefusedJson]]


@dataclass(frozen=True)
class Curve:
    """One run's test accuracy after each epoch (epoch k is ``accuracy[k - 1]``; nan: not recorded)."""

    trial_id: str
    case: str
    arm: str
    accuracy: tuple[float, ...]


@dataclass(frozen=True)
class Refused:
    """A run whose per-epoch accuracies could not be used, and why (hostile or broken trial files)."""

    trial_id: str
    reason: str


@dataclass(frozen=True)
class Correlation:
    """Pearson's r between epoch number and accuracy over some runs' points, with its two 95 % intervals.

    ``r`` None: undefined (fewer than 3 points, or the accuracy or the epoch number never varies), with
    ``reason``. ``fisher_ci`` None where n < 4. ``bootstrap_ci`` None with ``bootstrap_reason`` where there
    are too few runs or the resamples' r is undefined too often.
    """

    pooled: str  # what was pooled, in words
    n_points: int
    n_runs: int
    r: float | None
    reason: str
    fisher_ci: tuple[float, float] | None
    bootstrap_ci: tuple[float, float] | None
    bootstrap_reason: str
    bootstrap_resamples: int
    bootstrap_undefined: int  # resamples whose r was undefined (left out of the percentiles)

    def as_json(self) -> CorrelationJson:
        return {"pooled": self.pooled, "n_points": self.n_points, "n_runs": self.n_runs, "r": self.r,
                "reason": self.reason, "fisher_ci": None if self.fisher_ci is None else list(self.fisher_ci),
                "bootstrap_ci": None if self.bootstrap_ci is None else list(self.bootstrap_ci),
                "bootstrap_reason": self.bootstrap_reason, "bootstrap_resamples": self.bootstrap_resamples,
                "bootstrap_undefined": self.bootstrap_undefined}


def curve_of(trial_id: str, case: str, arm: str, raw: Any) -> Curve | Refused:
    """A trial's ``epoch_test_accuracy`` checked: a list of at most MAX_EPOCHS numbers in [0, 1] or nulls.

    Anything else (a string, a nested list, a bool, a value outside [0, 1], an over-long list) refuses the
    whole curve, with the reason, rather than guessing: accuracy in percent pooled with fractions would
    change r without a word.
    """
    if not isinstance(raw, list):
        return Refused(trial_id, f"epoch_test_accuracy is {type(raw).__name__}, not a list")
    if len(raw) > MAX_EPOCHS:
        return Refused(trial_id, f"{len(raw)} per-epoch values (at most {MAX_EPOCHS})")
    out = []
    for k, v in enumerate(raw, start=1):
        if v is None:
            out.append(math.nan)
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0.0 <= v <= 1.0:
            return Refused(trial_id, f"epoch {k}: {str(v)[:40]!s} is not an accuracy in [0, 1]")
        out.append(float(v))
    return Curve(trial_id, case, arm, tuple(out))


def points(curves: Iterable[Curve]) -> tuple[np.ndarray, np.ndarray]:
    """(epoch number, accuracy) of every recorded point of the curves, nan epochs left out."""
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    for c in curves:
        y = np.asarray(c.accuracy, dtype=float)
        x = np.arange(1, len(y) + 1, dtype=float)
        ok = np.isfinite(y)
        xs.append(x[ok])
        ys.append(y[ok])
    if not xs:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(xs), np.concatenate(ys)


def pearson(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> tuple[float | None, str]:
    """Pearson's r of the pairs, or (None, why) where it is undefined (as scipy.stats.pearsonr gives nan)."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.shape != ya.shape or xa.ndim != 1:
        raise ValueError("x and y must be 1-d arrays of one length")
    if xa.size < 3:
        return None, f"{xa.size} points (at least 3 needed)"
    if np.ptp(ya) == 0:
        return None, "the accuracy is the same after every epoch (no variance: r undefined)"
    if np.ptp(xa) == 0:
        return None, "every point has the same epoch number (no variance: r undefined)"
    xc, yc = xa - xa.mean(), ya - ya.mean()
    r = float(np.dot(xc, yc) / math.sqrt(float(np.dot(xc, xc)) * float(np.dot(yc, yc))))
    return max(-1.0, min(1.0, r)), ""


def fisher_ci(r: float, n: int, level: float = LEVEL) -> tuple[float, float] | None:
    """Fisher's z interval for r from n independent bivariate-normal pairs: tanh(atanh(r) ± z/√(n-3)).

    None where n < 4; (r, r) where |r| = 1 (the interval's limit: z is infinite). The assumptions do not
    hold for the points of convergence curves (see the module's docstring): shown for comparison only.
    """
    if n < 4 or not math.isfinite(r) or abs(r) > 1:
        return None
    if abs(r) == 1.0:
        return r, r
    from statistics import NormalDist

    half = NormalDist().inv_cdf(0.5 + level / 2) / math.sqrt(n - 3)
    z = math.atanh(r)
    return math.tanh(z - half), math.tanh(z + half)


def _sums(curves: Sequence[Curve], cx: float, cy: float) -> np.ndarray:
    """Per run: n, Σx, Σy, Σx², Σy², Σxy of its points, x and y centred by (cx, cy) for precision."""
    out = np.zeros((len(curves), 6))
    for i, c in enumerate(curves):
        x, y = points([c])
        x, y = x - cx, y - cy
        out[i] = (x.size, x.sum(), y.sum(), (x * x).sum(), (y * y).sum(), (x * y).sum())
    return out


def _r_of_sums(s: np.ndarray) -> np.ndarray:
    """r of each row of summed statistics; nan where a variance vanishes (relative to its scale)."""
    n, sx, sy, sxx, syy, sxy = (s[:, k] for k in range(6))
    with np.errstate(divide="ignore", invalid="ignore"):
        vx = sxx - sx * sx / n
        vy = syy - sy * sy / n
        cov = sxy - sx * sy / n
        r = cov / np.sqrt(vx * vy)
    flat = (n < 3) | (vx <= 1e-12 * np.maximum(sxx, 1e-300)) | (vy <= 1e-12 * np.maximum(syy, 1e-300))
    return np.where(flat, np.nan, np.clip(r, -1.0, 1.0))


def cluster_bootstrap_ci(curves: Sequence[Curve], strata: Sequence[str], *, resamples: int = BOOTSTRAP_RESAMPLES,
                         seed: int = BOOTSTRAP_SEED, level: float = LEVEL,
                         min_clusters: int = MIN_CLUSTERS) -> tuple[tuple[float, float] | None, str, int]:
    """Percentile interval of r, resampling whole runs with replacement within each stratum.

    Returns (interval or None, why None, number of resamples whose r was undefined). A stratum (one
    dataset and framework) with fewer than ``min_clusters`` runs gives None: with 2 runs there are 3
    distinct resamples, not a distribution. More than 10 % undefined resamples give None too.
    """
    if len(curves) != len(strata):
        raise ValueError("one stratum per curve")
    if not curves:
        return None, "no runs", 0
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(strata):
        groups.setdefault(s, []).append(i)
    smallest = min(len(v) for v in groups.values())
    if smallest < min_clusters:
        return None, (f"{smallest} run(s) in a dataset and framework: the cluster bootstrap needs at least "
                      f"{min_clusters} runs each"), 0
    x, y = points(curves)
    if x.size == 0:
        return None, "no recorded points", 0
    stats = _sums(curves, float(x.mean()), float(y.mean()))
    rng = np.random.default_rng(seed)
    total = np.zeros((resamples, 6))
    for idx in groups.values():
        pick = rng.integers(0, len(idx), size=(resamples, len(idx)))
        total += stats[np.asarray(idx)][pick].sum(axis=1)
    rs = _r_of_sums(total)
    undefined = int(np.isnan(rs).sum())
    if undefined > 0.1 * resamples:
        return None, f"r undefined in {undefined} of {resamples} resamples (runs without variance)", undefined
    lo, hi = np.quantile(rs[~np.isnan(rs)], [(1 - level) / 2, (1 + level) / 2])
    return (float(lo), float(hi)), "", undefined


def correlate(curves: Sequence[Curve], pooled: str, *, resamples: int = BOOTSTRAP_RESAMPLES,
              seed: int = BOOTSTRAP_SEED) -> Correlation:
    """r over every point of ``curves``, Fisher's interval, and the cluster bootstrap stratified by
    dataset (case) and framework (arm)."""
    x, y = points(curves)
    r, reason = pearson(x, y)
    fisher = None if r is None else fisher_ci(r, int(x.size))
    if r is None:
        boot, why, undefined = None, "r undefined", 0
    else:
        boot, why, undefined = cluster_bootstrap_ci(curves, [f"{c.case}\0{c.arm}" for c in curves],
                                                    resamples=resamples, seed=seed)
    return Correlation(pooled=pooled, n_points=int(x.size), n_runs=len(curves), r=r, reason=reason,
                       fisher_ci=fisher, bootstrap_ci=boot, bootstrap_reason=why, bootstrap_resamples=resamples,
                       bootstrap_undefined=undefined)


def epoch_accuracy(curves: Sequence[Curve], labels: Mapping[str, str]) -> EpochAccuracy:
    """The paper's pooled coefficient over every curve, and one per dataset and framework (``labels``: case ->
    dataset name, for the words of ``pooled``)."""
    n_points = sum(len(c.accuracy) for c in curves)
    if n_points > MAX_ACCURACY_POINTS:
        raise ValueError(f"{n_points} per-epoch accuracies (at most {MAX_ACCURACY_POINTS})")
    cases = list(dict.fromkeys(c.case for c in curves))
    arms = list(dict.fromkeys(c.arm for c in curves))
    overall = correlate(curves, "every (epoch number, accuracy after that epoch) point of every run's curve (each "
                                "dataset's own accuracy measure), "
                                f"all {len(cases)} datasets and {len(arms)} frameworks together")
    per: list[CaseArmCorrelation] = []
    for case in cases:
        for arm in arms:
            group = [c for c in curves if c.case == case and c.arm == arm]
            if group:
                cor = correlate(group, f"the points of the {len(group)} {arm} runs on {labels.get(case, case)}")
                per.append({"case": case, "arm": arm, **cor.as_json()})
    return {"paper_r": PAPER_R, "level": LEVEL, "overall": overall.as_json(), "per_case_arm": per,
            "bootstrap": {"resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED, "min_runs": MIN_CLUSTERS,
                          "unit": "a run (its whole curve)", "strata": "dataset x framework"}}
