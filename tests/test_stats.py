"""Tests of kit.stats against independently computed reference values.

Sources, named at each literal:
- published worked examples: Hollander & Wolfe (1973), pp. 29f. and 69f. (the examples of
  R's ?wilcox.test), the Brunner & Munzel (2000) pain-score example (lawstat and scipy docs);
- R 4.2.2 (Debian bookworm r-base-core, r-cran-nortest 1.0-4, r-cran-boot 1.3-28), run once
  with ``options(digits=17)``; the commands are quoted next to each value;
- hand derivations and brute-force enumerations written inside this file.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from kit import stats as S
from kit.errors import AnalysisError
from kit.stats.ranks import exact_rank as _exact_rank
from kit.stats.ranks import rank_sum_pmf as _rank_sum_pmf
from kit.stats.ranks import signed_rank_pmf as _signed_rank_pmf

# Hollander & Wolfe (1973), p. 29f.: Hamilton depression scale factor IV, first (x) and
# second (y) visit, 9 patients. Published: V = 40, one-sided p = 0.01953 (R ?wilcox.test).
HW_X = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30]
HW_Y = [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29]
# Hollander & Wolfe (1973), p. 69f.: permeability constants of the human chorioamnion,
# at term (x) and 12-26 weeks (y). Published: W = 35, one-sided p = 0.1272.
PERM_X = [0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46]
PERM_Y = [1.15, 0.88, 0.90, 0.74, 1.21]
# Brunner & Munzel (2000): pain scores after surgery, two groups.
BM_X = [1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 1, 1]
BM_Y = [3, 3, 4, 3, 1, 2, 3, 1, 1, 5, 4]
# Integer (millisecond-like) trial times with ties; paired differences hold two zeros.
TIE_A = [101, 104, 98, 100, 103, 102, 106, 99, 105, 102, 107, 101]
TIE_B = [100, 104, 99, 98, 101, 100, 103, 99, 102, 103, 104, 100]
UA = [12, 15, 11, 14, 15, 13, 16, 12, 14, 15, 13]
UB = [11, 12, 10, 13, 12, 11, 14, 10, 12, 13]


def big(n: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Distinct, untied values, written with 4 decimals and read by R as big_a, big_b.

    Rounded to 4 decimals so the doubles are exactly R's parsed ones (Fligner-Killeen ranks
    absolute deviations, whose ties depend on the last bit).
    """
    i = np.arange(n)
    return np.round(10 + ((i * 37) % 101) / 100, 4), np.round(10.15 + ((i * 53) % 97) / 100 + 0.0005, 4)


def wide() -> tuple[np.ndarray, np.ndarray]:
    """Same-centre arms, b three times as spread (R: fa <- big_a[1:20]; fb <- 10 + 3*(big_b[1:20] - 10.15))."""
    a, b = big(20)
    return a, 10 + 3 * (b - 10.15)


def roundtrip(obj: object) -> dict:
    """as_dict() must survive strict JSON (no NaN/inf tokens)."""
    return json.loads(json.dumps(obj.as_dict(), allow_nan=False))  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- describe


def test_describe_matches_r_and_hand_olympic_mean() -> None:
    x = [12.1, 11.8, 12.6, 13.9, 12.0, 12.3, 15.2, 11.9]
    d = S.describe(x)
    # R: mean(x); sd(x); median(x); mad(x, constant=1); quantile(x, c(.25,.75), type=7); IQR(x)
    assert d.n == 8
    assert d.mean == pytest.approx(12.72499999999999964, rel=1e-14)
    assert d.sd == pytest.approx(1.20445601236171540, rel=1e-14)
    assert d.median == pytest.approx(12.2, rel=1e-14)
    assert d.mad == pytest.approx(0.34999999999999876, rel=1e-12)
    # R's mad() uses the rounded constant 1.4826 (0.51891); scipy's scale="normal" is 1/qnorm(3/4)
    assert d.mad_normal == pytest.approx(0.35 / sps.norm.ppf(0.75), rel=1e-12)
    assert d.mad_normal == pytest.approx(0.51890999999999809, rel=1e-5)
    assert (d.q1, d.q3) == pytest.approx((11.975, 12.925), rel=1e-14)
    assert d.iqr == pytest.approx(0.95, rel=1e-12)
    assert d.cv == pytest.approx(1.20445601236171540 / 12.725, rel=1e-12)
    assert (d.min, d.max) == (11.8, 15.2)
    # MLPerf olympic mean by hand: drop 11.8 and 15.2, mean of the other six = 74.8 / 6
    assert d.olympic_mean == pytest.approx(74.8 / 6, rel=1e-14)


def test_describe_small_n_gives_nan_not_errors() -> None:
    one = S.describe([3.0])
    assert math.isnan(one.sd) and math.isnan(one.olympic_mean) and one.mad == 0.0
    two = S.describe([1.0, 3.0])
    assert math.isnan(two.olympic_mean) and two.sd == pytest.approx(math.sqrt(2))
    assert S.describe([1.0, 2.0, 9.0]).olympic_mean == 2.0
    assert math.isnan(S.describe([-1.0, 1.0]).cv)  # mean 0
    out = roundtrip(one)
    assert out["sd"] is None and out["n"] == 1


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [1.0, float("inf")], [[1.0, 2.0]], ["a", "b"]])
def test_bad_input_raises_analysis_error(bad: list) -> None:
    with pytest.raises(AnalysisError):
        S.describe(bad)


