"""Issue 43, item 1: foreign load measured on a pinned trial's own CPUs (and their SMT siblings), load on the kit's
CPU judged by the sampler's lateness, and both figures kept in the record. Pure functions on synthetic counters,
then (slow) a real busy loop pinned beside or onto a real pinned "trial" process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kit import disturbance_cpus as on_cpus
from kit.collectors.cpu import CpuCollector, cpu_ids
from kit.disturbance import PhaseDisturbance, TrialDisturbance, assess
from kit.disturbance_cpus import CpuScope

ROOT = Path(__file__).resolve().parents[1]
Row = tuple[float, str, str, str, float]


def _markers(t0: float, t1: float, c0: float, c1: float, cpus: object = None) -> list[dict[str, Any]]:
    head = [{"event": "harness_start", "t": t0 - 0.5, "cpus": cpus}] if cpus is not None else []
    return [*head, {"event": "phase_start", "phase": "train", "t": t0, "cpu_s": c0},
            {"event": "phase_end", "phase": "train", "t": t1, "cpu_s": c1}]


def _counters(rates: dict[int, float], kit_rate: float, t0: float = 999.0, t1: float = 1004.0,
              period: float = 0.1, per_cpu: bool = True, skip: tuple[float, float] | None = None) -> list[Row]:
    """Cumulative counters every ``period``: each CPU busy at ``rates[cpu]`` CPU-s/s, the host at their sum, the kit
    at ``kit_rate``; readings inside ``skip`` are left out (a sampler that was late)."""
    rows: list[Row] = []
    for i in range(round((t1 - t0) / period) + 1):
        t = t0 + i * period
        if skip and skip[0] < t < skip[1]:
            continue
        rows += [(t, "cpu", "total", "busy_cpu_s", 100.0 + sum(rates.values()) * (t - t0)),
                 (t, "cpu", "kit", "cpu_s", 5.0 + kit_rate * (t - t0))]
        if per_cpu:
            rows += [(t, "cpu", f"cpu{c}", "busy_cpu_s", 10.0 * c + r * (t - t0)) for c, r in rates.items()]
    return rows


PIN1 = CpuScope((1,), (1,), kit_shares=False, basis=on_cpus.BASIS_KIT)  # cpuset = "auto" on 2 CPUs: kit on 0


def test_load_on_another_cpu_is_not_foreign_for_a_trial_pinned_to_cpu_1() -> None:
    # 2 s phase; the trial keeps CPU 1 busy; a hog and the kit share CPU 0: host-wide 1 foreign CPU, on CPU 1 none
    markers = _markers(1001.0, 1003.0, 1.0, 3.0)
    rows = _counters({0: 1.0, 1: 1.0}, kit_rate=0.05)
    (p,) = assess(markers, rows, 0.1, cpus=PIN1).phases
    assert p.judged and not p.disturbed and p.cpus == (1,)
    assert p.foreign_cpu == pytest.approx(0.0, abs=1e-9)
    assert p.foreign_cpu_host == pytest.approx(0.95, abs=1e-9)  # kept beside it: hog 1.0 less the kit's 0.05
    # the same readings judged without the pinning: the old host-wide rule, which flagged it
    (old,) = assess(markers, rows, 0.1).phases
    assert old.disturbed and old.cpus == () and old.foreign_cpu == pytest.approx(old.foreign_cpu_host or -1)


def test_load_on_the_trials_cpu_is_foreign() -> None:
    # the hog shares CPU 1 with the trial: CPU 1 busy 1.0, the trial got 0.5 of it
    markers = _markers(1001.0, 1003.0, 1.0, 2.0)
    (p,) = assess(markers, _counters({0: 0.05, 1: 1.0}, kit_rate=0.05), 0.1, cpus=PIN1).phases
    assert p.disturbed and p.foreign_cpu == pytest.approx(0.5, abs=1e-9) and p.trial_cpu == pytest.approx(0.5)
    assert p.causes == ("foreign CPU 0.50 CPUs on CPU(s) 1 (limit 0.25)",)


def test_the_kit_is_subtracted_only_where_it_may_run() -> None:
    markers = _markers(1001.0, 1003.0, 1.0, 3.0)
    rows = _counters({0: 0.0, 1: 1.2}, kit_rate=0.2)  # the kit's 0.2 ran on CPU 1 beside the trial
    shares = CpuScope((1,), (1,), kit_shares=True, basis=on_cpus.BASIS_CORES)
    assert assess(markers, rows, 0.1, cpus=shares).phases[0].foreign_cpu == pytest.approx(0.0, abs=1e-9)
    assert assess(markers, rows, 0.1, cpus=PIN1).phases[0].foreign_cpu == pytest.approx(0.2, abs=1e-9)


def test_an_smt_sibling_of_the_trials_cpu_counts(tmp_path: Path) -> None:
    # 4 logical CPUs, cores {0,2} and {1,3}; trial on 1, a hog on 3 (its sibling), the kit on 0
    topo = {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"}
    for cpu, text in topo.items():
        d = tmp_path / f"devices/system/cpu/cpu{cpu}/topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(text + "\n")
    scope = on_cpus.trial_scope((1,), (0,), [], None, sysfs_root=tmp_path)
    assert scope == CpuScope((1,), (1, 3), kit_shares=False, basis=on_cpus.BASIS_KIT)
    markers = _markers(1001.0, 1003.0, 1.0, 3.0)
    (p,) = assess(markers, _counters({0: 0.05, 1: 1.0, 2: 0.0, 3: 1.0}, kit_rate=0.05), 0.1, cpus=scope).phases
    assert p.disturbed and p.cpus == (1, 3) and p.foreign_cpu == pytest.approx(1.0, abs=1e-9)
    # a hog on CPU 2 (the kit's core) is not foreign to the trial
    (q,) = assess(markers, _counters({0: 0.05, 1: 1.0, 2: 1.0, 3: 0.0}, kit_rate=0.05), 0.1, cpus=scope).phases
    assert not q.disturbed and q.foreign_cpu == pytest.approx(0.0, abs=1e-9)
    # an offline sibling (no counters: it runs nothing) is left out, not a reason to fall back to host-wide
    (r,) = assess(markers, _counters({0: 1.0, 1: 1.0, 2: 0.0}, kit_rate=0.05), 0.1, cpus=scope).phases
    assert not r.disturbed and r.cpus == (1,) and r.foreign_cpu == pytest.approx(0.0, abs=1e-9)
    # the kit's CPU is the trial's sibling: the kit shares the covered core, its time is subtracted
    assert on_cpus.trial_scope((1,), (3,), [], None, sysfs_root=tmp_path).kit_shares  # type: ignore[union-attr]
    # what sysfs does not say (missing file, a link, garbage) leaves a CPU on its own
    (tmp_path / "devices/system/cpu/cpu3/topology/thread_siblings_list").write_text("not a list")
    (tmp_path / "devices/system/cpu/cpu2/topology/thread_siblings_list").unlink()
    (tmp_path / "devices/system/cpu/cpu2/topology/thread_siblings_list").symlink_to(tmp_path / "x")
    assert on_cpus.read_siblings([2, 3, 7], tmp_path) == {2: (2,), 3: (3,), 7: (7,)}


def test_unpinned_or_pinned_to_every_cpu_keeps_the_host_wide_rule() -> None:
    markers = _markers(1001.0, 1003.0, 1.0, 3.0)
    rows = _counters({0: 1.0, 1: 1.0}, kit_rate=0.0)
    assert on_cpus.trial_scope((), (), markers, None) is None  # nothing says where it runs
    for scope in (None, CpuScope((0, 1), (0, 1), True, on_cpus.BASIS_AFFINITY)):
        (p,) = assess(markers, rows, 0.1, cpus=scope).phases
        assert p.disturbed and p.cpus == () and p.foreign_cpu == pytest.approx(1.0) == p.foreign_cpu_host
    # a collector without per-CPU counters (an older kit's readings): judged host-wide, and the record says so
    (p,) = assess(markers, _counters({0: 1.0, 1: 1.0}, 0.0, per_cpu=False), 0.1, cpus=PIN1).phases
    assert p.disturbed and p.cpus == () and p.foreign_cpu == pytest.approx(1.0)


def test_where_the_trials_cpus_come_from() -> None:
    env = {"cpu_pinning": {"cpus_pinned": [2]}}
    assert on_cpus.trial_cpu_set((1, 2, 3), [], None) == ((1, 2, 3), on_cpus.BASIS_KIT)
    # the kernel narrowed it (a job's cpuset), then the workload pinned itself within that
    assert on_cpus.trial_cpu_set((1, 2, 3), _markers(1, 2, 0, 1, cpus=[2, 3]), None) == ((2, 3),
                                                                                        on_cpus.BASIS_AFFINITY)
    assert on_cpus.trial_cpu_set((1, 2, 3), _markers(1, 2, 0, 1, cpus=[2, 3]), env) == ((2,), on_cpus.BASIS_CORES)
    assert on_cpus.trial_cpu_set((), _markers(1, 2, 0, 1, cpus=[0, 1]), None) == ((0, 1), on_cpus.BASIS_AFFINITY)
    # the trial's process cannot widen what the kit gave it, nor slip in anything that is not CPU numbers
    assert on_cpus.trial_cpu_set((1,), _markers(1, 2, 0, 1, cpus=[0, 1]), {"cpu_pinning": {"cpus_pinned": [0]}}) \
        == ((1,), on_cpus.BASIS_KIT)
    for bad in ([True], [-1], ["1"], [1.0], "1", [], [70000]):
        assert on_cpus.trial_cpu_set((), _markers(1, 2, 0, 1, cpus=bad), {"cpu_pinning": {"cpus_pinned": bad}}) \
            is None, bad


def test_late_samples_flag_the_telemetry_not_the_timing() -> None:
    markers = _markers(1001.0, 1003.0, 1.0, 3.0)
    (ok,) = assess(markers, _counters({0: 0.0, 1: 1.0}, 0.0), 0.1, cpus=PIN1).phases
    assert ok.late_samples == 0 and ok.telemetry is None and ok.max_sample_gap_s == pytest.approx(0.1)
    # the kit's CPU was loaded: no reading for 0.6 s in the middle of the phase
    (late,) = assess(markers, _counters({0: 1.0, 1: 1.0}, 0.0, skip=(1001.7, 1002.25)), 0.1, cpus=PIN1).phases
    assert late.late_samples == 1 and late.max_sample_gap_s == pytest.approx(0.6)
    assert late.telemetry and "telemetry late" in late.telemetry and not late.disturbed and late.judged
    assert late.foreign_cpu == pytest.approx(0.0, abs=1e-9)  # linear counters: the interpolation is exact here


def test_the_record_keeps_both_figures_and_old_records_stay_readable() -> None:
    markers = _markers(1001.0, 1003.0, 1.0, 3.0)
    d = assess(markers, _counters({0: 1.0, 1: 1.0}, 0.05), 0.1, cpus=PIN1).as_dict()
    phase = d["phases"]["train"]
    assert d["cpus"] == {"trial": [1], "covered": [1], "kit_shares": False, "basis": "[container] cpuset"}
    assert phase["cpus"] == [1] and phase["foreign_cpu"] == pytest.approx(0.0, abs=1e-9)
    assert phase.get("foreign_cpu_host") == pytest.approx(0.95)
    assert json.loads(json.dumps(d)) == d  # plain JSON
    back = on_cpus.phase_cpus(phase)
    assert back.cpus == (1,) and not back.host_wide and back.late_samples == 0 and back.telemetry is None
    # a record made before issue 43: foreign_cpu alone, host-wide
    old = PhaseDisturbance("train", 2.0, True, 0.4, 0.9, None, None, (), (), None).as_dict()
    for key in ("foreign_cpu_host", "cpus", "late_samples", "max_sample_gap_s", "telemetry"):
        old.pop(key)  # type: ignore[misc]
    was = on_cpus.phase_cpus(old)
    assert was.host_wide and was.foreign_cpu == 0.4 and was.foreign_cpu_host is None and was.late_samples is None
    assert TrialDisturbance().as_dict()["cpus"] is None


def test_the_collector_counts_each_cpus_busy_time(tmp_path: Path) -> None:
    online = tmp_path / "online"
    online.write_text("0,2-3\n")
    assert cpu_ids(3, str(online)) == (0, 2, 3)  # an offline CPU 1: /proc/stat lists 0, 2, 3
    assert cpu_ids(4, str(online)) == (0, 1, 2, 3) and cpu_ids(2, str(tmp_path / "none")) == (0, 1)
    c = CpuCollector(0.05)
    c._open()
    first = c.read()
    end = time.time() + 0.2
    while time.time() < end:
        pass
    second = c.read()
    busy = {(r.device): r.value for r in second if r.metric == "busy_cpu_s"}
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    per_cpu = {k: v for k, v in busy.items() if k.startswith("cpu")}
    assert len(per_cpu) >= n and all(r.unit == "s" for r in second if r.metric == "busy_cpu_s")
    before = {r.device: r.value for r in first if r.metric == "busy_cpu_s"}
    assert all(per_cpu[k] >= before[k] for k in per_cpu)  # cumulative
    assert sum(per_cpu.values()) == pytest.approx(busy["total"], rel=0.01)  # the host's is their sum


# -- for real: a busy loop pinned beside, or onto, a pinned trial -------------------------------------------------

TRIAL = """
import os, sys, time
from pathlib import Path
from kit.workloads.common import Markers
duty, secs = float(sys.argv[2]), float(sys.argv[3])
m = Markers(Path(sys.argv[1]))
m.event("harness_start", cpus=sorted(os.sched_getaffinity(0)))
m.start("train")
end = time.time() + secs
while time.time() < end:  # busy for `duty` of every 50 ms
    t = time.time()
    while time.time() - t < 0.05 * duty:
        pass
    time.sleep(0.05 * (1 - duty))
