"""Process trees the kit starts end when the kit says so: a subreaper, /proc, and a stop-record-kill-reap loop.

A trial's harness and a study's hook are process trees the kit starts and must
be able to end completely, whatever the code in them does. A process that
double-forks and calls ``setsid`` leaves its process group and session, so
``killpg`` misses it, and its parent's death re-parents it to PID 1 where
nothing of the kit can find it. Linux offers the fix: a *child subreaper*
(``PR_SET_CHILD_SUBREAPER``) adopts every orphan of its descendants instead of
PID 1. While the kit guards a tree it is one (:func:`child_subreaper`), and a
:class:`TreeGuard` finds the processes it adopted from that tree and ends them
(:meth:`TreeGuard.end`): SIGSTOP first, on every pass, so a fork loop cannot
outrun the kill, then a record of who they were, SIGKILL, and ``waitpid`` of
exactly the pids it identified.

Why never ``waitpid(-1)`` here: this runs inside the kit process, where
:class:`subprocess.Popen` objects wait for their own children by pid. Reaping
one of those would steal its exit status (Popen would then report 0 for a
process that failed). A :class:`TreeGuard` reaps only a child of the kit that
(1) was not its child before the tree started, (2) is not a pid the caller
tracks itself (the tree's root), (3) started no earlier than the tree's root
and (4) is not in the kit's own session. (4) is what makes the identification
sound: the tree's root is started in a new session, and no process can join a
session it was not born into, so nothing of the tree is ever in the kit's
session, while every process the kit starts without ``start_new_session`` is.

The kernel's OOM-kill counters (:func:`oom_counters`) let a backend say a
SIGKILL was "possibly the OOM killer" only when a kill was actually counted.

Standard library only, and a clear no-op off Linux (no /proc, no prctl): the
guard then finds nothing and the caller's own kill of the process group is
all there is.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
LIVE_GONE = ("Z", "X", "x")  # zombie or dead: not alive, nothing to stop or kill
STOPPED = ("T", "t")  # stopped by a signal, or by a tracer
MAX_LISTED = 50  # processes described in a record (the count stays exact)
END_DEADLINE_S = 10.0  # a process in uninterruptible sleep may take a moment to die; never wait longer


def on_linux() -> bool:
    return sys.platform.startswith("linux") and os.path.isdir("/proc/self")


# -- the subreaper ------------------------------------------------------------------------------------------------

def _prctl(option: int, value: int) -> int | None:
    """prctl(option, value); its result (None where there is no prctl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if option == PR_GET_CHILD_SUBREAPER:
            out = ctypes.c_int(0)
            if libc.prctl(option, ctypes.byref(out), 0, 0, 0) != 0:
                return None
            return int(out.value)
        return int(libc.prctl(option, value, 0, 0, 0))
    except (OSError, AttributeError):
        return None


def is_child_subreaper() -> bool:
    return _prctl(PR_GET_CHILD_SUBREAPER, 0) == 1


def set_child_subreaper(on: bool = True) -> bool:
    """Make this process a child subreaper (or stop being one); True if the kernel agreed. Idempotent."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0) == 0


_SUBREAPER_LOCK = threading.Lock()
_SUBREAPER = {"depth": 0, "ours": 0}


@contextlib.contextmanager
def child_subreaper() -> Iterator[bool]:
    """This process is a child subreaper inside the block (True: it is; False: not Linux, or refused).

    Re-entrant and shared between threads (a depth count): the attribute is the whole process's. On leaving
    the outermost block it is turned off again, but only if this module turned it on, so orphans of
    processes the kit starts outside a guard (a ``docker`` client, ``git``) go to PID 1 as usual instead of
    becoming zombies of the kit that nobody reaps.
    """
    with _SUBREAPER_LOCK:
        if _SUBREAPER["depth"] == 0:
            _SUBREAPER["ours"] = int(not is_child_subreaper() and set_child_subreaper(True))
        _SUBREAPER["depth"] += 1
        active = is_child_subreaper()
    try:
        yield active
    finally:
        with _SUBREAPER_LOCK:
            _SUBREAPER["depth"] -= 1
            if _SUBREAPER["depth"] == 0 and _SUBREAPER["ours"]:
                set_child_subreaper(False)
                _SUBREAPER["ours"] = 0


# -- /proc ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/PID/stat the guard needs."""

    pid: int
    state: str  # R S D T t Z X ...
    ppid: int
    pgid: int
    sid: int
    start_ticks: int  # clock ticks after boot: orders processes by start, survives pid reuse checks

    @property
    def alive(self) -> bool:
        return self.state not in LIVE_GONE

    @property
    def stopped(self) -> bool:
        return self.state in STOPPED


def proc_stat(pid: int) -> ProcStat | None:
    """/proc/PID/stat parsed (None: no such process, or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read(4096)
    except OSError:
        return None
    # "pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
    # priority nice num_threads itrealvalue starttime ...": comm may hold spaces and ')', so split after the last ')'
    try:
        f = raw[raw.rindex(b")") + 2:].split()
        return ProcStat(pid, f[0].decode("ascii", "replace"), int(f[1]), int(f[2]), int(f[3]), int(f[19]))
    except (ValueError, IndexError):
        return None


def state_of(pid: int) -> str | None:
    """The one-letter state of a process (None: gone)."""
    st = proc_stat(pid)
    return st.state if st is not None else None


def is_stopped(pid: int) -> bool:
    """True while ``pid`` is stopped (SIGSTOP/SIGTSTP, 'T') or held by a tracer ('t')."""
    st = proc_stat(pid)
    return st is not None and st.stopped


def process_table() -> dict[int, ProcStat]:
    """Every process this user can see ({} off Linux)."""
    table: dict[int, ProcStat] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if name.isdigit():
            st = proc_stat(int(name))
            if st is not None:
                table[st.pid] = st
    return table


def _children(table: dict[int, ProcStat]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for st in table.values():
        out.setdefault(st.ppid, []).append(st.pid)
    return out


def descendants(root: int, table: dict[int, ProcStat] | None = None) -> list[int]:
    """Every live process below ``root`` (parents before children); a zombie is not alive and not listed."""
    table = process_table() if table is None else table
    kids = _children(table)
    out: list[int] = []
    todo = list(kids.get(root, []))
    while todo:
        pid = todo.pop(0)
        if table[pid].alive:
            out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def describe(pid: int) -> dict[str, object]:
    """pid, name and command line (capped), for a record of processes that outlived their tree."""
    info: dict[str, object] = {"pid": pid}
    try:
        with open(f"/proc/{pid}/comm", "rb") as fh:
            info["name"] = fh.read(64).decode("utf-8", "replace").strip()
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            info["cmdline"] = fh.read(400).replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200]
    except OSError:
        pass
    return info


# -- the guard ------------------------------------------------------------------------------------------------------

class TreeGuard:
    """The processes of one tree the kit started, found and ended from the kit's side.

    Create it (inside :func:`child_subreaper`) just before starting the tree's root with
    ``start_new_session=True``, then call :meth:`started` with the root's pid. :meth:`adopted` lists the
    processes of the tree that were re-parented to the kit (see the module docstring for why exactly those);
    :meth:`end` stops, records, kills and reaps them and everything below them.
    """

    def __init__(self) -> None:
        self.me = os.getpid()
        self.my_sid = os.getsid(0)
        table = process_table()
        self.baseline = {st.pid for st in table.values() if st.ppid == self.me}
        self.keep: set[int] = set()  # pids the caller waits for itself (its Popen objects)
        self.since_ticks: int | None = None

    def started(self, root: int) -> None:
        """The tree's root (a Popen child the caller waits for): never reaped here; its start time bounds the tree."""
        self.keep.add(root)
        st = proc_stat(root)
        if st is not None and (self.since_ticks is None or st.start_ticks < self.since_ticks):
            self.since_ticks = st.start_ticks

    def _ours(self, st: ProcStat) -> bool:
        return (st.ppid == self.me and st.pid not in self.keep and st.pid not in self.baseline
                and self.since_ticks is not None and st.start_ticks >= self.since_ticks and st.sid != self.my_sid)

    def adopted(self, table: dict[int, ProcStat] | None = None) -> list[ProcStat]:
        """The tree's processes that are now children of the kit: alive (orphans) or zombies to reap."""
        table = process_table() if table is None else table
        return [st for st in table.values() if self._ours(st)]

    def reap(self, table: dict[int, ProcStat] | None = None) -> int:
        """waitpid() the adopted zombies (only those: identified, never -1); how many were reaped."""
        n = 0
        for st in self.adopted(table):
            if not st.alive:
                with contextlib.suppress(ChildProcessError, OSError):
                    if os.waitpid(st.pid, os.WNOHANG)[0] == st.pid:
                        n += 1
        return n

    def _targets(self, table: dict[int, ProcStat], roots: Collection[int]) -> list[int]:
        out: dict[int, None] = {}
        for root in roots:
            if root in table and table[root].alive:
                out[root] = None
            out.update(dict.fromkeys(descendants(root, table)))
        for st in self.adopted(table):
            if st.alive:
                out[st.pid] = None
            out.update(dict.fromkeys(descendants(st.pid, table)))
        return list(out)

    def end(self, roots: Collection[int] = (), spare: Collection[int] = (),
            deadline_s: float = END_DEADLINE_S) -> list[dict[str, object]]:
        """Stop, record, kill and reap every process of the tree still alive; the records (not ``spare``'s).

        ``roots`` are live pids the caller tracks (a hung root, a stopped reaper): they and everything below
        them are stopped and killed too, but never reaped here (their Popen waits for them). ``spare`` are
        pids killed like the rest but left out of the record (the trial's own harness is no leftover).
        Repeated passes: a process that forked while the others were being stopped is caught on the next.
        """
        seen: dict[int, dict[str, object]] = {}
        end = time.monotonic() + deadline_s
        while True:
            table = process_table()
            targets = self._targets(table, roots)
            zombies = [st for st in self.adopted(table) if not st.alive]
            if not targets and not zombies:
                break
            for pid in targets:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGSTOP)
            for pid in targets:
                if pid not in seen and pid not in roots and pid not in spare:
                    seen[pid] = describe(pid)
            for pid in targets:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            self.reap()
            if time.monotonic() > end:
                break
            time.sleep(0.01)
        return list(seen.values())


