"""No process of a study hook or a trial outlives the kit's guard (issue 37, items 4 and 6), attacks performed for real.

Study hooks: a trusted ``report.py`` whose ``sections()`` forks a daemon (double fork + ``setsid``), hoards memory
and loops forever, run by ``kit report`` in a subprocess that is sent SIGTERM (slow: the report analyses the run
first), and through ``kit.studies.call_hook`` in a subprocess sent SIGTERM, SIGHUP or SIGINT (fast); a hook over
its time limit; a hook that allocates 8 GiB; a hook that writes past its output cap.

Trials: a "harness" (the local backend's interpreter replaced by a script that runs the real reaper) that starts a
daemon and then SIGKILLs its reaper (from the harness, or from the daemon), or SIGSTOPs it; the same attacks on one
trial of a real calibrated run (slow); a daemon that outlives ``apptainer exec`` (the tests' fake). Each test records the
pids of every process the attack started and checks, after a short bounded wait, that none is alive; every test is
bounded by a timeout (a subprocess timeout or SIGALRM), so a regression fails it instead of hanging it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _crafted import golden_copy

from kit.errors import ExitCode, StudyError

REPO = Path(__file__).resolve().parents[1]
KIT = [sys.executable, "-m", "kit"]


class Hung(Exception):
    pass


@contextlib.contextmanager
def bounded(seconds: int) -> Iterator[None]:
    """Fail (not hang) a block that does not end within ``seconds`` (SIGALRM raises in the main thread)."""
    def hung(signum: int, frame: object) -> None:
        raise Hung(f"did not finish within {seconds} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _alive(pid: int) -> bool:
    """A live process (a zombie is dead: it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return False
    return raw[raw.rindex(b")") + 2:].split()[0] not in (b"Z", b"X")


def _pids(path: Path) -> list[int]:
    """Every pid in the file an attack writes (lines "PID" or "ROLE PID")."""
    return [int(x) for x in path.read_text().split() if x.isdigit()] if path.exists() else []


def _role(path: Path, role: str) -> int:
    (pid,) = [int(line.split()[1]) for line in path.read_text().splitlines() if line.startswith(f"{role} ")]
    return pid


def _wait_for_pids(path: Path, n: int, timeout_s: float = 60.0) -> list[int]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if len(_pids(path)) >= n:
            return _pids(path)
        time.sleep(0.05)
    raise AssertionError(f"the attack never started: {path} holds {_pids(path)}")


def _none_survive(pids: list[int], timeout_s: float = 5.0) -> list[int]:
    """The pids still alive after a short bounded wait (each is SIGKILLed afterwards, so no test leaks one)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and any(_alive(p) for p in pids):
        time.sleep(0.05)
    left = [p for p in pids if _alive(p)]
    for p in left:
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGKILL)
    return left


# -- study hooks ----------------------------------------------------------------------------------------------------

HOSTILE_HOOK = textwrap.dedent('''
    """A hook that is trusted and still misbehaves: a daemon out of its session, a memory hoard, no end."""
    import os
    import time

    PIDS = {pids!r}


    def _note(pid):
        with open(PIDS, "a") as fh:
            fh.write(f"{{pid}}\\n")


    def sections(manifest, analysis):
        if os.fork() == 0:  # double fork + setsid: out of the hook's process group and session
            os.setsid()
            if os.fork() == 0:
                _note(os.getpid())
                while True:
                    time.sleep(0.05)
            os._exit(0)
        time.sleep(0.1)
        _note(os.getpid())
        hoard = []
        while True:
            try:
                hoard.append(b"x" * (16 << 20))  # touched, not just reserved
            except MemoryError:
                hoard.clear()
            time.sleep(0.01)
    ''')


def default_signals() -> None:
    """The kit as a user's shell job gets it: SIGINT, SIGTERM and SIGHUP at their defaults. A test run started in the
    background (`cmd &` ignores SIGINT) or under nohup (SIGHUP ignored) passes its ignores on through exec, and the
    kit rightly keeps an inherited ignore (`nohup kit run` survives a logout), so the signal would do nothing."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _study(folder: Path, pids: Path, report: str | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "experiment.toml").write_text("")
    (folder / "report.py").write_text(report if report is not None else HOSTILE_HOOK.format(pids=str(pids)))
    return folder


def _kit_dirs(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(("kit-study-hook-", "kit-study-code-")))


@pytest.mark.slow
def test_kit_report_killed_by_sigterm_ends_the_hooks_every_process_and_directory(tmp_path: Path) -> None:
    """`kit report RUN --study DIR` whose sections() forks a daemon, hoards memory and loops; SIGTERM to the kit.
    (Slow: `kit report` analyses the run before the hook starts, 5 to 10 s; the same attack through call_hook,
    with all three signals, is in the fast suite below.)"""
    run = golden_copy(tmp_path / "run")
    pids = tmp_path / "pids"
    study = _study(tmp_path / "study", pids)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "KIT_HOOK_MEMORY_MB": "512"}
    proc = subprocess.Popen([*KIT, "report", str(run), "--study", str(study)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    try:
        recorded = _wait_for_pids(pids, 2)  # the daemon and the hook itself, both running
        assert all(_alive(p) for p in recorded)
        assert len(_kit_dirs(tmp)) == 2, _kit_dirs(tmp)  # the hook's work dir and the code copy exist meanwhile
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        left = _none_survive(_pids(pids))  # checked below; killed here whatever else failed
    assert left == [], "a process of the hook outlived the kit"
    assert proc.returncode == ExitCode.INTERRUPTED, (proc.returncode, out, err)
    assert "Traceback" not in out + err
    assert _kit_dirs(tmp) == []


CALL_HOOK = """
import sys
from pathlib import Path
from kit.studies import Hooks, call_hook
try:
    call_hook(Hooks("folder", Path(sys.argv[1]), None), "report", "sections", {}, {})
except KeyboardInterrupt:
    print("interrupted")
    sys.exit(130)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_the_kits_signal_ends_the_hooks_processes_and_directories_then_interrupts(
        tmp_path: Path, sig: signal.Signals) -> None:
    """The kit process (here a script calling kit.studies.call_hook, as `kit report` does) is signalled while the
    hostile hook runs: every process of the hook is gone, both temporary directories too, then KeyboardInterrupt."""
    pids = tmp_path / "pids"
    study = _study(tmp_path / "study", pids)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "KIT_HOOK_MEMORY_MB": "512"}
    proc = subprocess.Popen([sys.executable, "-c", CALL_HOOK, str(study)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    try:
        recorded = _wait_for_pids(pids, 2)
        assert all(_alive(p) for p in recorded) and len(_kit_dirs(tmp)) == 2, _kit_dirs(tmp)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        left = _none_survive(_pids(pids))
    assert left == [], "a process of the hook outlived the kit"
    assert proc.returncode == 130 and out.strip() == "interrupted", (proc.returncode, out, err)
    assert _kit_dirs(tmp) == []


def test_an_ignored_hangup_stays_ignored_under_nohup(tmp_path: Path) -> None:
    """`nohup kit ...` (SIGHUP ignored) must survive a logout: neither the CLI nor the hook's box turns an ignored
    SIGHUP into an interrupt. The hook keeps running through the hangup and ends with the kit's SIGTERM."""
    pids = tmp_path / "pids"
    study = _study(tmp_path / "study", pids)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "KIT_HOOK_MEMORY_MB": "512"}
    proc = subprocess.Popen([sys.executable, "-c", CALL_HOOK, str(study)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        _wait_for_pids(pids, 2)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.5)
        assert proc.poll() is None, "an ignored SIGHUP interrupted the kit"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        left = _none_survive(_pids(pids))
    assert left == [] and proc.returncode == 130 and out.strip() == "interrupted", (proc.returncode, out, err)
    script = ("import signal, sys\nsignal.signal(signal.SIGHUP, signal.SIG_IGN)\nimport kit.cli\n"
              "sys.argv = ['kit', '--version']\ntry:\n    kit.cli.main()\nexcept SystemExit:\n    pass\n"
              "print('ignored' if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else 'replaced')")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().endswith("ignored"), done.stdout + done.stderr


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's temporary directory, so the test can see that the hook's directories are removed."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def _folder_hooks(study: Path) -> Any:
    from kit.studies import Hooks

    return Hooks("folder", study, None)


def test_a_hook_over_its_time_limit_is_stopped_with_its_daemon_and_shows_progress(
        tmp_path: Path, private_tmp: Path) -> None:
    from kit.studies import call_hook
    from kit.study_child import HookLimits, hook_limits, hook_progress

    pids = tmp_path / "pids"
    study = _study(tmp_path / "study", pids)
    ticks: list[tuple[str, float, float]] = []
    ended: list[int] = []
    try:
        with bounded(60), hook_limits(HookLimits(timeout_s=2.5, memory_mb=512)), \
                hook_progress(lambda what, elapsed, limit: ticks.append((what, elapsed, limit)),
                              on_end=lambda: ended.append(len(ticks))), \
                pytest.raises(StudyError) as info:
            call_hook(_folder_hooks(study), "report", "sections", {}, {})
    finally:
        left = _none_survive(_pids(pids))
    msg = info.value.one_line()
    assert "did not finish within its 2.5 s time limit" in msg and "KIT_HOOK_TIMEOUT_S=" in msg, msg
    assert len(_pids(pids)) == 2 and left == []
    assert _kit_dirs(private_tmp) == []
    # the limit showed while it ran, with the limit, at times inside it (how many ticks fit in 2.5 s depends on how
    # busy the host is: at least one, never a count the clock decides)
    assert len(ticks) >= 1 and all(t[0] == "the study's sections()" and t[2] == 2.5 for t in ticks), ticks
    assert [t[1] for t in ticks] == sorted(t[1] for t in ticks) and all(0 < t[1] < 2.5 for t in ticks), ticks
    assert ended == [len(ticks)]  # told once, after the last tick (a live line can be cleared)


def test_a_hook_that_allocates_8_gib_gets_the_studys_memory_error(tmp_path: Path, private_tmp: Path) -> None:
    """The default 4 GiB address space refuses the allocation itself. (It is not touched: if the cap were gone the
    hook would return normally and the test fail, without driving the test machine into swap.)"""
    from kit.studies import call_hook

    study = _study(tmp_path / "study", tmp_path / "pids", report=textwrap.dedent("""
        def sections(manifest, analysis):
            hoard = bytearray(8 << 30)
            return [{"id": "x", "title": str(len(hoard))}]
        """))
    with bounded(60), pytest.raises(StudyError) as info:
        call_hook(_folder_hooks(study), "report", "sections", {}, {})
    msg = info.value.one_line()
    assert "the study's sections() ran out of its 4096 MiB address space" in msg and "KIT_HOOK_MEMORY_MB=" in msg, msg
    assert _kit_dirs(private_tmp) == []


def test_a_hook_that_writes_past_its_output_cap_gets_the_studys_error(
        tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.studies import call_hook

    monkeypatch.setenv("KIT_HOOK_OUTPUT_MB", "1")
    study = _study(tmp_path / "study", tmp_path / "pids", report=textwrap.dedent("""
        def sections(manifest, analysis):
            return [{"id": "x", "title": "y" * (3 << 20)}]
        """))
    with bounded(60), pytest.raises(StudyError) as info:
        call_hook(_folder_hooks(study), "report", "sections", {}, {})
    msg = info.value.one_line()
    assert "over its 1 MiB output limit" in msg and "KIT_HOOK_OUTPUT_MB=" in msg, msg
    assert _kit_dirs(private_tmp) == []


def test_hook_limits_come_from_the_environment_and_bad_values_are_named() -> None:
    from kit.study_child import HookLimits

    assert HookLimits.from_env({}) == HookLimits(timeout_s=120.0, memory_mb=4096, output_bytes=256 << 20)
    got = HookLimits.from_env({"KIT_HOOK_TIMEOUT_S": "7.5", "KIT_HOOK_MEMORY_MB": "1024", "KIT_HOOK_OUTPUT_MB": "2"})
    assert got == HookLimits(timeout_s=7.5, memory_mb=1024, output_bytes=2 << 20)
    assert HookLimits.from_env({"KIT_HOOK_TIMEOUT_S": "7.5"}, timeout_s=9).timeout_s == 9  # an option wins
    with pytest.raises(StudyError, match="KIT_HOOK_TIMEOUT_S"):
        HookLimits.from_env({"KIT_HOOK_TIMEOUT_S": "soon"})
    with pytest.raises(StudyError, match="KIT_HOOK_MEMORY_MB"):
        HookLimits.from_env({"KIT_HOOK_MEMORY_MB": "-1"})


# -- the guard itself -----------------------------------------------------------------------------------------------

def test_the_guard_never_reaps_or_kills_a_process_it_does_not_own() -> None:
    """A Popen child of the kit that ends while a guard cleans up keeps its own exit status (no waitpid(-1))."""
    from kit.proctree import TreeGuard, child_subreaper

    with bounded(30), child_subreaper():
        guard = TreeGuard()
        tree = subprocess.Popen([sys.executable, "-c", "import os\nif os.fork() == 0:\n    os.setsid()\n"
                                 "    import time; time.sleep(60)\n"], start_new_session=True)
        guard.started(tree.pid)
        mine = subprocess.Popen([sys.executable, "-c", "import time, sys; time.sleep(0.5); sys.exit(3)"])
        assert tree.wait(timeout=20) == 0
        end = time.monotonic() + 10
        while not guard.adopted() and time.monotonic() < end:  # the setsid'd grandchild, re-parented here
            time.sleep(0.02)
        (orphan,) = guard.adopted()
        assert orphan.alive and orphan.ppid == os.getpid()
        records = guard.end()
        assert [r["pid"] for r in records] == [orphan.pid] and not _alive(orphan.pid)
        assert mine.wait(timeout=20) == 3  # not stolen, not killed


# -- trials ---------------------------------------------------------------------------------------------------------

FAKE_PYTHON = '''#!{python}
"""The local backend's interpreter: the real one for the reaper, an attacker for the harness."""
import os, signal, sys, time
if sys.argv[1] == "-I":  # the reaper: run it as it is
    os.execv({python!r}, [{python!r}, *sys.argv[1:]])
PIDS = {pids!r}


def note(role):
    with open(PIDS, "a") as fh:
        fh.write(f"{{role}} {{os.getpid()}}\\n")


reaper = os.getppid()
if os.fork() == 0:  # a daemon: double fork + setsid, out of the trial's session
    os.setsid()
    if os.fork() == 0:
        note("daemon")
        if {who!r} == "daemon":
            time.sleep(0.3)
            os.kill(reaper, signal.{sig})
        while True:
            time.sleep(0.05)
    os._exit(0)
note("harness")
if {who!r} == "harness":
    time.sleep(0.3)
    os.kill(reaper, signal.{sig})
while True:  # the "harness" never ends by itself
    time.sleep(0.05)
'''


def _attack(tmp_path: Path, sig: str, who: str = "harness") -> tuple[Any, list[int], list[int], Path]:
    """Run one local trial whose harness (or its daemon) sends ``sig`` to its reaper; (outcome, the pids the attack
    recorded, those still alive after a short wait (then killed, also when the trial run failed), the pid file)."""
    from kit.backends.local import LocalBackend
    from kit.collectors.base import TrialTarget

    pids = tmp_path / "pids"
    fake = tmp_path / "fakepython"
    fake.write_text(FAKE_PYTHON.format(python=sys.executable, pids=str(pids), who=who, sig=sig))
    fake.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "request.json").write_text("{}")
    try:
        with bounded(90):
            out = LocalBackend(python=str(fake)).run_trial("pytorch", work, tmp_path, 60.0, TrialTarget())
    finally:
        left = _none_survive(_pids(pids))
    return out, _pids(pids), left, pids


def _record(out: Any) -> dict[str, Any]:
    from kit.plan import Trial
    from kit.run.trial import trial_record

    trial = Trial(trial_id="r001-c0-pytorch", position=3, block=1, repetition=1, warmup=False, arm="pytorch",
                  framework="pytorch", config_id="c0", seed=5)
    return trial_record(trial, out, 0.0, out.wall_s, [], {}, "local").to_json()


@pytest.mark.parametrize("who", ["harness", "daemon"])
def test_a_trial_that_sigkills_its_reaper_does_not_free_its_processes(tmp_path: Path, who: str) -> None:
    from kit.proctree import oom_counters

    before = oom_counters()
    out, pids, left, pid_file = _attack(tmp_path, "SIGKILL", who)
    kills = oom_counters().kills_since(before)
    assert len(pids) == 2, pids  # the daemon and the harness ran
    assert left == [], "a process of the trial outlived its killed reaper"
    # ended when the reaper died, not at the 60 s limit: the time limit makes the status "timeout" (status_from) and
    # leaves no "not by the kit" note, so "error" with that note says which mechanism ended it (no clock asserted)
    assert out.status == "error", out
    note = out.detail["note"]
    assert "reaper was killed by SIGKILL, not by the kit" in note, out.detail
    if kills == 0:  # nothing else on this host was OOM-killed meanwhile: the note must not suggest it
        assert "no OOM kill was counted" in note and "possibly" not in note, note
    daemon = _role(pid_file, "daemon")
    listed = {p["pid"] for p in out.detail["leftover_processes"]}
    assert daemon in listed and out.detail["leftover_count"] == len(listed) >= 1
    rec = _record(out)
    assert rec["status"] == "error" and rec["signal"] == "SIGKILL"
    assert "reaper was killed by SIGKILL, not by the kit" in rec["error"]
    assert kills != 0 or "OOM killer" not in rec["error"], rec["error"]
    assert rec["backend"]["leftover_processes"] == out.detail["leftover_processes"]


def test_a_trial_that_sigstops_its_reaper_is_ended_long_before_its_time_limit(tmp_path: Path) -> None:
    out, pids, left, pid_file = _attack(tmp_path, "SIGSTOP")
    assert len(pids) == 2, pids
    assert left == [], "a process of the trial outlived its stopped reaper"
    # detected, not ended at the 60 s limit: the limit gives "timeout" (even for a reaper found stopped during the
    # grace period), and only the stop watch (ReaperWait.stopped) writes this "reaper" line; no clock asserted
    assert out.status == "error", out
    assert out.detail["reaper"] == "stopped by the trial (SIGSTOP); killed by the kit", out.detail
    assert "the trial stopped its reaper (SIGSTOP)" in out.detail["note"] and "OOM" not in out.detail["note"]
    assert _role(pid_file, "daemon") in {p["pid"] for p in out.detail["leftover_processes"]}
    rec = _record(out)
    assert rec["status"] == "error" and "stopped its reaper" in rec["error"] and "OOM" not in rec["error"]


def test_a_sigkill_is_called_possibly_oom_only_when_the_kernel_counted_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The counter is faked to rise (the kernel's OOM killer cannot be called on purpose in a test); the status stays
    "error": a killed reaper is never an out-of-memory result."""
    import kit.backends.local as local
    from kit.proctree import OomCounters

    counts = iter([OomCounters(5, None), OomCounters(6, None)])
    monkeypatch.setattr(local, "oom_counters", lambda: next(counts))
    out, _, left, _ = _attack(tmp_path, "SIGKILL")
    assert left == []
    assert out.status == "error"
    assert "the kernel counted 1 OOM kill(s) during the trial: possibly the kernel's OOM killer" in out.detail["note"]


def test_a_normal_trial_records_what_it_did_before(tmp_path: Path) -> None:
    """The guard adds nothing to a trial that fought nothing: no note, no leftovers, no reaper remark."""
    from kit.backends.local import LocalBackend
    from kit.collectors.base import TrialTarget

    fake = tmp_path / "fakepython"
    fake.write_text(f"#!{sys.executable}\nimport os, sys\nif sys.argv[1] == '-I':\n"
                    f"    os.execv({sys.executable!r}, [{sys.executable!r}, *sys.argv[1:]])\nsys.exit(0)\n")
    fake.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "request.json").write_text("{}")
    with bounded(60):
        out = LocalBackend(python=str(fake)).run_trial("pytorch", work, tmp_path, 60.0, TrialTarget())
    assert out.exit_code == 0 and sorted(out.detail) == ["gpus", "pid"], out.detail


# -- a real run ------------------------------------------------------------------------------------------------------

ATTACK_SH = """#!/bin/sh
case "$(basename "$PWD")" in
  {victim})
    if [ "$1" != "-I" ]; then
      setsid sh -c 'echo $$ >> {pids}; exec sleep 300' </dev/null >/dev/null 2>&1 &
      while [ "$(wc -l < {pids} 2>/dev/null || echo 0)" -lt 1 ]; do sleep 0.01; done
      kill -{sig} $PPID
    fi ;;
esac
exec '{python}' "$@"
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["KILL", "STOP"])
def test_in_a_real_run_the_attacked_trial_is_an_error_and_nothing_survives(tmp_path: Path, sig: str) -> None:
    """A real run of the calibrated workload; one trial's harness starts a daemon and kills or stops its reaper,
    then runs the real harness. The run goes on; that trial is an error with the reason and its leftover."""
    from kit.plan import make_plan
    from kit.proctree import oom_counters
    from kit.run import RunOptions, start_run
    from kit.spec import load_spec

    spec_file = tmp_path / "calibrated.toml"
    spec_file.write_text((REPO / "tests" / "data" / "calibrated.toml").read_text()
                         .replace("repetitions = 12", "repetitions = 2"))
    spec = load_spec(spec_file)
    victim = next(t for t in make_plan(spec).trials if not t.warmup)
    pids = tmp_path / "pids"
    script = tmp_path / "python.sh"
    script.write_text(ATTACK_SH.format(victim=victim.trial_id, pids=pids, sig=sig, python=sys.executable))
    script.chmod(0o755)
    before = oom_counters()
    try:
        with bounded(300):
            rd = start_run(spec, RunOptions(runs_root=tmp_path / "runs", backend_options={"python": str(script)}))
    finally:
        left = _none_survive(_pids(pids))
    kills = oom_counters().kills_since(before)
    assert left == [] and len(_pids(pids)) == 1
    rec = json.loads(rd.trial_path(victim.trial_id).read_text())
    assert rec["status"] == "error", rec
    if kills == 0 or sig == "STOP":
        assert "OOM killer" not in rec["error"], rec["error"]
    assert ("stopped its reaper" if sig == "STOP" else "reaper was killed by SIGKILL, not by the kit") in rec["error"]
    assert _pids(pids)[0] in {p["pid"] for p in rec["backend"]["leftover_processes"]}
    others = [json.loads(p.read_text()) for p in (rd.path / "trials").glob("*.json")]
    assert [r["status"] for r in others].count("ok") == len(others) - 1


def test_an_apptainer_process_that_outlives_its_exec_is_ended_and_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Apptainer backend's process tree runs on this host (the test's fake apptainer runs the "container"'s
    command there): a daemon that escapes its session is re-parented to the kit, ended and recorded."""
    from kit.backends.apptainer import ApptainerBackend
    from kit.collectors.base import TrialTarget
    from kit.spec import Container

    pids = tmp_path / "pids"
    exe = tmp_path / "bin" / "apptainer"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {REPO / 'tests' / '_fake_apptainer.py'} \"$@\"\n")
    exe.chmod(0o755)
    harness = tmp_path / "bin" / "leaving-python"
    harness.write_text(f"#!/bin/sh\nsetsid sh -c 'echo daemon $$ >> {pids}; exec sleep 300' </dev/null >/dev/null 2>&1 &\n"
                       f"while [ ! -s {pids} ]; do sleep 0.01; done\nexit 0\n")
    harness.chmod(0o755)
    monkeypatch.setenv("FAKE_APPTAINER_PYTHON", str(harness))
    be = ApptainerBackend(Container(), apptainer=str(exe))
    be._images = {"pytorch": {"row": "r", "path": "/s/pt.sif", "digest": "sha256:" + "a" * 64, "device": "cpu"}}
    work = tmp_path / "work"
    work.mkdir()
    (work / "request.json").write_text("{}")
    try:
        with bounded(60):
            out = be.run_trial("pytorch", work, tmp_path, 60, TrialTarget())
    finally:
        left = _none_survive(_pids(pids))
    daemon = _role(pids, "daemon")
    assert left == []
    assert out.detail["leftover_count"] == 1 and out.detail["leftover_processes"][0]["pid"] == daemon


def test_a_second_signal_waits_until_the_trials_tree_is_gone() -> None:
    """The trial's cleanup runs with SIGINT, SIGTERM and SIGHUP held (kit.proctree.signals_held): a signal that
    arrives meanwhile is handled when the cleanup is over, never in the middle of it."""
    import threading

    from kit.proctree import signals_held

    seen: list[str] = []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append("handled"))
    busy = threading.Thread(target=time.sleep, args=(1.0,), daemon=True)  # as the sampler threads of a trial
    busy.start()
    try:
        with signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
            seen.append("cleanup done")
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert seen == ["cleanup done", "handled"]
