"""A re-run policy that fits a busy host (issue 39): a run-wide re-run budget, re-runs that stop when the load
persists, a resume that counts what was spent, and a busy idle baseline that says what it will cost.

The loop under test is the runner's own (kit.disturbance.rerun_disturbed, wired by kit.run.trial); the hog is
simulated by the disturbance assessment of each attempt (a disturbed record), on a real run directory. The real
CPU hog through `kit run` is the slow test at the end."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from _runs import records as typed_records
from _runs import trial as trial_record
from _runs import write_record

from kit import disturbance
from kit.collectors.quiet import LoadReading, QuietWait, wait_for_quiet
from kit.disturbance import KEEP_BUDGET, KEEP_PERSISTENT, RerunBudget, RerunHooks, RerunLedger, rerun_summary
from kit.errors import SpecError
from kit.pinning import Pinning
from kit.plan import make_plan
from kit.run import RunEvents, RunOptions, start_run
from kit.run.context import quiet_wait as _quiet_wait
from kit.run.context import rerun_ledger as _rerun_ledger
from kit.run.host import baseline_load as _baseline_load
from kit.spec import load_spec, parse_spec
from kit.store import RunDir

CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"


def _shaken(disturbed: bool) -> dict[str, Any]:
    """A disturbance record as kit.disturbance.assess writes it (what a hog beside the trial makes it say)."""
    phase = {"phase": "train", "judged": True, "disturbed": disturbed, "foreign_cpu": 1.9 if disturbed else 0.02,
             "causes": ["foreign CPU 1.90 CPUs (limit 0.25)"] if disturbed else []}
    return {"schema": 1, "disturbed": disturbed, "cause": "train: foreign CPU 1.90 CPUs" if disturbed else None,
            "phases": {"train": phase}}


class _Host:
    """A run directory and a host whose load the test decides per attempt; the hooks the runner would give."""

    def __init__(self, tmp_path: Path, reps: int = 8, load: Any = lambda n: True, disk: bool = True) -> None:
        spec = parse_spec(CALIBRATED.read_text().replace("repetitions = 12", f"repetitions = {reps}"), "c.toml")
        self.spec, self.plan = spec, make_plan(spec)
        self.rd = RunDir.create(tmp_path / "runs", "calibrated", {
            "experiment": "calibrated", "spec": spec.to_dict(), "plan": self.plan.as_dict(),
            "plan_digest": self.plan.digest(), "status": "running"})
        self.load, self.attempts, self.said, self.disk = load, 0, [], disk  # type: ignore[var-annotated]
        self.done: set[str] = set()
        self.logged: list[dict[str, Any]] = []  # the events, when the run directory is not written (disk=False)

    def attempt(self, tid: str) -> dict[str, Any]:
        """Run trial ``tid`` once: its record, disturbed when the host is loaded at this attempt."""
        t = next(t for t in self.plan.trials if t.trial_id == tid)
        self.attempts += 1
        rec = trial_record(tid, t.arm, t.config_id, repetition=t.repetition, position=t.position, warmup=t.warmup,
                           disturbance=_shaken(bool(self.load(self.attempts))), started=float(self.attempts))
        if self.disk:
            write_record(self.rd, rec, None)
        self.done.add(tid)
        return rec

    def hooks(self, tid: str, wait: Any = None) -> RerunHooks:
        if self.disk:
            return RerunHooks(archive=lambda: self.rd.archive_trial(tid), run=lambda: self.attempt(tid),
                              log=self.rd.log_event, say=self.said.append, wait=wait)
        return RerunHooks(archive=lambda: f"attempts/{tid}.n.json", run=lambda: self.attempt(tid),
                          log=lambda event, **kw: self.logged.append({"event": event, **kw}), say=self.said.append,
                          wait=wait)

    def ctx(self) -> Any:
        """What kit.run.context.rerun_ledger reads of a run's context."""
        return cast(Any, SimpleNamespace(spec=self.spec, plan=self.plan, rd=self.rd, only=None, opts=RunOptions(),
                                        backend=SimpleNamespace(pinning=Pinning())))

    def run(self, ledger: RerunLedger, wait: Any = None, stop_after: int | None = None) -> None:
        for t in self.plan.trials:
            if t.trial_id in self.done or t.trial_id in self.rd.finished_ids():
                continue
            if stop_after is not None and self.attempts >= stop_after:
                raise KeyboardInterrupt
            disturbance.rerun_disturbed(self.attempt(t.trial_id), t.trial_id, t.warmup, ledger,
                                        self.hooks(t.trial_id, wait))

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (self.rd.path / "events.jsonl").read_text().splitlines()] + self.logged


