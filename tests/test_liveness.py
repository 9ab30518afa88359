"""Dead runs are told apart (issue 39, item 4): a run whose manifest says "running" but whose process is gone (its
lock free, its holder's pid gone, reused, or of another boot) reads "interrupted" in `kit status` and in its report;
a run a live process holds still reads "running". Real processes and real locks; no process is faked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.executors.liveness import holder_alive, incomplete_note, lock_held, run_liveness
from kit.executors.status import run_status
from kit.store import RunDir, boot_id, process_identity, process_start
from tests._runs import bare_manifest_json

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / ".venv" / "bin" / "kit"
# A `kit run` as the lock sees it: flock the run's .lock (as kit.run.loop.run_lock does) and hold it until killed.
HOLDER = ("import fcntl, os, sys, time\n"
          "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
          "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
          "print('locked', flush=True)\n"
          "time.sleep(120)\n")


def _running_run(tmp_path: Path) -> RunDir:
    rd = RunDir.create(tmp_path / "runs", "t", bare_manifest_json(status="running", executor={"name": "local"}))
    (rd.path / ".lock").touch()
    return rd


def _log_holder(rd: RunDir, pid: int, **identity: object) -> None:
    """The ``start`` event of the process ``pid`` as RunDir.log_event writes it for that process."""
    rec = {"t": time.time(), "event": "start", "host": os.uname().nodename, "pid": pid, "boot_id": boot_id(),
           "pid_start": process_start(pid), **identity}
    with open(rd.path / "events.jsonl", "a") as fh:
        fh.write(json.dumps(rec) + "\n")


def _dead_pid() -> tuple[int, int | None]:
    """The pid of a process that ran and was reaped, with its start time read while it lived."""
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    started = process_start(p.pid)
    p.communicate(b"")
    return p.pid, started


def test_every_event_records_the_boot_and_the_process_start(tmp_path: Path) -> None:
    rd = _running_run(tmp_path)
    rd.log_event("start", plan_digest="x")
    holder = rd.holder()
    assert holder is not None and holder["pid"] == os.getpid()
    assert holder["boot_id"] == boot_id() and holder["pid_start"] == process_identity()["pid_start"] is not None
    assert holder_alive(holder)[0] is True  # this very process


def test_a_run_whose_process_is_gone_reads_interrupted(tmp_path: Path) -> None:
    rd = _running_run(tmp_path)
    pid, started = _dead_pid()
    _log_holder(rd, pid, pid_start=started)
    assert lock_held(rd.path) is False
    st = run_status(rd.path)
    assert st["status"] == "interrupted" and st["recorded_status"] == "running"
    assert f"process {pid}" in st["status_reason"] and "gone" in st["status_reason"]
    assert json.loads((rd.path / "manifest.json").read_text())["status"] == "running"  # a reader writes nothing


def test_a_pid_of_another_boot_or_reused_names_no_live_run(tmp_path: Path) -> None:
    """This test's own pid is alive: only the boot id (or the start time) tells the recorded process from it."""
    rd = _running_run(tmp_path)
    _log_holder(rd, os.getpid(), boot_id="00000000-0000-0000-0000-000000000000")
    live = run_liveness(rd, "running")
    assert live.status == "interrupted" and "before this host last booted" in live.reason
    rd2 = _running_run(tmp_path / "b")
    _log_holder(rd2, os.getpid(), pid_start=(process_start(os.getpid()) or 0) + 1)
    assert "now another process" in run_liveness(rd2, "running").reason
    (rd2.path / ".lock").unlink()  # a file system without the lock file: the holder's record alone speaks
    assert run_liveness(rd2, "running").status == "interrupted"


def test_a_live_holder_still_reads_running_until_it_is_killed(tmp_path: Path) -> None:
    rd = _running_run(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(rd.path / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        _log_holder(rd, holder.pid)
        assert lock_held(rd.path) is True
        st = run_status(rd.path)
        assert st["status"] == "running" and not st["status_reason"]
        holder.kill()  # SIGKILL: no handler runs, the manifest keeps "running"
        holder.wait(timeout=10)
        st = run_status(rd.path)
        assert st["status"] == "interrupted" and "is gone" in st["status_reason"]
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_other_statuses_and_cluster_runs_are_left_as_recorded(tmp_path: Path) -> None:
    rd = _running_run(tmp_path)
    pid, started = _dead_pid()
    _log_holder(rd, pid, pid_start=started)
    assert run_liveness(rd, "complete").status == "complete"
    assert run_liveness(rd, "running", hands_off=True).status == "running"  # Slurm's job states speak there


def test_the_report_of_an_unfinished_run_opens_with_it(tmp_path: Path) -> None:
    rd = _running_run(tmp_path)
    pid, started = _dead_pid()
    _log_holder(rd, pid, pid_start=started)
    note = incomplete_note(run_liveness(rd, "running"), 3, 26, rd.path)
    assert note is not None and note.startswith("Incomplete run: 3 of 26 planned trials finished; the run was "
                                                "interrupted (the run's process is gone")
    assert f"kit run --resume {rd.path}" in note
    assert incomplete_note(run_liveness(rd, "complete"), 26, 26, rd.path) is None


@pytest.mark.slow  # a `kit` process: a few seconds on a busy 2-core host
@pytest.mark.skipif(not KIT.exists(), reason="needs the kit installed in .venv (make setup)")
def test_kit_status_says_interrupted_with_a_hint_that_runs_from_here(tmp_path: Path) -> None:
    """Without .venv/bin on PATH the hint names .venv/bin/kit (relative to where the user stands), as it would
    be typed; with it on PATH, plain `kit`."""
    rd = _running_run(tmp_path)
    pid, started = _dead_pid()
    _log_holder(rd, pid, pid_start=started)
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    p = subprocess.run([str(KIT), "status", str(rd.path)], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    assert "status interrupted" in p.stdout and "the manifest says running" in p.stdout
    assert f"Continue with: .venv/bin/kit run --resume {rd.path}" in " ".join(p.stdout.split())
