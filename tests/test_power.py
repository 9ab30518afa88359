"""Verdicts that mean what they say (issue 25): exact small-sample power, equivalence for "no change",
deterministic metrics compared trial by trial, and every degenerate shape answered exactly.

Every power figure here is checked against the kit's own test functions (``stats.wilcoxon_paired``,
``stats.mann_whitney``) on independent draws, never against the simulation that produced it.
Tolerances: 1,500 draws give a binomial SE of 0.010 at power 0.8, so +-0.03 is 3 SE; 400 draws of a
6 % change give SE 0.011 at a true rate of 5 %.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from kit import stats
from kit.analysis import power_cache as pc
from kit.analysis.design import mde_sd, mde_sd_asymptotic
from kit.analysis.power_cache import detectability
from kit.compare import CompareOptions, compare_runs, conclusive_advice, judge, verdict
from kit.stats import power as pw
from kit.stats.detectability import hl_ratio

# (n, Holm level) of the studies' profiles: Patel distributed, DLBench paper, LeNet quick, Germino, LeNet paper
PROFILES = [(10, 0.05 / 3), (11, 0.05 / 30), (12, 0.05 / 10), (20, 0.05 / 12), (100, 0.05 / 10)]


def _signed_sample(n: int, t: int, zero: bool) -> np.ndarray:
    """Differences 1..n with the ranks that sum to t made negative: min(R+, R-) = t (a zero forces the normal test)."""
    d = np.arange(1, n + 1, dtype=float)
    rest = t
    for k in range(n, 0, -1):
        if k <= rest:
            d[k - 1] *= -1
            rest -= k
    assert rest == 0
    return np.concatenate([d, [0.0]]) if zero else d


@pytest.mark.parametrize("n", [5, 10, 11, 12, 20, 49, 60, 100])
@pytest.mark.parametrize("level", [0.05, 0.05 / 10, 0.05 / 30])
def test_signed_rank_critical_count_is_where_the_kits_test_starts_to_reject(n: int, level: float) -> None:
    exact = n <= 49
    c = pw.signed_rank_critical(n, level, exact)
    if c >= 0:
        assert stats.wilcoxon_paired(_signed_sample(n, c, False), np.zeros(n)).p < level
    if exact and c + 1 < n * (n + 1) / 4:
        assert stats.wilcoxon_paired(_signed_sample(n, c + 1, False), np.zeros(n)).p >= level
    if not exact:  # the normal approximation: the statistic one above the critical count no longer rejects
        x = _signed_sample(n, c + 1, False)
        assert stats.wilcoxon_paired(x, np.zeros(n)).p >= level


@pytest.mark.parametrize(("n_a", "n_b"), [(5, 5), (10, 10), (12, 12), (10, 15), (30, 30)])
def test_rank_sum_critical_count_matches_the_kits_mann_whitney(n_a: int, n_b: int) -> None:
    def with_u(u: int) -> tuple[np.ndarray, np.ndarray]:
        a, rest = [], u
        for i in range(n_a):
            k = min(n_b, rest)
            a.append(k - 0.5 + 1e-9 * i)
            rest -= k
        return np.array(a), np.arange(n_b, dtype=float)

    for level in (0.05, 0.005):
        c = pw.rank_sum_critical(n_a, n_b, level, exact=True)
        if c >= 0:
            r = stats.mann_whitney(*with_u(c))
            assert r.exact and r.p < level
        assert stats.mann_whitney(*with_u(c + 1)).p >= level


@pytest.mark.parametrize(("n", "level"), PROFILES)
def test_printed_power_holds_on_the_kits_own_test(n: int, level: float) -> None:
    """At the MDE the design table prints, the kit's signed-rank test rejects 80 % (+-0.03) of normal samples."""
    delta = mde_sd(n, level)
    assert delta is not None and math.isfinite(delta)
    rng = np.random.default_rng(1000 + n)
    draws = 1500
    hits = sum(stats.wilcoxon_paired(rng.standard_normal(n) + delta, np.zeros(n)).p < level for _ in range(draws))
    assert abs(hits / draws - 0.8) <= 0.03, (n, level, delta, hits / draws)


def test_the_old_formula_overstated_power_where_the_issue_measured_it() -> None:
    """DLBench's paper profile (n 11, m 30): the asymptotic MDE had 28 % power, the exact one needs 2.05 SD."""
    old, new = mde_sd_asymptotic(11, 0.05 / 30), mde_sd(11, 0.05 / 30)
    assert old is not None and new is not None and new > 1.6 * old
    assert pc.power_paired(old, 11, 0.05 / 30) < 0.4
    assert abs(pc.power_paired(new, 11, 0.05 / 30) - 0.8) < 0.01
    assert mde_sd(11, 0.05 / 30, ties=True) == math.inf  # any tie: the normal test cannot reach 0.05/30 at n 11


def test_unpaired_mde_holds_on_the_kits_mann_whitney() -> None:
    delta = pc.mde_unpaired_sd(12, 12, 0.05)
    rng = np.random.default_rng(7)
    hits = sum(stats.mann_whitney(rng.standard_normal(12) + delta, rng.standard_normal(12)).p < 0.05
               for _ in range(1500))
    assert abs(hits / 1500 - 0.8) <= 0.03


