"""Is anyone still working on a run whose manifest says "running"?

The manifest's status is written by the process that runs the trials: "running" when it starts, "interrupted",
"partial", "complete" or "failed" when it stops. A process that cannot stop cleanly (SIGKILL, the OOM killer, a
power cut, a reboot, a crash before its handlers) leaves "running" behind for ever, and every reader that trusts the
word shows a dead run as alive. So readers (`kit status`, `kit report`, `kit show`) ask two witnesses instead:

* the run's lock (``RUN/.lock``, flock'ed by `kit run` for as long as it works on the run): the kernel drops it
  when its holder dies, whatever the pid is reused for later, and after a reboot no one holds it;
* the holder's record (the newest ``start``/``resume`` event of events.jsonl: host, pid, boot id and the process's
  start time, kit.store.process_identity): on this host, a pid that no longer exists, that started at another time
  (reused), or that belongs to another boot names no live `kit run`.

A run on another host (a shared file system) that the lock cannot speak for is "unknown" here: said so, never
guessed. A run of a cluster executor is left to that executor's own states (kit.executors.status).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.store import RunDir, boot_id, process_start

LOCK = ".lock"


@dataclass(frozen=True)
class Liveness:
    """What the run's status really is: ``recorded`` (the manifest's word), ``status`` (the status a reader should
    show: "interrupted" for a "running" run whose process is gone) and ``reason`` (why, in a sentence; "" when the
    recorded status stands)."""

    recorded: str | None
    status: str | None
    alive: bool | None  # True: a live process holds the run; False: none does; None: cannot tell from here
    reason: str = ""

    @property
    def dead(self) -> bool:
        return self.recorded == "running" and self.alive is False

    def as_dict(self) -> dict[str, Any]:
        return {"recorded": self.recorded, "status": self.status, "alive": self.alive, "reason": self.reason}


def lock_held(run_path: Path, name: str = LOCK) -> bool | None:
    """Does a process hold the run's lock? True/False, or None when the lock cannot say (no lock file, a file
    system without flock). The probe takes a shared lock without blocking and drops it at once: it never waits,
    never creates or writes the file, and never follows a link."""
    try:
        fd = os.open(run_path / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return True
            return None  # ENOLCK, EINVAL, ENOSYS: this file system keeps no flock
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def holder_alive(holder: dict[str, Any] | None) -> tuple[bool | None, str]:
    """Is the process a ``start``/``resume`` event names alive? (True/False/None, why). None: no record, or a
    process of another host, which this host cannot see."""
    if not holder:
        return None, "the run's log names no process"
    pid, host = holder.get("pid"), holder.get("host")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None, "the run's log names no process"
    who = f"process {pid} on {host}"
    if host != socket.gethostname():
        return None, f"{who}, another host: its state cannot be seen from here"
    recorded_boot = holder.get("boot_id")
    now_boot = boot_id()
    if recorded_boot and now_boot and recorded_boot != now_boot:
        return False, f"{who} ran before this host last booted (boot id {str(recorded_boot)[:8]}…, now {now_boot[:8]}…)"
    started = process_start(pid)
    if started is None:
        return False, f"{who} is gone"
    recorded_start = holder.get("pid_start")
    if isinstance(recorded_start, int) and recorded_start != started:
        return False, f"{who} is gone (pid {pid} is now another process)"
    return True, f"{who} is alive"


def run_liveness(rd: RunDir, recorded: str | None, hands_off: bool = False) -> Liveness:
    """The status a reader should show for ``rd`` whose manifest says ``recorded``.

    Only a "running" run is questioned, and only one whose trials run in a process of the kit here (not a cluster
    executor's jobs: ``hands_off``). A held lock means running (the kernel's word); a holder that is gone (no such
    pid, another process under it, another boot) means interrupted; a free lock whose holder this host cannot see
    means interrupted too (nothing works on the run). A free lock with a live holder is still "running": the
    process is taking the lock as it starts, or letting it go as it ends."""
    if recorded != "running" or hands_off:
        return Liveness(recorded, recorded, None)
    held = lock_held(rd.path)
    try:
        holder = rd.holder()
    except KitError:  # a damaged log: the lock alone speaks
        holder = None
    alive, why = holder_alive(holder)
    if held is True:
        return Liveness(recorded, "running", True)
    if alive is False:
        return Liveness(recorded, "interrupted", False, f"the run's process is gone: {why}")
    if held is False and alive is None:
        return Liveness(recorded, "interrupted", False, f"no `kit run` holds the run's lock ({why})")
    if alive:  # its process lives (taking the lock as it starts, or letting it go as it ends)
        return Liveness(recorded, "running", True)
    return Liveness(recorded, "running", None, f"cannot tell whether it still runs: {why}")


def run_state(run_path: Path, recorded: str | None, executor: str | None = None) -> Liveness:
    """:func:`run_liveness` of the run at ``run_path`` (a cluster executor's run keeps its recorded status)."""
    return run_liveness(RunDir(run_path), recorded, hands_off=executor not in (None, "local"))


def incomplete_note(state: Liveness, finished: int, planned: int, run_path: Path) -> str | None:
    """The sentence a report of an unfinished run opens with (None for a complete run): how much of the plan it
    covers, why it stopped or whether it still runs, and how to finish it. ``kit run --resume`` is named as is: a
    report is read on other hosts, where no path of this one helps."""
    if state.status == "complete" and finished >= planned:
        return None
    covers = f"{finished} of {planned} planned trials finished"
    why = {
        "interrupted": "the run was interrupted" + (f" ({state.reason})" if state.reason else ""),
        "running": "the run was still running when this report was made"
                   + (f" ({state.reason})" if state.reason else ""),
        "partial": "the run stopped before its plan was done (a trial limit or a stopping rule)",
        "failed": "the run failed (see its events.jsonl)",
    }.get(str(state.status), f"its status is {state.status}")
    return (f"Incomplete run: {covers}; {why}. This report covers the finished trials only; continue the run with "
            f"`kit run --resume {run_path}`, then make the report again.")
