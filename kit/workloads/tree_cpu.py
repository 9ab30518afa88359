"""The CPU time of a trial's whole process tree, read inside the trial (standard library only).

A phase marker carries ``cpu_s``, the trial's own CPU time, which the host
subtracts from the host's busy CPU time over the phase to find what everything
else used (kit.disturbance). Until issue 39 that was ``os.times()`` of the
process writing the marker: its threads and the children it had *waited for*.
A distributed PyTorch trial writes its markers from rank 0, a grandchild of
the harness (harness -> torchrun -> ranks): rank 1's CPU, and any DataLoader
worker still running at the phase's end, were counted as foreign, so every
DDP trial would have been flagged disturbed once its phases were long enough
to judge.

So ``cpu_s`` is summed over the whole tree rooted at the harness: for every
live process in it, user + system time of all its threads plus the children
it has reaped (``/proc/PID/stat`` fields 14-17, utime stime cutime cstime).
A child that exits and is reaped moves its time into its parent's cutime, so
the sum neither loses nor double-counts it. The harness names the root in
``KIT_TRIAL_ROOT_PID``; the environment is inherited by every process of the
trial, and the root is used only when it is an ancestor of the reader (a
value leaked from elsewhere never makes a trial count a stranger's CPU).

Why here, not on the host from the kit's process tree (kit.proctree): with a
container backend the trial's processes are children of the engine's shim,
not of the kit, and in another PID namespace; from inside, /proc shows exactly
the trial's own processes under the same pids the tree links use, with the
local backend and with every container engine alike.
"""

from __future__ import annotations

import os
import sys

ROOT_ENV = "KIT_TRIAL_ROOT_PID"
_TICK_S: float | None = None


def _tick_s() -> float:
    global _TICK_S
    if _TICK_S is None:
        try:
            _TICK_S = 1.0 / float(os.sysconf("SC_CLK_TCK"))
        except (ValueError, OSError, AttributeError):
            _TICK_S = 0.01
    return _TICK_S


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, utime + stime + cutime + cstime in ticks) of ``pid``; None when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read(4096)
    except OSError:
        return None
    close = raw.rfind(b")")  # the command name may hold spaces and parentheses: the fields follow the last ")"
    fields = raw[close + 2:].split()
    try:
        return int(fields[1]), sum(int(fields[i]) for i in (11, 12, 13, 14))
    except (IndexError, ValueError):
        return None


def _table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, ticks) for every process this /proc shows."""
    out: dict[int, tuple[int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                out[int(name)] = st
    return out


def _is_ancestor(root: int, pid: int, table: dict[int, tuple[int, int]]) -> bool:
    seen = 0
    while pid > 1 and seen < 4096:
        if pid == root:
            return True
        entry = table.get(pid)
        if entry is None:
            return False
        pid, seen = entry[0], seen + 1
    return pid == root


def trial_root() -> int:
    """The pid whose tree is the trial: ``KIT_TRIAL_ROOT_PID`` where it names an ancestor of this process (or
    this process), else this process."""
    raw = os.environ.get(ROOT_ENV, "")
    me = os.getpid()
    if raw.isdigit() and int(raw) != me:
        if _is_ancestor(int(raw), me, _table()):
            return int(raw)
    return me


def tree_cpu_s(root: int | None = None) -> float:
    """User + system CPU seconds of ``root`` (default :func:`trial_root`) and every live descendant, with the
    children each has reaped. Off Linux (no /proc): this process and its reaped children (``os.times``)."""
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc/self"):
        t = os.times()
        return float(t.user + t.system + t.children_user + t.children_system)
    table = _table()
    me = os.getpid()
    if root is None:
        raw = os.environ.get(ROOT_ENV, "")
        root = int(raw) if raw.isdigit() and _is_ancestor(int(raw), me, table) else me
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    total, stack, seen = 0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen or pid not in table:
            continue
        seen.add(pid)
        total += table[pid][1]
        stack.extend(kids.get(pid, ()))
    if root not in table:  # /proc unreadable for the root: never report less than this process itself
        t = os.times()
        return float(t.user + t.system + t.children_user + t.children_system)
    return total * _tick_s()
