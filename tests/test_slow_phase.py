"""The slow-phase rule (kit.slow_phase): a phase slow against the run's quiet trials with no cause seen is
flagged "slow, cause not seen", re-run like a disturbed one and counted; quiet noise is not flagged."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from kit import disturbance, slow_phase
from kit.disturbance import PhaseDisturbance, TrialDisturbance
from kit.doctor.checks import check_visibility
from kit.errors import KitError
from kit.harness import MARKERS_FILE
from kit.records import JsonTable, Plan, Trial, TrialRecord
from kit.run import RunEvents, RunOptions, start_run
from kit.slow_phase import SLOW_CAUSE, QuietTimes, SlowRule, judge, judge_phase, phase_seconds
from kit.spec import load_spec
from kit.store import RunDir

CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"

RULE = SlowRule()


def _quiet(n: int, seconds: float = 2.0, cv: float = 0.04, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(seconds * rng.lognormal(0.0, np.sqrt(np.log(1 + cv * cv)), n))


def _shaken(*phases: PhaseDisturbance) -> TrialDisturbance:
    return TrialDisturbance(tuple(phases))


def _phase(name: str, foreign: float = 0.02, causes: tuple[str, ...] = ()) -> PhaseDisturbance:
    return PhaseDisturbance(name, 2.0, True, foreign_cpu=foreign, trial_cpu=1.0, causes=causes)


def test_a_planted_slow_phase_with_no_foreign_cpu_is_flagged_slow_cause_not_seen() -> None:
    quiet = _quiet(8)
    med = float(np.median(quiet))
    j = judge_phase("train", 1.5 * med, quiet)
    assert j.judged and j.slow and j.ratio == pytest.approx(1.5)
    assert j.limit_s is not None and med < j.limit_s < 1.5 * med
    amended = slow_phase.amend(_shaken(_phase("train"), _phase("infer")), [j])
    train, infer = amended.phases
    assert train.disturbed and train.causes[0].startswith(SLOW_CAUSE) and "1.50x the median of 8" in train.causes[0]
    assert not infer.disturbed and amended.disturbed
    # the stored form is what the re-run loop and the analysis read
    stored: JsonTable = {"status": "ok", "disturbance": amended.as_dict()}  # type: ignore[dict-item]
    assert disturbance.is_disturbed(stored)
    assert disturbance.disturbed_phases(stored) == {"train": [train.causes[0]]}
    # the threat's label: the cause up to its figures
    assert train.causes[0].split(" (")[0] == SLOW_CAUSE and slow_phase.is_slow_cause(train.causes[0])


def test_quiet_phases_and_a_phase_with_a_seen_cause_are_not_flagged_slow() -> None:
    quiet = _quiet(10)
    for s in _quiet(20, seed=1):
        assert not judge_phase("train", s, quiet).slow
    # faster than usual is never a disturbance
    assert not judge_phase("train", 0.5 * float(np.median(quiet)), quiet).slow
    # a phase already disturbed keeps its own cause: the slowness is explained
    seen = _phase("train", foreign=1.0, causes=("foreign CPU 1.00 CPUs (limit 0.25)",))
    j = judge_phase("train", 3.0 * float(np.median(quiet)), quiet)
    assert j.slow and slow_phase.amend(_shaken(seen), [j]).phases[0].causes == seen.causes
    # an identical-time history (MAD 0) still needs the 10 % floor before it calls a phase slow
    flat = [2.0] * 8
    assert not judge_phase("train", 2.1, flat).slow and judge_phase("train", 2.3, flat).slow


def test_fewer_than_min_quiet_references_leave_the_phase_not_judged() -> None:
    quiet = _quiet(RULE.min_quiet - 1)
    j = judge_phase("train", 10.0, quiet)
    assert not j.judged and not j.slow and f"judged from {RULE.min_quiet}" in (j.why or "")
    assert slow_phase.amend(_shaken(_phase("train")), [j]) == _shaken(_phase("train"))
    assert judge_phase("train", 10.0, _quiet(RULE.min_quiet)).slow
    assert not judge_phase("train", None, _quiet(10)).judged


def test_false_alarm_rate_of_quiet_lognormal_noise_is_under_one_percent() -> None:
    """The choice in kit.slow_phase: with k = 6 MADs, m = 6 and the 10 % floor, quiet trials of CV 3-5 % flag
    < 1 % of phases at the fewest references (m) and at more; a 1.5x phase is still caught nearly always."""
    rng = np.random.default_rng(43)
    n = 8_000  # the worst case (m = 6, CV 5 %) reads 0.6 % +- 0.09 %: well clear of 1 %
    for cv in (0.03, 0.05):
        sigma = float(np.sqrt(np.log(1 + cv * cv)))
        for m in (RULE.min_quiet, 2 * RULE.min_quiet):
            x = rng.lognormal(0.0, sigma, (n, m + 1))
            flagged = sum(judge_phase("p", float(row[m]), row[:m].tolist()).slow for row in x)
            assert flagged / n < 0.01, (cv, m, flagged / n)
            caught = sum(judge_phase("p", 1.5 * float(row[m]), row[:m].tolist()).slow for row in x[:1000])
            assert caught / 1000 > 0.9, (cv, m, caught / 1000)


def test_the_rule_refuses_nonsense_with_a_fix() -> None:
    for bad in ({"k_mads": 0.0}, {"k_mads": float("nan")}, {"min_quiet": 2}, {"min_quiet": True},
                {"min_excess_frac": -0.1}):
        with pytest.raises(KitError) as e:
            SlowRule(**bad)
        assert e.value.fix and e.value.where == "slow-phase rule"
    assert "6 scaled MADs" in RULE.text() and "10%" in RULE.text() and "once 6 quiet trials" in RULE.text()


def test_time_per_pass_comes_from_the_results_or_the_phase_table_over_the_passes() -> None:
    phases: dict[str, dict[str, float | None]] = {
        "warmup": {"start": 1.0, "end": 2.0, "duration_s": 1.0},
        "train": {"start": 2.0, "end": 4.0, "duration_s": 2.0},
        "infer": {"start": 4.0, "end": 6.0, "duration_s": 2.0},
        "eval": {"start": 6.0, "end": 7.5, "duration_s": None}}
    got = phase_seconds({"train_time_s": 1.9, "infer_passes": 4}, phases)
    assert got == {"train": 1.9, "infer": 0.5, "eval": 1.5}  # a calibrated phase: per pass, never the whole phase
    assert phase_seconds({"train_time_s": float("nan"), "train_passes": True}, {"train": phases["train"]}) == \
        {"train": 2.0}


def _record(tid: str, arm: str, seconds: float, *, warmup: bool = False, status: str = "ok",
            shaken: TrialDisturbance | None = None) -> TrialRecord:
    d = (shaken or _shaken(_phase("train"))).as_dict()
    return TrialRecord(trial_id=tid, arm=arm, framework=arm, config_id="c0", config={}, block=0, repetition=0,
                       position=0, seed=0, warmup=warmup, status=status, results={"train_time_s": seconds},
                       phases={"train": {"start": 0.0, "end": seconds, "duration_s": seconds}}, env={}, gpus=(),
                       device=None, error=None, wall_s=seconds, schema_version=1,
                       disturbance=d)  # type: ignore[arg-type]


def test_quiet_references_keep_only_counted_undisturbed_phases_per_arm() -> None:
    slow = _shaken(_phase("train", causes=(f"{SLOW_CAUSE} (3 s per pass)",)))
    recs = [_record("t1", "tf", 2.0), _record("t2", "tf", 2.1), _record("t3", "pt", 5.0),
            _record("w", "tf", 9.0, warmup=True), _record("f", "tf", 9.0, status="error"),
            _record("s", "tf", 3.0, shaken=slow)]
    q = QuietTimes.from_records(recs)
    assert q.of("tf", "c0", "train") == (2.0, 2.1) and q.of("pt", "c0", "train") == (5.0,)
    assert q.of("tf", "c1", "train") == () and q.with_record(recs[3]) is q
    # the other arm's times never judge this one
    tf = QuietTimes.from_records([_record(f"t{i}", "tf", s) for i, s in enumerate(_quiet(8))])
    assert not any(j.judged for j in judge("pt", "c0", {"train": 9.0}, tf))
    assert judge("tf", "c0", {"train": 9.0}, tf)[0].slow


class _Hooks:
    def __init__(self, runs: list[JsonTable]) -> None:
        self.runs, self.events, self.lines = list(runs), [], []  # type: ignore[var-annotated]

    def hooks(self) -> disturbance.RerunHooks:
        return disturbance.RerunHooks(archive=lambda: "attempts/x.1.json", run=lambda: self.runs.pop(0),
                                      log=lambda kind, **kw: self.events.append((kind, kw)), say=self.lines.append)


def _stored(seconds: float, quiet: list[float]) -> JsonTable:
    shaken = slow_phase.amend(_shaken(_phase("train")), judge("tf", "c0", {"train": seconds},
                                                                QuietTimes({("tf", "c0", "train"): tuple(quiet)})))
    return {"status": "ok", "disturbance": shaken.as_dict()}  # type: ignore[dict-item]


def test_a_slow_phase_is_re_run_within_the_budget_and_kept_flagged_when_it_is_spent() -> None:
    quiet = _quiet(8)
    slow, fine = _stored(1.5 * float(np.median(quiet)), quiet), _stored(float(np.median(quiet)), quiet)
    assert disturbance.is_disturbed(slow) and not disturbance.is_disturbed(fine)
    # re-run once: the re-run is quiet, it is the trial's record
    h = _Hooks([fine])
    ledger = disturbance.RerunLedger(disturbance.RerunBudget(measured_trials=8))
    assert disturbance.rerun_disturbed(slow, "t1", False, ledger, h.hooks()) is fine
    assert ledger.spent == 1 and [k for k, _ in h.events] == ["disturbed"]
    assert SLOW_CAUSE in str(h.events[0][1]["cause"])
    # a spent budget keeps the slow trial, flagged: the report counts it
    spent = disturbance.RerunLedger(disturbance.RerunBudget(measured_trials=8), spent=2)
    h2 = _Hooks([])
    assert disturbance.rerun_disturbed(slow, "t2", False, spent, h2.hooks()) is slow
    assert [k for k, _ in h2.events] == ["reruns_stopped", "disturbed_kept"]
    # a warm-up is never re-run
    assert disturbance.rerun_disturbed(slow, "w", True, ledger, _Hooks([]).hooks()) is slow


def _fake_root(tmp_path: Path, stat: str, cpuinfo: str = "", cgroup: dict[str, str] | None = None) -> Path:
    (tmp_path / "proc").mkdir(parents=True)
    (tmp_path / "proc" / "stat").write_text(stat)
    (tmp_path / "proc" / "cpuinfo").write_text(cpuinfo)
    for rel, text in (cgroup or {}).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_doctor_says_what_the_host_lets_the_kit_see_and_what_it_cannot(tmp_path: Path) -> None:
    stat = ("cpu  100 0 50 1000 0 0 0 2500 0 0\ncpu0 50 0 25 500 0 0 0 1250 0 0\n"
            "cpu1 50 0 25 500 0 0 0 1250 0 0\nintr 1\n")
    root = _fake_root(tmp_path / "vm", stat, "flags\t\t: fpu sse hypervisor\n",
                      {"sys/fs/cgroup/cpu.stat": "usage_usec 123\nuser_usec 100\n"})
    (row,) = check_visibility(root)
    assert row["ok"] and row["check"] == "host visibility"
    d = row["detail"]
    assert "per-CPU busy time of 2 CPUs" in d and "steal time (25 s since boot; a VM)" in d
    assert "cgroup CPU accounting (v2" in d
    assert "cannot see: another VM's" in d and "memory-bandwidth" in d and SLOW_CAUSE in d
    (bare,) = check_visibility(_fake_root(tmp_path / "none", ""))
    assert not bare["ok"] and bare["fix"] and "per-CPU counters" in bare["detail"] and "cgroup" in bare["detail"]


def test_a_kept_slow_trial_is_counted_in_the_threat_with_the_rule_stated() -> None:
    import pandas as pd

    from kit.analysis import validity_telemetry
    from kit.analysis.threats import Ctx

    cause = f"{SLOW_CAUSE} (3 s per pass, 1.50x the median of 8 quiet trials; limit 2.4 s)"
    analysis: dict[str, Any] = {"disturbance": {
        "still_disturbed_trials": ["t9"], "reruns": 2, "measured_trials": 24, "rerun_trials": ["t9"],
        "phases": [{"trial_id": "t9", "arm": "tf", "config_id": "c0", "phase": "train", "disturbed": True,
                    "causes": [cause]}]}}
    values = pd.DataFrame(columns=["metric", "arm", "config_id", "phase", "trial_id", "value", "status", "warmup"])
    ctx = Ctx(manifest=None, trials=[], values=values, analysis=analysis)  # type: ignore[arg-type]
    (t,) = validity_telemetry.disturbed_trials(ctx)
    text = str(t)
    assert "1 of 24 counted trials" in text and SLOW_CAUSE in text and "6 scaled MADs" in text


class _Freeze(RunEvents):
    """Stops one late measured trial's harness (SIGSTOP, then SIGCONT after 1 s) once its train phase has started:
    the phase takes twice its time and nobody uses a CPU meanwhile, the contention CPU time does not show."""

    def __init__(self, from_index: int) -> None:
        self.from_index, self.rd, self.frozen, self.messages = from_index, None, None, []  # type: ignore[var-annotated]
        self.thread: threading.Thread | None = None

    def run_started(self, rd: RunDir, plan: Plan, done: int) -> None:
        self.rd = rd  # type: ignore[assignment]

    def message(self, text: str) -> None:
        self.messages.append(text)

    def trial_started(self, trial: Trial, index: int, total: int) -> None:
        if self.thread is None and not trial.warmup and index >= self.from_index:
            self.frozen = trial.trial_id  # type: ignore[assignment]
            assert self.rd is not None
            self.thread = threading.Thread(target=self._freeze, args=(self.rd.work_dir(trial.trial_id),), daemon=True)
            self.thread.start()

    @staticmethod
    def _freeze(work: Path) -> None:
        markers, deadline = work / MARKERS_FILE, time.monotonic() + 60
        while time.monotonic() < deadline:
            text = markers.read_text() if markers.exists() else ""
            if '"phase_start"' in text and '"train"' in text:
                kids = psutil.Process().children(recursive=True)
                if kids:
                    harness = max(kids, key=lambda p: p.create_time())
                    harness.suspend()
                    time.sleep(1.0)
                    harness.resume()
                return
            time.sleep(0.005)


@pytest.mark.slow
def test_a_stopped_trial_is_flagged_slow_cause_not_seen_and_re_run_in_a_real_run(tmp_path: Path) -> None:
    spec_file = tmp_path / "frozen.toml"
    spec_file.write_text(CALIBRATED.read_text().replace("train_s = 0.15", "train_s = 0.5"))
    events = _Freeze(from_index=16)  # 7 quiet trials per arm before it: judged
    rd = start_run(load_spec(spec_file), RunOptions(runs_root=tmp_path / "runs"), events)
    if events.thread is not None:
        events.thread.join(timeout=30)
    frozen = events.frozen
    assert frozen is not None
    said = [m for m in events.messages if f"trial {frozen} disturbed" in m]
    assert said and SLOW_CAUSE in said[0] and "re-running it in its plan position" in said[0], events.messages
    first = next(a for a in rd.checked_attempts() if a.trial_id == frozen)
    causes = disturbance.disturbed_phases(first.record)
    assert list(causes) == ["train"] and causes["train"][0].startswith(SLOW_CAUSE), causes
    assert first.record.disturbance is not None
    assert first.record.disturbance["phases"]["train"]["foreign_cpu"] < 0.25  # no foreign CPU: a cause not seen
    # the re-run is the trial's record; its train phase ran at the usual speed
    now = next(r for r in rd.trial_records() if r.trial_id == frozen)
    assert now.attempt is not None and now.attempt >= 2 and "train" not in disturbance.disturbed_phases(now)
