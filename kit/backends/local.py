"""Local backend: each trial's harness in a fresh Python subprocess on this host.

A fresh process per trial keeps imports, JIT caches and allocator state from
leaking between trials. The child dies with the parent (``KIT_PARENT_PID``,
see ``kit.harness``), so killing ``kit run`` never leaves a trial running
behind a resumed run.

GPUs: the child sees only the trial's GPUs (``TrialTarget.gpu_indices``, NVML
indices) through ``CUDA_VISIBLE_DEVICES`` with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``,
so CUDA numbers GPUs as NVML does and the trial's first GPU is ``cuda:0``; a
CPU trial gets ``CUDA_VISIBLE_DEVICES=""``.

A trial cannot outlive the kit's guard (issue 37): the harness runs under a
child subreaper (``reaper.py``), and the kit process is one too while the
trial runs (:mod:`kit.proctree`), so a trial that kills its reaper
(``SIGKILL`` from the harness or from a daemon it started) only hands its
orphans to the kit, which stops, records, kills and reaps them. The kit
polls the reaper: a reaper held stopped (``SIGSTOP``) for a second is
detected and killed, and the trial's time limit is counted by the kit, not
by the reaper. What happened is in the trial's detail (a reaper killed or
stopped by the trial is an error, never an "oom"), and a SIGKILL is called
"possibly the kernel's OOM killer" only when the kernel counted an OOM kill
during the trial.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.backends.base import (
    Backend,
    TrialOutcome,
    TrialTarget,
    create_trial_file,
    fd_tail,
    kill_group,
    read_outputs,
    status_from,
    tail,
)
from kit.collectors.base import Probe
from kit.errors import BackendError
from kit.plan import arm_framework
from kit.proctree import MAX_LISTED, TreeGuard, child_subreaper, is_stopped, oom_counters, signals_held
from kit.records import JsonTable

KIT_ROOT = Path(__file__).resolve().parents[2]
REAPER = Path(__file__).resolve().parent / "reaper.py"
REPORT_MAX_BYTES = 64 << 10


STOPPED_AFTER_S = 1.0  # a reaper held stopped this long was stopped on purpose: the trial is ended
POLL_S = 0.1


@dataclass(frozen=True)
class ReaperWait:
    """How the wait for a trial's reaper ended."""

    timed_out: bool = False  # the kit's time limit ended the trial
    stopped: bool = False  # the reaper was held stopped (SIGSTOP) and the kit killed it
    kit_signal: str | None = None  # what the kit sent the reaper (SIGTERM: the time limit; SIGKILL: it had to)


def _wait(proc: subprocess.Popen[bytes], seconds: float | None, poll_s: float, stopped_after_s: float) -> str:
    """"exited", "stopped" or "running" after ``seconds``.

    "stopped": seen stopped at every poll for ``stopped_after_s`` and at least ten polls in a row, so a kit that
    was itself suspended with its reaper (a batch system's suspend: SIGSTOP to both, then SIGCONT) does not
    mistake the moment before the reaper's SIGCONT for a stop the trial made."""
    end = None if seconds is None else time.monotonic() + seconds
    stopped_since: float | None = None
    polls = 0
    while True:
        try:
            proc.wait(timeout=poll_s if end is None else max(0.0, min(poll_s, end - time.monotonic())))
            return "exited"
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if is_stopped(proc.pid):
            stopped_since = now if stopped_since is None else stopped_since
            polls += 1
            if now - stopped_since >= stopped_after_s and polls >= 10:
                return "stopped"
        else:
            stopped_since, polls = None, 0
        if end is not None and now >= end:
            return "running"