m.end("train")
m.close()
"""
HOG = "import os, sys, time\nos.sched_setaffinity(0, {int(sys.argv[1])})\nend = time.time() + 30\nwhile time.time() < end: pass"


def _real_phase(tmp_path: Path, hog_cpu: int, trial_cpu: int, kit_cpu: int, duty: float) -> PhaseDisturbance:
    """The kit (this process, its sampler) on ``kit_cpu``, a hog on ``hog_cpu``, a trial pinned (taskset) on
    ``trial_cpu`` running a 2.5 s phase; the phase as assess judges it with the run's scope (cpuset = "auto")."""
    marks = tmp_path / "markers.jsonl"
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {kit_cpu})
    hog = subprocess.Popen([sys.executable, "-c", HOG, str(hog_cpu)])
    try:
        with CpuCollector(0.1) as col:
            time.sleep(0.5)
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            subprocess.run(["taskset", "-c", str(trial_cpu), sys.executable, "-c", TRIAL, str(marks), str(duty), "2.5"],
                           check=True, env=env, timeout=60)
            time.sleep(0.3)
    finally:
        hog.kill()
        hog.wait(timeout=10)
        os.sched_setaffinity(0, before)
    markers = [json.loads(line) for line in marks.read_text().splitlines()]
    scope = on_cpus.trial_scope((trial_cpu,), (kit_cpu,), markers, None)
    assert scope is not None and scope.trial_cpus == (trial_cpu,)
    rows = [(r.t, r.source, r.device, r.metric, r.value) for r in col.rows]
    (p,) = assess(markers, rows, 0.1, cpus=scope).phases
    return p