def test_a_hog_for_the_whole_run_spends_at_most_the_budget_and_the_events_say_reruns_stopped(tmp_path: Path) -> None:
    host = _Host(tmp_path)  # 8 repetitions x 2 arms = 16 measured trials (+ 2 warm-ups), every attempt disturbed
    ledger = _rerun_ledger(host.ctx())
    assert ledger.budget.total == 4 and ledger.spent == 0  # 25 % of 16 measured trials
    host.run(ledger)
    measured = [t for t in host.plan.trials if not t.warmup]
    extra = host.attempts - len(host.plan.trials)
    # the load persisted: three re-runs in a row came back disturbed, and re-running stopped there
    assert extra == ledger.spent == disturbance.PERSISTENT_RERUNS <= 0.25 * len(measured)
    assert len(host.rd.checked_attempts()) == extra
    ev = host.events()
    stops = [e for e in ev if e["event"] == "reruns_stopped"]
    assert [(e["reason"], e["spent"], e["budget"]) for e in stops] == [(KEEP_PERSISTENT, 3, 4)]
    assert len([e for e in ev if e["event"] == "disturbed_kept"]) == len(measured)  # every trial flagged
    said = [s for s in host.said if "re-runs stopped" in s]
    assert len(said) == 1 and "load persists" in said[0] and "--wait-for-quiet" in said[0]  # said once
    summary = rerun_summary(ev)
    assert (summary["spent"], summary["budget"], summary["stopped"]) == (3, 4, True)
    assert summary["text"] == "3 re-run(s) of disturbed trials, of a budget of 4; stopped re-running after persistent load"


def test_waiting_for_quiet_between_reruns_is_bounded_by_the_budget(tmp_path: Path) -> None:
    """--wait-for-quiet: a wait that finds a quiet window lets the re-runs go on, yet a load that comes back every
    time still spends no more than the budget; a wait that finds none stops them."""
    host = _Host(tmp_path, disk=False)
    waits: list[int] = []
    ledger = _rerun_ledger(host.ctx())
    host.run(ledger, wait=lambda: waits.append(host.attempts) or True)
    assert ledger.spent == ledger.budget.total == 4 and host.attempts == len(host.plan.trials) + 4
    assert len(waits) == 1  # after 3 disturbed re-runs in a row: one wait; the next re-run spends the last one
    assert [e["reason"] for e in host.events() if e["event"] == "reruns_stopped"] == [KEEP_BUDGET]

    host = _Host(tmp_path / "b", disk=False)
    ledger = _rerun_ledger(host.ctx())
    host.run(ledger, wait=lambda: False)
    stops = [e for e in host.events() if e["event"] == "reruns_stopped"]
    assert ledger.spent == 3 and [(e["reason"], e["waited"]) for e in stops] == [(KEEP_PERSISTENT, True)]