def _end_reaper(proc: subprocess.Popen[bytes], grace_s: float, poll_s: float, stopped_after_s: float) -> str:
    """Ask the reaper to end the trial (SIGTERM: it records the leftovers); SIGKILL its group if it does not end
    within ``grace_s`` or is held stopped. The signal that ended it."""
    try:
        proc.terminate()
        if _wait(proc, grace_s, poll_s, stopped_after_s) == "exited":
            return "SIGTERM"
    except BaseException:
        kill_group(proc)
        raise
    kill_group(proc)
    return "SIGKILL"


def watch_reaper(proc: subprocess.Popen[bytes], timeout_s: float | None, grace_s: float = 10.0,
                 poll_s: float = POLL_S, stopped_after_s: float = STOPPED_AFTER_S) -> ReaperWait:
    """Wait for the reaper under the trial's time limit, counted here (not by the reaper, which the trial can
    stop). A reaper held stopped is killed at once; on the time limit or an interrupt the reaper is asked to end
    the harness and everything below it (SIGTERM), and its process group is killed if it does not. Whatever
    escaped to the kit is the caller's to end (:class:`kit.proctree.TreeGuard`)."""
    try:
        how = _wait(proc, timeout_s, poll_s, stopped_after_s)
    except BaseException:
        _end_reaper(proc, grace_s, poll_s, stopped_after_s)
        raise
    if how == "exited":
        return ReaperWait()
    if how == "stopped":
        kill_group(proc)
        return ReaperWait(stopped=True, kit_signal="SIGKILL")
    return ReaperWait(timed_out=True, kit_signal=_end_reaper(proc, grace_s, poll_s, stopped_after_s))


def wait_reaper(proc: subprocess.Popen[bytes], timeout_s: float | None, grace_s: float = 10.0) -> bool:
    """:func:`watch_reaper`; True if the trial timed out."""
    return watch_reaper(proc, timeout_s, grace_s).timed_out


def harness_pid(fd: int, timeout_s: float = 10.0, reaper: subprocess.Popen[bytes] | None = None) -> int | None:
    """The harness's PID from the reaper's first line (``harness PID``); None if it does not come (or the
    ``reaper`` ended or is held stopped meanwhile: then it never will)."""
    import select

    line = b""
    end = time.monotonic() + timeout_s
    while not line.endswith(b"\n") and len(line) < 64:
        left = end - time.monotonic()
        if left <= 0:
            return None
        if not select.select([fd], [], [], min(left, POLL_S))[0]:
            if reaper is not None and (reaper.poll() is not None or is_stopped(reaper.pid)):
                return None
            continue
        ch = os.read(fd, 1)
        if not ch:
            return None
        line += ch
    parts = line.split()
    return int(parts[1]) if len(parts) == 2 and parts[0] == b"harness" and parts[1].isdigit() else None


def read_report(fd: int) -> JsonTable:
    """The reaper's JSON record (``{}`` when it wrote none), read without blocking and capped."""
    import json

    os.set_blocking(fd, False)
    chunks, total = [], 0
    while total <= REPORT_MAX_BYTES:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    lines = b"".join(chunks)[:REPORT_MAX_BYTES].splitlines()
    lines = [ln for ln in lines if not ln.startswith(b"harness ")]  # the first line, unless already read
    try:
        rec = json.loads(lines[-1] if lines else b"{}")
    except ValueError:
        return {}
    return rec if isinstance(rec, dict) else {}


FRAMEWORK_MODULES = {"pytorch": "torch", "tensorflow": "tensorflow"}