def _two_cpus() -> tuple[int, int]:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2 or shutil.which("taskset") is None:
        pytest.skip("needs 2 CPUs this process may use and taskset")
    kit_cpu, trial_cpu = cpus[0], cpus[1]
    if kit_cpu in on_cpus.read_siblings([trial_cpu])[trial_cpu]:
        pytest.skip("the two CPUs are SMT siblings: a load on either is on the trial's core")
    return kit_cpu, trial_cpu


@pytest.mark.slow
def test_real_busy_loop_on_the_kits_cpu_is_not_foreign_to_the_pinned_trial(tmp_path: Path) -> None:
    kit_cpu, trial_cpu = _two_cpus()
    p = _real_phase(tmp_path, hog_cpu=kit_cpu, trial_cpu=trial_cpu, kit_cpu=kit_cpu, duty=1.0)
    assert p.judged and p.cpus == (trial_cpu,), p
    assert p.foreign_cpu is not None and p.foreign_cpu_host is not None and p.trial_cpu is not None
    # the hog's whole CPU is seen host-wide only (its CPU is saturated: busy 1.0 less the kit's own)
    assert p.foreign_cpu_host - p.foreign_cpu == pytest.approx(1.0, abs=0.15), p
    # the trial keeps its CPU busy: foreign on it is only what else took it (~0 on a quiet host; the 2-core CI
    # machine runs other tests beside this one, which then show here, as they should)
    assert p.foreign_cpu + p.trial_cpu == pytest.approx(1.0, abs=0.12), p
    if p.trial_cpu > 0.9:  # nothing else was on the trial's CPU: not disturbed, where the host-wide rule flagged it
        assert p.foreign_cpu < 0.15 and not any("foreign CPU" in c for c in p.causes), p