def test_an_intermittent_load_is_re_run_and_a_quiet_trial_resumes_stopped_reruns(tmp_path: Path) -> None:
    # disturbed for attempts 3-8 (a burst that outlasts three re-runs), quiet after: re-runs stop, then resume
    host = _Host(tmp_path, reps=4, load=lambda n: 3 <= n <= 8, disk=False)
    ledger = _rerun_ledger(host.ctx())
    assert ledger.budget.total == 2
    host.run(ledger)
    kinds = [e["event"] for e in host.events() if e["event"].startswith("reruns_") or e["event"] == "disturbed"]
    assert kinds == ["disturbed", "disturbed", "reruns_stopped"], kinds  # the budget (2) ran out first
    assert ledger.spent == 2

    host = _Host(tmp_path / "b", load=lambda n: 3 <= n <= 9, disk=False)
    ledger = _rerun_ledger(host.ctx())
    host.run(ledger)
    kinds = [e["event"] for e in host.events() if e["event"].startswith("reruns_") or e["event"] == "disturbed"]
    assert kinds == ["disturbed"] * 3 + ["reruns_stopped", "reruns_resumed"], kinds
    assert ledger.spent == 3 and ledger.stopped is None


def test_resume_counts_the_reruns_already_spent_from_the_run_directory(tmp_path: Path) -> None:
    host = _Host(tmp_path)
    with pytest.raises(KeyboardInterrupt):  # killed after the first trials and their re-runs
        host.run(_rerun_ledger(host.ctx()), wait=lambda: True, stop_after=5)
    spent_before = len(host.rd.checked_attempts())
    assert spent_before == 2
    again = _rerun_ledger(host.ctx())  # a new process: only the run directory knows
    assert again.spent == spent_before and again.budget.total == 4
    host.run(again, wait=lambda: True)
    assert again.spent == len(host.rd.checked_attempts()) == 4  # the budget of the run, not a fresh one
    budgets = [e for e in host.events() if e["event"] == "rerun_budget"]
    assert [(e["budget"], e["spent"]) for e in budgets] == [(4, 0), (4, 2)]
    assert rerun_summary(host.events())["spent"] == 4
    # a failed attempt set aside by --retry-failed is not a re-run of the budget
    attempts = typed_records([trial_record("a", "tensorflow", status="error", disturbance=_shaken(True)),
                              trial_record("b", "tensorflow", warmup=True, disturbance=_shaken(True)),
                              trial_record("c", "tensorflow", disturbance=_shaken(True))])
    assert disturbance.spent_reruns(attempts) == 1


def test_the_budget_key_is_validated_and_named() -> None:
    text = CALIBRATED.read_text()
    assert parse_spec(text, "c.toml").design.disturbance_budget_frac == 0.25
    assert parse_spec(text.replace("timeout_s = 120", "timeout_s = 120\ndisturbance_budget_frac = 0"),
                      "c.toml").design.disturbance_budget_frac == 0
    for bad in ("1.5", "-0.1", '"a quarter"', "nan"):
        with pytest.raises(SpecError) as err:
            parse_spec(text.replace("timeout_s = 120", f"timeout_s = 120\ndisturbance_budget_frac = {bad}"), "c.toml")
        assert err.value.where == "c.toml: design.disturbance_budget_frac", (bad, err.value.where)
    assert RerunBudget(24, 0.25).total == 6 and RerunBudget(7, 0.25).total == 1 and RerunBudget(3, 0.25).total == 0