# --------------------------------------------------------------------------- normality

NX = [10.02, 9.81, 10.58, 9.95, 12.05, 10.11, 9.97, 10.41, 10.01, 10.25]
NX += [9.92, 10.77, 10.06, 10.13, 11.20, 10.08, 10.32, 10.18, 10.05, 10.21]


def test_normality_against_r() -> None:
    res = S.normality(NX)
    # R: shapiro.test(nx) -> W = 0.72975778551028303, p = 9.2002145036562165e-05 (same Royston algorithm)
    assert res.shapiro_wilk.statistic == pytest.approx(0.72975778551028303, rel=1e-8)
    assert res.shapiro_wilk.p == pytest.approx(9.2002145036562165e-05, rel=1e-6)
    # R nortest::lillie.test(nx) -> D = 0.24102430112196777 (p = 0.0035035 by Dallal-Wilkinson;
    # statsmodels' table interpolation differs slightly, so p is checked loosely)
    assert res.lilliefors.statistic == pytest.approx(0.24102430112196777, rel=1e-12)
    assert res.lilliefors.p == pytest.approx(0.0035035375079468562, abs=5e-4)
    # R: ks.test(nx, "pnorm", mean(nx), sd(nx)) -> D = 0.24102430112196782, p = 0.16564094807352081
    assert res.ks_plain.statistic == pytest.approx(0.24102430112196782, rel=1e-12)
    assert res.ks_plain.p == pytest.approx(0.16564094807352081, rel=1e-9)
    assert "conservative" in res.ks_plain.method and "anti-conservative" not in res.ks_plain.method
    # the paper's variant: KS against N(0, 1) without standardising (scipy's exact one-sample KS)
    assert res.ks_paper.method.startswith("the paper's test (invalid: compares with N(0,1))")
    assert res.ks_paper.statistic == pytest.approx(sps.norm.cdf(min(NX)), rel=1e-12)  # every value is near 10
    assert res.ks_paper.p < 1e-10
    assert "Lilliefors" in res.lilliefors.method and "Shapiro" in res.shapiro_wilk.method


def test_normality_degenerate_inputs() -> None:
    tiny = S.normality([1.0, 2.0])
    assert math.isnan(tiny.shapiro_wilk.p) and "n = 2 < 3" in (tiny.shapiro_wilk.reason or "")
    const = S.normality([5.0] * 12)
    assert all(math.isnan(t.p) and "constant" in (t.reason or "") for t in (const.shapiro_wilk, const.lilliefors))
    three = S.normality([1.0, 2.0, 4.0])
    assert math.isfinite(three.shapiro_wilk.p) and math.isnan(three.lilliefors.p)
    assert roundtrip(const)["lilliefors"]["p"] is None


# --------------------------------------------------------------------------- Wilcoxon signed-rank


def test_wilcoxon_hollander_wolfe_example() -> None:
    res = S.wilcoxon_paired(HW_X, HW_Y, alternative="greater")
    # published: V = 40, p = 0.01953 (= 10/512, exact)
    assert res.statistic == 40 and res.details["r_plus"] == 40
    assert res.p == pytest.approx(10 / 512, rel=1e-12)
    assert res.exact and res.method_detail == "exact" and not res.continuity_correction
    # R: wilcox.test(x, y, paired=TRUE) -> p = 0.0390625
    assert S.wilcoxon_paired(HW_X, HW_Y).p == pytest.approx(0.0390625, rel=1e-12)


def test_wilcoxon_exact_p_equals_enumerated_null() -> None:
    # brute force: all 2^9 sign assignments of ranks 1..9, P(T+ >= 40)
    sums = [
        sum(r for r, s in zip(range(1, 10), signs, strict=True) if s) for signs in itertools.product([0, 1], repeat=9)
    ]
    p_enum = sum(t >= 40 for t in sums) / len(sums)
    assert S.wilcoxon_paired(HW_X, HW_Y, alternative="greater").p == pytest.approx(p_enum, rel=1e-12)


def test_wilcoxon_ties_and_zeros_use_normal_approximation_like_r() -> None:
    # R: wilcox.test(ta, tb, paired=TRUE, alternative=alt) -> V = 50 (zeros dropped, ties, correction)
    expected = {"two-sided": 0.023260619585451631, "greater": 0.011630309792725816, "less": 0.99116038972849341}
    for alt, p in expected.items():
        res = S.wilcoxon_paired(TIE_A, TIE_B, alternative=alt)
        assert res.p == pytest.approx(p, rel=1e-10), alt
        assert res.details["r_plus"] == 50 and res.details["zeros"] == 2
        assert not res.exact and res.method_detail == "asymptotic" and res.continuity_correction
        assert res.ties and res.n_used == 10 and res.n_pairs == 12