@pytest.mark.slow
def test_real_busy_loop_on_the_trials_cpu_is_foreign(tmp_path: Path) -> None:
    kit_cpu, trial_cpu = _two_cpus()
    p = _real_phase(tmp_path, hog_cpu=trial_cpu, trial_cpu=trial_cpu, kit_cpu=kit_cpu, duty=0.3)
    assert p.judged and p.disturbed and p.cpus == (trial_cpu,), p
    assert p.foreign_cpu is not None and p.trial_cpu is not None
    # the trial's CPU was busy all the time: what the trial did not use, the hog did (~1 CPU less the trial's share)
    assert p.foreign_cpu + p.trial_cpu == pytest.approx(1.0, abs=0.12), p
    assert p.foreign_cpu > 0.6, p


@pytest.mark.slow
def test_a_run_pinned_auto_beside_a_hog_on_the_kits_cpu_re_runs_nothing(tmp_path: Path) -> None:
    """Issue 43's measured case end to end: `cpuset = "auto"` (trial on CPU 1, the kit on CPU 0) and a one-core hog
    on CPU 0 for the whole run. The host-wide rule re-ran every trial; judged on the trial's CPU, none is."""
    from kit.run import RunEvents, RunOptions, start_run
    from kit.spec import load_spec

    kit_cpu, trial_cpu = _two_cpus()
    if (kit_cpu, trial_cpu) != (sorted(os.sched_getaffinity(0))[0], sorted(os.sched_getaffinity(0))[1]):
        pytest.skip("cpuset = auto puts the kit on the first CPU")
    calibrated = Path(__file__).parent / "data" / "calibrated.toml"
    spec_file = tmp_path / "pinned.toml"
    spec_file.write_text(calibrated.read_text().replace("train_s = 0.15", "train_s = 1.0")
                         .replace("infer_s = 0.05", "infer_s = 0.6").replace("repetitions = 12", "repetitions = 2")
                         .replace("warmup_repetitions = 1", "warmup_repetitions = 0") + '\n[container]\ncpuset = "auto"\n')

    class Said(RunEvents):
        def __init__(self) -> None:
            self.messages: list[str] = []

        def message(self, text: str) -> None:
            self.messages.append(text)

    events = Said()
    hog = subprocess.Popen([sys.executable, "-c", HOG.replace("30", "300"), str(kit_cpu)])
    try:
        rd = start_run(load_spec(spec_file), RunOptions(runs_root=tmp_path / "runs"), events)
    finally:
        hog.kill()
        hog.wait(timeout=10)
    # Only load on the trial's own CPU may flag a phase. On a quiet host that is none (no re-run at all); this 2-core
    # machine may run another test's trial beside this one, and the scheduler, CPU 0 being the hog's, moves it onto
    # CPU 1: then the busy-wait trial gets visibly less than its whole CPU, and that phase is rightly flagged.
    reruns = [m for m in events.messages if "re-running" in m]
    assert all(f"on CPU(s) {trial_cpu} " in m for m in reruns), reruns
    assert rd.manifest().status == "complete"
    judged = 0
    records = [rd.read_trial(t.trial_id) for t in rd.manifest().plan.trials]
    for d in [r["disturbance"] for r in records] + [a.record.disturbance for a in rd.checked_attempts()]:
        assert d["cpus"]["trial"] == [trial_cpu] and d["cpus"]["kit_shares"] is False, d
        for p in d["phases"].values():
            if p["judged"] and p["cpus"]:
                judged += 1
                assert p["foreign_cpu_host"] - p["foreign_cpu"] > 0.6, p  # the hog: seen host-wide only
                assert p["foreign_cpu"] + p["trial_cpu"] == pytest.approx(1.0, abs=0.12), p  # CPU 1 saturated
                if p["disturbed"]:
                    assert p["trial_cpu"] < 0.8, p  # something really took the trial's CPU
    assert judged >= 8
    assert len(reruns) == len(list(rd.checked_attempts()))


