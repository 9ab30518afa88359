"""What keeps `kit history` fast over 10,000 runs (issue 41 item 5): a bounded terminal table, fingerprints
taken in worker processes for many runs, and the same answers either way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kit import history_cache
from kit.history import TABLE_HEAD, TABLE_MAX_RUNS, TABLE_TAIL, HistoryPoint, HistorySeries, HistoryStep, shown_runs


def _series(n: int, steps: tuple[int, ...] = ()) -> HistorySeries:
    runs = tuple(HistoryPoint.of(f"/r/{i}", float(i), f"v{i}", "pytorch", None, (1.0, 1.1, 1.2)) for i in range(n))
    st = tuple(HistoryStep(index=i, from_label=f"v{i - 1}", to_label=f"v{i}", ratio=1.2, ratio_low=1.1,
                           ratio_high=1.3, p=0.001, n_before=30, n_after=30, runs_before=10, runs_after=10,
                           p_adj=0.001, verdict="regression") for i in steps)
    return HistorySeries(runs_dir="/r", metric="time_s", unit="s", phase="train", arm="pytorch", threshold=0.05,
                         alpha=0.05, runs=runs, steps=st, caveats=(), method="m")


def test_a_short_series_lists_every_run() -> None:
    assert shown_runs(_series(TABLE_MAX_RUNS)) == list(range(TABLE_MAX_RUNS))
    assert shown_runs(_series(0)) == []


def test_a_long_series_lists_its_ends_and_the_runs_around_each_step() -> None:
    shown = shown_runs(_series(10_000, steps=(6000, 9999)))
    assert shown == sorted(set(shown))
    assert shown[:TABLE_HEAD] == list(range(TABLE_HEAD))
    assert shown[-TABLE_TAIL:] == list(range(10_000 - TABLE_TAIL, 10_000))
    assert {5997, 5998, 5999, 6000, 6001, 6002} <= set(shown)
    assert len(shown) < 40


def _runs(tmp_path: Path, n: int) -> list[Path]:
    out = []
    for i in range(n):
        run = tmp_path / f"run-{i}"
        (run / "trials").mkdir(parents=True)
        (run / "manifest.json").write_text("{}")
        (run / "trials" / "t.json").write_text(str(i))
        out.append(run)
    return out


def test_fingerprints_in_workers_equal_those_taken_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _runs(tmp_path, 5)
    here = [history_cache.fingerprint(r) for r in runs]
    monkeypatch.setattr(history_cache, "PARALLEL_FINGERPRINTS", 1)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert history_cache.fingerprints(runs) == here
    (runs[3] / "trials" / "t.json").write_text("edited")
    again = history_cache.fingerprints(runs)
    assert again[3][0] != here[3][0] and again[:3] == here[:3]


def test_the_kits_binary_segmentation_finds_what_ruptures_finds() -> None:
    """kit.history.binseg_l1 replaces ruptures' Binseg with CostL1 (O(n^2) per segment: 3 s a series at 10,000 runs);
    on series without exact ties (where float rounding decides between equal gains) both find the same break points,
    with the penalty the kit uses, one-point segments allowed."""
    import numpy as np
    import ruptures as rpt
    from ruptures.costs import CostL1

    from kit.history import binseg_l1

    rng = np.random.default_rng(41)
    for trial in range(60):
        n = int(rng.integers(5, 160))
        x = rng.normal(1.0, 0.02, n)
        for _ in range(int(rng.integers(0, 3))):  # planted steps, up or down, anywhere (the newest run too)
            x[int(rng.integers(1, n)):] *= float(rng.choice([0.8, 1.15, 1.3]))
        pen = 2 * np.log(n) * 0.02
        cost = CostL1()
        cost.min_size = 1
        theirs = rpt.Binseg(custom_cost=cost, min_size=1, jump=1).fit(x.reshape(-1, 1)).predict(pen=pen)[:-1]
        assert binseg_l1([float(v) for v in x], pen) == sorted(int(b) for b in theirs), (trial, n)
