"""Arm a against arm b: the test the design calls for, why, and how large the difference is."""

from __future__ import annotations

from dataclasses import dataclass

from numpy.typing import ArrayLike

from kit.stats.common import (
    MAX_PAIRWISE,
    MIN_N_FOR_TESTS,
    AsDict,
    check_alternative,
    check_level,
    check_pair,
    check_sample,
)
from kit.stats.descriptive import Descriptives, describe
from kit.stats.effects import Effect, Ratio, Shift, cliffs_delta, ratio_of_medians, vargha_delaney_a12
from kit.stats.paired import hodges_lehmann
from kit.stats.rank_tests import (
    SpreadsEvidence,
    TestResult,
    brunner_munzel,
    mann_whitney,
    spreads_differ,
    wilcoxon_paired,
)

NO_TEST_REASON = f"fewer than {MIN_N_FOR_TESTS} samples per arm: descriptives only"


@dataclass(frozen=True)
class Comparison(AsDict):
    """Arm a against arm b: the test the design calls for, why, and how large the difference is."""

    paired: bool
    alternative: str
    alpha: float
    a: Descriptives
    b: Descriptives
    test: TestResult | None
    reason: str
    spreads: SpreadsEvidence | None = None
    cliffs_delta: Effect | None = None
    a12: Effect | None = None
    shift: Shift | None = None
    ratio: Ratio | None = None
    notes: tuple[str, ...] = ()


def compare_two(
    a: ArrayLike,
    b: ArrayLike,
    *,
    paired: bool,
    alpha: float = 0.05,
    alternative: str = "two-sided",
    conf: float = 0.95,
    n_boot: int = 5000,
    seed: int = 0,
    ratio_interval: bool = True,
) -> Comparison:
    """Compare two arms with the test the design calls for, plus effect sizes and intervals.

    paired (randomised complete blocks): Wilcoxon signed-rank on a − b.
    Unpaired: Mann–Whitney U, or Brunner–Munzel when Fligner–Killeen finds the
    spreads differ (Mann–Whitney then no longer tests location alone). Fewer than
    MIN_N_FOR_TESTS values in an arm: descriptives only. ``ratio_interval`` False: the ratio of medians without
    its bootstrap interval (5,000 resamples a row: a caller that reads only its estimate need not draw them).
    """
    where = "stats.compare_two"
    if paired:
        x, y = check_pair(a, b, where=where)
    else:
        x = check_sample(a, name="a", where=where)
        y = check_sample(b, name="b", where=where)
    alternative = check_alternative(alternative, where)
    alpha = check_level(alpha, "alpha", where)
    da, db = describe(x), describe(y)
    if min(x.size, y.size) < MIN_N_FOR_TESTS:
        return Comparison(paired, alternative, alpha, da, db, test=None, reason=NO_TEST_REASON)
    spreads = None
    if paired:
        test = wilcoxon_paired(x, y, alternative)
        reason = "paired design (one trial per arm per block): Wilcoxon signed-rank test on d = a - b"
    else:
        differ, spreads = spreads_differ(x, y, alpha)
        if differ:
            test = brunner_munzel(x, y, alternative)
            reason = (
                f"unpaired; spreads differ (Fligner-Killeen p = {spreads['p']:.3g} < {alpha}): Brunner-Munzel, "
                "which tests P(a > b) = P(a < b) without assuming equal spreads"
            )
        else:
            test = mann_whitney(x, y, alternative)
            reason = "unpaired; no evidence that spreads differ (Fligner-Killeen): Mann-Whitney U"
    reason += f" ({test.method_detail})"
    notes = ["Cliff's delta and A12 compare the arms' values as two samples (pairing ignored)"]
    total = x.size * (x.size + 1) // 2 if paired else x.size * y.size
    if total <= MAX_PAIRWISE:
        shift = hodges_lehmann(x, y, paired=paired, conf=conf)
    else:
        shift = None
        notes.append(f"Hodges-Lehmann shift skipped: {total} pairwise values exceed {MAX_PAIRWISE}")
    return Comparison(
        paired=paired,
        alternative=alternative,
        alpha=alpha,
        a=da,
        b=db,
        test=test,
        reason=reason,
        spreads=spreads,
        cliffs_delta=cliffs_delta(x, y),
        a12=vargha_delaney_a12(x, y),
        shift=shift,
        ratio=ratio_of_medians(x, y, conf=conf, n_boot=n_boot, seed=seed, paired=paired, interval=ratio_interval),
        notes=tuple(notes),
    )