def one_row_verdict(a: np.ndarray, b: np.ndarray, threshold: float = 0.05, alpha: float = 0.05) -> str:
    """The verdict ``judge`` gives a one-row family (Holm of one p is the p), from the quantity it tests and prints:
    the Hodges-Lehmann ratio B/A (issue 38), not the ratio of medians."""
    ratio = hl_ratio(b, a, paired=True, conf=1 - alpha).estimate
    assert ratio is not None
    p = stats.wilcoxon_paired(b, a).p
    det = detectability(a, b, paired=True, level=alpha, threshold=threshold, alpha=alpha)
    return verdict(ratio, p, True, threshold, alpha, det.mde, det.equivalent)


@pytest.mark.parametrize("n", [12, 30, 100])
def test_a_true_6_percent_change_is_rarely_called_no_change_at_a_5_percent_threshold(n: int) -> None:
    """The old rule called it "no change" 13-19 % of the time; equivalence (TOST) keeps that at most alpha."""
    rng = np.random.default_rng(n)
    reps, no_change = 400, 0
    for _ in range(reps):
        block = rng.lognormal(0.0, 0.05, n)  # a block effect both arms share
        a = block * rng.lognormal(0.0, 0.03, n)
        b = block * 1.06 * rng.lognormal(0.0, 0.03, n)  # B 6 % slower
        no_change += one_row_verdict(a, b) == "no change"
    assert no_change / reps <= 0.05 + 0.02, no_change / reps  # 2 SE of a rate of 5 % in 400 draws
    # and judge (with its bootstrap interval) agrees with the pieces on one draw
    row = judge([("c", "time_s", "train", "b vs a", a, b)], paired=True, opts=CompareOptions(n_boot=1000)).rows[0].to_json()
    assert row["verdict"] == one_row_verdict(a, b)


def test_a_one_percent_change_with_low_noise_is_shown_equivalent() -> None:
    rng = np.random.default_rng(3)
    a = rng.lognormal(0.0, 0.01, 30)
    b = a * 1.01 * rng.lognormal(0.0, 0.01, 30)
    row = judge([("c", "time_s", "train", "b vs a", a, b)], paired=True, opts=CompareOptions(n_boot=1000)).rows[0].to_json()
    assert row["verdict"] == "no change" and row["equivalent"] and 1 / 1.05 < row["eq_low"] < row["eq_high"] < 1.05


def _row(a: np.ndarray, b: np.ndarray, paired: bool, metric: str = "accuracy") -> dict:
    return judge([("c", metric, "infer", "b vs a", a, b)], paired=paired, opts=CompareOptions(n_boot=1000)).rows[0].to_json()


def test_degenerate_all_equal_paired_is_exactly_no_change() -> None:
    a = np.full(12, 0.98)
    r = _row(a, a.copy(), paired=True)
    assert r["verdict"] == "no change" and r["deterministic"] and r["n_needed"] is None
    assert (r["ratio"], r["ratio_low"], r["ratio_high"], r["eq_low"], r["eq_high"]) == (1.0, 1.0, 1.0, 1.0, 1.0)


def test_identical_pairs_that_vary_between_seeds_get_the_interval_1_1() -> None:
    """Accuracy differs from seed to seed but each seed gives the same value in both runs: ratio 1, CI [1, 1]."""
    a = np.linspace(0.93, 0.96, 12)
    r = _row(a, a.copy(), paired=True)
    assert (r["verdict"], r["ratio"], r["ratio_low"], r["ratio_high"]) == ("no change", 1.0, 1.0, 1.0)


def test_degenerate_one_side_constant() -> None:
    """B constant 2 % above a noisy-free A: a certain 2 % change, below the threshold: equivalent, no change."""
    a = np.full(12, 0.90)
    r = _row(a, np.full(12, 0.918), paired=True)
    assert r["ratio"] == pytest.approx(1.02) and r["verdict"] == "no change"
    r = _row(a, np.full(12, 0.99), paired=True)  # 10 % better, every pair: an improvement, not "no change"
    assert r["verdict"] == "improvement"


def test_degenerate_all_ties_unpaired_is_answered_not_crashed() -> None:
    a = np.r_[np.full(6, 0.9), np.full(6, 0.91)]
    r = _row(a, a.copy(), paired=False)
    # every shift in (-0.01, 0.01) gives the same ranks: the inverted test's interval is the point 1
    assert (r["verdict"], r["ratio"], r["eq_low"], r["eq_high"]) == ("no change", 1.0, 1.0, 1.0)


def test_degenerate_zeros_use_relative_differences() -> None:
    """Accuracy 0 in some trials (a model that diverged): no logs, differences relative to |median A|."""
    a = np.r_[np.zeros(3), np.full(9, 0.5)]
    r = _row(a, a.copy(), paired=True)
    assert r["verdict"] == "no change" and r["eq_low"] == r["eq_high"] == 1.0
    b = a.copy()
    b[5:] = 0.0  # B lost most of its accuracy
    r = _row(a, b, paired=True)
    assert r["verdict"] != "no change"