class LocalBackend(Backend):
    """Runs ``python -m kit.harness`` with this interpreter."""

    name = "local"

    def __init__(self, python: str | None = None, env: dict[str, str] | None = None) -> None:
        self.python = python or sys.executable
        self.env = dict(env or {})

    def available(self) -> Probe:
        return Probe(True, f"subprocesses of {self.python}")

    def describe(self) -> dict[str, str]:
        return {"backend": self.name, "python": self.python, "isolation": "fresh process per trial"}

    def prepare(self, arms: tuple[str, ...], data_dir: Path) -> dict[str, Any]:
        """Check that each arm's framework imports in this interpreter, before any trial."""
        import importlib.util

        frameworks = dict.fromkeys(arm_framework(arm) for arm in arms)
        missing = [fw for fw in frameworks if importlib.util.find_spec(FRAMEWORK_MODULES.get(fw, fw)) is None]
        if missing:
            raise BackendError(
                f"framework(s) not installed in {self.python}: {', '.join(missing)}",
                where="backend local",
                fix="install them (make setup installs torch and tensorflow-cpu) or use --backend docker",
            )
        return {}

    def trial_env(self, gpu_indices: list[int] | None = None) -> dict[str, str]:
        """The child's environment; ``gpu_indices`` None leaves CUDA_VISIBLE_DEVICES as it is (not resolved)."""
        env = dict(os.environ)
        env.update(self.env)
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's default is "fastest first", not NVML's order
        if gpu_indices is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_indices)
        path = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = str(KIT_ROOT) + (os.pathsep + path if path else "")
        env["KIT_PARENT_PID"] = str(os.getpid())
        env.update(self.pinning.env())
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def run_trial(
        self,
        arm: str,
        work: Path,
        data_dir: Path,
        timeout_s: float,
        target: TrialTarget,
        on_start: Callable[[], None] | None = None,
    ) -> TrialOutcome:
        # The harness runs in its work directory, so a relative run directory (`--runs-dir runs`)
        # or data directory must reach it as an absolute path.
        work, data_dir = work.resolve(), data_dir.resolve()
        cmd = [self.python, "-m", "kit.harness", "--out", str(work), "--data", str(data_dir)]
        if self.study_dir is not None:
            cmd += ["--study", str(self.study_dir.resolve())]
        # the harness runs under a child subreaper (kit/backends/reaper.py): every process the trial starts
        # ends with it, and those that outlived it are recorded
        # stderr is read back through this descriptor, never by name (the trial may replace the file)
        out_fd = create_trial_file(work, "stdout.log")
        try:
            err_fd = create_trial_file(work, "stderr.log")
        except BaseException:
            os.close(out_fd)
            raise
        report_r, report_w = os.pipe()
        cmd = [self.python, "-I", str(REAPER), str(report_w), "--", *cmd]
        oom_before = oom_counters()
        t0 = time.monotonic()
        try:
            # the kit adopts what escapes the reaper (a reaper killed or stopped by the trial): see kit.proctree
            with child_subreaper():
                guard = TreeGuard()
                try:
                    proc = subprocess.Popen(cmd, stdout=out_fd, stderr=err_fd, env=self.trial_env(target.gpu_indices),
                                            cwd=work, start_new_session=True, pass_fds=(report_w,))
                except OSError as exc:
                    raise BackendError(f"cannot start the harness ({exc})", where=self.python,
                                       fix="check that the interpreter exists and is executable") from exc
                finally:
                    os.close(report_w)
                guard.started(proc.pid)
                harness: int | None = None
                try:
                    harness = harness_pid(report_r, reaper=proc)
                    target.pid = harness or proc.pid  # the collectors sample the harness's tree
                    if on_start:
                        on_start()
                    waited = watch_reaper(proc, timeout_s)
                finally:
                    with signals_held():  # a second Ctrl-C or SIGTERM waits until the trial's tree is gone
                        if proc.returncode is None:  # an interrupt before the wait: the reaper too
                            kill_group(proc)
                        # every process of the trial still alive, now the kit's: stopped, recorded, killed, reaped
                        by_kit = guard.end(spare=(harness,) if harness else ())
            wall = time.monotonic() - t0
            err = fd_tail(err_fd)
            reaped = read_report(report_r)
        finally:
            os.close(out_fd)
            os.close(err_fd)
            os.close(report_r)
        result, markers, problem = read_outputs(work)
        code = proc.returncode
        detail: dict[str, Any] = {"pid": proc.pid, "gpus": target.gpu_indices if target.gpu_indices is not None else "all"}
        if problem:
            detail["untrusted_output"] = problem
        _leftovers(detail, reaped, by_kit)
        breach = _guard_note(detail, reaped, waited, code, oom_counters().kills_since(oom_before))
        status = status_from(code, result, waited.timed_out)
        if breach:  # the trial fought its guard: an error, whatever its own result says (never "oom")
            status = "error"
            if result is not None:
                own = f"; the trial's own result said: {str(result.get('error'))[:300]}" if result.get("error") else ""
                result = {**result, "status": "error", "error": f"{detail['note']}{own}"}
        return TrialOutcome(
            status=status,
            exit_code=code,
            result=result,
            markers=markers,
            stderr_tail=tail(err),
            wall_s=wall,
            detail=detail,
        )