# An unpinned hog that keeps its own account: each ~0.5 ms slice of its thread's CPU time, with the wall time and
# the CPU the kernel last ran it on (/proc/thread-self/stat, field 39), so the test knows how much of the phase it
# spent on the trial's CPU without asking the counters under test.
HOG_UNPINNED = """
import json, sys, time
out, secs = sys.argv[1], float(sys.argv[2])
def cpu():
    with open("/proc/thread-self/stat", "rb") as f:
        s = f.read()
    return int(s[s.rindex(b")") + 2:].split()[36])
rows, end, last = [], time.time() + secs, time.thread_time()
while time.time() < end:
    for _ in range(20000):
        pass
    now = time.thread_time()
    rows.append((time.time(), cpu(), now - last))
    last = now
with open(out, "w") as f:
    json.dump(rows, f)
"""


@pytest.mark.slow
def test_real_unpinned_loops_are_foreign_in_proportion_to_their_time_on_the_trials_cpu(tmp_path: Path) -> None:
    """Two busy loops the scheduler may put on either CPU, beside a trial pinned to one (a 30 % duty) and the kit on
    the other: the phase's foreign CPU is the loops' own account of their time on the trial's CPU, per second."""
    kit_cpu, trial_cpu = _two_cpus()
    marks = tmp_path / "markers.jsonl"
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {kit_cpu})
    hogs = [subprocess.Popen([sys.executable, "-c", HOG_UNPINNED, str(tmp_path / f"hog{i}.json"), "5"],
                             preexec_fn=lambda: os.sched_setaffinity(0, before)) for i in range(2)]
    try:
        with CpuCollector(0.1) as col:
            time.sleep(0.5)
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            subprocess.run(["taskset", "-c", str(trial_cpu), sys.executable, "-c", TRIAL, str(marks), "0.3", "2.5"],
                           check=True, env=env, timeout=60)
            time.sleep(0.3)
        for h in hogs:
            h.wait(timeout=30)
    finally:
        for h in hogs:
            h.kill()
        os.sched_setaffinity(0, before)
    markers = [json.loads(line) for line in marks.read_text().splitlines()]
    t0 = next(m["t"] for m in markers if m.get("event") == "phase_start" and m.get("phase") == "train")
    t1 = next(m["t"] for m in markers if m.get("event") == "phase_end" and m.get("phase") == "train")
    slices = [row for i in range(2) for row in json.loads((tmp_path / f"hog{i}.json").read_text())
              if t0 <= row[0] <= t1]
    share = sum(dt for _, c, dt in slices if c == trial_cpu) / (t1 - t0)  # the loops on the trial's CPU
    hogs_all = sum(dt for _, _, dt in slices) / (t1 - t0)  # the loops anywhere
    scope = on_cpus.trial_scope((trial_cpu,), (kit_cpu,), markers, None)
    rows = [(r.t, r.source, r.device, r.metric, r.value) for r in col.rows]
    (p,) = assess(markers, rows, 0.1, cpus=scope).phases
    assert p.judged and p.cpus == (trial_cpu,) and p.foreign_cpu is not None, p
    assert p.foreign_cpu_host is not None
    # what else ran on the host (this 2-core machine may run another test beside this one): the host-wide figure
    # less the loops' own time; on a quiet host ~0 and the figure on the trial's CPU is the loops' share there
    other = max(0.0, p.foreign_cpu_host - hogs_all)
    assert share - 0.15 <= p.foreign_cpu <= share + other + 0.15, (p, share, other)
    if share > 0.25 + 0.15:
        assert p.disturbed, (p, share)
    elif share + other < 0.25 - 0.15:
        assert not any("foreign CPU" in c for c in p.causes), (p, share)