# -- the kernel's OOM killer ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OomCounters:
    """The kernel's OOM-kill counts (None: not readable here): host-wide (/proc/vmstat ``oom_kill``) and the kit's
    own memory cgroup (cgroup v2 ``memory.events``, v1 ``memory.oom_control``: ``oom_kill``), which counts
    kills among its descendants, a local trial included."""

    vmstat: int | None
    cgroup: int | None

    def kills_since(self, before: OomCounters) -> int | None:
        """OOM kills counted since ``before`` (the larger of the two counters' rises); None: neither readable."""
        rises = [a - b for a, b in ((self.vmstat, before.vmstat), (self.cgroup, before.cgroup))
                 if a is not None and b is not None]
        return max(rises) if rises else None


def _counter(path: Path, key: str) -> int | None:
    try:
        with open(path, "rb") as fh:
            text = fh.read(1 << 16).decode("ascii", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return None


def _cgroup_oom_kills() -> int | None:
    try:
        with open("/proc/self/cgroup", "rb") as fh:
            lines = fh.read(1 << 16).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    root = Path("/sys/fs/cgroup")
    for line in lines:
        hid, controllers, path = [*line.split(":", 2), "", ""][:3]
        rel = path.lstrip("/")
        if hid == "0" and controllers == "":  # cgroup v2
            candidates = [root / rel / "memory.events", root / "memory.events"]
        elif "memory" in controllers.split(","):  # cgroup v1
            candidates = [root / "memory" / rel / "memory.oom_control", root / "memory" / "memory.oom_control"]
        else:
            continue
        for cand in candidates:
            got = _counter(cand, "oom_kill")
            if got is not None:
                return got
    return None


def oom_counters() -> OomCounters:
    """The OOM-kill counters now (read before and after a trial; :meth:`OomCounters.kills_since`)."""
    return OomCounters(_counter(Path("/proc/vmstat"), "oom_kill"), _cgroup_oom_kills())


@contextlib.contextmanager
def signals_held(signals: Collection[int] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """While the block runs (the cleanup of a trial's processes), ``signals`` are noted, not handled: a second
    Ctrl-C or SIGTERM must not cut the cleanup short and orphan what the kit adopted. Each noted signal is raised
    again when the block ends, so its own handler (KeyboardInterrupt, or the default action) then runs.

    The handlers are swapped, not the signal mask: with the kit's sampler threads running, a signal blocked in
    the main thread is delivered to another thread, and Python runs its handler in the main thread regardless.
    An ignored signal stays ignored. Outside the main thread (where no handler can be set) a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    old: dict[int, Any] = {}
    for sig in signals:
        if signal.getsignal(sig) == signal.SIG_IGN:
            continue
        try:
            old[sig] = signal.signal(sig, lambda signum, frame: noted.append(signum))
        except (OSError, ValueError):
            continue
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for sig in dict.fromkeys(noted):
            signal.raise_signal(sig)
