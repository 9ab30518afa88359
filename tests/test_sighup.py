"""SIGHUP stops a run as SIGTERM does (issue 39, item 4): the terminal a `kit run` was started from closes, the run
keeps its finished trials, its status says "interrupted", `kit status` says so, and `kit run --resume` continues it.

Real: `kit run` of the calibrated self-test spec (its trials go through the real harness and run loop, with the
progress bar on a terminal, without starting a framework) on a pseudo-terminal of its own (its session leader, as a login shell's
job is), the terminal closed by closing its master side (the kernel hangs it up: SIGHUP, and every later write to it
fails with EIO), or SIGHUP sent to the process group several times at once (a shell forwarding it, the kernel sending
it again as the session ends)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / ".venv" / "bin" / "kit"
SPEC = Path(__file__).parent / "data" / "calibrated.toml"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not KIT.exists(), reason="needs the kit installed in .venv (make setup)")]


def _kit_on_a_terminal(runs: Path, *args: str) -> tuple[int, int]:
    """(pid, master fd) of `kit run` started on a new pseudo-terminal, in a session of its own."""
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal's session leader
        # a login shell's job has SIGHUP and SIGINT at their defaults; a test run under nohup or in the background
        # would pass its ignores on (and the kit rightly keeps an inherited ignore)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(ROOT)
        os.execv(str(KIT), [str(KIT), "run", str(SPEC), "--backend", "local",
                            "--runs-dir", str(runs), *args])
    return pid, fd


def _wait_for_a_trial(runs: Path, fd: int, timeout_s: float = 300) -> Path:
    """The run directory once its first trial is on disk (the terminal's output drained meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                os.read(fd, 65536)
            except OSError:
                break
        done = list(runs.glob("*/trials/*.json"))
        if done:
            return done[0].parent.parent
    raise AssertionError("no trial finished in time")


def _exit_code(pid: int, timeout_s: float = 120) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("kit run did not stop after SIGHUP")


def _interrupted(run: Path) -> dict[str, object]:
    man = json.loads((run / "manifest.json").read_text())
    events = [json.loads(line)["event"] for line in (run / "events.jsonl").read_text().splitlines()]
    assert man["status"] == "interrupted", man["status"]
    assert events[-1] == "interrupted"
    return man


def _status(run: Path) -> str:
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    p = subprocess.run([str(KIT), "status", str(run)], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    return " ".join(p.stdout.split())


def test_a_closed_terminal_leaves_an_interrupted_resumable_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    pid, fd = _kit_on_a_terminal(runs)
    try:
        run = _wait_for_a_trial(runs, fd)
    finally:
        os.close(fd)  # the terminal closes: SIGHUP to its session leader, EIO on every later write to it
    # 130 as after Ctrl-C; before the fix a hung-up terminal turned the closing line into an OSError and exit 1
    assert _exit_code(pid) == 130
    _interrupted(run)
    kept = {p.name for p in (run / "trials").glob("*.json")}
    assert kept and not list(run.rglob("*.tmp"))
    assert "status interrupted" in _status(run)
    # resumable, with the command the kit prints, as printed
    p = subprocess.run([str(KIT), "run", "--resume", str(run), "--max-trials", "1"], capture_output=True, text=True,
                       cwd=ROOT, timeout=600, check=False)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    after = {q.name for q in (run / "trials").glob("*.json")}
    assert kept < after and len(after) == len(kept) + 1
    assert json.loads((run / "manifest.json").read_text())["status"] == "partial"


def test_sighup_sent_again_and_again_cannot_cut_the_cleanup_short(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    pid, fd = _kit_on_a_terminal(runs)
    code = None
    try:
        run = _wait_for_a_trial(runs, fd)
        for _ in range(3):  # the shell forwards it, the kernel sends it as the session ends, a wrapper passes it on
            os.killpg(pid, signal.SIGHUP)
        deadline = time.monotonic() + 120
        while code is None and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.2)[0]:  # keep the terminal drained: the kit's last lines reach it
                try:
                    os.read(fd, 65536)
                except OSError:
                    pass
            got, status = os.waitpid(pid, os.WNOHANG)
            if got:
                code = os.waitstatus_to_exitcode(status)
    finally:
        os.close(fd)
        if code is None:
            code = _exit_code(pid)
    assert code == 130
    _interrupted(run)
    assert "status interrupted" in _status(run)
