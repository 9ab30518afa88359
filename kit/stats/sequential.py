"""Stopping when the answer is conclusive: looks at the data with alpha spending, and the decision at each look.

``kit run --until-conclusive`` runs interleaved blocks and looks at the
hypotheses after a fixed schedule of repetitions (``looks``: the spec's
repetitions, then every ``step`` more, up to ``max_repetitions``). Looking
repeatedly and stopping at the first significant look inflates the error rate
(five looks at 0.05 reject a true H0 about 14 % of the time), so each look k
gets its own level ``alpha_k`` from an O'Brien-Fleming-type spending function
(Lan & DeMets 1983): ``f(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))`` with ``t``
the share of the maximum repetitions reached, ``alpha_k = f(t_k) - f(t_{k-1})``.
The increments sum to ``alpha``; testing each look at its increment keeps the
family-wise error at ``alpha`` by the union bound alone, whatever the
correlation between looks (conservative: exact group-sequential boundaries would
spend a little less, but need the joint distribution of rank statistics, which
the union bound does not). Early looks spend little, so a run that stops late
loses almost nothing against a fixed-n test at ``alpha``.

At each look every testable hypothesis gets two tests on its paired values:
the difference (Wilcoxon signed-rank on a - b, the test the analysis uses) and
equivalence within ``margin`` (two one-sided Wilcoxon signed-rank tests on
log(a) - log(b) against ±log(1 + margin)). What the equivalence leg shows is
the Hodges-Lehmann ratio a/b, exp of the pseudo-median of the paired log
ratios, inside [1/(1+margin), 1+margin]: the quantity those tests test, which
each decision carries as ``ratio`` and names in ``estimator`` (issue 38: not
the ratio of medians, which differs from it where one arm has occasional slow
trials; with the truth on the margin of the quantity shown, "equivalent" holds
its level with log-normal and outlier noise: benchmarks/claims_verdicts_sim.py,
section 4). Holm's procedure over all 2m tests at ``alpha_k``
decides them: a hypothesis is "rejected" (a difference), "equivalent" or still
"open". :func:`simulate` checks the whole procedure by Monte Carlo at the sizes
the kit uses (tests/test_sequential.py).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from kit.stats.common import MIN_N_FOR_TESTS
from kit.stats.multiplicity import holm
from kit.stats.rank_tests import wilcoxon_paired

DEFAULT_MARGIN = 0.05  # equivalence: arms within 5 % of each other (the kit's practical threshold for a change)
ESTIMATOR = "Hodges-Lehmann ratio a/b: exp of the pseudo-median of the paired log ratios (what the equivalence leg tests)"


@dataclass(frozen=True)
class Schedule:
    """When to look (repetitions per arm reached) and the level spent at each look."""

    looks: tuple[int, ...]
    alphas: tuple[float, ...]
    alpha: float
    margin: float = DEFAULT_MARGIN

    def as_dict(self) -> dict[str, object]:
        return {"looks": list(self.looks), "alphas": list(self.alphas), "alpha": self.alpha, "margin": self.margin,
                "spending": "O'Brien-Fleming-type (Lan-DeMets), tested at each increment (union bound)"}


def obf_spent(t: float, alpha: float) -> float:
    """Alpha spent by information fraction ``t`` in (0, 1] (Lan-DeMets O'Brien-Fleming-type)."""
    if t <= 0:
        return 0.0
    z = float(sps.norm.ppf(1 - alpha / 2))
    return float(min(alpha, 2 - 2 * sps.norm.cdf(z / math.sqrt(min(t, 1.0)))))


def spend(looks: Sequence[int], alpha: float, margin: float = DEFAULT_MARGIN) -> Schedule:
    """The schedule of ``looks`` (repetitions per arm, the last the maximum) at family level ``alpha``: each look
    tested at its increment of the O'Brien-Fleming-type spending function. The kit's limits on looks and margins
    are the caller's (kit.analysis.sequential_record.schedule)."""
    spent = [obf_spent(n / looks[-1], alpha) for n in looks]
    alphas = [spent[0]] + [b - a for a, b in itertools.pairwise(spent)]
    return Schedule(tuple(looks), tuple(alphas), alpha, margin)


@dataclass(frozen=True)
class Decision:
    """One hypothesis at one look."""

    key: str
    status: str  # rejected | equivalent | open
    n: int
    p_difference: float | None
    p_equivalence: float | None
    why: str | None = None
    ratio: float | None = None  # the Hodges-Lehmann ratio a/b the equivalence leg tests (None: no log ratio)

    def as_dict(self) -> dict[str, object]:
        return {"key": self.key, "status": self.status, "n": self.n, "p_difference": self.p_difference,
                "p_equivalence": self.p_equivalence, "why": self.why, "ratio": self.ratio, "estimator": ESTIMATOR}


def _p_equivalence(a: np.ndarray, b: np.ndarray, margin: float) -> float | None:
    """Two one-sided Wilcoxon tests on log(a) - log(b) against ±log(1+margin); None: a value is not positive."""
    if np.any(a <= 0) or np.any(b <= 0):
        return None
    d = math.log1p(margin)
    la, lb = np.log(a), np.log(b)
    upper = wilcoxon_paired(la - d, lb, alternative="less").p  # H1: log a - log b < +d
    lower = wilcoxon_paired(la + d, lb, alternative="greater").p  # H1: log a - log b > -d
    return max(upper, lower)


def _hl_ratio(a: np.ndarray, b: np.ndarray) -> float | None:
    """exp of the median of the Walsh averages of log(a_i / b_i): the ratio the equivalence leg tests."""
    if a.size == 0 or a.size != b.size or np.any(a <= 0) or np.any(b <= 0):
        return None
    d = np.log(a) - np.log(b)
    d = d[d != 0]  # the signed-rank tests drop zero differences, and so does their estimate
    if d.size == 0:
        return 1.0
    i, j = np.triu_indices(d.size)
    return float(math.exp(float(np.median((d[i] + d[j]) / 2.0))))


def decide(items: Sequence[tuple[str, np.ndarray, np.ndarray]], level: float, margin: float) -> list[Decision]:
    """Each (key, a, b) paired sample: rejected, equivalent or open, Holm over all 2m tests at ``level``."""
    pvals: list[float | None] = []
    why: list[str | None] = []
    for _, a, b in items:
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if a.size < MIN_N_FOR_TESTS:
            pvals += [None, None]
            why.append(f"{a.size} pairs, fewer than {MIN_N_FOR_TESTS}")
            continue
        pvals += [wilcoxon_paired(a, b).p, _p_equivalence(a, b, margin)]
        why.append(None if pvals[-1] is not None else "a value is not positive: equivalence of ratios not assessable")
    adj = holm(pvals)
    out = []
    for i, (key, a, b) in enumerate(items):
        p_diff, p_eq = adj[2 * i], adj[2 * i + 1]
        status = ("rejected" if p_diff is not None and p_diff < level else
                  "equivalent" if p_eq is not None and p_eq < level else "open")
        out.append(Decision(key, status, int(np.asarray(a).size), pvals[2 * i], pvals[2 * i + 1],
                            why[i] if status == "open" else None, _hl_ratio(np.asarray(a, float), np.asarray(b, float))))
    return out


@dataclass(frozen=True)
class Outcome:
    """What the sequential procedure decided over the looks taken."""

    stopped_at: int  # repetitions at the look where it stopped (or the last look taken)
    conclusive: bool
    decisions: tuple[Decision, ...]  # each hypothesis's final state (decided at its first deciding look)


def run_looks(sched: Schedule, data: Sequence[tuple[str, np.ndarray, np.ndarray]],
              available: int | None = None) -> tuple[Outcome, list[list[Decision]]]:
    """Apply the schedule to paired data (each array in block order; ``available``: repetitions run so far).

    A hypothesis decided at a look stays decided (its test at that look's level is final); the procedure stops
    at the first look where every hypothesis is decided.
    """
    n_max = min(len(a) for _, a, _ in data) if data else 0
    if available is not None:
        n_max = min(n_max, available)
    final: dict[str, Decision] = {}
    per_look: list[list[Decision]] = []
    stopped = 0
    for n, level in zip(sched.looks, sched.alphas, strict=True):
        if n > n_max:
            break
        stopped = n
        todo = [(k, a[:n], b[:n]) for k, a, b in data if k not in final or final[k].status == "open"]
        got = decide(todo, level, sched.margin)
        per_look.append(got)
        for d in got:
            final[d.key] = d
        if all(d.status != "open" for d in final.values()):
            break
    decisions = tuple(final[k] for k, _, _ in data if k in final)
    done = bool(decisions) and all(d.status != "open" for d in decisions)
    return Outcome(stopped, done, decisions), per_look


def simulate(sched: Schedule, effects: Sequence[float], sd: float, n_sims: int, seed: int) -> dict[str, float]:
    """Monte-Carlo of the whole procedure: m hypotheses with true log-ratio ``effects`` and paired-difference SD ``sd``.

    Returns the family-wise error (a difference claimed where the effect is 0, or equivalence claimed where
    |effect| >= log(1+margin)), the share of runs ending conclusive, the mean repetitions used and the power
    (the share of hypotheses with a non-zero effect that ended "rejected").
    """
    rng = np.random.default_rng(seed)
    n = sched.looks[-1]
    d_margin = math.log1p(sched.margin)
    errors = conclusive = found = real = 0
    used = 0.0
    for _ in range(n_sims):
        data = []
        for j, eff in enumerate(effects):
            base = rng.lognormal(0.0, 0.05, n)  # block effects, shared by both arms
            diff = rng.normal(eff, sd, n)
            data.append((f"h{j}", base * np.exp(diff), base))
        out, _ = run_looks(sched, data)
        bad = False
        for d, eff in zip(out.decisions, effects, strict=True):
            if d.status == "rejected" and eff == 0.0:
                bad = True
            if d.status == "equivalent" and abs(eff) >= d_margin:
                bad = True
            if eff != 0.0:
                real += 1
                found += d.status == "rejected"
        errors += bad
        conclusive += out.conclusive
        used += out.stopped_at
    return {"fwer": errors / n_sims, "conclusive": conclusive / n_sims, "mean_repetitions": used / n_sims,
            "power": found / real if real else math.nan}