def test_advice_lists_rows_and_knows_deterministic_rows_need_nothing() -> None:
    rng = np.random.default_rng(5)
    a = rng.lognormal(0.0, 0.15, 10)
    b = a * rng.lognormal(0.0, 0.15, 10)
    acc = np.full(10, 0.97)
    res = judge([("c", "time_s", "train", "b vs a", a, b), ("c", "accuracy", "infer", "b vs a", acc, acc.copy())],
                paired=True, opts=CompareOptions(n_boot=1000))
    time_row, acc_row = (r.to_json() for r in res.rows)
    assert time_row["verdict"] == "inconclusive" and acc_row["verdict"] == "no change"
    advice = conclusive_advice(res)
    assert advice is not None and f"c/time_s/train/b vs a: {time_row['n_needed']} pairs" in advice
    assert "accuracy" not in advice


def test_a_run_compared_with_an_identical_copy_is_no_change_with_ci_1_1(tmp_path: Path) -> None:
    """The issue's case: accuracy under the same plan seeds, compared trial by trial, is exactly unchanged."""
    golden = Path(__file__).parent / "data" / "golden" / "run"
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(golden, a)
    shutil.copytree(golden, b)
    man = json.loads((b / "manifest.json").read_text())
    man["label"] = "copy"
    (b / "manifest.json").write_text(json.dumps(man))
    res = compare_runs(a, b, CompareOptions(metrics=("accuracy",), n_boot=1000))
    assert res.rows
    for r in (row.to_json() for row in res.rows):
        assert r["paired"] and r["deterministic"], r
        assert (r["verdict"], r["ratio"], r["ratio_low"], r["ratio_high"]) == ("no change", 1.0, 1.0, 1.0)
    assert conclusive_advice(res) is None


def test_power_cache_makes_a_design_table_cheap() -> None:
    """The figures are cached per (n, level): the second call does no simulation."""
    pw._paired_thresholds.cache_clear()
    mde_sd(11, 0.05 / 30)
    mde_sd(11, 0.05 / 30)
    info = pw._paired_thresholds.cache_info()
    assert info.misses == 1 and info.hits == 1


def test_simulated_order_statistics_are_kept_on_disk_between_processes(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A second process (here: a cleared lru cache) reads the draws back, bit for bit, and simulates nothing; a file
    that is not what the simulation returns is ignored and rewritten; KIT_POWER_CACHE=off keeps nothing."""
    monkeypatch.setenv(pc.ENV_CACHE, str(tmp_path / "power"))
    want = pw._simulate_paired(12, (9, 68))
    first = pw._paired_order_stats(12, (9, 68), pc.on_disk)
    assert np.array_equal(first, want)
    (kept,) = (tmp_path / "power").iterdir()

    def _believed() -> np.ndarray:
        got = pc.cached_entry("paired", (12, 9, 68), want.shape)
        assert got is not None, "the entry is not one a reader believes"
        return got

    def no_simulation(*_args: object) -> np.ndarray:
        raise AssertionError("simulated again")

    monkeypatch.setattr(pw, "_simulate_paired", no_simulation)
    assert np.array_equal(pw._paired_order_stats(12, (9, 68), pc.on_disk), want)
    pw._paired_thresholds.cache_clear()
    critical = pw.signed_rank_critical(12, 0.05, True)
    monkeypatch.setattr(pw, "_simulate_paired", lambda n, ks: want[:, :1] if ks == (critical,) else no_simulation())
    assert pc.mde_paired_sd(12, 0.05) == pytest.approx(float(np.quantile(np.sort(-want[:, 0]), pw.POWER)))
    pw._paired_thresholds.cache_clear()

    assert kept == pc.entry_path("paired", (12, 9, 68))
    for bad in (b"not an array", np.zeros((3, 2)).tobytes()):  # garbage, then the right size without a header
        kept.write_bytes(bad)
        monkeypatch.setattr(pw, "_simulate_paired", lambda n, ks: want)
        assert np.array_equal(pw._paired_order_stats(12, (9, 68), pc.on_disk), want)
        assert np.array_equal(_believed(), want)  # rewritten (a reader now believes it: its MAC holds)
    with open(kept, "wb") as fh:  # an array of another shape (a plain .npy: no MAC either)
        np.save(fh, want[:10])
    assert np.array_equal(pw._paired_order_stats(12, (9, 68), pc.on_disk), want) and _believed().shape == want.shape

    before = sorted(p.name for p in (tmp_path / "power").iterdir())
    assert len(before) == 2  # (9, 68) and the critical count's: each distinct draw once
    monkeypatch.setenv(pc.ENV_CACHE, "off")
    assert np.array_equal(pw._unpaired_order_stats(3, 4, (2,), pc.on_disk), pw._simulate_unpaired(3, 4, (2,)))
    assert sorted(p.name for p in (tmp_path / "power").iterdir()) == before