def test_a_pinned_runs_baseline_counts_other_work_on_the_trials_cpus_only(tmp_path: Path) -> None:
    """The idle baseline and the quiet wait count other work where the phases are judged: a hog on the kit's CPU
    makes a pinned run's host "quiet", and the busy line names the trials' CPUs."""
    from kit.collectors.quiet import LoadReading, LoadScope, foreign_cpu, read_load
    from kit.disturbance import RerunBudget, busy_baseline_text

    line = busy_baseline_text(0.9, 1, 0.25, RerunBudget(8, 0.25, 2), None, "kit run --resume R",
                              LoadScope((1,), False).where)
    assert "0.9 CPUs busy on the trials' CPU(s) 1 during the idle baseline" in line
    # the kit's own CPU time is subtracted only where it may run
    a, b = LoadReading(0.0, 10.0, 1.0), LoadReading(1.0, 10.9, 1.5)
    assert foreign_cpu(a, b) == pytest.approx(0.4)
    assert LoadScope((1,), False).where and not LoadScope().where
    # an offline or unknown CPU in the scope runs nothing
    assert read_load(scope=LoadScope((65535,), False)).busy_cpu_s == 0.0
    assert read_load(scope=LoadScope((65535,), False)).own_cpu_s == 0.0


@pytest.mark.slow
def test_real_hog_on_the_kits_cpu_leaves_the_trials_cpus_quiet_for_the_baseline() -> None:
    from kit.collectors.quiet import LoadScope, foreign_cpu, read_load

    kit_cpu, trial_cpu = _two_cpus()
    hog = subprocess.Popen([sys.executable, "-c", HOG, str(kit_cpu)])
    try:
        time.sleep(0.5)
        scope = LoadScope((trial_cpu,), False)
        host0, on0 = read_load(), read_load(scope=scope)
        time.sleep(2.0)
        host1, on1 = read_load(), read_load(scope=scope)
    finally:
        hog.kill()
        hog.wait(timeout=10)
    host, on = foreign_cpu(host0, host1), foreign_cpu(on0, on1)
    assert host is not None and on is not None
    assert host > 0.8, host  # the hog, host-wide
    assert host - on > 0.8, (host, on)  # none of it on the trial's CPU
