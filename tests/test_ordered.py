"""Kruskal-Wallis with R's arithmetic, and the simulated MDE of the stratified Jonckheere-Terpstra test
(kit.stats.ordered; issue 25 item 8: a "no trend" needs the trend it could have detected)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from kit import stats
from kit.errors import AnalysisError
from kit.stats import ordered

# R ?kruskal.test (Hollander & Wolfe 1973, p. 116): mucociliary efficiency of three groups.
# R: kruskal.test(list(x, y, z)) -> Kruskal-Wallis chi-squared = 0.77143, df = 2, p-value = 0.68
HW_X = [2.9, 3.0, 2.5, 2.6, 3.2]
HW_Y = [3.8, 2.7, 4.0, 2.4]
HW_Z = [2.8, 3.4, 3.7, 2.2, 2.0]
BATCHES = [16, 32, 64, 128, 256]


def test_kruskal_wallis_is_rs() -> None:
    r = ordered.kruskal_wallis([HW_X, HW_Y, HW_Z])
    assert r.statistic == pytest.approx(0.7714285714285714, rel=1e-12)  # 27/35: the rank sums by hand
    assert r.df == 2 and r.p == pytest.approx(math.exp(-0.7714285714285714 / 2), rel=1e-12)  # chi2(2) sf
    assert r.p == pytest.approx(0.68, abs=0.005) and not r.ties and r.reason is None
    # ties: mid-ranks and the tie-corrected H, as R (and scipy, which computes the same) do
    a, b, c = [1, 1, 2, 3], [2, 3, 3, 3, 4], [4, 4, 5]
    tied = ordered.kruskal_wallis([a, b, c])
    ref = sps.kruskal(a, b, c)
    assert tied.ties and tied.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert tied.p == pytest.approx(ref.pvalue, rel=1e-12) and tied.tie_correction < 1


def test_kruskal_wallis_degenerate_shapes_answer_as_r() -> None:
    equal = ordered.kruskal_wallis([[2.0, 2.0], [2.0, 2.0, 2.0]])  # R: NaN statistic, NA p (0/0)
    assert math.isnan(equal.statistic) and math.isnan(equal.p) and "every value is equal" in (equal.reason or "")
    one = ordered.kruskal_wallis([[1.0, 2.0], []])  # R: error "all observations are in the same group"
    assert math.isnan(one.p) and one.groups == 1 and "fewer than two" in (one.reason or "")
    dropped = ordered.kruskal_wallis([HW_X, [], HW_Y, HW_Z])  # an empty group is an unused factor level
    assert dropped.groups == 3 and dropped.p == pytest.approx(ordered.kruskal_wallis([HW_X, HW_Y, HW_Z]).p)
    with pytest.raises(AnalysisError):
        ordered.kruskal_wallis([[1.0, float("nan")], [2.0]])


def _layout(n_strata: int, sd: float, slope: float, seed: int) -> list[tuple[list[int], list[float]]]:
    rng = np.random.default_rng(seed)
    return [(BATCHES, list(100.0 + 7 * k + slope * np.arange(5) + rng.normal(0, sd, 5))) for k in range(n_strata)]


def test_trend_mde_power_matches_the_test_it_describes() -> None:
    """The MDE's claimed power 0.8 holds for stratified_trend itself, on draws the MDE never saw (seed 11)."""
    strata = _layout(12, 4.0, 0.0, seed=1)
    level = 0.05 / 4  # Holm over 4 rows (2 frameworks x 2 phases): the first threshold
    mde = ordered.trend_mde(strata, level=level)
    assert mde.mde_per_step is not None and mde.reason is None
    assert mde.noise_df == 12 * 3 and mde.noise_sd == pytest.approx(4.0, rel=0.25)
    assert mde.power_at_mde == pytest.approx(0.8, abs=0.02) and mde.steps == 4 and mde.strata == 12
    rng = np.random.default_rng(11)
    reps = 1000
    hits = sum(stats.stratified_trend([(BATCHES, list(mde.mde_per_step * np.arange(5) + rng.normal(0, mde.noise_sd, 5)))
                                       for _ in range(12)]).p < level for _ in range(reps))
    assert hits / reps == pytest.approx(0.8, abs=0.04)  # binomial SE 0.013 at 1000 draws, plus the MDE's own


def test_trend_mde_noise_ignores_the_trend_and_the_stratum_levels() -> None:
    flat = ordered.trend_mde(_layout(10, 3.0, 0.0, seed=2), level=0.05)
    steep = ordered.trend_mde(_layout(10, 3.0, 25.0, seed=2), level=0.05)  # same noise draws, a trend added
    assert steep.noise_sd == pytest.approx(flat.noise_sd) and steep.mde_per_step == pytest.approx(flat.mde_per_step)
    # more strata, same noise: a smaller trend is detectable; the same call twice gives the same answer
    more = ordered.trend_mde(_layout(40, 3.0, 0.0, seed=2), level=0.05)
    assert more.mde_per_step is not None and flat.mde_per_step is not None
    assert more.mde_per_step < flat.mde_per_step
    assert ordered.trend_mde(_layout(10, 3.0, 0.0, seed=2), level=0.05) == flat


def test_trend_mde_says_when_no_trend_could_be_detected() -> None:
    tiny = ordered.trend_mde([([1, 2], [3.0, 1.0]), ([1, 2], [5.0, 4.0])], level=0.05)
    assert tiny.mde_per_step is None and "too few" in (tiny.reason or "") and tiny.max_z == pytest.approx(math.sqrt(2))
    none = ordered.trend_mde([([1, 1], [1.0, 2.0])], level=0.05)
    assert none.mde_per_step is None and "no stratum holds two levels" in (none.reason or "")
    twos = ordered.trend_mde([([1, 2], [1.0, 2.0])] * 20, level=0.05)  # enough pairs, but no residual df
    assert twos.mde_per_step is None and "noise is unknown" in (twos.reason or "")
    given = ordered.trend_mde([([1, 2], [1.0, 2.0])] * 20, level=0.05, noise_sd=1.0)
    assert given.mde_per_step is not None and given.mde_per_step > 0


def test_no_trend_words_are_neutral() -> None:
    mde = ordered.trend_mde(_layout(12, 4.0, 0.0, seed=1), level=0.0125)
    text = ordered.no_trend_text(mde, "W", "batch-size step")
    assert text.startswith("no monotone trend detected; a trend of ")
    assert "W per batch-size step or more would have been detected with power 0.8" in text
    assert "did not" not in text and "no effect" not in text
    tiny = ordered.trend_mde([([1, 2], [3.0, 1.0])], level=0.05)
    assert ordered.no_trend_text(tiny, "W").startswith("no monotone trend detected; this layout could not")