def _leftovers(detail: dict[str, Any], reaped: JsonTable, by_kit: list[dict[str, object]]) -> None:
    """The processes that outlived the harness: the reaper's record plus those the kit ended itself (a reaper
    killed or stopped by the trial could not). Nothing is added for a trial that left none."""
    found = reaped.get("leftover_processes")
    listed = [p for p in found if isinstance(p, dict)] if isinstance(found, list) else []
    count = reaped.get("leftover_count")
    count = count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else 0
    known = {p.get("pid") for p in listed}
    extra = [p for p in by_kit if p.get("pid") not in known]
    if extra:
        detail["leftover_by_kit"] = len(extra)
    if count or extra:
        detail["leftover_processes"] = (listed + extra)[:MAX_LISTED]
        detail["leftover_count"] = count + len(extra)
    elif "leftover_count" not in reaped:
        detail["reaper"] = "no report (the reaper was killed)"


def _oom_words(kills: int | None) -> str:
    if kills is None:
        return "the kernel's OOM-kill counter cannot be read here, so an OOM kill cannot be ruled out"
    if kills > 0:
        return f"the kernel counted {kills} OOM kill(s) during the trial: possibly the kernel's OOM killer"
    return "no OOM kill was counted by the kernel during the trial"


def _guard_note(detail: dict[str, Any], reaped: JsonTable, waited: ReaperWait, code: int | None,
                oom_kills: int | None) -> bool:
    """Say in ``detail`` (``signal``, ``note``, ``reaper``) how the trial ended; True when the trial fought its
    guard (stopped or killed its reaper, or signalled it): then it is an error, never an out-of-memory result."""
    sig = signal.Signals(-code).name if code is not None and code < 0 and -code in signal.valid_signals() else None
    if sig is not None:
        detail["signal"] = sig
    reported = "leftover_count" in reaped  # the reaper's final record: it ended the trial itself
    if waited.stopped:
        detail["signal"] = "SIGKILL"
        detail["reaper"] = "stopped by the trial (SIGSTOP); killed by the kit"
        detail["note"] = ("the trial stopped its reaper (SIGSTOP): the kit detected it, ended the reaper and every "
                          "process of the trial with SIGKILL")
        return True
    if waited.timed_out or sig is None:
        return False
    if not reported and waited.kit_signal is None:
        detail["reaper"] = f"killed by {sig}, not by the kit (no report)"
        detail["note"] = f"the trial's reaper was killed by {sig}, not by the kit" + (
            f"; {_oom_words(oom_kills)}" if sig == "SIGKILL" else "")  # the OOM killer sends SIGKILL only
        return True
    stopped_by = reaped.get("stopped_by")
    if reported and isinstance(stopped_by, str) and waited.kit_signal is None:
        detail["reaper"] = f"received {stopped_by[:20]}, not from the kit"
        detail["note"] = (f"the trial's reaper received {stopped_by[:20]}, not from the kit, and ended the trial "
                          f"({sig})")
        return True
    if sig == "SIGKILL":
        detail["note"] = f"killed by SIGKILL ({_oom_words(oom_kills)})"
    return False

