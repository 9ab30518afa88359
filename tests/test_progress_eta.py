"""Progress with an ETA from the first trial on (issue 39): the profile's estimate first, then the measured trials
and their re-runs; plain lines where there is no terminal; `kit list` keeps the estimate beside a measured run."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from rich.console import Console

from kit.catalog import Measured, estimate_text, measured_runs
from kit.plan import ESTIMATE_WEIGHT_TRIALS, EtaClock, Plan, Trial, eta
from tests._runs import records, trial


def test_eta_from_the_estimate_then_from_the_measured_trials() -> None:
    # before any trial: the profile's estimate spread over the plan (220 s for 26 trials), less the trial in flight
    first = eta(26, 0, [], 220.0)
    assert (first.left_s, first.basis) == (pytest.approx(220.0), "estimate")
    assert eta(26, 0, [], 220.0, in_flight_s=3.0).left_s == pytest.approx(217.0)
    assert first.text() == "~3 min 40 s (estimate)"
    # a busy host: trials (with their re-runs) take 90 s, not 8.5 s; the estimate counts as two trials, then yields
    prior = 220.0 / 26
    two = eta(26, 2, [90.0, 90.0], 220.0)
    per = (ESTIMATE_WEIGHT_TRIALS * prior + 2 * 90.0) / (ESTIMATE_WEIGHT_TRIALS + 2)
    assert (two.basis, two.per_trial_s) == ("blend", pytest.approx(per)) and two.left_s == pytest.approx(24 * per)
    late = eta(26, 20, [90.0] * 20, 220.0)
    assert late.per_trial_s is not None and 80 < late.per_trial_s < 90 and "(estimate + measured)" in late.text()
    # no estimate: nothing until a trial is measured, then the measurement alone
    assert eta(10, 0, [], None).left_s is None and eta(10, 0, [], None).text() == "-"
    assert (eta(10, 4, [30.0, 50.0], None).left_s, eta(10, 4, [30.0, 50.0], None).basis) == (240.0, "measured")
    # never negative: a trial running longer than the per-trial figure, or a finished plan
    assert eta(3, 2, [10.0], None, in_flight_s=99.0).left_s == 0.0 and eta(3, 3, [10.0], None).left_s == 0.0
    # a resume: earlier trials are done, the estimate is still per planned trial
    assert eta(26, 13, [], 220.0).left_s == pytest.approx(110.0)


def test_the_eta_clock_times_trials_with_their_reruns() -> None:
    clock = EtaClock(4, 1, 40.0)
    assert clock.eta(0.0).left_s == pytest.approx(30.0)
    clock.started(100.0)
    assert clock.eta(104.0).left_s == pytest.approx(26.0)  # counts down within the first trial
    clock.finished_one(130.0)  # 30 s: the trial and its re-runs
    assert clock.times == [30.0] and clock.finished == 2
    assert clock.eta(130.0).left_s == pytest.approx(2 * (2 * 10.0 + 30.0) / 3)


def _plan(n: int) -> Plan:
    trials = tuple(Trial(f"r{i:03d}-c00-pytorch", i, i, i, False, "pytorch", "pytorch", "c00", {}, 0) for i in range(n))
    return Plan(0, "interleaved", ("pytorch",), {"c00": {}}, trials)


def test_without_a_terminal_the_progress_prints_plain_lines_with_the_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.cli import ui

    buf = io.StringIO()
    console = Console(file=buf, width=200)
    assert not console.is_terminal
    plan = _plan(3)
    rd = cast(Any, SimpleNamespace(path=Path("runs/x"), manifest=lambda: SimpleNamespace(
        spec={"profile_estimate_s": 30.0})))
    now = [1000.0]
    monkeypatch.setattr(ui.time, "monotonic", lambda: now[0])
    with ui.RichEvents(console) as events:
        events.run_started(rd, plan, 0)
        assert events.eta_text() == "~30 s (estimate)"  # from the first trial on, before any finished
        events.trial_started(plan.trials[0], 0, 3)
        now[0] += 40.0
        events.trial_finished(plan.trials[0], records([trial(plan.trials[0].trial_id, "pytorch")])[0])
        events.waiting("baseline", 95.0, 1.9)
    out = buf.getvalue()
    assert "progress 1/3 trials · eta ~40 s (estimate + measured)" in out, out
    assert "waiting for a quiet host: 1:35 left, other work 1.9 CPUs" in out, out
    assert "eta ~40 s" in ui._EtaColumn(events).render(cast(Any, None)).plain


def _complete_run(runs: Path, name: str, wall_s: float, events: list[dict[str, Any]], started: float = 1000.0) -> None:
    d = runs / name
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"experiment": "florencio2019_lenet", "profile": "quick",
                                                 "status": "complete", "started": started, "ended": started + wall_s}))
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events) + "not json\n")


def test_kit_list_keeps_the_estimate_beside_the_measured_figure_labelled(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert measured_runs(runs, ["florencio2019_lenet"]) == {}
    _complete_run(runs, "2026-01-01T00-00-00Z-florencio2019_lenet", 2377.0,
                  [{"event": "rerun_budget", "budget": 6}, {"event": "disturbed", "trial_id": "a"}])
    (seen,) = measured_runs(runs, ["florencio2019_lenet"]).values()
    assert seen == Measured(2377.0, "2026-01-01T00-00-00Z-florencio2019_lenet", True)
    assert estimate_text(220.0, seen) == "~3 min 40 s est., 39 min 37 s measured (busy host)"
    assert estimate_text(220.0, Measured(230.0, "r", False)) == "~3 min 40 s est., 3 min 50 s measured"
    assert estimate_text(220.0, None) == "~3 min 40 s" and estimate_text(None, None) == "unknown"
    assert estimate_text(None, Measured(230.0, "r", False)) == "3 min 50 s measured"
    _complete_run(runs, "2026-01-02T00-00-00Z-florencio2019_lenet", 230.0, [{"event": "baseline_load", "busy": False}],
                  started=90000.0)  # the newest complete run is the one shown
    (newest,) = measured_runs(runs, ["florencio2019_lenet"]).values()
    assert (newest.wall_s, newest.busy) == (230.0, False)
