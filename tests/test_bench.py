"""Overhead benchmark logic with fake trials (no timing is asserted)."""

from __future__ import annotations

import numpy as np
import pytest

from kit.bench import OverheadResult, cpu_workload, in_process_trial, overhead, ratio_ci


class FakeTrials:
    """Records every call; 'on' trials take ``slowdown`` times longer, plus seeded noise."""

    def __init__(self, slowdown: float = 1.0, noise: float = 0.0, seed: int = 0) -> None:
        self.calls: list[bool] = []
        self.slowdown = slowdown
        self.noise = noise
        self.rng = np.random.default_rng(seed)

    def __call__(self, collectors_on: bool) -> float:
        self.calls.append(collectors_on)
        base = 1.0 + (self.rng.normal(0, self.noise) if self.noise else 0.0)
        return base * (self.slowdown if collectors_on else 1.0)


def test_pairs_are_interleaved_and_order_is_seeded() -> None:
    fake = FakeTrials()
    res = overhead(fake, n_pairs=20, seed=7, warmup_pairs=1)
    assert len(fake.calls) == 2 * 21
    pairs = [fake.calls[i : i + 2] for i in range(0, len(fake.calls), 2)]
    assert all(sorted(p) == [False, True] for p in pairs)  # one off and one on per pair
    assert {tuple(p) for p in pairs} == {(False, True), (True, False)}  # both orders occur
    assert len(res.times_off_s) == len(res.times_on_s) == len(res.order) == 20  # warm-up discarded
    again = FakeTrials()
    overhead(again, n_pairs=20, seed=7, warmup_pairs=1)
    assert again.calls == fake.calls
    other = FakeTrials()
    overhead(other, n_pairs=20, seed=8, warmup_pairs=1)
    assert other.calls != fake.calls


def test_no_noise_gives_the_exact_ratio() -> None:
    res = overhead(FakeTrials(slowdown=1.02), n_pairs=5, seed=0, warmup_pairs=0)
    assert res.ratio == pytest.approx(1.02) and res.overhead_pct == pytest.approx(2.0)
    assert res.ci_low == pytest.approx(1.02) == res.ci_high and res.ci_method == "degenerate"
    assert not res.meets_target()


def test_noisy_ratio_and_ci() -> None:
    res = overhead(FakeTrials(slowdown=1.05, noise=0.01, seed=3), n_pairs=30, seed=1, n_resamples=2000)
    assert res.ci_method in ("BCa", "percentile")
    assert res.ci_low <= res.ratio <= res.ci_high
    assert res.ci_low < 1.05 < res.ci_high or abs(res.ratio - 1.05) < 0.01
    assert res.ci_low > 1.0  # a 5 % slowdown is seen
    assert "on/off" in res.summary() and res.as_dict()["n_pairs"] == 30


def test_no_slowdown_meets_target() -> None:
    res = overhead(FakeTrials(slowdown=1.0, noise=0.002, seed=5), n_pairs=30, seed=2, n_resamples=2000)
    assert res.ci_low < 1.0 < res.ci_high + 1e-9
    assert res.meets_target(0.01)


def test_ratio_ci_is_paired() -> None:
    # Large drift shared by both runs of a pair, tiny constant overhead: a paired CI stays narrow.
    drift = np.linspace(1.0, 3.0, 40)
    lo, hi, _ = ratio_ci(drift, drift * 1.01, n_resamples=2000)
    assert lo == pytest.approx(1.01, abs=0.02) and hi == pytest.approx(1.01, abs=0.02)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="n_pairs"):
        overhead(FakeTrials(), n_pairs=1, seed=0)
    with pytest.raises(ValueError, match="positive time"):
        overhead(lambda on: 0.0, n_pairs=3, seed=0)
    with pytest.raises(ValueError, match="positive time"):
        overhead(lambda on: float("nan"), n_pairs=3, seed=0)


def test_meets_target_uses_the_upper_bound() -> None:
    r = OverheadResult(1.004, 0.999, 1.012, "BCa", 0.95, 10, 0, [1.0], [1.0])
    assert not r.meets_target(0.01) and r.meets_target(0.02)


def test_default_workload_and_in_process_trial() -> None:
    assert cpu_workload(10_000) > 0
    run = in_process_trial(("cpu", "memory"), period_s=0.01, workload=lambda: cpu_workload(20_000))
    assert run(False) > 0 and run(True) > 0
    res = overhead(run, n_pairs=2, seed=0, warmup_pairs=0, n_resamples=200)
    assert len(res.times_on_s) == 2 and all(t > 0 for t in res.times_on_s)
