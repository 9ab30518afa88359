"""Disturbed trials (issue 24): what kit.disturbance reads from the counters, and a real planted busy process
during one trial's timed phase, caught while the run goes on, the trial re-run in place and its attempt kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kit import disturbance
from kit.disturbance import Limits, assess
from kit.plan import Trial
from kit.run import RunEvents, RunOptions, start_run
from kit.spec import load_spec

CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"


def _markers(phases: list[tuple[str, float, float, float, float]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, t0, t1, c0, c1 in phases:
        out += [{"event": "phase_start", "phase": name, "t": t0, "cpu_s": c0},
                {"event": "phase_end", "phase": name, "t": t1, "cpu_s": c1}]
    return out


def _counters(t0: float, t1: float, period: float, host_rate: float, kit_rate: float) -> list[tuple[float, str, str, str, float]]:
    """Cumulative host-busy and kit CPU counters sampled every ``period`` from ``t0`` to ``t1``."""
    rows = []
    n = round((t1 - t0) / period)
    for i in range(n + 1):
        t = t0 + i * period
        rows += [(t, "cpu", "total", "busy_cpu_s", 100.0 + host_rate * (t - t0)),
                 (t, "cpu", "kit", "cpu_s", 5.0 + kit_rate * (t - t0))]
    return rows


def test_foreign_cpu_is_host_busy_minus_the_trial_and_the_kit() -> None:
    # 2 s phase: the trial uses 1 CPU, the kit 0.05, the host is busy 2.05 CPUs: 1 CPU of someone else
    markers = _markers([("warmup", 1000.0, 1001.0, 0.0, 1.0), ("train", 1001.0, 1003.0, 1.0, 3.0)])
    rows = _counters(999.0, 1004.0, 0.1, host_rate=2.05, kit_rate=0.05)
    d = assess(markers, rows, 0.1)
    (train,) = d.phases  # the warm-up is not judged: it is not measured
    assert train.phase == "train" and train.judged
    assert train.foreign_cpu == pytest.approx(1.0, abs=1e-9) and train.trial_cpu == pytest.approx(1.0)
    assert train.disturbed and d.disturbed and "foreign CPU 1.00 CPUs" in (d.cause or "")
    quiet = assess(markers, _counters(999.0, 1004.0, 0.1, host_rate=1.1, kit_rate=0.05), 0.1)
    assert not quiet.disturbed and quiet.phases[0].foreign_cpu == pytest.approx(0.05, abs=1e-9)
    # the limit is the spec's: a higher one lets the same phase pass, 0 turns the CPU check off
    assert not assess(markers, rows, 0.1, Limits(foreign_cpu=1.5)).disturbed
    assert not assess(markers, rows, 0.1, Limits(foreign_cpu=0.0)).disturbed


def test_short_or_uncovered_phases_are_not_judged() -> None:
    rows = _counters(999.0, 1004.0, 0.1, host_rate=2.0, kit_rate=0.0)
    short = assess(_markers([("infer", 1001.0, 1001.2, 1.0, 1.2)]), rows, 0.1)
    assert not short.disturbed and not short.phases[0].judged and "shorter than 5" in (short.phases[0].why or "")
    outside = assess(_markers([("train", 1010.0, 1012.0, 1.0, 3.0)]), rows, 0.1)
    assert not outside.disturbed and "no host CPU counters" in (outside.phases[0].why or "")
    old = assess([{"event": "phase_start", "phase": "train", "t": 1001.0},
                  {"event": "phase_end", "phase": "train", "t": 1003.0}], rows, 0.1)
    assert not old.disturbed and "no CPU time" in (old.phases[0].why or "")


def test_throttling_and_foreign_gpu_processes_disturb_a_phase() -> None:
    markers = _markers([("train", 1001.0, 1003.0, 1.0, 3.0)])
    rows = _counters(999.0, 1004.0, 0.1, host_rate=1.0, kit_rate=0.0)
    rows += [(1002.0, "nvml", "0", "foreign_procs", 1.0), (1002.0, "nvml", "0", "throttle_reasons", float(0x40 | 0x4)),
             (1002.0, "cpu", "total", "freq_mhz", 1500.0)]
    d = assess(markers, rows, 0.1, idle_freq_mhz=2000.0)
    causes = d.phases[0].causes
    assert any("foreign process" in c for c in causes)
    assert any("hardware thermal slowdown" in c for c in causes)  # the power cap (0x4) alone is not a disturbance
    assert not any("software power cap" in c for c in causes)
    assert any("25% below idle" in c for c in causes)


def test_crafted_markers_are_ignored_not_trusted() -> None:
    rows = _counters(999.0, 1004.0, 0.1, host_rate=2.0, kit_rate=0.0)
    crafted = [{"event": "phase_start", "phase": "train", "t": "soon", "cpu_s": 1.0}, "not a marker",
               {"event": "phase_end", "phase": "train", "t": float("nan"), "cpu_s": 2.0},
               {"event": "phase_start", "phase": "infer", "t": 1001.0, "cpu_s": True},
               {"event": "phase_end", "phase": "infer", "t": 1003.0, "cpu_s": 3.0}]
    d = assess(crafted, rows, 0.1)
    assert [p.phase for p in d.phases] == ["infer"] and not d.phases[0].judged  # a bool is not a CPU time
    assert disturbance.disturbed_phases({"disturbance": {"phases": "x"}}) == {}
    assert not disturbance.is_disturbed({"disturbance": {"disturbed": "yes", "phases": {}}})


class _Hog(RunEvents):
    """Starts a busy process when the first measured trial starts; stops it when the kit says it re-runs."""

    def __init__(self, stop: Path) -> None:
        self.stop, self.proc, self.messages, self.hogged = stop, None, [], None  # type: ignore[var-annotated]

    def trial_started(self, trial: Trial, index: int, total: int) -> None:
        if self.proc is None and not trial.warmup:
            self.hogged = trial.trial_id
            self.proc = subprocess.Popen([sys.executable, "-c",
                                          f"import os\nwhile not os.path.exists({str(self.stop)!r}): pass"])

    def message(self, text: str) -> None:
        self.messages.append(text)
        if "disturbed" in text:
            self.stop.touch()


@pytest.mark.slow
def test_a_planted_busy_process_is_caught_and_the_trial_re_run_in_place(tmp_path: Path) -> None:
    spec_file = tmp_path / "hog.toml"
    spec_file.write_text(CALIBRATED.read_text().replace("train_s = 0.15", "train_s = 1.0")
                         .replace("repetitions = 12", "repetitions = 2").replace("warmup_repetitions = 1",
                                                                                   "warmup_repetitions = 0"))
    events = _Hog(tmp_path / "stop")
    try:
        rd = start_run(load_spec(spec_file), RunOptions(runs_root=tmp_path / "runs"), events)
    finally:
        events.stop.touch()
        if events.proc is not None:
            events.proc.wait(timeout=30)
    hogged = events.hogged
    assert hogged is not None
    said = [m for m in events.messages if "disturbed" in m]
    assert said and hogged in said[0] and "re-running it in its plan position" in said[0], events.messages
    # the disturbed attempt is kept with its telemetry; the trial in trials/ is the quiet re-run
    assert rd.attempt_files(hogged) == [f"attempts/{hogged}.1.json"]
    (attempt,) = [a for a in rd.checked_attempts() if a.trial_id == hogged]
    first = attempt.record.disturbance
    assert first["disturbed"] and first["phases"]["train"]["foreign_cpu"] > 0.5, first
    now = rd.read_trial(hogged)
    assert now["attempt"] == 2 and not now["disturbance"]["disturbed"], now["disturbance"]
    assert now["position"] == attempt.record.position and now["seed"] == attempt.record.seed
    assert rd.manifest().status == "complete"
    others = [rd.read_trial(t.trial_id) for t in rd.manifest().plan.trials if t.trial_id != hogged]
    assert all(not r["disturbance"]["disturbed"] for r in others), [r["disturbance"]["cause"] for r in others]


def test_a_significant_change_between_sides_in_different_host_states_is_suspect() -> None:
    from kit.analysis.host_state import SideState, suspect_cause
    from kit.compare import EXIT_INCONCLUSIVE, EXIT_SUSPECT, exit_code, mark_suspects
    from kit.compare_records import Comparison
    from tests.test_compare_records import bare_row

    quiet, shaken = SideState(12, 0), SideState(12, 6)
    assert suspect_cause(quiet, quiet, "A", "B", "train") is None
    assert suspect_cause(shaken, SideState(12, 5), "A", "B", "train") is None  # both sides alike
    cause = suspect_cause(quiet, shaken, "A", "B", "train")
    assert cause and "B: 6 of 12 trials disturbed in train" in cause
    # a busy idle baseline on one side counts only where that side's phases were not judged (issue 39: its
    # trials judged quiet were measured quiet)
    assert suspect_cause(SideState(0, 0, busy_baseline=True), quiet, "A", "B", "infer")
    assert suspect_cause(SideState(12, 0, busy_baseline=True), quiet, "A", "B", "infer") is None
    rows = [bare_row(verdict="regression", phase="train"), bare_row(verdict="no change", phase="train"),
            bare_row(verdict="inconclusive", phase="infer")]
    marked = mark_suspects(rows, lambda r: (quiet, shaken), "A", "B")
    counts = Comparison(marked, 0.05, 0.05).counts
    assert marked[0].verdict == "suspect" and marked[0].was == "regression" and marked[1].verdict == "no change"
    assert counts["suspect"] == 1 and counts["regression"] == 0
    # the gate: suspect has its own exit code, before "inconclusive"; a real regression still exits 1
    assert exit_code(counts, "regression") == EXIT_SUSPECT == 4
    assert exit_code({**counts, "suspect": 0}, "regression") == EXIT_INCONCLUSIVE
    assert exit_code({**counts, "regression": 1}, "regression") == 1
    assert exit_code(counts, None) == 0


@pytest.mark.slow
def test_two_runs_one_under_planted_load_compare_says_suspect_with_its_exit_code(tmp_path: Path) -> None:
    """Run B is 10 % slower (planted) and ran beside a busy process: significant, but its trials were disturbed
    and run A's were not, so the verdict is suspect, and `--fail-on regression` exits 4, not 1."""
    from typer.testing import CliRunner

    from kit.cli import app
    from kit.compare import compare_runs

    base = (CALIBRATED.read_text().replace("train_s = 0.15", "train_s = 0.3").replace("infer_s = 0.05", "infer_s = 0.3")
            .replace("repetitions = 12", "repetitions = 10").replace("warmup_repetitions = 1", "warmup_repetitions = 0")
            .replace("timeout_s = 120", "timeout_s = 120\ndisturbance_retries = 0")
            .replace("[telemetry]", "[telemetry]\nperiod_s = 0.05"))  # phases of 6 periods: judged
    (tmp_path / "a.toml").write_text(base)
    (tmp_path / "b.toml").write_text(base.replace("jitter_frac = 0.01", "jitter_frac = 0.01\nslowdown = 1.10"))
    run_a = start_run(load_spec(tmp_path / "a.toml"), RunOptions(runs_root=tmp_path / "a")).path
    stop = tmp_path / "stop"
    hog = subprocess.Popen([sys.executable, "-c", f"import os\nwhile not os.path.exists({str(stop)!r}): pass"])
    try:
        run_b = start_run(load_spec(tmp_path / "b.toml"), RunOptions(runs_root=tmp_path / "b")).path
    finally:
        stop.touch()
        hog.wait(timeout=30)
    res = compare_runs(run_a, run_b).to_json()
    times = [r for r in res["rows"] if r["metric"] == "time_s"]
    assert times and all(r["verdict"] == "suspect" and r["was"] == "regression" for r in times), \
        [(r["arm"], r["phase"], r["verdict"], r.get("p_adj"), r["n_a"], r["n_b"], r.get("reason")) for r in times]
    assert "B: 10 of 10 trials disturbed" in times[0]["suspect_cause"]
    assert res["counts"]["regression"] == 0 and res["counts"]["improvement"] == 0
    out = CliRunner().invoke(app, ["compare", str(run_a), str(run_b), "--fail-on", "regression"])
    assert out.exit_code == 4, out.output
    assert "suspect" in out.output


