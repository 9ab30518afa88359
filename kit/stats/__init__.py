"""The pure statistics of the kit: "is framework A faster than B, by how much, and can I trust that?".

Functions over arrays of per-trial measurements, importing nothing of the kit but :mod:`kit.errors`
(tests/test_stats_pure.py holds it to that): whatever reads a run lives in :mod:`kit.analysis` and
calls these. Modules:

* common: input checks, R's size limits, results as JSON; ranks: the rank statistics' null distributions;
* descriptive: descriptives, normality diagnostics, Tukey's fences;
* rank_tests: Wilcoxon signed-rank, Mann–Whitney, Brunner–Munzel, Fligner–Killeen;
* effects: Cliff's δ, A12, the unpaired Hodges–Lehmann shift, the ratio of medians;
* paired: the paired Hodges–Lehmann shift, the ratio of paired throughputs;
* comparison: the design-chosen two-arm comparison; multiplicity: Holm; trends: drift and ordered factors;
* ordered: Kruskal–Wallis and the trend a "no trend" could have seen; power: the rank tests' power at small n
  and their smallest attainable p (the simulated draws come from a ``keep`` store: kit.analysis.power_cache);
* detectability: what a comparison could have seen, and equivalence; sequential: looks with alpha spending.

The names of the two-arm toolbox are exported here, so ``from kit import stats`` gives ``stats.compare_two``,
``stats.holm``, ``stats.wilcoxon_paired`` and the rest.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names as the checkers see them; at run time they load on first use (__getattr__)
    from kit.stats.common import ALTERNATIVES, EXACT_MAX_N, MAX_PAIRWISE, MIN_N_FOR_TESTS
    from kit.stats.comparison import NO_TEST_REASON, Comparison, compare_two
    from kit.stats.descriptive import (
        KS_PAPER,
        KS_PLAIN,
        QUANTILES,
        Descriptives,
        Normality,
        NormalityTest,
        Outliers,
        describe,
        normality,
        tukey_outliers,
    )
    from kit.stats.effects import (
        Effect,
        Ratio,
        Shift,
        cliffs_delta,
        hodges_lehmann_unpaired,
        ratio_of_medians,
        vargha_delaney_a12,
    )
    from kit.stats.multiplicity import holm
    from kit.stats.paired import PairedRatio, PairedShift, hodges_lehmann, paired_log_ratio
    from kit.stats.rank_tests import (
        ZERO_RULE,
        SpreadsEvidence,
        TestResult,
        brunner_munzel,
        mann_whitney,
        spreads_differ,
        wilcoxon_paired,
    )
    from kit.stats.trends import StratifiedTrend, StratumRow, Trend, linear_trend, stratified_trend

# Where each exported name lives. The package imports none of its modules up front: `kit list` needs only
# kit.stats.power's smallest p and must not pay for statsmodels and pandas (kit.stats.descriptive), which
# `from kit import stats` would otherwise load (issue 44: imports on demand).
_WHERE: dict[str, str] = {
    "ALTERNATIVES": "kit.stats.common",
    "EXACT_MAX_N": "kit.stats.common",
    "MAX_PAIRWISE": "kit.stats.common",
    "MIN_N_FOR_TESTS": "kit.stats.common",
    "NO_TEST_REASON": "kit.stats.comparison",
    "Comparison": "kit.stats.comparison",
    "compare_two": "kit.stats.comparison",
    "KS_PAPER": "kit.stats.descriptive",
    "KS_PLAIN": "kit.stats.descriptive",
    "QUANTILES": "kit.stats.descriptive",
    "Descriptives": "kit.stats.descriptive",
    "Normality": "kit.stats.descriptive",
    "NormalityTest": "kit.stats.descriptive",
    "Outliers": "kit.stats.descriptive",
    "describe": "kit.stats.descriptive",
    "normality": "kit.stats.descriptive",
    "tukey_outliers": "kit.stats.descriptive",
    "Effect": "kit.stats.effects",
    "Ratio": "kit.stats.effects",
    "Shift": "kit.stats.effects",
    "cliffs_delta": "kit.stats.effects",
    "hodges_lehmann_unpaired": "kit.stats.effects",
    "ratio_of_medians": "kit.stats.effects",
    "vargha_delaney_a12": "kit.stats.effects",
    "holm": "kit.stats.multiplicity",
    "PairedRatio": "kit.stats.paired",
    "PairedShift": "kit.stats.paired",
    "hodges_lehmann": "kit.stats.paired",
    "paired_log_ratio": "kit.stats.paired",
    "ZERO_RULE": "kit.stats.rank_tests",
    "SpreadsEvidence": "kit.stats.rank_tests",
    "TestResult": "kit.stats.rank_tests",
    "brunner_munzel": "kit.stats.rank_tests",
    "mann_whitney": "kit.stats.rank_tests",
    "spreads_differ": "kit.stats.rank_tests",
    "wilcoxon_paired": "kit.stats.rank_tests",
    "StratifiedTrend": "kit.stats.trends",
    "StratumRow": "kit.stats.trends",
    "Trend": "kit.stats.trends",
    "linear_trend": "kit.stats.trends",
    "stratified_trend": "kit.stats.trends",
}


def __getattr__(name: str) -> object:
    """Load an exported name's module on first use (PEP 562); a submodule (``from kit.stats import power``)
    is found by the import system once this raises AttributeError."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ALTERNATIVES",
    "EXACT_MAX_N",
    "KS_PAPER",
    "KS_PLAIN",
    "MAX_PAIRWISE",
    "MIN_N_FOR_TESTS",
    "NO_TEST_REASON",
    "QUANTILES",
    "ZERO_RULE",
    "Comparison",
    "Descriptives",
    "Effect",
    "Normality",
    "NormalityTest",
    "Outliers",
    "PairedRatio",
    "PairedShift",
    "Ratio",
    "Shift",
    "SpreadsEvidence",
    "StratifiedTrend",
    "StratumRow",
    "TestResult",
    "Trend",
    "brunner_munzel",
    "cliffs_delta",
    "compare_two",
    "describe",
    "hodges_lehmann",
    "hodges_lehmann_unpaired",
    "holm",
    "linear_trend",
    "mann_whitney",
    "normality",
    "paired_log_ratio",
    "ratio_of_medians",
    "spreads_differ",
    "stratified_trend",
    "tukey_outliers",
    "vargha_delaney_a12",
    "wilcoxon_paired",
]