def test_wilcoxon_large_and_medium_n_against_r() -> None:
    a, b = big()
    # R: wilcox.test(big_a, big_b, paired=TRUE) -> V = 601, p = 0.021006783088850990 (n = 60: normal approx)
    res = S.wilcoxon_paired(a, b)
    assert res.details["r_plus"] == 601 and res.p == pytest.approx(0.021006783088850990, rel=1e-10)
    assert not res.exact
    # R: wilcox.test(big_a[1:30], big_b[1:30], paired=TRUE) -> V = 155, p = 0.114176673814654364 (exact)
    res = S.wilcoxon_paired(a[:30], b[:30])
    assert res.details["r_plus"] == 155 and res.p == pytest.approx(0.114176673814654364, rel=1e-10)
    assert res.exact


def test_wilcoxon_all_zero_differences_and_bad_pairs() -> None:
    res = S.wilcoxon_paired([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert res.p == 1.0 and res.method_detail == "degenerate" and res.n_used == 0
    with pytest.raises(AnalysisError, match="differ in length"):
        S.wilcoxon_paired([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(AnalysisError, match="alternative"):
        S.wilcoxon_paired(HW_X, HW_Y, alternative="bigger")


# --------------------------------------------------------------------------- Mann-Whitney and Brunner-Munzel


def test_mann_whitney_hollander_wolfe_example() -> None:
    res = S.mann_whitney(PERM_X, PERM_Y, alternative="greater")
    # published: W = 35, p = 0.1272 (R: 0.1272061272061272, exact)
    assert res.statistic == 35
    assert res.p == pytest.approx(0.1272061272061272, rel=1e-12)
    assert res.exact and res.method_detail == "exact"


def test_mann_whitney_exact_p_equals_enumerated_null() -> None:
    # brute force over all C(15, 10) labellings: P(U >= 35)
    values = np.array(PERM_X + PERM_Y)
    u = []
    for idx in itertools.combinations(range(15), 10):
        mask = np.zeros(15, bool)
        mask[list(idx)] = True
        u.append(int((values[mask][:, None] > values[~mask][None, :]).sum()))
    p_enum = float(np.mean(np.array(u) >= 35))
    assert S.mann_whitney(PERM_X, PERM_Y, alternative="greater").p == pytest.approx(p_enum, rel=1e-12)


def test_mann_whitney_ties_and_large_n_against_r() -> None:
    # R: wilcox.test(ua, ub, alternative=alt) -> W = 89, normal approx with ties and correction
    expected = {"two-sided": 0.016727683070503433, "greater": 0.0083638415352517165, "less": 0.99313136789356082}
    for alt, p in expected.items():
        res = S.mann_whitney(UA, UB, alternative=alt)
        assert res.statistic == 89 and res.p == pytest.approx(p, rel=1e-10), alt
        assert res.ties and not res.exact and res.continuity_correction
    a, b = big()
    # R: wilcox.test(big_a, big_b) -> W = 1410, p = 0.040919494713745598 (n >= 50: normal approx)
    res = S.mann_whitney(a, b)
    assert res.statistic == 1410 and res.p == pytest.approx(0.040919494713745598, rel=1e-10) and not res.exact
    # R: wilcox.test(big_a[1:30], big_b[1:25]) -> W = 306, p = 0.249139089619750287 (exact); "less": 0.12456954480987514
    res = S.mann_whitney(a[:30], b[:25])
    assert res.statistic == 306 and res.exact and res.p == pytest.approx(0.249139089619750287, rel=1e-10)
    assert S.mann_whitney(a[:30], b[:25], "less").p == pytest.approx(0.12456954480987514, rel=1e-10)


def test_brunner_munzel_published_example() -> None:
    res = S.brunner_munzel(BM_X, BM_Y)
    # Brunner & Munzel (2000), lawstat/scipy docs: W_BF = 3.1375, df = 17.68, p = 0.005786
    assert res.statistic == pytest.approx(3.1374674823029505, rel=1e-10)
    assert res.p == pytest.approx(0.005786208666151469, rel=1e-9)
    assert res.details["p_hat"] == pytest.approx(0.788961038961039, rel=1e-12)  # published p̂ = 0.789
    assert res.method_detail == "t approximation" and not res.exact
    # BM_X tends to be smaller: one-sided "less" holds half the two-sided p
    assert S.brunner_munzel(BM_X, BM_Y, "less").p == pytest.approx(0.005786208666151469 / 2, rel=1e-9)


def _bm_by_hand(x: np.ndarray, y: np.ndarray) -> float:
    """Brunner & Munzel (2000) eqs. (4.4)-(4.7) from placements, two-sided t p-value."""
    n1, n2 = len(x), len(y)
    r = sps.rankdata(np.concatenate([x, y]))
    r1, r2 = r[:n1], r[n1:]
    p1, p2 = r1 - sps.rankdata(x), r2 - sps.rankdata(y)
    s1 = np.sum((p1 - p1.mean()) ** 2) / (n1 - 1) / n2**2
    s2 = np.sum((p2 - p2.mean()) ** 2) / (n2 - 1) / n1**2
    se = math.sqrt((n1 + n2) * (s1 / n1 + s2 / n2))
    w = (r2.mean() - r1.mean()) / (se * math.sqrt(n1 + n2))
    df = (s1 / n1 + s2 / n2) ** 2 / ((s1 / n1) ** 2 / (n1 - 1) + (s2 / n2) ** 2 / (n2 - 1))
    return float(2 * sps.t.sf(abs(w), df))


def test_brunner_munzel_against_hand_formula() -> None:
    a, b = wide()
    assert S.brunner_munzel(a, b).p == pytest.approx(_bm_by_hand(a, b), rel=1e-9)


def test_brunner_munzel_complete_separation_is_exact_permutation_p() -> None:
    fast, slow = np.arange(10.0), np.arange(10.0) + 20
    res = S.brunner_munzel(slow, fast)
    # by hand: 1 of C(20, 10) = 184756 labellings puts all of a on top; two-sided counts both ends
    assert res.p == pytest.approx(2 / 184756, rel=1e-12)
    assert res.method_detail.startswith("permutation") and res.statistic == -math.inf
    assert S.brunner_munzel(slow, fast, "greater").p == pytest.approx(1 / 184756, rel=1e-12)
    assert S.brunner_munzel(slow, fast, "less").p == 1.0
    assert roundtrip(res)["statistic"] is None
    # the exact Mann-Whitney p for U = 0 is the same number: the two tests agree here
    assert S.mann_whitney(slow, fast).p == pytest.approx(res.p, rel=1e-12)
    assert S.brunner_munzel([2.0, 2.0, 2.0], [2.0, 2.0]).p == 1.0


# --------------------------------------------------------------------------- spreads and compare_two


def test_spreads_differ_fligner_against_r() -> None:
    differ, ev = S.spreads_differ(*wide())
    # R: fligner.test(list(fa, fb)) -> chi2 = 14.466694612108292, p = 0.00014265975537587549
    assert differ and ev["statistic"] == pytest.approx(14.466694612108292, rel=1e-10)
    assert ev["p"] == pytest.approx(0.00014265975537587549, rel=1e-9)
    differ, ev = S.spreads_differ(*big())
    # R: fligner.test(list(big_a, big_b)) -> chi2 = 0.51559982136117855, p = 0.47272473251419189
    assert not differ and ev["p"] == pytest.approx(0.47272473251419189, rel=1e-9)
    assert "Fligner" in ev["method"]
    assert S.spreads_differ([1.0, 1.0, 1.0], [2.0, 2.0])[0] is False
    json.dumps(ev, allow_nan=False)


def test_compare_two_too_few_samples_gives_descriptives_only() -> None:
    c = S.compare_two(HW_X, HW_Y, paired=True)
    assert c.test is None and c.reason == "fewer than 10 samples per arm: descriptives only"
    assert c.a.n == 9 and c.cliffs_delta is None and c.ratio is None
    out = roundtrip(c)
    assert out["test"] is None and out["a"]["median"] == pytest.approx(1.68)
    assert S.compare_two(PERM_X, PERM_Y, paired=False).test is None  # b has 5


def test_compare_two_paired_uses_wilcoxon() -> None:
    c = S.compare_two(TIE_A, TIE_B, paired=True)
    assert c.test is not None and c.test.method == "wilcoxon signed-rank"
    assert c.test.p == pytest.approx(0.023260619585451631, rel=1e-10)  # R, as above
    assert "paired" in c.reason and c.spreads is None
    assert c.shift is not None and c.shift.paired and c.ratio is not None and c.ratio.paired
    with pytest.raises(AnalysisError):
        S.compare_two(TIE_A, TIE_B[:-1], paired=True)


def test_compare_two_unpaired_picks_test_by_spread() -> None:
    a, b = big()
    c = S.compare_two(a, b, paired=False)
    assert c.test is not None and c.test.method == "mann-whitney u"
    assert c.test.p == pytest.approx(0.040919494713745598, rel=1e-10)  # R, as above
    assert c.spreads is not None and not c.spreads["differ"] and "Mann-Whitney" in c.reason
    wa, wb = wide()
    c = S.compare_two(wa, wb, paired=False)
    assert c.test is not None and c.test.method == "brunner-munzel" and "spreads differ" in c.reason
    assert c.test.p == pytest.approx(_bm_by_hand(wa, wb), rel=1e-9)


def test_compare_two_as_dict_is_json_and_recomputable() -> None:
    out = roundtrip(S.compare_two(UA, UB, paired=False))
    test = out["test"]
    for key in (
        "method",
        "alternative",
        "n_a",
        "n_b",
        "exact",
        "method_detail",
        "ties",
        "continuity_correction",
        "call",
    ):
        assert key in test
    assert test["n_a"] == 11 and test["alternative"] == "two-sided"
    assert out["cliffs_delta"]["magnitude"] in {"negligible", "small", "medium", "large"}
    with pytest.raises(AnalysisError, match="NaN"):
        S.compare_two([*UA[:-1], float("nan")], UB, paired=False)


# --------------------------------------------------------------------------- Holm


def test_holm_hand_example_and_none_passthrough() -> None:
    # by hand (and R p.adjust(c(.01,.04,.03,.005), "holm")): sorted .005*4, .01*3, .03*2, .04*1 -> running max
    assert S.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    out = S.holm([0.01, None, 0.04, 0.03, None, 0.005])
    assert out[1] is None and out[4] is None
    assert [out[i] for i in (0, 2, 3, 5)] == pytest.approx([0.03, 0.06, 0.06, 0.02])  # family of 4, not 6
    assert S.holm([0.3, 0.4]) == pytest.approx([0.6, 0.6])
    assert S.holm([None]) == [None] and S.holm([]) == []
    assert S.holm([0.01, float("nan")]) == [0.01, None]  # NaN means "no test", like None
    with pytest.raises(AnalysisError):
        S.holm([0.5, 1.5])


# --------------------------------------------------------------------------- effect sizes


def _brute_force(a: list[float] | np.ndarray, b: list[float] | np.ndarray) -> tuple[int, int, int]:
    gt = lt = eq = 0
    for x in a:
        for y in b:
            gt += x > y
            lt += x < y
            eq += x == y
    return gt, lt, eq


def test_effects_hand_example_with_ties() -> None:
    # by hand: a = (1, 2, 3), b = (2, 2, 4): a > b in 2 pairs, a < b in 5, ties in 2 of 9
    d = S.cliffs_delta([1, 2, 3], [2, 2, 4])
    assert d.value == pytest.approx(-3 / 9) and d.magnitude == "medium"
    a12 = S.vargha_delaney_a12([1, 2, 3], [2, 2, 4])
    assert a12.value == pytest.approx(3 / 9) and a12.magnitude == "medium"  # |1/3 - 1/2| = 0.167
    assert (d.p_greater, d.p_less, d.p_equal) == pytest.approx((2 / 9, 5 / 9, 2 / 9))


def test_effects_match_brute_force_and_mann_whitney_u() -> None:
    rng = np.random.default_rng(3)
    for m, n in [(1, 1), (7, 13), (40, 25)]:
        a = np.round(rng.normal(size=m), 1)  # rounding creates ties
        b = np.round(rng.normal(0.3, 1, size=n), 1)
        gt, lt, eq = _brute_force(a, b)
        assert S.cliffs_delta(a, b).value == pytest.approx((gt - lt) / (m * n), abs=1e-15)
        assert S.vargha_delaney_a12(a, b).value == pytest.approx((gt + 0.5 * eq) / (m * n), abs=1e-15)
        u = sps.mannwhitneyu(a, b, method="asymptotic").statistic  # U of a counts ties as 1/2
        assert S.vargha_delaney_a12(a, b).value == pytest.approx(u / (m * n), abs=1e-15)


def test_effects_scale_to_ten_thousand() -> None:
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=10_000), rng.normal(0.1, 1, size=10_000)
    d = S.cliffs_delta(a, b)
    sub = _brute_force(a[:50], b[:50])  # consistency on a sub-block keeps the brute force cheap
    assert S.cliffs_delta(a[:50], b[:50]).value == pytest.approx((sub[0] - sub[1]) / 2500)
    assert -1 <= d.value <= 1 and d.n_a == 10_000


@pytest.mark.parametrize(
    ("a12", "label"),
    [(0.5, "negligible"), (0.559, "negligible"), (0.56, "small"), (0.64, "medium"), (0.71, "large"), (0.29, "large")],
)
def test_a12_thresholds_vargha_delaney(a12: float, label: str) -> None:
    # 1000 x 1 arms: A12 is the share of a above the single b, so every threshold is hit exactly
    k = round(a12 * 1000)
    a = [1.0] * k + [-1.0] * (1000 - k)
    assert S.vargha_delaney_a12(a, [0.0]).magnitude == label


@pytest.mark.parametrize(
    ("delta", "label"), [(0.146, "negligible"), (0.147, "small"), (0.33, "medium"), (0.474, "large"), (-0.5, "large")]
)
def test_cliffs_delta_thresholds_romano(delta: float, label: str) -> None:
    k = round((delta + 1) * 1000)  # 2000 x 1 arms: δ = (2k - 2000)/2000
    a = [1.0] * k + [-1.0] * (2000 - k)
    res = S.cliffs_delta(a, [0.0])
    assert res.value == pytest.approx(delta) and res.magnitude == label


# --------------------------------------------------------------------------- Hodges-Lehmann


def test_null_distributions_match_enumeration_and_r() -> None:
    # enumeration: all sign vectors of ranks 1..6, all 4-subsets of 7 for U(4, 3)
    t = [sum(r for r, s in zip(range(1, 7), sg, strict=True) if s) for sg in itertools.product([0, 1], repeat=6)]
    assert _signed_rank_pmf(6) == pytest.approx(np.bincount(t) / 64)
    u = []
    for idx in itertools.combinations(range(7), 4):
        ranks_b = [r for r in range(7) if r not in idx]
        u.append(sum(ra > rb for ra in idx for rb in ranks_b))
    assert _rank_sum_pmf(4, 3) == pytest.approx(np.bincount(u) / 35)
    # R: psignrank(0:10, 9) and pwilcox(0:10, 10, 5)
    psignrank_9 = [0.001953125, 0.00390625, 0.005859375, 0.009765625, 0.013671875, 0.01953125]
    psignrank_9 += [0.02734375, 0.037109375, 0.048828125, 0.064453125, 0.082031250]
    assert np.cumsum(_signed_rank_pmf(9))[:11] == pytest.approx(psignrank_9)
    assert np.cumsum(_rank_sum_pmf(10, 5))[:6] == pytest.approx(
        [0.000333000333, 0.000666000666, 0.001332001332, 0.002331002331, 0.003996003996, 0.006327006327]
    )
    # R: qsignrank(0.025, c(9, 20, 49)) = 6 53 416; qwilcox(0.025, c(10,30,49), c(5,25,49)) = 9 259 925
    assert [_exact_rank(_signed_rank_pmf(n), 0.05)[0] for n in (9, 20, 49)] == [6, 53, 416]
    assert [_exact_rank(_rank_sum_pmf(m, n), 0.05)[0] for m, n in ((10, 5), (30, 25), (49, 49))] == [9, 259, 925]


def test_hodges_lehmann_exact_matches_r() -> None:
    # R: wilcox.test(x, y, paired=TRUE, conf.int=TRUE) on the Hamilton data (H&W 1973, p. 29f.)
    s = S.hodges_lehmann(HW_X, HW_Y, paired=True)
    assert (s.estimate, s.low, s.high) == pytest.approx((0.46, 0.01, 0.786), abs=1e-12)
    assert s.method == "exact" and s.achieved_conf == pytest.approx(1 - 2 * 10 / 512)
    s90 = S.hodges_lehmann(HW_X, HW_Y, paired=True, conf=0.90)  # R conf.level=0.9: 0.175 0.726
    assert (s90.low, s90.high) == pytest.approx((0.175, 0.726), abs=1e-12)
    # R: wilcox.test(x, y, conf.int=TRUE) on the permeability data (H&W 1973, p. 69f.): 0.305 (-0.15, 0.76)
    u = S.hodges_lehmann(PERM_X, PERM_Y, paired=False)
    assert (u.estimate, u.low, u.high) == pytest.approx((0.305, -0.15, 0.76), abs=1e-12)
    a, b = big()
    # R: wilcox.test(big_a[1:30], big_b[1:30], paired=TRUE, conf.int=TRUE): -0.1105 (-0.2655, 0.0445)
    p30 = S.hodges_lehmann(a[:30], b[:30], paired=True)
    assert (p30.estimate, p30.low, p30.high) == pytest.approx((-0.1105, -0.2655, 0.0445), abs=1e-12)
    # R: wilcox.test(big_a[1:30], big_b[1:25], conf.int=TRUE): -0.0905 (-0.2605, 0.0795)
    u30 = S.hodges_lehmann(a[:30], b[:25], paired=False)
    assert (u30.estimate, u30.low, u30.high) == pytest.approx((-0.0905, -0.2605, 0.0795), abs=1e-12)


def test_hodges_lehmann_estimate_is_brute_force_median() -> None:
    rng = np.random.default_rng(11)
    a, b = rng.normal(size=23), rng.normal(size=17)
    d = a[:17] - b
    walsh = [(d[i] + d[j]) / 2 for i in range(17) for j in range(i, 17)]
    assert S.hodges_lehmann(a[:17], b, paired=True).estimate == pytest.approx(float(np.median(walsh)))
    diffs = [x - y for x in a for y in b]
    assert S.hodges_lehmann(a, b, paired=False).estimate == pytest.approx(float(np.median(diffs)))


def test_hodges_lehmann_normal_approximation_matches_r_root() -> None:
    # R inverts the asymptotic test with uniroot(tol = 1e-4): agree to that tolerance
    a, b = big()
    s = S.hodges_lehmann(a, b, paired=True)  # R: -0.105576912232238890 (-0.225480796175868720, -0.015514875654353475)
    assert s.method.startswith("normal") and np.isnan(s.achieved_conf)
    assert (s.low, s.high) == pytest.approx((-0.225480796175868720, -0.015514875654353475), abs=1e-4)
    assert s.estimate == pytest.approx(-0.105576912232238890, abs=1e-3)
    u = S.hodges_lehmann(a, b, paired=False)  # R: -0.11053221504027201 (-0.22046420233255687, -5.0250267440978848e-04)
    assert (u.low, u.high) == pytest.approx((-0.22046420233255687, -5.0250267440978848e-04), abs=1e-4)
    t = S.hodges_lehmann(UA, UB, paired=False)  # R with ties: 1.9999890416703783 (4.6041e-05, 3.0000297022698810)
    assert (t.estimate, t.low, t.high) == pytest.approx((2.0, 0.0, 3.0), abs=1e-4) and t.ties
    # paired with ties: R drops zero differences first, so compare on the non-zero ones
    d = np.array(TIE_A, float) - np.array(TIE_B, float)
    nz = d[d != 0]
    p = S.hodges_lehmann(nz, np.zeros_like(nz), paired=True)  # R: 1.50003885490972388 (0.49999043, 2.50007395)
    assert (p.estimate, p.low, p.high) == pytest.approx((1.5, 0.5, 2.5), abs=1e-4)
    # many tied |d|: the tie-corrected variance moves the lower bound from -3 to R's -2.5
    d = np.array([4, 9, 6, -13, 4, 7, 1, -1, -5, 1, 5, 7, 2, -2, -1, -7, 7, -11], float)
    # R: wilcox.test(d, conf.int=TRUE) -> V = 102.5, p = 0.47118761827625333, 1.49996114 (-2.50001201, 4.00001963)
    s = S.hodges_lehmann(d, np.zeros_like(d), paired=True)
    assert (s.estimate, s.low, s.high) == pytest.approx((1.5, -2.5, 4.0), abs=1e-4)
    assert S.wilcoxon_paired(d, np.zeros_like(d)).p == pytest.approx(0.47118761827625333, rel=1e-10)
    # one rule for zeros (issue 15): the paired interval drops them as the test does, so on the full
    # data it is the interval of the non-zero differences above (R's wilcox.test drops zeros first,
    # so its paired call on TIE_A, TIE_B is the call quoted above), and it excludes 0 as the test rejects
    full = S.hodges_lehmann(TIE_A, TIE_B, paired=True)
    assert full.zeros == 2 and (full.estimate, full.low, full.high) == pytest.approx((1.5, 0.5, 2.5), abs=1e-12)
    assert S.wilcoxon_paired(TIE_A, TIE_B).p < 0.05 and full.low > 0


# --------------------------------------------------------------------------- ratio of medians


def test_ratio_of_medians_bca_against_r_boot() -> None:
    a, b = big(30)
    r = S.ratio_of_medians(a, b)
    assert r.estimate == pytest.approx(np.median(a) / np.median(b), rel=1e-14)
    # R boot 1.3-28, R = 40000, strata by arm: boot.ci(type="bca") -> (0.96560048280024124, 1.0133167867882202)
    assert (r.low, r.high) == pytest.approx((0.96560048280024124, 1.0133167867882202), abs=3e-3)
    rp = S.ratio_of_medians(a, b, paired=True)
    # R boot on rows (a_i, b_i), R = 40000: (0.96487535662504098, 1.0109354854113939)
    assert (rp.low, rp.high) == pytest.approx((0.96487535662504098, 1.0109354854113939), abs=3e-3)
    assert r.low < r.estimate < r.high and rp.low < rp.estimate < rp.high
    assert S.ratio_of_medians(a, b) == r  # same seed, same interval
    assert S.ratio_of_medians(a, b, seed=1).low != r.low  # the seed matters
    assert roundtrip(r)["method"].startswith("BCa")


def test_ratio_of_medians_degenerate_data() -> None:
    const = S.ratio_of_medians([2.0] * 10, [4.0] * 10)
    assert (const.estimate, const.low, const.high) == (0.5, 0.5, 0.5) and "constant" in (const.reason or "")
    zero = S.ratio_of_medians([1.0, 2.0, 3.0], [0.0, 0.0, 1.0])
    assert math.isnan(zero.estimate) and "median of b is 0" in (zero.reason or "")
    assert roundtrip(zero)["estimate"] is None
    # every leave-one-out median of b is 2, so the BCa acceleration is 0/0: NaN with scipy's reason
    one_constant = S.ratio_of_medians([5.0] * 12, [1.0] + [2.0] * 10 + [3.0])
    assert one_constant.estimate == 2.5 and math.isnan(one_constant.low) and math.isnan(one_constant.high)
    assert "BCa interval undefined" in (one_constant.reason or "")


# --------------------------------------------------------------------------- outliers and trend


def test_tukey_outliers_hand_example() -> None:
    x = [5, 1, 40, 2, 3, 4, 6, 25, 7, 8, 9, 10]
    o = S.tukey_outliers(x)
    # by hand, type-7 quantiles of sorted (1..10, 25, 40): q1 = 3 + 0.75 = 3.75, q3 = 9 + 0.25 = 9.25, IQR 5.5
    assert (o.q1, o.q3, o.iqr) == pytest.approx((3.75, 9.25, 5.5))
    assert (o.lower_fence, o.upper_fence) == pytest.approx((-4.5, 17.5))
    assert (o.lower_outer_fence, o.upper_outer_fence) == pytest.approx((-12.75, 25.75))
    assert o.mild_indices == (7,) and o.mild_values == (25.0,)  # 17.5 < 25 <= 25.75
    assert o.extreme_indices == (2,) and o.extreme_values == (40.0,)
    assert o.n == 12  # nothing dropped
    # same quartiles; 17.5 sits on the inner fence (not an outlier), 25.75 on the outer one (mild, not extreme)
    on_fence = S.tukey_outliers([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 17.5, 25.75])
    assert (on_fence.upper_fence, on_fence.upper_outer_fence) == pytest.approx((17.5, 25.75))
    assert on_fence.mild_indices == (11,) and on_fence.extreme_indices == ()
    assert json.dumps(o.as_dict())
    with pytest.raises(AnalysisError):
        S.tukey_outliers(x, k=0)


def test_linear_trend_hand_example() -> None:
    t = S.linear_trend([1, 2, 3, 4, 5], [1, 2, 3, 4, 10])
    # by hand: perfectly monotone, tau = 1; exact p = 2 / 5! (both extreme orderings)
    assert t.tau == pytest.approx(1.0) and t.p == pytest.approx(2 / 120) and t.p_method == "exact"
    # pairwise slopes: six 1s, 2.25, 8/3, 3.5, 6 -> median 1; intercept median(y) - 1 * median(x) = 0
    assert t.slope == pytest.approx(1.0) and t.intercept == pytest.approx(0.0)


def test_linear_trend_against_r_and_enumeration() -> None:
    a, _ = big(40)
    # R: cor.test(1:20, big_a[1:20], method="kendall") -> tau = 0.24210526315789477, p = 0.14584421836472772 (exact)
    t = S.linear_trend(np.arange(1, 21), a[:20])
    assert t.tau == pytest.approx(0.24210526315789477, rel=1e-12) and t.p == pytest.approx(
        0.14584421836472772, rel=1e-9
    )
    # R: cor.test(1:40, big_a[1:40] + (1:40)/200, method="kendall", exact=FALSE) -> 0.205128205128205149, 0.062298462427986451
    t40 = S.linear_trend(np.arange(1, 41), a + np.arange(1, 41) / 200)
    assert t40.tau == pytest.approx(0.205128205128205149, rel=1e-12)
    assert t40.p == pytest.approx(0.062298462427986451, rel=1e-9) and t40.p_method == "asymptotic"
    # exact p by enumerating all 7! orderings of the Kendall S statistic
    val = [3, 1, 4, 7, 5, 2, 6]
    s_of = lambda v: sum(np.sign(v[j] - v[i]) for i in range(7) for j in range(i + 1, 7))  # noqa: E731
    s_all = np.array([s_of(p) for p in itertools.permutations(range(7))])
    p_enum = float(np.mean(np.abs(s_all) >= abs(s_of(val))))
    assert S.linear_trend(range(7), val).p == pytest.approx(p_enum, rel=1e-12)


def test_linear_trend_theil_sen_interval_per_sen_1968() -> None:
    a, _ = big(40)
    pos, val = np.arange(1.0, 41.0), a + np.arange(1, 41) / 200
    t = S.linear_trend(pos, val)
    slopes = np.sort([(val[j] - val[i]) / (pos[j] - pos[i]) for i in range(40) for j in range(i + 1, 40)])
    assert t.slope == pytest.approx(float(np.median(slopes)))
    # Sen (1968) eq. 2.6 (no ties in position or value): C = z * sqrt(n(n-1)(2n+5)/18), bounds at (N ∓ C)/2
    c = sps.norm.ppf(0.975) * math.sqrt(40 * 39 * 85 / 18)
    n_slopes = slopes.size
    assert t.slope_low == pytest.approx(slopes[round((n_slopes - c) / 2) - 1])
    assert t.slope_high == pytest.approx(slopes[round((n_slopes + c) / 2)])


def test_linear_trend_degenerate_inputs() -> None:
    flat = S.linear_trend([1, 2, 3, 4], [2.0, 2.0, 2.0, 2.0])
    assert math.isnan(flat.tau) and flat.slope == 0.0 and "constant" in (flat.reason or "")
    assert roundtrip(flat)["tau"] is None
    with pytest.raises(AnalysisError):
        S.linear_trend([1, 1, 1], [1.0, 2.0, 3.0])
    with pytest.raises(AnalysisError):
        S.linear_trend([1, 2, 3], [1.0, 2.0])


def test_holm_equals_statsmodels_multipletests(monkeypatch: pytest.MonkeyPatch) -> None:
    """kit's Holm is written out (statsmodels runs gc.collect() per call); it must give statsmodels' numbers."""
    import gc

    from statsmodels.stats.multitest import multipletests

    # statsmodels' per-call gc.collect() walks the whole heap: with both frameworks imported earlier in the
    # session that is 0.2 s a call, 45 s for this test; the numbers do not depend on it
    monkeypatch.setattr(gc, "collect", lambda *a, **k: 0)

    rng = np.random.default_rng(24)
    for m in (1, 2, 5, 13):
        for _ in range(50):
            p = rng.uniform(0, 1, m) ** 3
            if m > 2:
                p[1] = p[0]  # ties
            want = multipletests(p, method="holm")[1]
            assert S.holm(list(p)) == pytest.approx(list(want), abs=1e-15)
    assert S.holm([0.01, None, float("nan"), 0.04]) == [pytest.approx(0.02), None, None, pytest.approx(0.04)]