def test_a_rejected_hypothesis_whose_arms_ran_in_different_conditions_is_suspect() -> None:
    from kit.analysis.host_state import disturbance_table
    from kit.analysis.hypotheses import mark_suspect as _mark_suspect
    from tests._runs import records_of

    def rec(tid: str, arm: str, block: int, shaken: bool) -> dict[str, Any]:
        phase = {"judged": True, "disturbed": shaken, "foreign_cpu": 1.0 if shaken else 0.01,
                 "causes": ["foreign CPU 1.00 CPUs (limit 0.25)"] if shaken else []}
        return {"trial_id": tid, "arm": arm, "config_id": "c00", "block": block, "status": "ok", "warmup": False,
                "disturbance": {"disturbed": shaken, "phases": {"train": phase}}}

    trials = [rec(f"r{b}-tf", "tensorflow", b, shaken=b < 6) for b in range(12)]
    trials += [rec(f"r{b}-pt", "pytorch", b, shaken=False) for b in range(12)]
    table = disturbance_table(records_of(trials), [{"trial_id": "r0-tf", "disturbed": True}])
    assert table.reruns == 1 and len(table.still_disturbed_trials) == 6
    row = {"arm_a": "tensorflow", "arm_b": "pytorch", "config_id": "c00", "phase": "train", "blocks": list(range(12)),
           "decision": "reject H0 (tensorflow > pytorch)", "rejected": True}
    _mark_suspect(row, table)
    assert row["decision"].startswith("suspect: reject H0") and "tensorflow: 6 of 12 trials disturbed" in row["suspect"]
    quiet = {**row, "decision": "reject H0 (tensorflow > pytorch)", "blocks": list(range(6, 12))}
    quiet.pop("suspect")
    _mark_suspect(quiet, table)  # only the quiet blocks were tested: nothing suspect about them
    assert "suspect" not in quiet