class _FakeHost:
    """A monotonic clock that only sleep() advances, and CPU counters of a hog of ``cpus`` until ``until``."""

    def __init__(self, cpus: float, until: float) -> None:
        self.t, self.cpus, self.until, self.slept, self.reads = 1000.0, cpus, until, [], []  # type: ignore[var-annotated]

    def clock(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s

    def read(self) -> LoadReading:
        busy = self.cpus * (min(self.t, self.until) - 1000.0)  # cumulative CPU-seconds of the hog
        self.reads.append(self.t)
        return LoadReading(self.t, busy + 0.01 * self.t, 0.01 * self.t)  # the kit's own time is subtracted


def test_wait_for_quiet_counts_down_backs_off_and_ends_either_way() -> None:
    fake = _FakeHost(cpus=1.9, until=1000.0 + 47.0)
    ticks: list[tuple[float, float | None]] = []
    res = wait_for_quiet(600, 0.25, read=fake.read, sleep=fake.sleep, clock=fake.clock,
                         tick=lambda left, cpu: ticks.append((left, cpu)))
    assert res.quiet and res.foreign_cpu == pytest.approx(0.0) and res.waited_s < 600
    # windows of 5 s after growing pauses (0, 5, 10, 20, 40 s): checks at 0, 10, 25, 50 -> the 4th is quiet
    assert res.checks == 4 and [round(t - 1000) for t in fake.reads[::2]] == [0, 10, 25, 50]
    assert ticks[0] == (600, None) and ticks[-1][1] == pytest.approx(1.9)  # the countdown, with the last figure
    assert all(a[0] >= b[0] for a, b in itertools.pairwise(ticks)) and max(fake.slept) <= 1.0

    fake = _FakeHost(cpus=1.9, until=1e9)  # a hog that never stops
    res = wait_for_quiet(120, 0.25, read=fake.read, sleep=fake.sleep, clock=fake.clock)
    assert not res.quiet and res.foreign_cpu == pytest.approx(1.9) and res.checks == 6  # the last gap cut short
    assert res.waited_s == pytest.approx(120) and [round(t - 1000) for t in fake.reads[::2]] == [0, 10, 25, 50, 95, 115]
    assert wait_for_quiet(60, 0.0, read=fake.read, sleep=fake.sleep, clock=fake.clock).quiet  # the check is off


class _Said(RunEvents):
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ticks: list[tuple[str, float, float | None]] = []

    def message(self, text: str) -> None:
        self.lines.append(text)

    def waiting(self, what: str, left_s: float, foreign_cpu: float | None) -> None:
        self.ticks.append((what, left_s, foreign_cpu))


def test_a_busy_baseline_says_its_figure_cost_and_choice_and_records_them(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    host = _Host(tmp_path, disk=False)
    said = _Said()
    ctx = host.ctx()
    ctx.events, ctx.reruns = said, _rerun_ledger(ctx)
    busy = _baseline_load(ctx, LoadReading(0.0, 100.0, 1.0), LoadReading(5.0, 110.0, 1.5))  # 9.5 s over 5 s
    cpus = os.cpu_count()
    assert busy == {"foreign_cpu": 1.9, "cpus": cpus, "on_cpus": [], "limit_cpu": 0.25, "busy": True,
                    "choice": "go_on"}
    (line,) = said.lines
    for part in (f"1.9 CPUs busy of {cpus} CPUs", "up to 4 re-runs (25% of 16 measured trials)", "Going on (the default)",
                 f"kit run --resume {host.rd.path} --wait-for-quiet 10m", "to stop, press Ctrl-C"):
        assert part in line, (part, line)
    quiet = _baseline_load(ctx, LoadReading(0.0, 100.0, 1.0), LoadReading(5.0, 100.3, 1.2))
    assert quiet["choice"] == "quiet" and len(said.lines) == 1  # a quiet host: nothing said

    # --wait-for-quiet: the choice, the countdown (an injected clock: no real sleeping) and the outcome, recorded
    ctx.opts = RunOptions(wait_for_quiet_s=120)
    fake = _FakeHost(cpus=1.9, until=1000.0 + 20.0)
    monkeypatch.setattr("kit.run.context.wait_for_quiet", lambda secs, limit, tick, read: wait_for_quiet(
        secs, limit, tick=tick, read=fake.read, sleep=fake.sleep, clock=fake.clock))
    assert _baseline_load(ctx, LoadReading(0.0, 100.0, 1.0), LoadReading(5.0, 110.0, 1.5))["choice"] == "wait_for_quiet"
    assert "Waiting up to 2 min for a quiet window" in said.lines[-1]
    res = _quiet_wait(ctx, "baseline")
    assert isinstance(res, QuietWait) and res.quiet and said.ticks[0] == ("baseline", 120, None)
    assert "quiet window after" in said.lines[-1] and "going on" in said.lines[-1]
    ev = host.events()
    loads = [(e["foreign_cpu"], e["busy"], e["choice"]) for e in ev if e["event"] == "baseline_load"]
    assert loads == [(1.9, True, "go_on"), (0.02, False, "quiet"), (1.9, True, "wait_for_quiet")]
    (wait,) = [e for e in ev if e["event"] == "quiet_wait"]
    assert (wait["when"], wait["outcome"], wait["quiet"], wait["duration_s"]) == ("baseline", "quiet", True, 120)
    assert rerun_summary(ev)["baseline"]["choice"] == "wait_for_quiet"


def test_wait_for_quiet_durations_are_read_or_refused_naming_the_option() -> None:
    from kit.collectors.quiet import parse_wait
    from kit.errors import KitError

    assert (parse_wait("10m"), parse_wait("1h30m"), parse_wait("90")) == (600, 5400, 90)
    for bad in ("soon", "", "0s", "30h"):
        with pytest.raises(KitError) as err:
            parse_wait(bad)
        assert err.value.where == "--wait-for-quiet" and "10m" in str(err.value.fix)


@pytest.mark.slow
def test_a_real_cpu_hog_for_the_whole_run_costs_at_most_a_quarter_more_trials(tmp_path: Path) -> None:
    """A busy loop beside the whole run (idle baseline included): the baseline says so, the re-runs stop within
    25 % of the measured trials, every measured trial is kept, flagged, and the answer a user copies says it was
    measured under load (10 pairs: the smallest n the hypotheses are tested at)."""
    spec_file = tmp_path / "hog.toml"
    # training phases of 0.3 s sampled every 0.05 s: 6 periods, judged (kit.disturbance.MIN_PERIODS = 5), as in
    # test_disturbance's planted-load runs; a 1 s phase at the default 0.1 s said the same at three times the cost
    spec_file.write_text(CALIBRATED.read_text().replace("train_s = 0.15", "train_s = 0.3")
                         .replace("repetitions = 12", "repetitions = 10").replace("warmup_repetitions = 1",
                                                                                   "warmup_repetitions = 0")
                         .replace("baseline_s = 0", "baseline_s = 2").replace("[telemetry]", "[telemetry]\nperiod_s = 0.05"))
    stop = tmp_path / "stop"
    hogs = [subprocess.Popen([sys.executable, "-c", f"import os\nwhile not os.path.exists({str(stop)!r}): pass"])
            for _ in range(max(1, (os.cpu_count() or 1) // 2))]
    said = _Said()
    try:
        rd = start_run(load_spec(spec_file), RunOptions(runs_root=tmp_path / "runs"), said)
    finally:
        stop.touch()
        for h in hogs:
            h.wait(timeout=30)
    ev = [json.loads(line) for line in (rd.path / "events.jsonl").read_text().splitlines()]
    summary = rerun_summary(ev)
    measured = len(rd.manifest().plan.trials)
    assert summary["budget"] == measured // 4 == 5 and summary["spent"] <= 5, summary
    assert summary["stopped"] and summary["baseline"]["busy"], summary
    assert len(rd.checked_attempts()) == summary["spent"]
    assert any(line.startswith("host busy before the first trial") for line in said.lines), said.lines
    assert rd.manifest().baseline["load"]["busy"] is True
    records = [r.to_json() for r in rd.trial_records()]
    assert len(records) == measured and sum(disturbance.is_disturbed(r) for r in records) >= measured - 1
    from kit.analysis.analyze import analyze_run
    from kit.report.answer import answer

    head = answer(analyze_run(rd.path, write=False))["headline"]
    assert "measured under load" in head and "trials disturbed" in head, head
